"""A zero-decimal currency end to end: the sandbox's yen account act_1004, whose budgets and
Insights money are whole yen (a client that divides by 100 is 100 times off)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from flow import campaign_rule, records, run_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_TOKEN


@pytest.fixture
async def wired(settings: Settings, db: Database, redis: Any, accounts: list[str]) -> Settings:
    """Accounts registered (act_1004 in JPY), Redis and the database empty."""
    return settings


async def graph_get(sandbox: SandboxAdmin, path: str, **params: str) -> Any:
    async with aiohttp.ClientSession() as http:
        url = f"{sandbox.base_url}/v27.0/{path}"
        query = params | {"access_token": SANDBOX_TOKEN}
        async with http.get(url, params=query) as response:
            return await response.json()


def on_yen_account(data: dict[str, Any], name: str) -> dict[str, Any]:
    data["ad_accounts"] = ["act_1004"]
    data["timezone"] = "Asia/Tokyo"
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": name}]
    return data


async def test_a_yen_campaigns_budget_conditions_and_20_percent_are_exact(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    campaigns = await graph_get(sandbox, "act_1004/campaigns", fields="id,name")
    campaign = next(c["id"] for c in campaigns["data"] if c["name"] == "[AUTO] Prospecting JP 1")
    row = await graph_get(sandbox, f"{campaign}/insights", date_preset="yesterday", fields="spend")
    spend = float(row["data"][0]["spend"])  # whole yen, e.g. "27312"
    conditions = [
        {"metric": "spend", "period": "yesterday", "operator": ">", "value": 5000},
        {"metric": "daily_budget", "operator": "==", "value": 30000},
        {
            "metric": "spend",
            "period": "yesterday",
            "operator": "<",
            "compare_to": {"metric": "daily_budget", "multiplier": 2},
        },
    ]
    data = campaign_rule({"type": "increase_budget", "percent": 20}, conditions, name="yen")
    await run_rule(wired, db, on_yen_account(data, "Prospecting JP 1"))

    (record,) = await records(db)
    assert [c["actual"] for c in record["conditions"]] == [spend, 30000.0, spend]
    assert [c["expected"] for c in record["conditions"]] == [5000.0, 30000.0, 60000.0]
    assert all(c["passed"] for c in record["conditions"])
    assert (record["outcome"], record["before"], record["after"]) == ("applied", 30000, 36000)
    live = await graph_get(sandbox, campaign, fields="daily_budget")
    assert live["daily_budget"] == "36000"


async def test_yen_ad_set_budgets_rise_by_exactly_20_percent(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    conditions = [{"metric": "daily_budget", "operator": ">=", "value": 5000}]
    data = campaign_rule(
        {"type": "increase_budget", "percent": 20}, conditions, name="yen ad sets", level="adset"
    )
    data = on_yen_account(data, "Retargeting JP 1")
    data["filters"][0]["field"] = "adset.name"
    await run_rule(wired, db, data)

    applied = await records(db, outcome="applied")
    assert [(r["before"], r["after"]) for r in applied] == [(5000, 6000), (5000, 6000)]
    for record in applied:
        live = await graph_get(sandbox, record["entity_id"], fields="daily_budget")
        assert live["daily_budget"] == "6000"
