"""The account write lock's fence: a counter in MongoDB, taken at each acquisition.

A holder that lost its lock — paused past the lock's lifetime, or cut off by a Redis
restart — while another worker took the account over sends and records nothing more:
its writes already sent are left pending for the reaper, which settles them from the
live values. The counter survives a Redis restart.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flow import (
    campaign_ids,
    campaign_rule,
    dispatch,
    engine_for,
    kill,
    reap,
    records,
    sandbox_quiet,
    save_rule,
    start_worker,
    successful_writes,
    wait_for,
    work,
    write_in_flight,
    writes_at_least,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine import errors
from ruleengine.devstack.embedded import ProcessGroup, start_redis
from ruleengine.dispatching.payload import EvaluateJob, deserialize
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.intents import IntentStore
from ruleengine.worker.job import evaluate_account
from ruleengine.writes.lock import AccountLocks
from test_faults import ALWAYS, queued_jobs
from test_write_batches import HAS_BUDGET, big_account, budget_rule, each_write_recorded_once

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def intent(batch_id: str, entity_id: str) -> dict[str, Any]:
    """A pending budget change of act_1001, as the write path records it."""
    return {
        "batch_id": batch_id,
        "task_id": "t",
        "entity_id": entity_id,
        "rule_id": "r",
        "account": "act_1001",
        "field": "daily_budget",
        "before": 1000,
        "target": 1100,
    }


async def lock_free(redis: Any, account: str) -> bool:
    return not await redis.exists(f"{c.ACCOUNT_LOCK_PREFIX}{account}")


# ---------------------------------------------------------------- the fence's protocol


async def test_a_holder_taken_over_records_settles_and_sends_nothing(
    db: Database, redis: Any
) -> None:
    intents = IntentStore(db)
    # renewed every 20 s: the old holder's renewal never runs during the test
    locks = AccountLocks(redis, intents=intents, ttl_s=60, wait_s=5)
    key = f"{c.ACCOUNT_LOCK_PREFIX}act_1001"
    async with locks.hold("act_1001") as old:
        stale = intents.under(old.fence)
        sent = await stale.begin(intent("b-old", "c1"), now=NOW)
        old_key = await redis.get(key)
        await redis.delete(key)  # Redis lost the key (restarted, or failed over)
        async with locks.hold("act_1001") as new:
            assert new.fence.value == old.fence.value + 1
            with pytest.raises(errors.Fenced):
                await stale.resolve(sent.id, status="done", now=NOW)
            with pytest.raises(errors.Fenced):
                await stale.begin(intent("b-old", "c2"), now=NOW)
            await new.check()
            assert await intents.under(new.fence).resolve(sent.id, status="failed", now=NOW)
        # a Redis that failed over to a replica which missed all this holds the old key
        # again: Redis says the lock is the old holder's, its fence says it is not, and no
        # write goes out under it
        await redis.set(key, old_key, px=60_000)
        with pytest.raises(errors.Fenced):
            await old.check()
    docs = {d["entity_id"]: d async for d in db[c.ACTION_INTENTS].find({})}
    assert (docs["c1"]["status"], docs["c1"]["lock_fence"]) == ("failed", old.fence.value)
    assert docs["c1"]["holder_fence"] == new.fence.value
    assert "c2" not in docs  # nothing recorded under the old fence


async def test_the_fence_survives_a_redis_restart(
    settings: Settings,
    db: Database,
    accounts: list[str],
    sandbox: SandboxAdmin,
    own_redis: tuple[ProcessGroup, int],
) -> None:
    group, port = own_redis
    wired = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"})
    entity_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    rule = await save_rule(
        db, campaign_rule({"type": "increase_budget", "percent": 10}, [ALWAYS], filters=only)
    )
    start = datetime.now(UTC)
    await dispatch(wired, db, now=start)
    await work(wired)
    group.stop_all()  # Redis restarts empty: every lock key and counter it held is gone
    start_redis(group, port=port, data_dir=None)
    await dispatch(wired, db, now=start + timedelta(minutes=15))
    await work(wired)
    fences = [
        i["lock_fence"]
        async for i in db[c.ACTION_INTENTS].find({"rule_id": rule.id}).sort("created_at")
    ]
    assert len(fences) == 2
    assert fences[1] > fences[0]
    counter = await db[c.LOCK_FENCES].find_one({"_id": "act_1001"})
    assert counter is not None and counter["fence"] == fences[1]


# ---------------------------------------------------------------- a worker paused with SIGSTOP


async def test_a_worker_paused_past_its_lock_sends_and_records_nothing_once_taken_over(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, tmp_path: Path
) -> None:
    await big_account(sandbox, db, settings, 60)  # 60 writes: calls of 20, 20 and 20
    rule = await save_rule(db, budget_rule("act_2001", cooldown_minutes=60))
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    (paused_job,) = await queued_jobs(redis)
    # each call of writes lands 1.5 s after it arrived, and is answered then: the worker is
    # paused once its first call is sent, and its answer waits for it
    await sandbox.set_faults(write_latency_ms=1500)
    worker = start_worker(settings, tmp_path / "worker.log", write_batch_size="20")
    try:
        await wait_for(lambda: write_in_flight(sandbox), timeout_s=60)
        worker.send_signal(signal.SIGSTOP)
        await wait_for(lambda: lock_free(redis, "act_2001"))  # its lock outlived (2 s)
        await wait_for(lambda: sandbox_quiet(sandbox))
        assert await writes_at_least(sandbox, 20) == 20  # the first call landed, alone
        await sandbox.clear_faults()
        took_over = await take_over(settings, db, redis, sandbox)
        sent = await sandbox.writes()
        assert len(sent) == 21  # the paused worker's first call, and the one taking over
        worker.send_signal(signal.SIGCONT)
        await wait_for(lambda: closed(db, paused_job.batch_id), timeout_s=60)
    finally:
        kill(worker)
    assert await sandbox.writes() == sent  # it sent nothing more
    paused = await records(db, batch_id=paused_job.batch_id)
    assert {r["reason"] for r in paused} == {"write_unconfirmed", "lock_lost"}
    assert [r for r in paused if r["outcome"] == "applied"] == []
    own = [i async for i in db[c.ACTION_INTENTS].find({"batch_id": paused_job.batch_id})]
    assert {i["status"] for i in own} == {"pending"}
    # the reaper settles what it left from the live values: nothing lost, nothing twice
    await reap(settings, db, redis, now=start + timedelta(hours=1))
    writes = await successful_writes(sandbox)
    assert [w["params"] for w in writes if w["id"] == took_over][-1] == {"status": "PAUSED"}
    budget_writes = [w for w in writes if "daily_budget" in w["params"]]
    each_write_recorded_once(
        budget_writes,
        [i async for i in db[c.ACTION_INTENTS].find({"rule_id": rule.id, "status": "done"})],
        await records(db, batch_id=paused_job.batch_id, outcome="applied"),
    )
    assert await db[c.ACTION_INTENTS].count_documents({"status": "pending"}) == 0


async def take_over(settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin) -> str:
    """Another worker pauses one of act_2001's campaigns; the campaign's id."""
    entity_id = sorted((await campaign_ids(sandbox, "act_2001")).values())[0]
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    rule = await save_rule(
        db,
        campaign_rule({"type": "pause"}, [HAS_BUDGET], filters=only, ad_accounts=["act_2001"]),
    )
    await dispatch(settings, db)
    (job_id,) = [i for i in await redis.zrange(c.QUEUE_NAME, 0, -1) if rule.id.encode() in i]
    await redis.zrem(c.QUEUE_NAME, job_id)  # run here, not by the paused worker once resumed
    job = EvaluateJob.model_validate(deserialize(await redis.get(b"arq:job:" + job_id))["a"][0])
    async with engine_for(settings, db) as engine:
        summary = await evaluate_account(engine, job, now=datetime.now(UTC))
    assert summary.applied == 1
    return entity_id


async def closed(db: Database, batch_id: str) -> bool:
    batch = await db[c.BATCHES].find_one({"_id": batch_id})
    return batch is not None and batch["status"] != "RUNNING"
