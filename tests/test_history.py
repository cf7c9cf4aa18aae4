"""Insights history against the sandbox over HTTP: the sandbox's numbers, fetched once.

Every figure is compared with what the sandbox serves to a direct query for the same
entity and day; Graph calls are counted by the sandbox itself (``/_sandbox/stats``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.backtest.history import HistoryRequest, HistoryResult, InsightsHistory
from ruleengine.meta.http import READ_AND_BATCH, GraphSession
from ruleengine.meta.insights import BASE_PARAMS
from ruleengine.rules.replay.history import DayRange
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.insights_history import HistoryQuery, InsightsHistoryStore
from support import SANDBOX_NOW, SANDBOX_TOKEN

ACCOUNT = "act_1001"
TIMEZONE = "America/New_York"
TODAY = date(2026, 12, 1)  # SANDBOX_NOW (18:00 UTC) is 13:00 in New York
NOVEMBER = DayRange(date(2026, 11, 1), date(2026, 11, 30))
FIELDS = ("spend", "impressions", "actions", "purchase_roas")


@pytest.fixture
async def graph(settings: Settings, sandbox: SandboxAdmin) -> AsyncIterator[GraphSession]:
    """A read-only session with the Batch API (what a backtest may use)."""
    session = GraphSession(settings, methods=READ_AND_BATCH)
    try:
        yield session
    finally:
        await session.close()


@pytest.fixture
def history(db: Database, graph: GraphSession) -> InsightsHistory:
    return InsightsHistory(InsightsHistoryStore(db), graph)


async def campaign_ids(graph: GraphSession, edge: str = "campaigns") -> tuple[str, ...]:
    body = await graph.request(
        "GET", f"{ACCOUNT}/{edge}", token=SANDBOX_TOKEN, params={"fields": "id", "limit": 500}
    )
    return tuple(c["id"] for c in body["data"])


async def direct(
    graph: GraphSession, entity: str, days: DayRange, fields: tuple[str, ...], **extra: Any
) -> list[dict[str, Any]]:
    """The sandbox's own rows for one entity over ``days`` (one row, or one per hour)."""
    params = {
        **BASE_PARAMS,
        "time_range": {"since": days.since.isoformat(), "until": days.until.isoformat()},
        "fields": ",".join(fields),
        "limit": 100,
        **extra,
    }
    body = await graph.request("GET", f"{entity}/insights", token=SANDBOX_TOKEN, params=params)
    return list(body["data"])


async def fetch(
    history: InsightsHistory,
    ids: tuple[str, ...],
    days: DayRange,
    fields: tuple[str, ...] = FIELDS,
    *,
    hourly: tuple[str, ...] = (),
    now: datetime = SANDBOX_NOW,
    level: str = "campaign",
) -> HistoryResult:
    request = HistoryRequest(ACCOUNT, level, ids, fields, days, hourly_fields=hourly)
    return await history.get(request, token=SANDBOX_TOKEN, timezone=TIMEZONE, now=now)


async def counted_calls(sandbox: SandboxAdmin) -> int:
    stats = await sandbox.stats()
    return int(stats["counted_calls"])


async def test_the_numbers_are_what_the_sandbox_serves_for_each_day(
    history: InsightsHistory, graph: GraphSession
) -> None:
    ids = await campaign_ids(graph)
    days = DayRange(date(2026, 11, 25), TODAY)  # six full days and today so far
    result = await fetch(history, ids, days)
    assert not result.errors
    checked = 0
    for entity in ids[:4]:
        for day in days.days():
            rows = await direct(graph, entity, DayRange(day, day), FIELDS)
            expected = {k: v for k, v in rows[0].items() if k in FIELDS} if rows else {}
            numbers = result.daily[entity][day]
            assert numbers.values == expected, (entity, day)
            assert numbers.fetched_at == dict.fromkeys(FIELDS, SANDBOX_NOW)
            checked += bool(expected)
    assert checked >= 10  # most of these days delivered


