"""When the wall clock steps: automation does not stop, cooldowns do not shorten, and the
workers' periodic jobs neither stop nor burst.

The clocks that step are the ones the engine reads: the dispatcher's ``clock``, the ``now`` a
worker's job runs at, and the wall clock arq's cron reads. MongoDB, Redis and the sandbox stay
on the real clock. A clock that steps back 20 minutes is one that read 20 minutes ahead of the
real time and then reads the real time; one that steps forward 3 hours read 3 hours behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from arq.constants import job_key_prefix
from arq.jobs import deserialize_job
from arq.utils import timestamp_ms

from flow import (
    LOSER,
    WINNER,
    campaign_rule,
    engine_for,
    records,
    save_rule,
    successful_writes,
    work,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob, deserialize
from ruleengine.dispatching.sweep import Dispatcher
from ruleengine.jobs import worker_kwargs
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.followups import followup_job_id
from ruleengine.store.ruledocs import RuleDoc
from ruleengine.worker.job import evaluate_account
from ruleengine.worker.stages import Summary
from support import SANDBOX_TOKEN

STEP_BACK = timedelta(minutes=20)
STEP_FORWARD = timedelta(hours=3)
NEW_YORK = ZoneInfo("America/New_York")
ONE_LOSER = [{"field": "name", "operator": "EQUAL", "value": "[AUTO] Prospecting US 2"}]


def real_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
async def dispatcher(
    settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> AsyncIterator[Callable[[Callable[[], datetime]], Dispatcher]]:
    made: list[tuple[Dispatcher, GraphSession]] = []

    def make(clock: Callable[[], datetime]) -> Dispatcher:
        session = GraphSession(settings)
        one = Dispatcher(
            settings,
            db=db,
            queue=connect_queue(settings),
            reader=GraphReader.from_settings(session),
            clock=clock,
            owner="stepping",
        )
        made.append((one, session))
        return one

    yield make
    for one, session in made:
        await session.close()
        await one.queue.aclose()


async def queued_instants(redis: Any) -> list[tuple[str, datetime]]:
    """(rule, scheduled instant) of every evaluation job in the queue."""
    found = []
    for job_id in await redis.zrange(c.QUEUE_NAME, 0, -1):
        if job_id.startswith(b"evaluate:"):
            raw = await redis.get(job_key_prefix.encode() + job_id)
            job = EvaluateJob.model_validate(deserialize_job(raw, deserializer=deserialize).args[0])
            found.append((job.rule_id, job.scheduled_at))
    return found


async def run_at(
    settings: Settings, db: Database, rule: RuleDoc, batch: str, now: datetime
) -> Summary:
    """One run of ``rule`` on act_1001 by a worker whose clock reads ``now``."""
    parsed = parse_rule({**rule.definition, "status": "ACTIVE"})
    async with engine_for(settings, db) as engine:
        reader = GraphReader.from_settings(engine.session)
        job = EvaluateJob.of(
            parsed,
            batch_id=batch,
            rule_id=rule.id,
            version=rule.version,
            account="act_1001",
            entities=await reader.list_for_rule(parsed, "act_1001", token=SANDBOX_TOKEN),
            scheduled_at=now,
            dispatched_at=now,
        )
        return await evaluate_account(engine, job, now=now)


# ---------------------------------------------------------------- the dispatcher's clock


def weekly_at(when: datetime) -> dict[str, Any]:
    """A timetable with one slot a week: ``when``'s weekday and minute in New York."""
    local = when.astimezone(NEW_YORK)
    return {"mode": "timetable", "slots": {local.strftime("%a").lower(): [f"{local:%H:%M}"]}}


