"""Rules at ``"level": "ad"`` against the sandbox's ads: listing, Insights at level ad,
``results`` / ``cost_per_result`` per ad (its ad set's indicator), rankings, pausing ads."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import orjson
import pytest

from flow import campaign_rule, engine_for, records, run_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.approvals.deciding import decide
from ruleengine.backtest.result import BacktestRequest
from ruleengine.backtest.service import BacktestDeps, run_backtest
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.approvals import ApprovalStore, write_batch
from ruleengine.store.db import Database
from ruleengine.undo.run import preview as preview_undo
from ruleengine.undo.run import undo_batch
from support import SANDBOX_NOW, SANDBOX_TOKEN

CAMPAIGN = "Prospecting US 3"
PURCHASES = "actions:offsite_conversion.fb_pixel_purchase"
NEW_YORK = ZoneInfo("America/New_York")
WEEK = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


async def graph_get(sandbox: SandboxAdmin, path: str, **params: str) -> Any:
    """A Graph read of the sandbox with the demo token."""
    async with aiohttp.ClientSession() as http:
        url = f"{sandbox.base_url}/v27.0/{path}"
        async with http.get(url, params=params | {"access_token": SANDBOX_TOKEN}) as response:
            return await response.json()


async def ads_insights(sandbox: SandboxAdmin) -> dict[str, dict[str, Any]]:
    """The last 7 days of every ad of the campaign, by ad id, as Meta reports them."""
    body = await graph_get(
        sandbox,
        "act_1001/insights",
        level="ad",
        date_preset="last_7d",
        fields="ad_id,ad_name,spend,results,cost_per_result,quality_ranking",
        filtering=f'[{{"field":"campaign.name","operator":"CONTAIN","value":"{CAMPAIGN}"}}]',
        use_unified_attribution_setting="true",
        limit="500",
    )
    return {row["ad_id"]: row for row in body["data"]}


def ad_rule(conditions: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    data = campaign_rule({"type": "pause"}, conditions, level="ad", **extra)
    data["filters"] = [
        {"field": "campaign.name", "operator": "CONTAIN", "value": CAMPAIGN},
        {"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]},
    ]
    return data


def _cost(row: dict[str, Any]) -> float | None:
    entries = row.get("cost_per_result") or []
    values = entries[0].get("values") if entries else None
    return float(values[0]["value"]) if values else None


@pytest.mark.parametrize("reports", [False, True], ids=["sync", "async-reports"])
async def test_an_ad_rule_pauses_the_ads_whose_results_cost_too_much(
    settings: Settings, accounts: list[str], db: Database, sandbox: SandboxAdmin, reports: bool
) -> None:
    if reports:  # Insights at level ad through asynchronous report runs, as for big accounts
        settings = settings.model_copy(update={"insights_async_threshold": 1})
    rows = await ads_insights(sandbox)
    await sandbox.clear_stats()
    costs = sorted(c for r in rows.values() if (c := _cost(r)) is not None)
    assert len(costs) >= 2, rows
    threshold = costs[len(costs) // 2]  # the dearer half is paused
    conditions = [
        {"metric": "results", "period": "last_7d", "operator": ">=", "value": 1},
        {"metric": "cost_per_result", "period": "last_7d", "operator": ">", "value": threshold},
    ]
    rule = await run_rule(settings, db, ad_rule(conditions))
    dear = {ad for ad, row in rows.items() if (c := _cost(row)) is not None and c > threshold}
    seen = await records(db, rule_id=rule.id)
    applied = {r["entity_id"] for r in seen if r.get("outcome") == "applied"}
    assert applied == dear and dear
    for record in seen:
        if record["entity_id"] in dear:
            assert record["field"] == "status" and record["after"] == "PAUSED"
            assert {c.get("indicator") for c in record["conditions"]} == {PURCHASES}
    for ad in rows:
        status = (await sandbox.object(ad))["status"]
        assert status == ("PAUSED" if ad in dear else "ACTIVE")
    calls = (await sandbox.stats())["calls_by_kind"]
    assert (calls.get("report", 0) > 0) == reports


async def _ads(sandbox: SandboxAdmin) -> list[dict[str, Any]]:
    body = await graph_get(
        sandbox,
        "act_1001/ads",
        fields="id,name,adset{name},campaign{name},effective_status",
        limit="500",
    )
    return [a for a in body["data"] if CAMPAIGN in a["campaign"]["name"]]


async def test_ads_are_renamed_duplicated_and_picked_by_their_ad_set_s_name(
    settings: Settings, accounts: list[str], db: Database, sandbox: SandboxAdmin
) -> None:
    ads = await _ads(sandbox)
    adset_name = ads[0]["adset"]["name"]
    mine = {a["id"] for a in ads if a["adset"]["name"] == adset_name}
    spent = {"metric": "impressions", "period": "last_7d", "operator": ">=", "value": 0}
    data = ad_rule([spent])
    data["filters"] = [{"field": "adset.name", "operator": "EQUAL", "value": adset_name}]
    data["tasks"][0]["action"] = {"type": "append_to_name", "text": " [seen]"}
    data["tasks"].append({"id": "copy", "conditions": [spent], "action": {"type": "duplicate"}})
    rule = await run_rule(settings, db, data)
    seen = await records(db, rule_id=rule.id)
    renamed = {r["entity_id"] for r in seen if r["task_id"] == "t" and r["outcome"] == "applied"}
    copied = [r for r in seen if r["task_id"] == "copy" and r["outcome"] == "applied"]
    assert renamed == mine and {r["entity_id"] for r in copied} == mine
    for ad in mine:
        assert (await sandbox.object(ad))["name"].endswith(" [seen]")
    for record in copied:
        copy = await sandbox.object(record["response"]["copied_id"])
        assert (
            copy["status"] == "PAUSED"
            and copy["adset_id"] == (await sandbox.object(record["entity_id"]))["adset_id"]
        )


async def _one_ad(sandbox: SandboxAdmin) -> dict[str, Any]:
    return next(a for a in await _ads(sandbox) if a["effective_status"] == "ACTIVE")


def _only(ad: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    delivering = {"metric": "impressions", "period": "last_7d", "operator": ">=", "value": 0}
    data = ad_rule([delivering])
    data["filters"] = [{"field": "id", "operator": "EQUAL", "value": ad["id"]}]
    data["tasks"][0]["action"] = action
    return data


async def test_an_approved_pause_of_an_ad_lands_and_schedules_its_follow_up(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    ad = await _one_ad(sandbox)
    data = _only(ad, {"type": "pause", "then": {"after_minutes": 60, "do": "activate"}})
    data["tasks"][0]["approval"] = {"when": "always"}
    rule = await run_rule(settings, db, data)
    (waiting,) = await records(db, rule_id=rule.id, outcome="awaiting_approval")
    assert (await sandbox.object(ad["id"]))["status"] == "ACTIVE"
    queue = connect_queue(settings)
    try:
        await decide(
            ApprovalStore(db),
            queue,
            waiting["approval_id"],
            status="approved",
            by="ana",
            now=datetime.now(UTC),
        )
    finally:
        await queue.aclose()
    await work(settings)
    assert (await sandbox.object(ad["id"]))["status"] == "PAUSED"
    followup = await db[c.FOLLOWUPS].find_one({"entity_id": ad["id"]})
    assert followup is not None and followup["status"] == "scheduled"
    assert followup["batch_id"] == write_batch(waiting["approval_id"])


async def test_a_pause_of_an_ad_is_undone_and_its_follow_up_cancelled(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    ad = await _one_ad(sandbox)
    data = _only(ad, {"type": "pause", "then": {"after_minutes": 60, "do": "activate"}})
    rule = await run_rule(settings, db, data)
    (paused,) = await records(db, rule_id=rule.id, outcome="applied")
    assert (await sandbox.object(ad["id"]))["status"] == "PAUSED"
    async with engine_for(settings, db) as engine:
        plan = await preview_undo(engine, paused["batch_id"], now=datetime.now(UTC))
        assert plan.as_json()["will_revert"] == 1
        result = await undo_batch(engine, paused["batch_id"], by="api", now=datetime.now(UTC))
    assert [ch["outcome"] for ch in result["changes"]] == ["applied"]
    assert (await sandbox.object(ad["id"]))["status"] == "ACTIVE"
    followup = await db[c.FOLLOWUPS].find_one({"entity_id": ad["id"]})
    assert followup is not None
    assert (followup["status"], followup["reason"]) == ("skipped", "cancelled_by_undo")


async def _day_cost(sandbox: SandboxAdmin, ad_id: str, day: date) -> float | None:
    """The sandbox's own cost per result of one ad on one day (one query per day)."""
    span = orjson.dumps({"since": day.isoformat(), "until": day.isoformat()}).decode()
    body = await graph_get(
        sandbox,
        f"{ad_id}/insights",
        fields="cost_per_result",
        time_range=span,
        use_unified_attribution_setting="true",
    )
    return _cost(body["data"][0]) if body["data"] else None


