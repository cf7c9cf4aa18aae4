"""Retention: TTL indexes follow the settings, and each settled day is rolled up before it expires.

The server's TTL monitor is not waited for (it runs about once a minute); these
tests check the index options it acts on, the dates it reads, and the rollups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import pytest
from pymongo.errors import OperationFailure

from flow import DueBurstWorker, campaign_rule, dispatch, records, run_rule, save_rule, work
from flow import _Idle as Idle
from ruleengine import constants as c
from ruleengine.jobs import worker_kwargs
from ruleengine.maintenance.retention import RetentionPolicy, apply_retention, retention_job
from ruleengine.settings import Settings
from ruleengine.store.db import (
    Database,
    TtlIndex,
    ensure_indexes,
    ensure_ttl_index,
    server_time,
)
from ruleengine.store.intents import KEPT_AFTER_COOLDOWN, expires_at
from ruleengine.store.rollups import RollupStore, days_to_roll_up
from ruleengine.writes.meta_limits import TOO_LOW_REMEMBERED

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


async def _ttl_of(db: Database, collection: str) -> dict[str, int]:
    """Field → expireAfterSeconds of the collection's TTL indexes."""
    info = await db[collection].index_information()
    return {
        spec["key"][0][0]: spec["expireAfterSeconds"]
        for spec in info.values()
        if "expireAfterSeconds" in spec
    }


async def test_ttl_indexes_follow_the_settings_and_a_changed_setting_changes_them(
    settings: Settings, db: Database
) -> None:
    policy = RetentionPolicy.from_settings(settings)
    first = await apply_retention(db, policy, now=NOW)
    assert set(first.ttl.values()) == {"created"}
    assert await _ttl_of(db, c.EXECUTIONS) == {"created_at": 30 * 86400}
    assert await _ttl_of(db, c.EVALUATIONS) == {"created_at": 30 * 86400}  # the chunks too
    assert await _ttl_of(db, c.BATCHES) == {"finished_at": 90 * 86400}
    assert await _ttl_of(db, c.ROLLUPS) == {"date": 400 * 86400}
    assert await _ttl_of(db, c.ROLLUP_DAYS) == {"date": 402 * 86400}
    assert await _ttl_of(db, c.INSIGHTS_HISTORY) == {"month_end": 120 * 86400}

    shorter = settings.model_copy(
        update={"executions_retention_days": 7, "batches_retention_days": 14}
    )
    second = await apply_retention(db, RetentionPolicy.from_settings(shorter), now=NOW)
    assert second.ttl == {
        c.EXECUTIONS: "updated",
        c.EVALUATIONS: "updated",
        c.BATCHES: "updated",
        c.ROLLUPS: "unchanged",
        c.ROLLUP_DAYS: "unchanged",
        c.INSIGHTS_HISTORY: "unchanged",
    }
    assert await _ttl_of(db, c.EXECUTIONS) == {"created_at": 7 * 86400}
    assert await _ttl_of(db, c.EVALUATIONS) == {"created_at": 7 * 86400}
    assert await _ttl_of(db, c.BATCHES) == {"finished_at": 14 * 86400}
    names = [i["name"] async for i in await db[c.BATCHES].list_indexes()]
    assert names.count("finished_at_ttl") == 1  # changed in place, not duplicated


async def test_a_plain_index_on_the_field_becomes_the_ttl_index(db: Database) -> None:
    await db[c.BATCHES].create_index("finished_at")  # e.g. made by hand, without expiry
    ttl = TtlIndex(c.BATCHES, "finished_at", 3600)
    assert await ensure_ttl_index(db, ttl) == "updated"
    assert await _ttl_of(db, c.BATCHES) == {"finished_at": 3600}
    assert await ensure_ttl_index(db, ttl) == "unchanged"


