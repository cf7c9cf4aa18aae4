"""The Insights history cache's month buckets: what is written is read back, per field.

Against the embedded MongoDB-compatible server: concurrent writers of the same bucket,
ranges across months and years, the days around daylight-saving changes, documents of
the per-day layout, and a hypothesis round trip of random writes and reads.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruleengine import constants as c
from ruleengine.maintenance.retention import RetentionPolicy, apply_retention
from ruleengine.rules.replay.history import DayRange, Granularity
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.insights_history import (
    DAY_LAYOUT_INDEX,
    Cached,
    CachedCells,
    HistoryQuery,
    InsightsHistoryStore,
    bucket_id,
    drop_day_documents,
    month_end,
    month_of,
)

ACCOUNT = "act_1001"
AT = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
ACTIONS = [{"action_type": "purchase", "value": "3"}, {"action_type": "link_click", "value": "41"}]


async def write(
    store: InsightsHistoryStore,
    cells: dict[tuple[str, date], dict[str, Any]],
    at: datetime = AT,
    granularity: Granularity = "day",
) -> int:
    return await store.write(
        account_id=ACCOUNT, level="campaign", granularity=granularity, cells=cells, fetched_at=at
    )


async def read(
    store: InsightsHistoryStore,
    ids: list[str],
    days: DayRange,
    fields: tuple[str, ...],
    granularity: Granularity = "day",
) -> CachedCells:
    return await store.read(HistoryQuery(ACCOUNT, "campaign", granularity, ids, days, fields))


def test_a_day_belongs_to_its_calendar_month_and_the_month_ends_at_utc_midnight() -> None:
    assert month_of(date(2026, 11, 30)) == "2026-11"
    assert month_end(date(2026, 11, 30)) == datetime(2026, 12, 1, tzinfo=UTC)
    assert month_of(date(2026, 12, 31)) == "2026-12"
    assert month_end(date(2026, 12, 1)) == datetime(2027, 1, 1, tzinfo=UTC)
    assert month_end(date(2028, 2, 29)) == datetime(2028, 3, 1, tzinfo=UTC)
    assert bucket_id(ACCOUNT, "adset", "42", date(2027, 1, 1), "hour") == (
        "act_1001|adset|42|2027-01|hour"
    )
    with pytest.raises(ValueError):
        bucket_id(ACCOUNT, "campaign", "4.2", date(2027, 1, 1), "day")  # not a key part


async def test_a_field_name_that_would_not_be_a_plain_key_writes_nothing(db: Database) -> None:
    store = InsightsHistoryStore(db)
    cells = {("7", date(2026, 11, 1)): {"spend": "1"}, ("7", date(2026, 11, 2)): {"a.b": "1"}}
    with pytest.raises(ValueError):
        await write(store, cells)
    with pytest.raises(ValueError):
        await write(store, {("7", date(2026, 11, 1)): {"$set": "1"}})
    assert await db[c.INSIGHTS_HISTORY].count_documents({}) == 0


async def test_one_bucket_per_entity_month_and_granularity_holds_each_field_with_its_instant(
    db: Database,
) -> None:
    store = InsightsHistoryStore(db)
    days = DayRange(date(2026, 10, 25), date(2026, 11, 5))
    cells = {(e, d): {"spend": "1.50", "actions": ACTIONS} for e in ("7", "8") for d in days.days()}
    assert await write(store, cells) == 4  # 2 entities × October and November
    later = AT + timedelta(hours=1)
    assert await write(store, {("7", date(2026, 11, 2)): {"impressions": None}}, later) == 1

    doc = await db[c.INSIGHTS_HISTORY].find_one({"_id": "act_1001|campaign|7|2026-11|day"})
    assert doc is not None
    assert (doc["account"], doc["level"], doc["entity"], doc["granularity"]) == (
        ACCOUNT,
        "campaign",
        "7",
        "day",
    )
    assert (doc["month"], doc["month_end"]) == ("2026-11", datetime(2026, 12, 1, tzinfo=UTC))
    assert sorted(doc["days"]) == [f"2026-11-0{d}" for d in range(1, 6)]
    assert doc["days"]["2026-11-02"]["impressions"] == {"value": None, "fetched_at": later}
    assert doc["days"]["2026-11-02"]["spend"] == {"value": "1.50", "fetched_at": AT}
    # a list (or an object) as JSON text
    assert json.loads(doc["days"]["2026-11-02"]["actions"]["json"]) == ACTIONS

    held = await read(store, ["7"], DayRange(date(2026, 10, 30), date(2026, 11, 2)), ("spend",))
    assert sorted(held) == [("7", date(2026, 10, d)) for d in (30, 31)] + [
        ("7", date(2026, 11, d)) for d in (1, 2)
    ]
    assert held[("7", date(2026, 10, 31))] == {"spend": Cached("1.50", AT)}
    both = await read(
        store, ["7"], DayRange(date(2026, 11, 2), date(2026, 11, 2)), ("actions", "impressions")
    )
    assert both == {
        ("7", date(2026, 11, 2)): {
            "actions": Cached(ACTIONS, AT),
            "impressions": Cached(None, later),  # Meta had no value: stored as null
        }
    }

    # an entry without its instant (not written by this store) is as good as absent
    await db[c.INSIGHTS_HISTORY].update_one(
        {"_id": "act_1001|campaign|7|2026-11|day"},
        {"$set": {"days.2026-11-03.reach": "1", "days.2026-11-03.clicks": {"value": "2"}}},
    )
    third = DayRange(date(2026, 11, 3), date(2026, 11, 3))
    assert await read(store, ["7"], third, ("clicks", "reach", "spend")) == {
        ("7", date(2026, 11, 3)): {"spend": Cached("1.50", AT)}
    }


async def test_concurrent_writers_of_different_fields_of_the_same_day_keep_each_others_fields(
    db: Database,
) -> None:
    store = InsightsHistoryStore(db)
    ids = [str(e) for e in range(40)]
    days = DayRange(date(2026, 11, 28), date(2026, 12, 1))  # two new buckets per entity
    fields = ("spend", "impressions", "actions", "reach")
    instants = {name: AT + timedelta(seconds=n) for n, name in enumerate(fields)}
    # every writer upserts the same buckets at once: they race to insert them
    await asyncio.gather(
        *(
            write(
                store,
                {(e, d): {name: f"{name}-{e}"} for e in ids for d in days.days()},
                instants[name],
            )
            for name in fields
        )
    )
    held = await read(store, ids, days, fields)
    assert held == {
        (e, d): {name: Cached(f"{name}-{e}", instants[name]) for name in fields}
        for e in ids
        for d in days.days()
    }
    assert await db[c.INSIGHTS_HISTORY].count_documents({}) == len(ids) * 2


@pytest.mark.parametrize(
    "day",
    [date(2026, 3, 8), date(2026, 11, 1)],  # New York: a 23-hour and a 25-hour day
    ids=["spring-forward", "fall-back"],
)
async def test_the_hours_of_a_daylight_saving_day_stay_in_the_accounts_day(
    db: Database, day: date
) -> None:
    store = InsightsHistoryStore(db)
    hours = [h for h in range(24) if not (day.month == 3 and h == 2)]  # 02:00 never was
    spend = {f"{h:02d}": f"{h}.25" for h in hours}
    fetched = datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC)  # UTC next day
    await write(store, {("9", day): {"spend": spend}}, fetched, "hour")
    held = await read(store, ["9"], DayRange(day, day), ("spend",), "hour")
    assert held == {("9", day): {"spend": Cached(spend, fetched)}}
    # the bucket is the account's day's month, whatever the UTC instant of the fetch
    doc = await db[c.INSIGHTS_HISTORY].find_one({})
    assert (
        doc is not None and doc["month"] == month_of(day) and list(doc["days"]) == [day.isoformat()]
    )


async def test_a_range_over_a_year_end_reads_both_years_buckets(db: Database) -> None:
    store = InsightsHistoryStore(db)
    days = DayRange(date(2026, 12, 20), date(2027, 1, 10))
    await write(store, {("5", d): {"spend": d.isoformat()} for d in days.days()})
    held = await read(store, ["5", "6"], DayRange(date(2026, 12, 31), date(2027, 1, 1)), ("spend",))
    assert held == {
        ("5", date(2026, 12, 31)): {"spend": Cached("2026-12-31", AT)},
        ("5", date(2027, 1, 1)): {"spend": Cached("2027-01-01", AT)},
    }
    months = sorted([d["month"] async for d in db[c.INSIGHTS_HISTORY].find({})])
    assert months == ["2026-12", "2027-01"]


async def test_documents_of_the_per_day_layout_are_never_read_and_dropped_once(
    db: Database, settings: Settings
) -> None:
    docs = db[c.INSIGHTS_HISTORY]
    await docs.create_index(
        [("account", 1), ("level", 1), ("granularity", 1), ("day", 1)], name=DAY_LAYOUT_INDEX
    )
    await docs.insert_one(
        {
            "_id": "act_1001|campaign|7|2026-11-20|day",
            "account": ACCOUNT,
            "level": "campaign",
            "entity": "7",
            "day": "2026-11-20",
            "granularity": "day",
            "fields": {"spend": {"value": "9.00", "fetched_at": AT}},
        }
    )
    store = InsightsHistoryStore(db)
    await write(store, {("7", date(2026, 11, 21)): {"spend": "1.00"}})
    november = DayRange(date(2026, 11, 1), date(2026, 11, 30))
    assert list(await read(store, ["7"], november, ("spend",))) == [("7", date(2026, 11, 21))]

    report = await apply_retention(db, RetentionPolicy.from_settings(settings), now=AT)
    assert report.ttl[c.INSIGHTS_HISTORY] == "created"
    assert [d["_id"] async for d in docs.find({})] == ["act_1001|campaign|7|2026-11|day"]
    assert DAY_LAYOUT_INDEX not in await docs.index_information()
    assert await drop_day_documents(db) == 0  # once: nothing left to look for


FIELDS = ("spend", "impressions", "actions", "purchase_roas")
FIRST = date(2026, 9, 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)  # what JSON can carry
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def day_ranges(draw: st.DrawFn) -> DayRange:
    since = FIRST + timedelta(days=draw(st.integers(0, 200)))
    return DayRange(since, since + timedelta(days=draw(st.integers(0, 89))))


WRITES = st.lists(
    st.tuples(
        st.lists(st.sampled_from(["1", "2", "3"]), min_size=1, unique=True),
        day_ranges(),
        st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, min_size=1),
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=WRITES,
    days=day_ranges(),
    fields=st.lists(st.sampled_from(FIELDS), min_size=1, unique=True),
    granularity=st.sampled_from(["day", "hour"]),
)
async def test_what_is_written_is_read_back_field_by_field_whatever_the_days(
    db: Database,
    writes: list[tuple[list[str], DayRange, dict[str, Any]]],
    days: DayRange,
    fields: list[str],
    granularity: Granularity,
) -> None:
    await db[c.INSIGHTS_HISTORY].delete_many({})
    store = InsightsHistoryStore(db)
    model: dict[tuple[str, date], dict[str, Cached]] = {}
    for n, (ids, span, values) in enumerate(writes):
        at = AT + timedelta(minutes=n)
        await write(store, {(e, d): values for e in ids for d in span.days()}, at, granularity)
        for key in ((e, d) for e in ids for d in span.days()):
            model.setdefault(key, {}).update({k: Cached(v, at) for k, v in values.items()})
    held = await read(store, ["1", "3"], days, tuple(fields), granularity)
    expected = {
        (e, d): {k: v for k, v in cached.items() if k in fields}
        for (e, d), cached in model.items()
        if e in ("1", "3") and days.since <= d <= days.until
    }
    assert held == expected