async def test_a_backtest_of_an_ad_rule_fires_on_the_days_its_ad_cost_too_much(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    ad = await _one_ad(sandbox)
    today = SANDBOX_NOW.astimezone(NEW_YORK).date()
    days = [today - timedelta(days=n) for n in range(10, 0, -1)]
    costs = {d: await _day_cost(sandbox, ad["id"], d - timedelta(days=1)) for d in days}
    known = sorted(v for v in costs.values() if v is not None)
    threshold = known[len(known) // 2]  # about half the days
    expected = {d for d, v in costs.items() if v is not None and v > threshold}
    assert 2 <= len(expected) <= 8, costs
    data = _only(ad, {"type": "pause", "then": {"after_minutes": 60, "do": "activate"}})
    data["tasks"][0]["conditions"] = [
        {"metric": "cost_per_result", "period": "yesterday", "operator": ">", "value": threshold}
    ]
    data["schedule"] = {"mode": "timetable", "slots": {d: ["09:00"] for d in WEEK}}
    data["filters"] = [{"field": "id", "operator": "EQUAL", "value": ad["id"]}]
    request = BacktestRequest(rule=parse_rule(data), days=10, as_seen=False)
    async with BacktestDeps.open(settings, db) as deps:
        result = await run_backtest(deps, request, now=SANDBOX_NOW)
    pauses = [f for f in result["fires"] if f["action"] == "pause"]
    fired = {datetime.fromisoformat(f["time"]).astimezone(NEW_YORK).date() for f in pauses}
    assert fired == expected
    for fire in pauses:  # the cost per result of the ad's own day, as Meta reported it
        day = datetime.fromisoformat(fire["time"]).astimezone(NEW_YORK).date()
        seen = fire["matured"]["cost_per_result yesterday"]
        assert seen == pytest.approx(costs[day], abs=0.01)
        assert (fire["entity_id"], fire["before"], fire["after"]) == (ad["id"], "ACTIVE", "PAUSED")
    reactivated = [f for f in result["fires"] if f["action"] == "then:activate"]
    assert len(reactivated) == len(pauses)
    # a second backtest reads the ads' days from the history cache: no Insights asked again
    await sandbox.clear_stats()
    async with BacktestDeps.open(settings, db) as deps:
        again = await run_backtest(deps, request, now=SANDBOX_NOW)
    assert again["fires"] == result["fires"]
    assert again["graph_calls"] == 0 and again["cache_hits"] > 0
    assert (await sandbox.stats())["counted_calls"] == 0