class _WithoutCollMod:
    """A database whose server refuses collMod, as some MongoDB-compatible servers do."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __getitem__(self, name: str) -> Any:
        return self._db[name]

    async def command(self, command: dict[str, Any]) -> Any:
        if "collMod" in command:
            raise OperationFailure("no such command: 'collMod'", code=59)
        return await self._db.command(command)


async def test_a_retired_index_is_dropped_at_start_and_the_others_stay(db: Database) -> None:
    intents = db[c.ACTION_INTENTS]
    await intents.create_index([("rule_id", 1), ("entity_id", 1), ("created_at", -1)])
    await ensure_indexes(db)
    names = set(await intents.index_information())
    assert "rule_id_1_entity_id_1_created_at_-1" not in names
    assert "rule_id_1_task_id_1_entity_id_1_status_1" in names
    await ensure_indexes(db)  # nothing left to drop: a second start changes nothing
    assert set(await intents.index_information()) == names


async def test_without_coll_mod_the_index_is_dropped_and_created_again(db: Database) -> None:
    await ensure_ttl_index(db, TtlIndex(c.EXECUTIONS, "created_at", 86400))
    refusing = cast(Database, _WithoutCollMod(db))
    assert await ensure_ttl_index(refusing, TtlIndex(c.EXECUTIONS, "created_at", 60)) == (
        "recreated"
    )
    assert await _ttl_of(db, c.EXECUTIONS) == {"created_at": 60}


async def test_what_the_engine_writes_carries_the_dates_the_ttl_indexes_read(
    settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    rule = {
        "name": "Pause spenders",
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "UTC",
        "tasks": [
            {
                "id": "pause",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "pause"},
            }
        ],
    }
    saved = await run_rule(settings, db, rule)
    executions = await records(db, rule_id=saved.id)
    assert executions and all(isinstance(r["created_at"], datetime) for r in executions)
    batch = await db[c.BATCHES].find_one({"rule_id": saved.id})
    assert batch is not None and isinstance(batch["finished_at"], datetime)


async def test_a_running_batch_has_no_date_to_expire_on(db: Database) -> None:
    await _insert(db, "stuck", "r1", NOW - 200 * DAY, status="RUNNING")
    batch = await db[c.BATCHES].find_one({"_id": "stuck"})
    assert batch is not None and batch.get("finished_at") is None


# --- daily rollups ---------------------------------------------------------------------


def test_days_to_roll_up_are_settled_and_still_whole() -> None:
    settle = timedelta(minutes=70)
    days = days_to_roll_up(now=NOW, settle=settle, keep=90 * DAY, done=set())
    assert (days[0], days[-1], len(days)) == (date(2026, 9, 12), date(2026, 12, 9), 89)
    # at 00:30 yesterday has not settled, and the day before has begun to expire
    at_0030, at_0130 = (datetime(2026, 12, 10, h, 30, tzinfo=UTC) for h in (0, 1))
    assert days_to_roll_up(now=at_0030, settle=settle, keep=2 * DAY, done=set()) == []
    assert days_to_roll_up(now=at_0130, settle=settle, keep=2 * DAY, done=set()) == [
        date(2026, 12, 9)
    ]
    done = {date(2026, 12, 9)}
    assert days_to_roll_up(now=NOW, settle=settle, keep=2 * DAY, done=done) == []
    assert days_to_roll_up(now=NOW, settle=settle, keep=2 * DAY, done=set()) == [date(2026, 12, 9)]


async def _insert(
    db: Database,
    batch_id: str,
    rule_id: str,
    started_at: datetime,
    *,
    status: str = "DONE",
    duration_s: float | None = None,
    name: str | None = None,
) -> None:
    doc: dict[str, Any] = {
        "_id": batch_id,
        "rule_id": rule_id,
        "rule_name": name or rule_id.upper(),
        "status": status,
        "started_at": started_at,
        "finished_at": None,
    }
    if status in ("DONE", "FAILED"):
        doc |= {
            "finished_at": started_at + timedelta(seconds=duration_s or 0),
            "duration_s": duration_s,
            "evaluated_count": 10,
            "affected_count": 4,
            "applied_count": 3,
            "failed_count": 1 if status == "FAILED" else 0,
            "graph": {"http_requests": 2, "counted_calls": 5},
        }
    elif status == "ABANDONED":
        doc["finished_at"] = started_at + timedelta(minutes=11)
    await db[c.BATCHES].insert_one(doc)


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


async def test_a_day_is_rolled_up_per_rule_from_its_batches(db: Database) -> None:
    day = date(2026, 12, 8)
    start = datetime(2026, 12, 8, tzinfo=UTC)
    durations = [0.5, 1.25, 2.0, 8.0]
    for n, seconds in enumerate(durations):
        await _insert(db, f"a{n}", "a", start + timedelta(hours=n), duration_s=seconds)
    await _insert(db, "a-failed", "a", start + timedelta(hours=5), status="FAILED", duration_s=3.0)
    await _insert(db, "a-lost", "a", start + timedelta(hours=6), status="ABANDONED")
    await _insert(db, "a-late", "a", start + timedelta(hours=23), name="A renamed", duration_s=1)
    await _insert(db, "b0", "b", start + timedelta(minutes=1), duration_s=4.0)
    await _insert(db, "other-day", "b", start - timedelta(seconds=1), duration_s=99.0)
    store = RollupStore(db)
    assert await store.roll_up(day, now=NOW) == 2
    rollups = {d["rule_id"]: d async for d in db[c.ROLLUPS].find()}
    a = rollups["a"]
    timed = [*durations, 3.0, 1.0]
    assert (a["_id"], a["day"], a["date"], a["rule_name"]) == (
        "a:2026-12-08",
        "2026-12-08",
        start,
        "A renamed",
    )
    assert (a["batches"], a["done"], a["failed"], a["abandoned"], a["running"]) == (7, 5, 1, 1, 0)
    assert (a["evaluated"], a["affected"], a["applied"], a["action_failures"]) == (60, 24, 18, 1)
    assert (a["graph_calls"], a["http_requests"]) == (30, 12)
    assert (a["timed"], a["duration_sum_s"], a["duration_max_s"]) == (6, sum(timed), 8.0)
    assert a["duration_p50_s"] == round(_p(timed, 50), 6)
    assert a["duration_p95_s"] == round(_p(timed, 95), 6)
    b = rollups["b"]
    assert (b["batches"], b["duration_p95_s"], b["duration_max_s"]) == (1, 4.0, 4.0)

    # rolling the same day up again gives the same documents
    assert await store.roll_up(day, now=NOW) == 2
    again = {d["rule_id"]: d async for d in db[c.ROLLUPS].find()}
    assert again == rollups
    assert await store.rolled_up(since=day) == {day}


async def test_a_day_of_only_abandoned_batches_has_counts_but_no_durations(db: Database) -> None:
    await _insert(db, "lost", "a", datetime(2026, 12, 8, 3, tzinfo=UTC), status="ABANDONED")
    await RollupStore(db).roll_up(date(2026, 12, 8), now=NOW)
    rollup = await db[c.ROLLUPS].find_one({"rule_id": "a"})
    assert rollup is not None
    assert (rollup["batches"], rollup["abandoned"], rollup["timed"]) == (1, 1, 0)
    assert (rollup["duration_p95_s"], rollup["duration_sum_s"]) == (None, 0.0)


async def test_the_retention_pass_rolls_up_each_settled_day_once(
    settings: Settings, db: Database
) -> None:
    for days_ago in range(4):  # today, yesterday and the two days before
        started = NOW - days_ago * DAY
        await _insert(db, f"a{days_ago}", "a", started, duration_s=1.0 + days_ago)
    policy = RetentionPolicy.from_settings(
        settings.model_copy(update={"batches_retention_days": 4})
    )
    first = await apply_retention(db, policy, now=NOW)
    assert first.rolled_up == ["2026-12-07", "2026-12-08", "2026-12-09"]
    days = sorted([(d["day"], d["duration_max_s"]) async for d in db[c.ROLLUPS].find()])
    assert days == [("2026-12-07", 4.0), ("2026-12-08", 3.0), ("2026-12-09", 2.0)]
    assert (await apply_retention(db, policy, now=NOW)).rolled_up == []
    tomorrow = await apply_retention(db, policy, now=NOW + DAY)
    assert tomorrow.rolled_up == ["2026-12-10"]


async def test_a_long_history_is_caught_up_a_few_days_per_pass(
    settings: Settings, db: Database
) -> None:
    policy = RetentionPolicy.from_settings(settings)
    first = await apply_retention(db, policy, now=NOW, max_days=7)
    assert first.rolled_up[0] == "2026-09-12" and len(first.rolled_up) == 7
    second = await apply_retention(db, policy, now=NOW, max_days=7)
    assert second.rolled_up[0] == "2026-09-19"


async def test_the_worker_runs_retention_from_its_cron(
    settings: Settings, db: Database, redis: Any
) -> None:
    kwargs = worker_kwargs(settings) | {"poll_delay": 0.01, "handle_signals": False}
    assert "retention" in {job.name for job in kwargs["cron_jobs"]}
    kwargs["cron_jobs"] = [job for job in kwargs["cron_jobs"] if job.name == "retention"]
    worker = DueBurstWorker(**kwargs)
    try:
        with pytest.raises(Idle):  # how the burst worker stops once nothing is due
            await worker.main()
    finally:
        await worker.close()
    assert worker.jobs_complete == 1
    assert await _ttl_of(db, c.BATCHES) == {"finished_at": 90 * 86400}
    assert await db[c.ROLLUP_DAYS].count_documents({}) > 0


async def test_the_cron_job_uses_the_worker_context(settings: Settings, db: Database) -> None:
    result = await retention_job({"settings": settings, "db": db})
    assert len(result["rolled_up"]) == 7
    assert await _ttl_of(db, c.EXECUTIONS) == {"created_at": 30 * 86400}


@pytest.mark.parametrize("name", ["executions", "batches", "rollups"])
def test_retention_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(f"RULEENGINE_{name.upper()}_RETENTION_DAYS", "12")
    assert getattr(Settings(), f"{name}_retention_days") == 12


# ---------------------------------------------------------------- action intents

HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}


def _on(name: str) -> list[dict[str, Any]]:
    return [{"field": "name", "operator": "CONTAIN", "value": name}]


async def test_an_intent_expires_a_month_after_its_cooldown_unless_its_count_is_read(
    settings: Settings, db: Database, accounts: list[str]
) -> None:
    """Intents are kept for good no more: one nothing reads again goes a month after its
    cooldown ends; one a task's execution_count_limit counts stays (it counts them ever)."""
    raise_budget = {"type": "increase_budget", "percent": 10}
    cooled = campaign_rule(raise_budget, [HAS_BUDGET], name="cooled", cooldown_minutes=360)
    counted = campaign_rule(raise_budget, [HAS_BUDGET], name="counted")
    counted["tasks"][0]["execution_count_limit"] = 5
    cooled_rule = await save_rule(db, cooled | {"filters": _on("Prospecting US 1")})
    counted_rule = await save_rule(db, counted | {"filters": _on("Prospecting US 2")})
    await dispatch(settings, db)
    await work(settings)

    (first,) = [d async for d in db[c.ACTION_INTENTS].find({"rule_id": cooled_rule.id})]
    assert first["status"] == "done"
    cooldown_over = first["cooling_from"] + timedelta(minutes=360)
    assert first["expires_at"] == cooldown_over + KEPT_AFTER_COOLDOWN
    (kept,) = [d async for d in db[c.ACTION_INTENTS].find({"rule_id": counted_rule.id})]
    assert kept["status"] == "done" and "expires_at" not in kept

    index = (await db[c.ACTION_INTENTS].index_information())["expires_at_1"]
    assert index["sparse"] is True  # a count-limited task's intents have no entry


