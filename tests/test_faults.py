"""Promises kept under faults: killed workers, slow Graph, rate limits, Graph errors in the reaper.

Each test reproduces a break found by driving the engine from outside (workers SIGKILLed
while acting, two jobs racing for one campaign through a slow Graph, a reaper meeting a
Graph error) and checks what Meta (the sandbox) received and what MongoDB holds.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from arq.jobs import serialize_result
from arq.worker import JobExecutionFailed
from pymongo.errors import AutoReconnect

from flow import (
    WINNER,
    campaign_ids,
    campaign_rule,
    dispatch,
    engine_for,
    kill,
    reap,
    records,
    save_rule,
    start_worker,
    successful_writes,
    wait_for,
    work,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob, deserialize, serialize
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.job import evaluate_account

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}


async def queued_job(redis: Any) -> EvaluateJob:
    """The (first) evaluation job the dispatcher enqueued, as a worker would read it."""
    job_id = (await redis.zrange(c.QUEUE_NAME, 0, 0))[0]
    return EvaluateJob.model_validate(deserialize(await redis.get(b"arq:job:" + job_id))["a"][0])


def writes_per_entity(writes: list[dict[str, Any]]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for write in writes:
        counted[write["id"]] = counted.get(write["id"], 0) + 1
    return counted


# ---------------------------------------------------------------- cooldowns


async def test_a_worker_killed_right_after_its_first_write_leaves_the_cooldown_in_force(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    rule = await save_rule(
        db, campaign_rule({"type": "increase_budget", "percent": 2}, [WINNER], cooldown_minutes=30)
    )
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    await sandbox.set_faults(latency_ms=700)  # room to kill between the writes
    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        first = await wait_for(lambda: successful_writes(sandbox))
    finally:
        kill(worker)
    await sandbox.clear_faults()
    await redis.delete(c.QUEUE_NAME)  # the dead worker's job would block an in-process burst
    # the next run comes long before the reaper would (it waits for the job timeout)
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    second_run = await records(db, rule_id=rule.id)
    reasons = {r["entity_id"]: r["reason"] for r in second_run}
    assert reasons[first[0]["id"]] == "next_execute_not_reached"
    assert max(writes_per_entity(await successful_writes(sandbox)).values()) == 1


# ---------------------------------------------------------------- the account write lock


async def test_two_rules_changing_one_campaign_through_a_slow_graph_compose(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    entity_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    live = int((await sandbox.object(entity_id))["daily_budget"])
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    for name, percent in (("plus 3", 3), ("plus 2", 2)):
        await save_rule(
            db,
            campaign_rule(
                {"type": "increase_budget", "percent": percent}, [ALWAYS], name=name, filters=only
            ),
        )
    await dispatch(settings, db)
    # Each locked section (a live read and a write) takes over 0.8 s; unless renewed, the
    # lock would expire during the live read. Both jobs run at once in one worker.
    await sandbox.set_faults(latency_ms=400)
    await work(settings.model_copy(update={"account_lock_ttl_s": 0.3}))
    await sandbox.clear_faults()
    writes = [w for w in await successful_writes(sandbox) if w["id"] == entity_id]
    assert [int(w["params"]["daily_budget"]) for w in writes] in (
        [round(live * 1.03), round(round(live * 1.03) * 1.02)],
        [round(live * 1.02), round(round(live * 1.02) * 1.03)],
    )
    # in the order they were written: both raise the budget, so the first has the lower
    # target (applied_at is each job's start, and both jobs start at once)
    intents = sorted(
        [d async for d in db[c.ACTION_INTENTS].find({})], key=lambda i: int(i["target"])
    )
    assert [i["status"] for i in intents] == ["done", "done"]
    assert intents[1]["before"] == intents[0]["target"]  # the second saw the first's write
    assert intents[0]["lock_fence"] != intents[1]["lock_fence"]
    applied = await records(db, outcome="applied")
    assert sorted(r["before"] for r in applied) == sorted(i["before"] for i in intents)


async def test_a_rate_limit_on_the_live_read_is_waited_out_outside_the_lock(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    entity_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    await save_rule(db, campaign_rule({"type": "pause"}, [ALWAYS], filters=only))
    await dispatch(settings, db)
    job = await queued_job(redis)
    await sandbox.set_faults(
        rules=[{"path_contains": entity_id, "method": "GET", "code": 17, "times": 2}]
    )
    lock_key = f"{c.ACCOUNT_LOCK_PREFIX}act_1001"
    lock_held_while_waiting: list[bool] = []
    async with engine_for(settings, db) as engine:

        async def observed_sleep(seconds: float) -> None:
            lock_held_while_waiting.append(bool(await redis.exists(lock_key)))

        engine.executor.sleep = observed_sleep
        summary = await evaluate_account(engine, job, now=datetime.now(UTC))
    assert summary.applied == 1
    assert lock_held_while_waiting == [False, False]
    assert (await sandbox.object(entity_id))["status"] == "PAUSED"


async def test_a_live_unsettled_write_of_another_run_blocks_the_field_until_its_owner_is_gone(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    entity_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    live = int((await sandbox.object(entity_id))["daily_budget"])
    now = datetime.now(UTC)
    # another rule's job is still running and has an unconfirmed write on the budget
    await db[c.BATCHES].insert_one(
        {"_id": "other", "status": "RUNNING", "account": "act_1001", "last_started_at": now}
    )
    await db[c.ACTION_INTENTS].insert_one(
        {
            "batch_id": "other",
            "task_id": "t",
            "entity_id": entity_id,
            "rule_id": "r",
            "account": "act_1001",
            "field": "daily_budget",
            "before": live,
            "target": live + 100,
            "status": "pending",
            "created_at": now,
        }
    )
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    rule = await save_rule(
        db, campaign_rule({"type": "increase_budget", "percent": 10}, [ALWAYS], filters=only)
    )
    await dispatch(settings, db, now=now)
    await work(settings)
    (blocked,) = await records(db, rule_id=rule.id)
    assert (blocked["outcome"], blocked["reason"]) == ("skipped", "write_pending_elsewhere")
    assert await sandbox.writes() == []
    # once its batch is ABANDONED the owner is provably gone: the next run settles it first
    await db[c.BATCHES].update_one({"_id": "other"}, {"$set": {"status": "ABANDONED"}})
    await dispatch(settings, db, now=now + timedelta(minutes=15))
    await work(settings)
    other = await db[c.ACTION_INTENTS].find_one({"batch_id": "other"})
    assert other is not None and (other["status"], other["reason"]) == ("failed", "not_applied")
    assert [int(w["params"]["daily_budget"]) for w in await successful_writes(sandbox)] == [
        round(live * 1.1)
    ]


# ---------------------------------------------------------------- the reaper


async def test_the_reaper_goes_on_after_a_graph_error_and_retries_on_a_later_pass(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(sandbox)
    stale = datetime.now(UTC) - timedelta(hours=2)
    entities = [ids["[AUTO] Prospecting US 1"], ids["[AUTO] Retargeting US 1"]]
    for index, entity_id in enumerate(entities):
        live = int((await sandbox.object(entity_id))["daily_budget"])
        batch_id = f"lost-{index}"
        await db[c.BATCHES].insert_one(
            {
                "_id": batch_id,
                "status": "RUNNING",
                "rule_id": "r",
                "account": "act_1001",
                "last_started_at": stale,
                "started_at": stale,
            }
        )
        await db[c.ACTION_INTENTS].insert_one(
            {
                "batch_id": batch_id,
                "task_id": "t",
                "entity_id": entity_id,
                "rule_id": "r",
                "account": "act_1001",
                "action": "increase_budget",
                "field": "daily_budget",
                "before": live,
                "target": live,  # as if the write had landed
                "status": "pending",
                "created_at": stale,
            }
        )
    await sandbox.set_faults(
        rules=[{"path_contains": entities[0], "method": "GET", "code": 190, "times": 1}]
    )
    now = datetime.now(UTC)
    assert await reap(settings, db, redis, now=now) == 2
    statuses = {d["batch_id"]: d["status"] async for d in db[c.ACTION_INTENTS].find({})}
    assert statuses == {"lost-0": "pending", "lost-1": "done"}  # the error stopped only its own
    assert len(await records(db, batch_id="lost-1", recovered_by="reaper")) == 1
    assert await records(db, batch_id="lost-0") == []
    assert await db[c.ERROR_LOG].find_one({"function": "reaper.settle"}) is not None
    assert await reap(settings, db, redis, now=now + timedelta(minutes=1)) == 0
    (settled,) = await records(db, batch_id="lost-0", recovered_by="reaper")
    assert (settled["outcome"], settled["executed"]) == ("applied", True)
    batches = {b["_id"]: b async for b in db[c.BATCHES].find({})}
    assert all(b["recovered_at"] and b["applied_count"] == 1 for b in batches.values())


# ---------------------------------------------------------------- arq results


def test_failed_and_expired_job_results_serialize() -> None:
    for failure in (JobExecutionFailed("job expired"), TimeoutError()):
        raw = serialize_result(
            c.EVALUATE_JOB,
            ({"batch_id": "b"},),
            {},
            1,
            0,
            False,
            failure,
            0,
            0,
            "ref",
            "q",
            "j",
            serializer=serialize,
        )
        assert raw is not None
        assert deserialize(raw)["r"]["error"] == type(failure).__name__


async def test_an_expired_job_is_dropped_without_a_serialisation_error(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    caplog: Any,
) -> None:
    caplog.set_level(logging.INFO)
    queue = connect_queue(settings)
    try:
        await queue.enqueue_job(
            c.EVALUATE_JOB, {"batch_id": "gone"}, _job_id="evaluate:gone", _expires=0.05
        )
    finally:
        await queue.aclose()
    await wait_for(lambda: _missing(redis, b"arq:job:evaluate:gone"))
    await work(settings)
    assert "job evaluate:gone expired" in caplog.text
    assert "error serializing" not in caplog.text


async def _missing(redis: Any, key: bytes) -> bool:
    return not await redis.exists(key)


# ---------------------------------------------------------------- overlapping runs


async def test_two_overlapping_runs_of_a_rule_change_an_entity_once_within_its_cooldown(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    # Found by bench/chaos.py: when a rule's next run starts before the previous one has
    # acted (a job longer than the interval, a backlog), both passed the cooldown stage
    # before either had recorded its intent, and both wrote.
    entity_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    live = int((await sandbox.object(entity_id))["daily_budget"])
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    await save_rule(
        db,
        campaign_rule(
            {"type": "increase_budget", "percent": 10},
            [ALWAYS],
            filters=only,
            cooldown_minutes=60,
            schedule={"mode": "interval", "every_minutes": 1},
        ),
    )
    start = datetime.now(UTC).replace(microsecond=0)
    await dispatch(settings, db, now=start)
    first = await queued_job(redis)
    await dispatch(settings, db, now=start + timedelta(minutes=1))
    (second,) = [job for job in await queued_jobs(redis) if job.batch_id != first.batch_id]
    async with engine_for(settings, db) as late, engine_for(settings, db) as early:
        # the second run passes its cooldown stage, then waits until the first has acted
        at_act, first_done = asyncio.Event(), asyncio.Event()
        act = late.executor.act_many  # status, budget and name writes go in Batch API calls

        async def act_after_the_first(*args: Any) -> Any:
            at_act.set()
            await first_done.wait()
            return await act(*args)

        late.executor.act_many = act_after_the_first  # type: ignore[method-assign]
        overlapping = asyncio.create_task(evaluate_account(late, second, now=datetime.now(UTC)))
        await asyncio.wait_for(at_act.wait(), timeout=20)
        done = await evaluate_account(early, first, now=datetime.now(UTC))
        first_done.set()
        skipped = await overlapping
    assert done.applied == 1
    assert [int(w["params"]["daily_budget"]) for w in await successful_writes(sandbox)] == [
        round(live * 1.1)
    ]
    assert skipped.applied == 0
    (record,) = await records(db, batch_id=second.batch_id)
    assert (record["outcome"], record["reason"]) == ("skipped", "next_execute_not_reached")
    assert record["next_execute_at"] > datetime.now(UTC) + timedelta(minutes=50)


async def queued_jobs(redis: Any) -> list[EvaluateJob]:
    """Every evaluation job the dispatcher enqueued, as a worker would read them."""
    return [
        EvaluateJob.model_validate(deserialize(await redis.get(b"arq:job:" + job_id))["a"][0])
        for job_id in await redis.zrange(c.QUEUE_NAME, 0, -1)
    ]


# ---------------------------------------------------------------- a job failing after writes


async def test_changes_of_a_job_that_failed_after_writing_are_recovered_into_rule_logs(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    # Found by bench/chaos.py: MongoDB went away while a job was acting; the job closed its
    # batch FAILED, and the changes it had made had intents but never execution records.
    ids = await campaign_ids(sandbox)
    chosen = [ids["[AUTO] Prospecting US 1"], ids["[AUTO] Retargeting US 1"]]
    only = [{"field": "id", "operator": "IN", "value": chosen}]
    await save_rule(
        db, campaign_rule({"type": "increase_budget", "percent": 10}, [ALWAYS], filters=only)
    )
    await dispatch(settings, db)
    job = await queued_job(redis)
    async with engine_for(settings, db) as engine:

        async def outage(records: Any, **_: Any) -> None:
            raise AutoReconnect("127.0.0.1: connection closed")

        engine.executions.keep_run = outage  # type: ignore[method-assign]
        summary = await evaluate_account(engine, job, now=datetime.now(UTC))
    assert summary.status == "FAILED"
    assert len(await successful_writes(sandbox)) == 2
    assert await records(db, batch_id=job.batch_id) == []
    await reap(settings, db, redis, now=datetime.now(UTC))
    recovered = await records(db, batch_id=job.batch_id)
    assert sorted(r["entity_id"] for r in recovered) == sorted(chosen)
    assert {(r["outcome"], r["recovered_by"]) for r in recovered} == {("applied", "reaper")}
    batch = await db[c.BATCHES].find_one({"_id": job.batch_id})
    assert batch is not None and (batch["status"], batch["applied_count"]) == ("FAILED", 2)


# ---------------------------------------------------------------- writes Meta did not answer


async def test_a_write_that_timed_out_but_landed_is_recorded_when_the_reaper_settles_it(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    entity_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    live = int((await sandbox.object(entity_id))["daily_budget"])
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    rule = await save_rule(
        db, campaign_rule({"type": "increase_budget", "percent": 10}, [ALWAYS], filters=only)
    )
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    # the client gives up after 0.5 s; the sandbox applies the write after 1 s
    await sandbox.set_faults(write_latency_ms=1000)
    await work(settings.model_copy(update={"graph_timeout_s": 0.5}))
    (first,) = await records(db, rule_id=rule.id)
    assert (first["outcome"], first["reason"]) == ("failed", "write_unconfirmed")
    landed = await wait_for(lambda: successful_writes(sandbox))
    await sandbox.clear_faults()
    # the intent stays pending: the next run does not write the field again …
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    second = [r for r in await records(db, rule_id=rule.id) if r["batch_id"] != first["batch_id"]]
    assert [r["reason"] for r in second] == ["write_pending_elsewhere"]
    assert len(await successful_writes(sandbox)) == 1
    # … until the reaper settles it from the live value and corrects the record
    await reap(settings, db, redis, now=start + timedelta(hours=1))
    intent = await db[c.ACTION_INTENTS].find_one({"batch_id": first["batch_id"]})
    assert intent is not None and intent["status"] == "done"
    (corrected,) = await records(db, batch_id=first["batch_id"])
    assert (corrected["outcome"], corrected["recovered_by"]) == ("applied", "reaper")
    assert corrected["after"] == int(landed[0]["params"]["daily_budget"]) == round(live * 1.1)
    batch = await db[c.BATCHES].find_one({"_id": first["batch_id"]})
    assert batch is not None and batch["applied_count"] == 1