async def test_a_clock_stepped_back_20_minutes_does_not_stop_interval_rules(
    dispatcher: Callable[[Callable[[], datetime]], Dispatcher], db: Database, redis: Any
) -> None:
    real = real_now()
    clock = {"now": real + STEP_BACK}  # the dispatcher's clock, before it steps back
    every = {"2 min": 2, "3 min": 3}
    rules = {
        name: await save_rule(
            db,
            campaign_rule({"type": "pause"}, [LOSER], name=name)
            | {"schedule": {"mode": "interval", "every_minutes": minutes}},
            now=clock["now"],
        )
        for name, minutes in every.items()
    }
    slot = (clock["now"] - timedelta(minutes=10)).replace(second=0)
    weekly = await save_rule(
        db,
        campaign_rule({"type": "pause"}, [LOSER], name="weekly") | {"schedule": weekly_at(slot)},
        now=slot - timedelta(hours=1),
    )
    made = dispatcher(lambda: clock["now"])
    first = await made.tick()
    assert first is not None and first.jobs == 3  # both interval rules, and the weekly slot

    clock["now"] = real  # the clock steps back 20 minutes
    assert await made.tick() is not None
    for name, minutes in every.items():
        doc = await db[c.RULES].find_one({"_id": rules[name].id})
        assert doc is not None
        assert doc["next_execute_at"] - real <= timedelta(minutes=minutes), name

    # three minutes on (real time and the stepped clock alike), each interval rule ran again,
    # once, at an instant it never ran; the weekly slot the clock passed again did not
    for _ in range(3):
        clock["now"] += timedelta(minutes=1)
        report = await made.tick()
        assert report is not None and report.duplicates == 0
    clock["now"] = slot + timedelta(minutes=1)
    await made.tick()
    instants = await queued_instants(redis)
    assert len(instants) == len(set(instants))
    for name, rule in rules.items():
        after_the_step = sorted(at for r, at in instants if r == rule.id and at < real + STEP_BACK)
        assert after_the_step, name
        assert after_the_step[0] <= real + timedelta(minutes=every[name]), name
    assert [at for r, at in instants if r == weekly.id] == [slot]


# ---------------------------------------------------------------- follow-ups


