"""The entity timeline (``GET /api/entities/{id}/timeline``) over history the real engine made:
a budget rule run at successive instants, a change made in Ads Manager between two runs, a
new version of the rule, and its ``then`` follow-up."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from web_helpers import AUTH, Client, fire_followup

from flow import campaign_ids, campaign_rule, dispatch, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database

ONE = "[AUTO] Prospecting US 1"
SPENT = {"metric": "spend", "period": "today", "operator": ">=", "value": 0}
HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}
OUTSIDE_BUDGET = 7777


def scale_up(percent: float) -> dict[str, Any]:
    """ "Scale up": raise ONE's budget by ``percent``, restoring it 60 minutes later."""
    action = {"type": "increase_budget", "percent": percent}
    action["then"] = {"after_minutes": 60, "do": "restore_budget"}
    data = campaign_rule(action, [SPENT, HAS_BUDGET], name="Scale up")
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": ONE}]
    return data


@dataclass
class History:
    """What the engine did to ONE: its id, its first budget and the rule's id."""

    campaign: str
    start_budget: int
    rule_id: str


async def make_history(
    client: Client, settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> History:
    """v1 acts; Ads Manager sets 77.77; v1 acts again; v2 acts; the last follow-up restores."""
    campaign = (await campaign_ids(sandbox))[ONE]
    start_budget = int((await sandbox.object(campaign))["daily_budget"])
    created = await (await client.post("/api/rules", json=scale_up(10), headers=AUTH)).json()
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    await work(settings)
    await sandbox.ads_manager_change(campaign, daily_budget=OUTSIDE_BUDGET)
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    path = f"/api/rules/{created['id']}"
    assert (await client.put(path, json=scale_up(20), headers=AUTH)).status == 200
    await dispatch(settings, db, now=start + timedelta(minutes=30))
    await work(settings)
    latest = await db[c.FOLLOWUPS].find_one({"entity_id": campaign}, sort=[("created_at", -1)])
    assert latest is not None
    await fire_followup(settings, redis, latest["_id"], generation=latest.get("generation", 1))
    return History(campaign, start_budget, created["id"])


@pytest.fixture
async def history(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> History:
    return await make_history(client, web_settings, db, redis, sandbox)


async def test_the_timeline_tells_each_budget_change_by_its_author(
    client: Client, history: History, db: Database
) -> None:
    response = await client.get(f"/api/entities/{history.campaign}/timeline", headers=AUTH)
    assert response.status == 200
    body = await response.json()
    assert body["days"] == 14 and body["entity_name"] == ONE
    budget = body["fields"]["daily_budget"]
    authors = [(ch["by"]["kind"], ch["by"].get("rule_version")) for ch in budget["changes"]]
    assert authors == [
        ("rule", 1),
        ("outside", None),
        ("rule", 1),
        ("rule", 2),
        ("followup", 2),
    ]
    first, outside, second, third, restored = budget["changes"]
    assert first["before"] == history.start_budget
    assert first["after"] == round(history.start_budget * 1.1)
    assert first["by"]["label"] == "Scale up v1"
    assert (outside["before"], outside["after"]) == (first["after"], OUTSIDE_BUDGET)
    assert outside["by"]["label"] == "outside the engine"
    assert (second["before"], second["after"]) == (OUTSIDE_BUDGET, round(OUTSIDE_BUDGET * 1.1))
    assert third["by"]["label"] == "Scale up v2"
    assert third["after"] == round(second["after"] * 1.2)
    assert restored["by"]["label"] == "Scale up v2 (follow-up)"
    assert restored["after"] == third["before"]
    # the steps: the start, then one per change, each the value it left
    values = [s["value"] for s in budget["steps"]]
    assert values == [history.start_budget] + [ch["after"] for ch in budget["changes"]]
    # status never moved: one step, no change
    assert body["fields"]["status"]["changes"] == []
    # spend: what "spend today" was seen as, one point per day
    assert [p["spend"] >= 0 for p in body["spend"]] == [True] * len(body["spend"])
    assert len(body["spend"]) >= 1
    assert body["metric"]["metric"] == "spend" and body["metric"]["rule_id"] == history.rule_id
    assert len(body["metric"]["points"]) == 3
    executions = body["executions"]
    assert [e["kind"] for e in executions] == ["followup", "evaluation", "evaluation", "evaluation"]
    times = [e["created_at"] for e in executions]
    assert times == sorted(times, reverse=True)


async def test_an_entity_without_records_has_an_empty_timeline(client: Client) -> None:
    body = await (await client.get("/api/entities/1200999/timeline?days=3", headers=AUTH)).json()
    assert (body["days"], body["fields"], body["executions"], body["metric"]) == (3, {}, [], None)


@pytest.mark.parametrize("days", ["0", "91", "x", "-1"])
async def test_days_out_of_range_is_refused(client: Client, days: str) -> None:
    response = await client.get(f"/api/entities/1/timeline?days={days}", headers=AUTH)
    assert response.status == 422


async def make_one_tick_of_three_rules(
    client: Client, settings: Settings, db: Database, sandbox: SandboxAdmin
) -> tuple[str, int]:
    """One tick: "Margin guard" lowers ONE's budget by 10 %; "Watch" and "Scale later" look
    at ONE in the same tick (their listing taken before the guard wrote) and do nothing.
    The campaign's id and its budget before."""
    campaign = (await campaign_ids(sandbox))[ONE]
    before = int((await sandbox.object(campaign))["daily_budget"])
    only = [{"field": "name", "operator": "CONTAIN", "value": ONE}]
    never = {"metric": "spend", "period": "today", "operator": "<", "value": 0}
    # the two that look read the budget in a condition: their listings carry it
    rules = [
        campaign_rule({"type": "decrease_budget", "percent": 10}, [SPENT], name="Margin guard"),
        campaign_rule(
            {"type": "increase_budget", "percent": 20}, [HAS_BUDGET, never], name="Scale later"
        ),
        campaign_rule({"type": "pause"}, [HAS_BUDGET, never], name="Watch"),
    ]
    for rule in rules:
        response = await client.post("/api/rules", json=rule | {"filters": only}, headers=AUTH)
        assert response.status == 201, await response.text()
    await dispatch(settings, db, now=datetime.now(UTC))
    # one job at a time, in the order dispatched: the guard writes, then the others record
    # what their listing (taken before the write) saw
    await work(settings.model_copy(update={"worker_max_jobs": 1}))
    return campaign, before


async def test_rules_that_looked_in_the_same_tick_as_a_change_invent_no_change(
    client: Client, web_settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    campaign, before = await make_one_tick_of_three_rules(client, web_settings, db, sandbox)
    assert await db[c.EXECUTIONS].count_documents({"entity_id": campaign}) >= 1
    body = await (await client.get(f"/api/entities/{campaign}/timeline", headers=AUTH)).json()
    budget = body["fields"]["daily_budget"]
    assert [(ch["before"], ch["after"], ch["by"]["label"]) for ch in budget["changes"]] == [
        (before, round(before * 0.9), "Margin guard v1")
    ]
    live = int((await sandbox.object(campaign))["daily_budget"])
    assert budget["steps"][-1]["value"] == live == round(before * 0.9)