async def test_a_second_call_with_the_same_inputs_costs_no_graph_call(
    history: InsightsHistory, graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(graph)
    await sandbox.clear_stats()
    first = await fetch(history, ids, NOVEMBER)
    assert first.graph_calls == await counted_calls(sandbox) > 0
    assert first.cache_hits == 0 and first.cells_fetched == len(ids) * 30
    await sandbox.clear_stats()
    second = await fetch(history, ids, NOVEMBER, now=SANDBOX_NOW + timedelta(minutes=5))
    assert await counted_calls(sandbox) == 0
    assert (second.graph_calls, second.http_requests, second.cells_fetched) == (0, 0, 0)
    assert second.cache_hits == len(ids) * 30
    assert second.daily == first.daily


async def test_extra_fields_and_extra_days_cost_only_what_is_missing(
    history: InsightsHistory, graph: GraphSession, sandbox: SandboxAdmin, db: Database
) -> None:
    ids = await campaign_ids(graph)
    first_at, second_at, third_at = (SANDBOX_NOW + timedelta(minutes=m) for m in (0, 1, 2))
    await fetch(history, ids, NOVEMBER, ("spend",), now=first_at)

    await sandbox.clear_stats()
    wider = await fetch(history, ids, NOVEMBER, ("spend", "impressions"), now=second_at)
    assert wider.graph_calls == await counted_calls(sandbox) == 1  # one request: impressions
    day = date(2026, 11, 20)
    entity = next(e for e in ids if "impressions" in wider.daily[e][day].values)
    assert wider.daily[entity][day].fetched_at == {"spend": first_at, "impressions": second_at}
    rows = await direct(graph, entity, DayRange(day, day), ("spend", "impressions"))
    assert wider.daily[entity][day].values == {k: rows[0][k] for k in ("spend", "impressions")}

    await sandbox.clear_stats()
    longer = DayRange(date(2026, 10, 15), NOVEMBER.until)
    more = await fetch(history, ids, longer, ("spend", "impressions"), now=third_at)
    assert more.graph_calls == await counted_calls(sandbox) == 1  # October 15–31 only
    assert more.cache_hits == len(ids) * 30 and more.cells_fetched == len(ids) * 17
    assert more.daily[entity][date(2026, 10, 20)].fetched_at["spend"] == third_at
    assert more.daily[entity][day].fetched_at["spend"] == first_at

    # what MongoDB holds: one document per (account, level, entity, granularity, month)
    doc = await db[c.INSIGHTS_HISTORY].find_one({"_id": f"{ACCOUNT}|campaign|{entity}|2026-11|day"})
    assert doc is not None
    assert (doc["account"], doc["level"], doc["entity"], doc["granularity"], doc["month"]) == (
        ACCOUNT,
        "campaign",
        entity,
        "day",
        "2026-11",
    )
    assert doc["month_end"] == datetime(2026, 12, 1, tzinfo=UTC)
    assert sorted(doc["days"]) == [d.isoformat() for d in NOVEMBER.days()]
    held = doc["days"]["2026-11-20"]
    assert held["spend"] == {"value": rows[0]["spend"], "fetched_at": first_at}
    assert held["impressions"]["fetched_at"] == second_at
    october = await db[c.INSIGHTS_HISTORY].find_one(
        {"_id": f"{ACCOUNT}|campaign|{entity}|2026-10|day"}
    )
    assert october is not None and sorted(october["days"]) == [
        f"2026-10-{d}" for d in range(15, 32)
    ]


async def test_hourly_rows_are_the_sandboxs_and_add_up_to_the_daily_ones(
    history: InsightsHistory, graph: GraphSession
) -> None:
    ids = (await campaign_ids(graph, "adsets"))[:5]
    days = DayRange(date(2026, 11, 29), TODAY)
    fields = ("spend", "impressions")
    result = await fetch(history, ids, days, fields, hourly=fields, level="adset")
    assert not result.errors
    compared = 0
    for entity in ids:
        for day in days.days():
            hours = result.hour_values(entity, day)
            daily = result.daily[entity][day].values
            # each hour's counts are rounded down on their own: within a unit per hour (of
            # an ad set: a campaign's hours are its ad sets' hours, each rounded)
            impressions = sum(int(h.get("impressions", 0)) for h in hours.values())
            assert 0 <= int(daily.get("impressions", 0)) - impressions < 24
            spend = sum(Decimal(h.get("spend", "0")) for h in hours.values())
            assert 0 <= Decimal(daily.get("spend", "0")) - spend < Decimal("0.24")
            compared += bool(hours)
        served = await direct(
            graph,
            entity,
            DayRange(TODAY, TODAY),
            fields,
            breakdowns="hourly_stats_aggregated_by_advertiser_time_zone",
        )
        by_hour = {
            int(row["hourly_stats_aggregated_by_advertiser_time_zone"][:2]): {
                k: row[k] for k in fields
            }
            for row in served
        }
        assert result.hour_values(entity, TODAY) == by_hour
        assert max(by_hour, default=0) <= 13  # today so far: 13:00 in New York
    assert compared >= 5


async def test_ninety_days_back(
    history: InsightsHistory, graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(graph)
    days = DayRange.last(90, TODAY, include_today=False)
    await sandbox.clear_stats()
    result = await fetch(history, ids, days, ("spend",))
    assert not result.errors and result.graph_calls == await counted_calls(sandbox)
    for entity in ids:
        assert sorted(result.daily[entity]) == days.days()  # every day known, delivered or not
        served = await direct(graph, entity, days, ("spend",))
        total = sum(Decimal(n.values.get("spend", "0")) for n in result.daily[entity].values())
        assert total == (Decimal(served[0]["spend"]) if served else 0)


async def test_stale_days_are_fetched_again_and_final_ones_never(
    history: InsightsHistory, graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = (await campaign_ids(graph))[:3]
    days = DayRange.last(60, TODAY)  # from October 3: before November 3 is final
    await fetch(history, ids, days, ("spend",))

    later = SANDBOX_NOW + timedelta(minutes=20)  # today's numbers (15 minutes) are stale
    again = await fetch(history, ids, days, ("spend",), now=later)
    assert again.cells_fetched == len(ids) and again.graph_calls == 1
    assert again.daily[ids[0]][TODAY].fetched_at["spend"] == later

    much_later = SANDBOX_NOW + timedelta(hours=7)  # maturing days (6 hours) are stale too
    third = await fetch(history, ids, days, ("spend",), now=much_later)
    maturing = [d for d in days.days() if d >= date(2026, 11, 3)]
    assert third.cells_fetched == len(ids) * len(maturing)
    final = third.daily[ids[0]][date(2026, 11, 1)]
    assert final.fetched_at["spend"] == SANDBOX_NOW
    assert third.daily[ids[0]][date(2026, 11, 10)].fetched_at["spend"] == much_later


async def test_a_request_meta_times_out_on_is_split_and_gives_the_same_numbers(
    db: Database, graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(graph)
    whole = await fetch(InsightsHistory(InsightsHistoryStore(db), graph), ids, NOVEMBER)
    await db[c.INSIGHTS_HISTORY].delete_many({})
    await sandbox.set_insights(sync_max_cells=40)  # ad sets × days in one request
    split = await fetch(InsightsHistory(InsightsHistoryStore(db), graph), ids, NOVEMBER)
    assert not split.errors
    assert split.graph_calls > whole.graph_calls
    assert split.daily == whole.daily


async def test_the_read_takes_the_account_level_and_months_asked_only(db: Database) -> None:
    store = InsightsHistoryStore(db)
    at = datetime(2026, 12, 1, tzinfo=UTC)
    for month in ("2026-10", "2026-11", "2026-12"):  # three buckets per entity
        first = date.fromisoformat(f"{month}-01")
        cells = {
            (str(e), first + timedelta(days=d)): {"spend": "1"}
            for e in range(20)
            for d in range(28)
        }
        for account, level in (("act_1", "campaign"), ("act_2", "campaign"), ("act_1", "ad")):
            await store.write(
                account_id=account, level=level, granularity="day", cells=cells, fetched_at=at
            )
    query = HistoryQuery("act_1", "campaign", "day", ["3", "4"], NOVEMBER, ("spend",))
    cells = await store.read(query)
    assert sorted(cells) == sorted((e, date(2026, 11, d)) for e in ("3", "4") for d in range(1, 29))
    many = [str(e) for e in range(3, 70)]  # past MAX_IDS_IN_QUERY: picked out of the answer
    cells = await store.read(HistoryQuery("act_1", "campaign", "day", many, NOVEMBER, ("spend",)))
    assert sorted(cells) == sorted(
        (str(e), date(2026, 11, d)) for e in range(3, 20) for d in range(1, 29)
    )


async def test_a_request_graph_fails_on_writes_nothing_and_keeps_what_the_cache_held(
    history: InsightsHistory, graph: GraphSession, sandbox: SandboxAdmin, db: Database
) -> None:
    ids = await campaign_ids(graph)
    await fetch(history, ids, NOVEMBER, ("spend",))
    before = [doc async for doc in db[c.INSIGHTS_HISTORY].find({}).sort("_id")]
    await sandbox.set_faults(rules=[{"path_contains": "insights", "code": 100}])  # permanent
    later = SANDBOX_NOW + timedelta(minutes=1)
    failed = await fetch(history, ids, NOVEMBER, ("spend", "impressions"), now=later)
    assert set(failed.errors) == set(ids) and failed.daily == {}
    assert [doc async for doc in db[c.INSIGHTS_HISTORY].find({}).sort("_id")] == before
    await sandbox.clear_faults()
    again = await fetch(history, ids, NOVEMBER, ("spend", "impressions"), now=later)
    assert not again.errors and again.cells_fetched == len(ids) * 30
    held = again.daily[ids[0]][date(2026, 11, 20)].fetched_at
    assert held == {"spend": SANDBOX_NOW, "impressions": later}
