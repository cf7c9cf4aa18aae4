"""The sparklines' series: fires per day, p95 per day and error occurrences per hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_helpers import AUTH, Client, insert_batch, rule_body, run_batch

from ruleengine import constants as c
from ruleengine.errors import ErrorReport
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.errorlog import HOURS_KEPT, ErrorGroup, ErrorLog, hour_key, hours_ending
from ruleengine.store.rollups import RollupStore


async def _applied_by_day(db: Database, rule_id: str) -> dict[str, int]:
    by_day: dict[str, int] = {}
    async for b in db[c.BATCHES].find({"rule_id": rule_id}):
        day = b["started_at"].date().isoformat()
        by_day[day] = by_day.get(day, 0) + b["applied_count"]
    return by_day


async def test_fires_per_day_are_the_actions_the_engine_applied(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> None:
    body = rule_body(ad_accounts=["act_1001", "act_1002"])
    body["tasks"][0]["conditions"][0]["value"] = {"USD": 1, "EUR": 1}  # dollars and euros
    created = await (await client.post("/api/rules", json=body, headers=AUTH)).json()
    idle = await (await client.post("/api/rules", json=rule_body("Idle"), headers=AUTH)).json()
    rule = parse_rule(body)
    now = datetime.now(UTC)
    three_days_ago = now - timedelta(days=3)
    await run_batch(
        web_settings, db, redis, rule_id=created["id"], version=1, rule=rule,
        account="act_1001", now=three_days_ago,
    )  # fmt: skip
    await run_batch(
        web_settings, db, redis, rule_id=created["id"], version=1, rule=rule,
        account="act_1002", now=now,
    )  # fmt: skip
    applied = await _applied_by_day(db, created["id"])
    assert applied[three_days_ago.date().isoformat()] > 0 and applied[now.date().isoformat()] > 0

    query = f"/api/trends/rules/fires?rule_id={created['id']}&rule_id={idle['id']}"
    answer = await (await client.get(query)).json()
    days = answer["days"]
    assert len(days) == 14 and days[-1] == now.date().isoformat()
    assert days[0] == (now - timedelta(days=13)).date().isoformat()
    assert answer["unit"] == "actions"
    fires, none = answer["items"]
    assert fires["rule_id"] == created["id"]
    assert fires["values"] == [applied.get(d, 0) for d in days]
    assert sum(fires["values"]) == sum(applied.values())
    assert none == {"rule_id": idle["id"], "values": [0] * 14}
    week = await (
        await client.get(f"/api/trends/rules/fires?rule_id={created['id']}&days=3")
    ).json()
    assert week["items"][0]["values"] == [0, 0, applied[now.date().isoformat()]]


async def test_p95_per_day_comes_from_rollups_and_from_batches_not_rolled_up(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> None:
    body = rule_body()
    created = await (await client.post("/api/rules", json=body, headers=AUTH)).json()
    rule_id = created["id"]
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    for days_ago, durations in ((3, [1.0, 2.0, 3.0, 4.0, 5.0]), (1, [1.0, 2.0])):
        for n, seconds in enumerate(durations):
            await insert_batch(
                db,
                batch_id=f"{rule_id}-{days_ago}-{n}",
                rule_id=rule_id,
                rule_name="Pause spenders",
                started_at=today - timedelta(days=days_ago, hours=-n),
                duration_s=seconds,
            )
    await RollupStore(db).roll_up((today - timedelta(days=3)).date(), now=datetime.now(UTC))
    # the rollup is what counts for a rolled-up day, even where the batches say otherwise
    await db[c.ROLLUPS].update_one(
        {"rule_id": rule_id, "day": (today - timedelta(days=3)).date().isoformat()},
        {"$set": {"duration_p95_s": 7.5}},
    )
    batch_id = await run_batch(
        web_settings,
        db,
        redis,
        rule_id=rule_id,
        version=1,
        rule=parse_rule(body),
        account="act_1001",
    )
    ran = await db[c.BATCHES].find_one({"_id": batch_id})
    assert ran is not None and ran["status"] == "DONE"

    answer = await (await client.get(f"/api/trends/rules/p95?rule_id={rule_id}&days=5")).json()
    assert answer["unit"] == "seconds"
    assert answer["items"] == [
        {"rule_id": rule_id, "values": [None, 7.5, None, 1.95, round(ran["duration_s"], 6)]}
    ]


async def test_trend_queries_name_their_bad_parameters(client: Client) -> None:
    for query, path in (
        ("", "rule_id"),
        ("?rule_id=" + "&rule_id=".join(str(n) for n in range(101)), "rule_id"),
        ("?rule_id=a&days=0", "days"),
        ("?rule_id=a&days=91", "days"),
    ):
        for route in ("fires", "p95"):
            answer = await client.get(f"/api/trends/rules/{route}{query}")
            assert answer.status == 422
            assert (await answer.json())["errors"][0]["path"] == path


async def test_errors_are_counted_per_hour_for_48_hours(client: Client, db: Database) -> None:
    log = ErrorLog(db)
    now = datetime.now(UTC)

    async def report(at: datetime) -> str:
        return await log.record(
            ErrorReport(function="writer.update", message=f"campaign 120200{at:%H%M%S} failed"),
            now=at,
        )

    group = await report(now - timedelta(hours=50))
    for _ in range(3):
        await report(now - timedelta(hours=2))
    await report(now)
    page = await (await client.get("/api/errors")).json()
    (item,) = page["items"]
    assert item["id"] == group and item["count"] == 5
    assert "hourly" not in item
    counts = item["per_hour"]["counts"]
    assert len(counts) == HOURS_KEPT
    assert counts[-1] == 1 and counts[-3] == 3 and sum(counts) == 4
    assert item["per_hour"]["since"] == hours_ending(now)[0].isoformat().replace("+00:00", "Z")
    stored = await db[c.ERROR_LOG].find_one({})
    assert stored is not None
    # the hour 50 hours ago fell out of the window and is no longer kept
    assert set(stored["hourly"]) == {hour_key(now - timedelta(hours=2)), hour_key(now)}


@given(
    st.datetimes(timezones=st.just(UTC)), st.dictionaries(st.integers(0, 100), st.integers(1, 9))
)
def test_per_hour_is_aligned_to_the_hours_ending_now(now: datetime, ago: dict[int, int]) -> None:
    hourly = {hour_key(now - timedelta(hours=h)): n for h, n in ago.items()}
    group = ErrorGroup(
        id="g", function="f", message="m", count=1, first_seen=now, last_seen=now,
        status="active", samples=[], hourly=hourly,
    )  # fmt: skip
    counts = group.per_hour(now)
    assert len(counts) == HOURS_KEPT
    assert counts == [ago.get(h, 0) for h in range(HOURS_KEPT - 1, -1, -1)]


QUERY_VALUES = st.one_of(
    st.text(max_size=250),
    st.sampled_from(["0", "14", "90", "91", "-1", "1e3", "٣", "14\n", "", "x" * 201]),
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ids=st.lists(QUERY_VALUES, max_size=4),
    days=st.one_of(st.none(), QUERY_VALUES),
    route=st.sampled_from(["fires", "p95"]),
)
async def test_any_query_is_answered_200_or_422_never_500(
    client: Client, ids: list[str], days: str | None, route: str
) -> None:
    query = [("rule_id", i) for i in ids] + ([] if days is None else [("days", days)])
    answer = await client.get(f"/api/trends/rules/{route}", params=query)
    body = await answer.json()
    assert answer.status in (200, 422), body
    if answer.status == 422:
        assert body["errors"][0]["path"] in ("rule_id", "days")
        return
    asked = list(dict.fromkeys(i for i in ids if i))
    assert [item["rule_id"] for item in body["items"]] == asked
    assert all(len(item["values"]) == len(body["days"]) for item in body["items"])