async def test_the_retention_pass_deletes_the_intents_that_expired_and_no_other(
    settings: Settings, db: Database
) -> None:
    now = await server_time(db)
    base = {"task_id": "t", "rule_id": "r", "status": "done", "cooling_from": now}
    await db[c.ACTION_INTENTS].insert_many(
        [
            base | {"batch_id": "old", "entity_id": "1", "expires_at": now - timedelta(minutes=1)},
            base | {"batch_id": "new", "entity_id": "2", "expires_at": now + timedelta(days=1)},
            base | {"batch_id": "counted", "entity_id": "3"},  # kept for good: no date
        ]
    )
    report = await apply_retention(db, RetentionPolicy.from_settings(settings), now=NOW)
    assert report.intents_expired == 1
    left = {d["batch_id"] async for d in db[c.ACTION_INTENTS].find()}
    assert left == {"new", "counted"}
    again = await apply_retention(db, RetentionPolicy.from_settings(settings), now=NOW)
    assert again.intents_expired == 0


def test_an_intent_outlives_every_window_that_reads_intents_back() -> None:
    longest_oscillation = next(
        m.le for m in Settings.model_fields["oscillation_window_hours"].metadata if hasattr(m, "le")
    )
    assert timedelta(hours=longest_oscillation) < KEPT_AFTER_COOLDOWN
    assert KEPT_AFTER_COOLDOWN > TOO_LOW_REMEMBERED
    at = datetime(2026, 12, 1, tzinfo=UTC)
    plain = {"cooling_from": at, "cooldown_minutes": 60, "counted": False}
    assert expires_at(**plain, action="pause") == at + timedelta(hours=1) + KEPT_AFTER_COOLDOWN
    assert expires_at(**plain | {"counted": True}, action="pause") is None
    assert expires_at(**plain, action="rebalance_budget") is None  # its next run reads them
