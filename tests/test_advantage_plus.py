"""Legacy Advantage+ campaigns: Meta refuses their updates and copies since 2026-05-19 (v25.0
changelog); the engine lists their state and refuses those actions before any write."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from flow import campaign_rule, records, run_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.preview import open_preview, preview_rule
from support import SANDBOX_TOKEN
from test_cli import run
from test_copies import graph

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
LEGACY_NAME = "Advantage+ Shopping ID (legacy)"


def on_the_legacy_campaign(action: dict[str, Any], level: str = "campaign") -> dict[str, Any]:
    field = "name" if level == "campaign" else "campaign.name"
    return campaign_rule(
        action,
        [ALWAYS],
        level=level,
        ad_accounts=["act_1003"],
        timezone="Asia/Jakarta",
        filters=[{"field": field, "operator": "CONTAIN", "value": "Advantage+ Shopping"}],
    )


async def legacy_campaign(sandbox: SandboxAdmin) -> dict[str, Any]:
    fields = "id,name,smart_promotion_type,advantage_state_info,daily_budget,status"
    body = await graph(sandbox, "act_1003/campaigns", fields=fields)
    return next(c for c in body["data"] if c["name"] == LEGACY_NAME)


async def test_the_sandbox_lists_the_state_and_lets_only_status_through(
    sandbox: SandboxAdmin,
) -> None:
    campaign = await legacy_campaign(sandbox)
    assert campaign["smart_promotion_type"] == "AUTOMATED_SHOPPING_ADS"
    assert campaign["advantage_state_info"] == {"advantage_state": "advantage_plus_sales"}
    other = (await graph(sandbox, "act_1003/campaigns", fields="name,advantage_state_info"))[
        "data"
    ][0]
    assert other["advantage_state_info"] == {"advantage_state": "DISABLED"}

    async def post(path: str, **form: str) -> Any:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{sandbox.base_url}/v27.0/{path}", data={"access_token": SANDBOX_TOKEN, **form}
            ) as response,
        ):
            return await response.json()

    refused = await post(campaign["id"], daily_budget="30000")
    assert refused["error"]["code"] == 100
    assert "legacy Advantage+" in refused["error"]["message"]
    assert (await post(f"{campaign['id']}/copies"))["error"]["code"] == 100
    assert await post(campaign["id"], status="PAUSED") == {"success": True}
    assert (await sandbox.object(campaign["id"]))["daily_budget"] == int(campaign["daily_budget"])


@pytest.mark.parametrize(
    ("action", "level", "field"),
    [
        ({"type": "increase_budget", "percent": 10}, "campaign", "daily_budget"),
        ({"type": "append_to_name", "text": " [x]"}, "campaign", "name"),
        ({"type": "duplicate"}, "campaign", "copies"),
        ({"type": "rename", "template": "{name} [off]"}, "adset", "name"),
    ],
)
async def test_budget_name_and_copy_actions_are_refused_before_any_write(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    accounts: list[str],
    action: dict[str, Any],
    level: str,
    field: str,
) -> None:
    rule = await run_rule(settings, db, on_the_legacy_campaign(action, level))
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["reason"], record["field"]) == (
        "skipped",
        "advantage_plus_legacy",
        field,
    )
    assert "legacy Advantage+ shopping campaign" in record["error"]["message"]
    assert "2026-05-19" in record["error"]["message"]
    assert await sandbox.writes() == []  # nothing sent: no Graph error per run


async def test_a_pause_goes_through_and_the_preview_says_what_a_run_does(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    reading = open_preview(settings, db=db)
    try:
        budget = await preview_rule(
            reading,
            parse_rule(on_the_legacy_campaign({"type": "increase_budget", "percent": 10})),
            rule_id="r",
            version=1,
            now=datetime.now(UTC),
        )
    finally:
        await reading.close()
    (would,) = budget.records
    assert (would["outcome"], would["reason"]) == ("skipped", "advantage_plus_legacy")
    rule = await run_rule(settings, db, on_the_legacy_campaign({"type": "pause"}))
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["after"]) == ("applied", "PAUSED")
    assert record["entity"]["advantage_state_info"] == {"advantage_state": "advantage_plus_sales"}
    assert [(w["kind"], w["params"]) for w in await sandbox.writes()] == [
        ("update", {"status": "PAUSED"})
    ]


async def test_validate_live_and_conflicts_live_name_the_legacy_campaign(
    settings: Settings, db: Database, sandbox: SandboxAdmin, accounts: list[str], tmp_path: Path
) -> None:
    up = on_the_legacy_campaign({"type": "increase_budget", "percent": 10}) | {"name": "Up"}
    down = on_the_legacy_campaign({"type": "decrease_budget", "percent": 10}) | {"name": "Down"}
    files = []
    for data in (up, down):
        path = tmp_path / f"{data['name']}.json"
        path.write_bytes(orjson.dumps(data))
        files.append(str(path))
    offline = run("rules", "validate", files[0], settings=settings)
    assert offline.returncode == 0 and "warning" not in offline.stdout
    live = run("rules", "validate", "--live", files[0], settings=settings)
    assert live.returncode == 0, live.stderr
    (warning,) = [line for line in live.stdout.splitlines() if "warning" in line]
    assert LEGACY_NAME in warning and "legacy Advantage+ shopping campaign" in warning
    assert "task t (increase_budget) will be skipped (advantage_plus_legacy)" in warning
    assert await sandbox.writes() == []
    assert run("rules", "apply", *files, settings=settings).returncode == 0
    conflicts = run("rules", "conflicts", "--live", settings=settings)
    assert "only status changes reach it (advantage_plus_legacy)" in conflicts.stdout
