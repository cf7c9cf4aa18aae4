"""Backtests against the Graph sandbox over HTTP: the days a rule fires on, what its
actions do to later runs, what a second backtest costs.

Expected days are read from the sandbox directly (one Insights query per day), never
from the history cache or the replay under test.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from flow import campaign_ids, campaign_rule, run_at
from graph_sandbox.admin import SandboxAdmin
from ruleengine.backtest.result import CAVEATS, BacktestRequest
from ruleengine.backtest.service import BacktestDeps, run_backtest
from ruleengine.meta.http import READ_AND_BATCH, GraphSession
from ruleengine.meta.insights import BASE_PARAMS
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_NOW, SANDBOX_TOKEN

NEW_YORK = ZoneInfo("America/New_York")
TODAY = SANDBOX_NOW.astimezone(NEW_YORK).date()  # 2026-12-01
PROSPECTING = "[AUTO] Prospecting US 1"


@pytest.fixture
async def deps(
    settings: Settings, db: Database, accounts: list[str]
) -> AsyncIterator[BacktestDeps]:
    async with BacktestDeps.open(settings, db) as opened:
        yield opened


async def backtest(deps: BacktestDeps, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    request = BacktestRequest(parse_rule(data), **extra)
    return await run_backtest(deps, request, now=SANDBOX_NOW)


async def day_rows(settings: Settings, entity_id: str, day: date, field: str) -> list[Any]:
    """The sandbox's own Insights rows of one entity and day (at the sandbox's clock)."""
    session = GraphSession(settings, methods=READ_AND_BATCH)
    try:
        body = await session.request(
            "GET",
            f"{entity_id}/insights",
            token=SANDBOX_TOKEN,
            params={
                **BASE_PARAMS,
                "fields": field,
                "time_range": {"since": day.isoformat(), "until": day.isoformat()},
            },
        )
    finally:
        await session.close()
    return list(body["data"])


async def daily_spend(settings: Settings, entity_id: str, days: list[date]) -> dict[date, float]:
    """The sandbox's own spend of each day (one query per day)."""
    spends = {}
    for day in days:
        rows = await day_rows(settings, entity_id, day, "spend")
        spends[day] = float(rows[0]["spend"]) if rows else 0.0
    return spends


def one_campaign(name: str) -> list[dict[str, Any]]:
    return [{"field": "name", "operator": "EQUAL", "value": name}]


