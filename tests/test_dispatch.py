"""The dispatcher against real Redis, the MongoDB-compatible server and the sandbox."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from flow import process_env, wait_for
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.devstack.embedded import ProcessGroup, free_port, start_redis
from ruleengine.dispatching.payload import EvaluateJob, deserialize
from ruleengine.dispatching.sweep import Dispatcher
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.ruledocs import RuleDoc
from ruleengine.store.rules import RuleStore
from support import SANDBOX_TOKEN

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SRC = Path(__file__).parents[1] / "src" / "ruleengine"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def rule_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "Scale winners",
        "level": "campaign",
        "ad_accounts": ["act_1001", "act_1002", "act_1003"],
        "filters": [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": "scale",
                "conditions": [
                    {
                        "metric": "spend",
                        "period": "today",
                        "operator": ">",
                        "compare_to": {"metric": "daily_budget", "multiplier": 0.5},
                    }
                ],
                "action": {"type": "increase_budget", "percent": 20},
            }
        ],
    }
    return data | overrides


async def save(db: Database, now: datetime = T0, **overrides: Any) -> RuleDoc:
    result = await RuleStore(db).save(
        parse_rule(rule_data(**overrides)), now=now, author="t", source="t"
    )
    return result.rule


@pytest.fixture
async def make_dispatcher(
    settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> AsyncIterator[Any]:
    made: list[tuple[Dispatcher, GraphSession]] = []

    def make(clock: Clock, *, owner: str | None = None, **overrides: Any) -> Dispatcher:
        cfg = settings.model_copy(update=overrides)
        session = GraphSession(cfg)
        dispatcher = Dispatcher(
            cfg,
            db=db,
            queue=connect_queue(cfg),
            reader=GraphReader.from_settings(session),
            owner=owner,
            clock=clock,
        )
        made.append((dispatcher, session))
        return dispatcher

    yield make
    for dispatcher, session in made:
        await session.close()
        await dispatcher.queue.aclose()


async def queued_jobs(redis: Any) -> list[dict[str, Any]]:
    ids = await redis.zrange(c.QUEUE_NAME, 0, -1)
    jobs = []
    for job_id in ids:
        raw = await redis.get(b"arq:job:" + job_id)
        jobs.append(deserialize(raw))
    return jobs


async def all_redis_bytes(redis: Any) -> bytes:
    blob = b""
    async for key in redis.scan_iter():
        kind = await redis.type(key)
        if kind == b"string":
            blob += await redis.get(key)
        elif kind == b"zset":
            blob += b"".join(await redis.zrange(key, 0, -1))
    return blob


async def test_a_rule_over_three_accounts_becomes_three_jobs(
    make_dispatcher: Any, db: Database, redis: Any
) -> None:
    rule = await save(db)
    report = await make_dispatcher(Clock(T0 + timedelta(seconds=3))).tick()
    assert report is not None
    assert (report.due, report.jobs, report.listings, report.advanced) == (1, 3, 3, 1)
    jobs = await queued_jobs(redis)
    assert sorted(j["a"][0]["account"] for j in jobs) == ["act_1001", "act_1002", "act_1003"]
    payload = EvaluateJob.model_validate(jobs[0]["a"][0])
    assert payload.rule_id == rule.id
    assert payload.rule_version == 1
    assert payload.rule["tasks"][0]["id"] == "scale"
    assert payload.scheduled_at == T0
    assert payload.token_ref == f"account:{payload.account}"
    assert payload.batch_id == f"{rule.id}-{payload.account}-20261201T100000Z"
    assert len(payload.entities) == 10  # the [AUTO] campaigns
    assert any(e.daily_budget for e in payload.entities)  # budget fields: the rule references one
    assert jobs[0]["f"] == c.EVALUATE_JOB
    # a job not started before the rule's next run expires instead of running late
    ttl_ms = await redis.pttl(b"arq:job:" + (await redis.zrange(c.QUEUE_NAME, 0, 0))[0])
    assert 0 < ttl_ms <= (15 * 60 - 3) * 1000
    assert SANDBOX_TOKEN.encode() not in await all_redis_bytes(redis)
    stored = await RuleStore(db).get(rule.id)
    assert stored.next_execute_at == T0 + timedelta(minutes=15)
    assert stored.last_execute_at == T0 + timedelta(seconds=3)


async def test_budget_fields_are_listed_only_when_referenced(
    make_dispatcher: Any, db: Database, redis: Any
) -> None:
    plain = rule_data()
    plain["tasks"][0]["conditions"] = [
        {"metric": "spend", "period": "today", "operator": ">", "value": 1}
    ]
    await RuleStore(db).save(parse_rule(plain), now=T0, author="t", source="t")
    await make_dispatcher(Clock(T0)).tick()
    job = (await queued_jobs(redis))[0]["a"][0]
    assert all("daily_budget" not in e for e in job["entities"])


async def test_the_same_scheduled_time_is_never_enqueued_twice(
    make_dispatcher: Any, db: Database, redis: Any
) -> None:
    rule = await save(db)
    dispatcher = make_dispatcher(Clock(T0))
    await dispatcher.tick()
    # as if the dispatcher died after enqueuing, before advancing the schedule
    await db[c.RULES].update_one({"_id": rule.id}, {"$set": {"next_execute_at": T0}})
    report = await dispatcher.tick()
    assert report is not None
    assert (report.jobs, report.duplicates) == (0, 3)
    assert len(await queued_jobs(redis)) == 3


async def test_an_interval_rule_keeps_its_cadence_when_sweeps_run_late(
    make_dispatcher: Any, db: Database
) -> None:
    rule = await save(db)
    clock = Clock(T0 + timedelta(seconds=7))
    dispatcher = make_dispatcher(clock)
    await dispatcher.tick()
    assert (await RuleStore(db).get(rule.id)).next_execute_at == T0 + timedelta(minutes=15)
    clock.now = T0 + timedelta(minutes=15, seconds=40)
    await dispatcher.tick()
    assert (await RuleStore(db).get(rule.id)).next_execute_at == T0 + timedelta(minutes=30)
    clock.now = T0 + timedelta(minutes=62)  # two slots missed: skipped, not burst
    report = await dispatcher.tick()
    assert report is not None
    assert report.jobs == 3
    assert (await RuleStore(db).get(rule.id)).next_execute_at == T0 + timedelta(minutes=75)


async def test_a_timetable_rule_runs_at_its_slot_and_not_before(
    make_dispatcher: Any, db: Database
) -> None:
    slot = {"mode": "timetable", "slots": {"tue": ["12:00"]}}  # 2026-12-01 is a Tuesday
    rule = await save(db, schedule=slot, timezone="UTC")
    clock = Clock(datetime(2026, 12, 1, 11, 59, 59, tzinfo=UTC))
    dispatcher = make_dispatcher(clock)
    report = await dispatcher.tick()
    assert report is not None
    assert report.due == 0
    clock.now = datetime(2026, 12, 1, 12, 0, 1, tzinfo=UTC)
    report = await dispatcher.tick()
    assert report is not None
    assert (report.due, report.jobs) == (1, 3)
    assert (await RuleStore(db).get(rule.id)).next_execute_at == datetime(
        2026, 12, 8, 12, tzinfo=UTC
    )


async def test_a_rule_outside_its_date_range_is_not_dispatched(
    make_dispatcher: Any, db: Database, redis: Any
) -> None:
    await save(db, date_range={"start": "2026-12-05"})
    await save(db, name="Over", date_range={"end": "2026-11-30"})
    report = await make_dispatcher(Clock(T0)).tick()
    assert report is not None
    assert report.due == 0
    assert await queued_jobs(redis) == []


async def test_listing_failing_twice_then_working_still_dispatches(
    make_dispatcher: Any, db: Database, sandbox: SandboxAdmin
) -> None:
    await save(db)
    await sandbox.set_faults(
        rules=[{"path_contains": "/act_1001/campaigns", "code": 2, "times": 2}]
    )
    report = await make_dispatcher(Clock(T0)).tick()
    assert report is not None
    assert (report.jobs, report.skipped) == (3, [])


async def test_three_listing_failures_skip_only_that_account(
    make_dispatcher: Any, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    rule = await save(db)
    await sandbox.set_faults(
        rules=[{"path_contains": "/act_1001/campaigns", "code": 2, "times": 3}]
    )
    dispatcher = make_dispatcher(Clock(T0))
    report = await dispatcher.tick()
    assert report is not None
    assert report.jobs == 2
    assert report.skipped == [f"{rule.id}/act_1001"]
    assert sorted(j["a"][0]["account"] for j in await queued_jobs(redis)) == [
        "act_1002",
        "act_1003",
    ]
    assert report.advanced == 1  # the rest of the rule goes on; act_1001 is retried next run
    group = await db[c.ERROR_LOG].find_one({"function": "dispatch.list_entities"})
    assert group is not None
    assert group["count"] == 1
    assert "act_<id>" in group["message"]
    assert dispatcher.metrics.listing_failures.labels(account="act_1001")._value.get() == 1


async def test_two_dispatchers_only_one_enqueues(
    make_dispatcher: Any, db: Database, redis: Any
) -> None:
    await save(db)
    # a long tick (and so a long lease) keeps this test independent of the machine's speed
    first = make_dispatcher(Clock(T0), owner="one", tick_seconds=10)
    second = make_dispatcher(Clock(T0), owner="two", tick_seconds=10)
    reports = await asyncio.gather(first.tick(), second.tick())
    assert sorted(r is None for r in reports) == [False, True]
    assert len(await queued_jobs(redis)) == 3
    standby = second if reports[1] is None else first  # whichever lost the race
    assert await standby.tick() is None


async def test_redis_down_during_a_sweep_holds_the_rule_back_until_it_returns(
    make_dispatcher: Any, db: Database, sandbox: SandboxAdmin, own_redis: tuple[ProcessGroup, int]
) -> None:
    group, port = own_redis
    rule = await save(db)
    dispatcher = make_dispatcher(Clock(T0), redis_url=f"redis://127.0.0.1:{port}/0")
    await sandbox.set_faults(latency_ms=600)
    sweep = asyncio.create_task(dispatcher.tick())
    # stop Redis only once the lease is taken, while the listings are in flight
    await wait_for(lambda: _holds_lease(port, dispatcher.owner))
    assert not sweep.done()
    group.stop_all()
    report = await sweep
    assert report is not None
    assert report.degraded == "redis_unreachable"
    assert (report.jobs, report.advanced) == (0, 0)
    assert (await RuleStore(db).get(rule.id)).next_execute_at == T0
    down = await dispatcher.tick()  # keeps ticking, no crash
    assert down is not None
    assert down.degraded == "redis_unreachable"
    await sandbox.clear_faults()
    start_redis(group, port=port, data_dir=None)
    back = await dispatcher.tick()
    assert back is not None
    assert (back.jobs, back.advanced) == (3, 1)
    assert (await RuleStore(db).get(rule.id)).next_execute_at == T0 + timedelta(minutes=15)


async def _holds_lease(port: int, owner: str) -> bool:
    from redis.asyncio import Redis

    client = Redis.from_url(f"redis://127.0.0.1:{port}/0")
    try:
        value = await client.get(c.LEASE_KEY)
    finally:
        await client.aclose()
    return value is not None and value.decode().startswith(f"{owner}|")


async def test_a_sweep_slower_than_the_lease_still_dispatches(
    make_dispatcher: Any, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await save(db)
    # the lease lives 1 s (3 ticks of 0.2 s, at least 1 s); each listing takes 1.5 s
    dispatcher = make_dispatcher(Clock(T0), owner="alone", tick_seconds=0.2)
    await sandbox.set_faults(latency_ms=1500)
    report = await dispatcher.tick()
    assert report is not None
    assert (report.degraded, report.jobs, report.advanced) == (None, 3, 1)
    assert len(await queued_jobs(redis)) == 3


async def test_a_deposed_leader_cannot_enqueue(
    make_dispatcher: Any, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    rule = await save(db)
    old = make_dispatcher(Clock(T0), owner="old", tick_seconds=10)
    new = make_dispatcher(Clock(T0), owner="new", tick_seconds=10)
    fence = await old.lease.acquire()
    assert fence is not None
    await redis.delete(c.LEASE_KEY)  # the old leader stalled past its lease …
    assert await new.lease.acquire() == fence + 1  # … and a standby took over
    report = await old.sweep(T0, fence)
    assert (report.degraded, report.jobs, report.advanced) == ("lost_lease", 0, 0)
    assert await queued_jobs(redis) == []
    assert (await RuleStore(db).get(rule.id)).next_execute_at == T0
    taken = await new.tick()
    assert taken is not None and (taken.jobs, taken.advanced) == (3, 1)


# ---------------------------------------------------------------- processes


def dispatcher_env(settings: Settings) -> dict[str, str]:
    return process_env(settings, tick_seconds="0.3", dispatcher_metrics_port="0")


def start_dispatcher(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "ruleengine.dispatch"],
            env=dispatcher_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def heartbeat_owner(db: Database) -> str | None:
    doc = await db[c.HEARTBEATS].find_one({"_id": "dispatcher"})
    return None if doc is None else str(doc["owner"])


async def test_sigkill_of_the_leader_lets_the_standby_take_over(
    settings: Settings, db: Database, redis: Any, accounts: list[str], tmp_path: Path
) -> None:
    first = start_dispatcher(settings, tmp_path / "first.log")
    try:
        leader = await wait_for(lambda: heartbeat_owner(db))
        second = start_dispatcher(settings, tmp_path / "second.log")
        try:
            await wait_for(lambda: db[c.HEARTBEATS].find_one({"role": "standby"}))
            assert await heartbeat_owner(db) == leader
            first.send_signal(signal.SIGKILL)
            first.wait()

            async def new_leader() -> str | None:
                owner = await heartbeat_owner(db)
                return owner if owner not in (None, leader) else None

            taken = await wait_for(new_leader, timeout_s=10)
            assert taken.endswith(str(second.pid)) or str(second.pid) in taken
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=15) == 0
        finally:
            if second.poll() is None:
                second.kill()
    finally:
        if first.poll() is None:
            first.kill()
    assert b"is now the leader" in (tmp_path / "second.log").read_bytes()


def test_dispatch_once_runs_a_single_sweep(settings: Settings, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruleengine.dispatch", "--once"],
        env=dispatcher_env(settings),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert b"tick: 0 due" in result.stderr


def test_payload_round_trips_through_the_orjson_serializer() -> None:
    payload = {"batch_id": "b", "when": T0.isoformat(), "n": 1}
    from ruleengine.dispatching.payload import serialize

    assert deserialize(serialize(payload)) == payload
    assert orjson.loads(serialize({"x": 1})) == {"x": 1}


async def test_a_mongodb_outage_does_not_stop_the_dispatcher(
    settings: Settings, redis: Any, tmp_path: Path
) -> None:
    from ruleengine.devstack.embedded import start_mongodb
    from ruleengine.store.db import create_client, database, ensure_indexes

    with ProcessGroup(log_dir=tmp_path) as group:
        mongo = start_mongodb(group, port=free_port(), storage_path=":memory:")
        own = settings.model_copy(update={"mongodb_url": mongo.address})
        client = create_client(own, serverSelectionTimeoutMS=300)
        db = database(client, own)
        await ensure_indexes(db)
        session = GraphSession(own)
        queue = connect_queue(own)
        dispatcher = Dispatcher(
            own, db=db, queue=queue, reader=GraphReader.from_settings(session), owner="t"
        )
        try:
            group.stop_all()
            report = await dispatcher.tick()
            assert report is not None
            assert report.degraded == "mongodb_unreachable"
            assert (await dispatcher.tick()) is not None  # and it keeps ticking
        finally:
            await session.close()
            await queue.aclose()
            await client.close()
            await asyncio.sleep(0.2)
            # pymongo leaves the socket of a reconnect attempt to the dead server to the
            # garbage collector; collect it here, where that is expected
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                gc.collect()


async def test_the_dispatcher_warns_at_start_when_its_graph_version_nears_expiry(
    settings: Settings, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """v25.0 expires on 2027-02-23: from 90 days before, every process says so at start-up
    (here the dispatcher; the worker, the web app and ``ruleengine up`` call the same check)."""
    from ruleengine.dispatch import run_dispatcher
    from ruleengine.rules.meta.versions import version_warning

    old = settings.model_copy(update={"graph_version": "v25.0"})
    with caplog.at_level(logging.WARNING, logger="ruleengine.dispatch"):
        assert await run_dispatcher(old, once=True) == 0
    expected = version_warning("v25.0", datetime.now(UTC).date())
    if expected is None:  # before 2026-11-25 nothing is due
        return
    assert expected in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ruleengine.dispatch"):
        await run_dispatcher(settings, once=True)  # v27.0: nothing to say
    assert "Marketing API" not in caplog.text