async def test_a_follow_up_armed_before_a_step_back_fires_on_time_in_real_time(
    dispatcher: Callable[[Callable[[], datetime]], Dispatcher],
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    # PAUSED: the test runs it on a worker itself; the dispatcher only looks after timers
    data = campaign_rule(
        {"type": "pause", "then": {"after_minutes": 2, "do": "activate"}},
        [LOSER],
        name="Pause, then activate after 2 minutes",
        filters=ONE_LOSER,
    )
    rule = await save_rule(db, data | {"status": "PAUSED"})
    real = real_now()
    clock = {"now": real + STEP_BACK}  # the dispatcher's and the worker's, before the step
    summary = await run_at(settings, db, rule, "b-before-the-step", clock["now"])
    assert summary.applied == 1
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    job_id = followup_job_id(followup["_id"], 1)
    # due two minutes after the action, by MongoDB's clock (the real one)
    assert abs(followup["due_at"] - (real + timedelta(minutes=2))) < timedelta(seconds=5)

    async def fires_at() -> datetime:
        score = await redis.zscore(c.QUEUE_NAME, job_id)
        return datetime.fromtimestamp(score / 1000, UTC)

    # the timer is on the worker's clock: 2 minutes after its own now
    assert abs(await fires_at() - (clock["now"] + timedelta(minutes=2))) < timedelta(seconds=5)
    made = dispatcher(lambda: clock["now"])
    await made.tick()  # clocks agree with each other: nothing moves
    assert abs(await fires_at() - (clock["now"] + timedelta(minutes=2))) < timedelta(seconds=5)

    clock["now"] = real_now()  # the clocks step back 20 minutes
    await made.tick()
    # it fires 2 minutes after the action in real time, not 22
    assert abs(await fires_at() - followup["due_at"]) < timedelta(seconds=2)
    await made.tick()  # and stays there
    assert abs(await fires_at() - followup["due_at"]) < timedelta(seconds=2)

    await redis.zadd(c.QUEUE_NAME, {job_id: timestamp_ms() - 1})  # two minutes pass
    await work(settings)
    await work(settings)
    assert (await sandbox.object(followup["entity_id"]))["status"] == "ACTIVE"
    (ran,) = await records(db, kind="followup")
    assert ran["outcome"] == "applied"
    done = await db[c.FOLLOWUPS].find_one({})
    assert done is not None and done["status"] == "done"


# ---------------------------------------------------------------- cooldowns


async def test_a_worker_clock_stepped_forward_3_hours_does_not_shorten_a_cooldown(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    data = campaign_rule({"type": "increase_budget", "percent": 2}, [WINNER], cooldown_minutes=30)
    rule = await save_rule(db, data | {"status": "PAUSED"})  # run here, not dispatched
    before = real_now() - STEP_FORWARD  # the worker's clock, 3 hours behind
    first = await run_at(settings, db, rule, "b-before-the-step", before)
    assert first.applied > 0
    written = await successful_writes(sandbox)
    # the clock steps forward 3 hours; 270 real seconds later the rule runs again
    second = await run_at(
        settings, db, rule, "b-after-the-step", before + STEP_FORWARD + timedelta(seconds=270)
    )
    assert second.applied == 0
    cooling = await records(db, batch_id="b-after-the-step", reason="next_execute_not_reached")
    assert len(cooling) == first.applied
    assert await successful_writes(sandbox) == written


# ---------------------------------------------------------------- the periodic jobs


def cron_jobs(settings: Settings) -> dict[str, Any]:
    """The workers' cron entries by name (fresh ones, as a worker process builds them)."""
    return {job.name: job for job in worker_kwargs(settings)["cron_jobs"]}


async def test_a_worker_clock_stepped_forward_3_hours_runs_each_periodic_job_once(
    settings: Settings, db: Database, redis: Any
) -> None:
    jobs = list(cron_jobs(settings).values())
    for job in jobs:
        job.calculate_next(datetime.now(UTC) - STEP_FORWARD)  # planned on the clock before
    worker = await work(settings, cron_jobs=jobs)
    # one catch-up pass each (reaper, retention), not one per minute of the step
    assert worker.jobs_complete == 2


async def test_a_worker_clock_stepped_back_20_minutes_does_not_stop_periodic_jobs(
    settings: Settings,
) -> None:
    for name, job in cron_jobs(settings).items():
        job.calculate_next(datetime.now(UTC) + STEP_BACK)  # planned on the clock before
        assert job.next_run - datetime.now(UTC) <= timedelta(minutes=1), name


def test_a_run_planned_by_arq_a_second_early_is_not_taken_for_a_step(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """arq enqueues a cron job up to a poll and a second before it is due and plans the next
    run from the due time: a period and a second ahead of now, which is no clock step."""
    for name, job in cron_jobs(settings).items():
        planned = datetime.now(UTC) + timedelta(minutes=1, seconds=1)
        job.next_run = planned  # as arq sets it, from the due time of the run it enqueued
        assert job.next_run == planned, name
    assert "the clock stepped" not in caplog.text


async def test_a_periodic_pass_less_than_a_minute_after_another_does_nothing(
    settings: Settings, db: Database, redis: Any
) -> None:
    reaper = cron_jobs(settings)["reap_abandoned_batches"]
    queue = connect_queue(settings)
    try:
        async with engine_for(settings, db) as engine:
            ctx = {"settings": settings, "engine": engine, "queue": queue, "redis": queue}
            await reaper.coroutine(ctx)
            # a batch whose worker died long ago: the next pass would mark it ABANDONED
            long_ago = datetime.now(UTC) - timedelta(hours=2)
            await db[c.BATCHES].insert_one(
                {"_id": "b-dead", "status": "RUNNING", "started_at": long_ago}
                | {"last_started_at": long_ago, "rule_id": "r", "account": "act_1001"}
            )
            await reaper.coroutine(ctx)  # a catch-up of the same minute
            batch = await db[c.BATCHES].find_one({"_id": "b-dead"})
            assert batch is not None and batch["status"] == "RUNNING"
    finally:
        await queue.aclose()
    stamp_ms = await redis.pttl("ruleengine:periodic:reap_abandoned_batches")
    assert 0 < stamp_ms <= 60_000  # the next minute's pass runs