def local(fire: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(fire["time"]).astimezone(NEW_YORK)


async def test_a_rule_fires_on_exactly_the_days_its_condition_held(
    deps: BacktestDeps, settings: Settings, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(sandbox)
    days = [TODAY - timedelta(days=n) for n in range(15, 0, -1)]
    spends = await daily_spend(settings, ids[PROSPECTING], [d - timedelta(days=1) for d in days])
    threshold = sorted(spends.values())[len(spends) // 2]  # the median: about half the days
    expected = {d for d in days if spends[d - timedelta(days=1)] > threshold}
    assert 3 <= len(expected) <= 12
    rule = campaign_rule(
        {"type": "increase_budget", "percent": 1},
        [{"metric": "spend", "period": "yesterday", "operator": ">", "value": threshold}],
        schedule={"mode": "timetable", "slots": {d: ["09:00"] for d in WEEK}},
        filters=one_campaign(PROSPECTING),
    )
    result = await backtest(deps, rule, days=15)
    fired = {local(f).date() for f in result["fires"]}
    assert fired == expected
    assert all(local(f).hour == 9 for f in result["fires"])
    assert result["runs"] == 15
    by_day = {row["date"]: row["fires"] for row in result["per_day"]}
    assert by_day == {d.isoformat(): int(d in expected) for d in days}
    first = result["fires"][0]
    seen_day = local(first).date() - timedelta(days=1)
    assert first["matured"]["spend yesterday"] == pytest.approx(spends[seen_day], abs=0.01)
    assert first["after"] == pytest.approx(first["before"] * 1.01, abs=0.01)
    assert all(caveat in result["caveats"] for caveat in CAVEATS)


WEEK = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


async def test_a_cooldown_and_a_follow_up_shape_the_later_runs(
    deps: BacktestDeps, sandbox: SandboxAdmin
) -> None:
    """Pause, re-activate 60 minutes later, and not again for 3 hours after the pause."""
    rule = campaign_rule(
        {"type": "pause", "then": {"after_minutes": 60, "do": "activate"}},
        [{"metric": "spend", "period": "last_7d", "operator": ">", "value": 1}],
        cooldown_minutes=180,
        filters=one_campaign(PROSPECTING),
    )
    result = await backtest(deps, rule, days=2)
    pauses = [datetime.fromisoformat(f["time"]) for f in result["fires"] if f["action"] == "pause"]
    activations = [
        datetime.fromisoformat(f["time"]) for f in result["fires"] if f["action"] == "then:activate"
    ]
    start = datetime.combine(TODAY - timedelta(days=2), datetime.min.time(), NEW_YORK)
    assert pauses == [start + timedelta(hours=3 * n) for n in range(16)]
    assert activations == [p + timedelta(minutes=60) for p in pauses]
    per_day = result["per_day"]
    assert [row["paused"] for row in per_day] == [8, 8]
    assert [row["activated"] for row in per_day] == [8, 8]
    assert [row["fires"] for row in per_day] == [8, 8]  # follow-ups are not fires of a task
    entity = result["entities"][0]
    assert entity["before"]["status"] == "ACTIVE" and entity["after"]["status"] == "ACTIVE"


async def test_a_status_filter_drops_what_a_simulated_pause_takes_out(
    deps: BacktestDeps, sandbox: SandboxAdmin
) -> None:
    rule = campaign_rule(
        {"type": "pause"},
        [{"metric": "spend", "period": "last_7d", "operator": ">", "value": 1}],
        filters=[
            *one_campaign(PROSPECTING),
            {"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]},
        ],
    )
    result = await backtest(deps, rule, days=3)
    assert len(result["fires"]) == 1  # paused at the first run, never evaluated again
    assert result["runs"] == 3 * 96


async def test_max_budget_stops_the_raises_and_a_second_backtest_asks_graph_nothing(
    deps: BacktestDeps, sandbox: SandboxAdmin
) -> None:
    rule = campaign_rule(
        {"type": "increase_budget", "percent": 20, "max_budget": 500},
        [{"metric": "spend", "period": "today", "operator": ">", "value": 5}],
        cooldown_minutes=360,
    )
    first = await backtest(deps, rule, days=7)
    assert first["graph_calls"] > 0
    for entity in first["entities"]:
        assert entity["after"]["daily_budget"] <= 500
    budget_fires = [f for f in first["fires"] if f["field"] == "daily_budget"]
    assert budget_fires and all(f["after"] <= 500 for f in budget_fires)
    for entity_id in {f["entity_id"] for f in budget_fires}:
        times = sorted(
            datetime.fromisoformat(f["time"]) for f in budget_fires if f["entity_id"] == entity_id
        )
        assert all(b - a >= timedelta(hours=6) for a, b in itertools.pairwise(times))
    await sandbox.clear_stats()
    tweaked = rule | {"tasks": [rule["tasks"][0] | {"cooldown_minutes": 120}]}
    second = await backtest(deps, tweaked, days=7)
    assert second["graph_calls"] == 0
    assert second["cache_hits"] > 0
    stats = await sandbox.stats()
    assert stats["counted_calls"] == 0, stats
    assert len(second["fires"]) >= len(first["fires"])


async def test_an_account_without_a_usable_token_is_refused_by_name(
    deps: BacktestDeps, sandbox: SandboxAdmin, db: Database
) -> None:
    rule = campaign_rule(
        {"type": "pause"}, [{"metric": "spend", "period": "today", "operator": ">", "value": 1}]
    )
    rule["ad_accounts"] = ["act_9999"]
    with pytest.raises(Exception, match="act_9999"):
        await backtest(deps, rule, days=2)


def test_days_and_accounts_are_checked() -> None:
    rule = parse_rule(
        campaign_rule(
            {"type": "pause"}, [{"metric": "spend", "period": "today", "operator": ">", "value": 1}]
        )
    )
    with pytest.raises(ValueError, match="days must be 1 to 90"):
        BacktestRequest(rule, days=91)
    with pytest.raises(ValueError, match="act_2"):
        BacktestRequest(rule, accounts=("act_2",))


async def adds_to_cart(
    settings: Settings, sandbox: SandboxAdmin, entity_id: str, *, at: datetime, day: date
) -> float:
    """The campaign's adds to cart of ``day`` as the sandbox showed them at ``at``."""
    await sandbox.set_clock(at)
    for row in await day_rows(settings, entity_id, day, "actions"):
        for item in row.get("actions", []):
            if item["action_type"] == "omni_add_to_cart":
                return float(item["value"])
    return 0.0


async def test_as_seen_and_matured_fire_where_the_sandboxs_lag_curve_says(
    deps: BacktestDeps, settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    """The engine ran at 30 instants a fortnight ago (its records teach the curve); the
    backtest's as-seen view fires where what the sandbox showed at 09:00 crossed the
    threshold, the matured view where today's numbers do."""
    await sandbox.set_insights(attribution_lag={"enabled": True})
    metric = "actions.omni_add_to_cart"
    probes = [
        {"metric": metric, "period": period, "operator": ">", "value": 1e12}
        for period in ("yesterday", "last_3d", "last_7d")
    ]
    instants = tuple(
        datetime(2026, 11, day, hour, tzinfo=NEW_YORK).astimezone(UTC)
        for day in range(16, 21)
        for hour in range(1, 24, 4)
    )
    await run_at(settings, db, sandbox, probes, instants)
    ids = await campaign_ids(sandbox)
    campaign = ids[PROSPECTING]
    days = [TODAY - timedelta(days=n) for n in range(7, 0, -1)]
    seen, now = {}, {}
    for day in days:
        nine = datetime.combine(day, datetime.min.time(), NEW_YORK).replace(hour=9)
        seen[day] = await adds_to_cart(
            settings, sandbox, campaign, at=nine, day=day - timedelta(days=1)
        )
    for day in days:
        now[day] = await adds_to_cart(
            settings, sandbox, campaign, at=SANDBOX_NOW, day=day - timedelta(days=1)
        )
    await sandbox.set_clock(SANDBOX_NOW)
    assert all(seen[d] < now[d] for d in days), (seen, now)  # the lag is on
    values = sorted({*seen.values(), *now.values()})

    def margin(x: float) -> float:
        return min(abs(x - v) for v in values)

    def splits(x: float) -> bool:  # some days fire in both views, some in the matured only
        return any(seen[d] > x for d in days) and any(seen[d] < x < now[d] for d in days)

    middles = [(a + b) / 2 for a, b in itertools.pairwise(values)]
    threshold = max((x for x in middles if splits(x)), key=margin)
    assert margin(threshold) >= 1, (threshold, seen, now)
    rule = campaign_rule(
        {"type": "increase_budget", "percent": 1},
        [{"metric": metric, "period": "yesterday", "operator": ">", "value": threshold}],
        schedule={"mode": "timetable", "slots": {d: ["09:00"] for d in WEEK}},
        filters=one_campaign(PROSPECTING),
    )
    result = await backtest(deps, rule, days=7)
    assert result["as_seen"]["used"] and result["view"] == "as_seen", result["as_seen"]
    learned = result["as_seen"]["accounts"]["act_1001"]
    assert learned["enough"] and learned["curve"], learned
    matured_days = {local(f).date() for f in result["views"]["matured"]["fires"]}
    seen_days = {local(f).date() for f in result["views"]["as_seen"]["fires"]}
    assert matured_days == {d for d in days if now[d] > threshold}
    assert seen_days == {d for d in days if seen[d] > threshold}
    assert seen_days and seen_days < matured_days  # fewer conversions seen then: fewer fires
    only_matured = {
        datetime.fromisoformat(d["time"]).astimezone(NEW_YORK).date()
        for d in result["differs_as_seen"]
        if d["only_in"] == "matured"
    }
    assert only_matured == matured_days - seen_days
    for fire in result["fires"]:
        day = local(fire).date()
        key = f"{metric} yesterday"
        assert fire["seen"][key] == pytest.approx(seen[day], rel=0.08, abs=1), fire
        assert fire["matured"][key] == pytest.approx(now[day], abs=0.01), fire
