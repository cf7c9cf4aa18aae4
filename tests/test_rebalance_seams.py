"""Where ``rebalance_budget`` meets the other paths: two runs of one task, and a decrease whose
answer was lost. The group's total is replayed from what Meta received, write by write: it
never goes above what it was, and what a run took from the group comes back to it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flow import (
    dispatch,
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
from ruleengine.dispatching.payload import EvaluateJob, deserialize, evaluate_job_id
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.preview import open_preview, preview_rule
from test_rebalance import budgets, rebalance_rule

SUPERSEDED = "superseded_by_later_run"  # why a redelivered run writes nothing more
ACTIVE_ONLY = {"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}


def active_rebalance() -> dict[str, Any]:
    """The rebalance of act_1001's delivering ad sets, paused ones left out of the group."""
    data = rebalance_rule()
    data["filters"] = [*data["filters"], ACTIVE_ONLY]
    return data


async def planned(settings: Settings, db: Database, data: dict[str, Any]) -> dict[str, int]:
    """Every member of the group the run would plan, and its move (after − before; 0 for one
    that would stay), as the preview says."""
    reading = open_preview(settings, db=db)
    try:
        preview = await preview_rule(
            reading, parse_rule(data), rule_id="r", version=1, now=datetime.now(UTC)
        )
    finally:
        await reading.close()
    members = [r for r in preview.records if r["outcome"] in ("would_apply", "no_change")]
    return {r["entity_id"]: (r["after"] or 0) - (r["before"] or 0) for r in members}


def never_above(writes: list[dict[str, Any]], original: dict[str, int]) -> None:
    """Replay Meta's writes in order: the group's total never goes above the original's."""
    total = sum(original.values())
    running = dict(original)
    for write in writes:
        if write["id"] in running:
            running[write["id"]] = int(write["params"]["daily_budget"])
            above = sum(running.values()) - total
            assert above <= 0, f"the group went {above} above its total"


async def batch_done(db: Database, batch_id: str) -> bool:
    row = await db[c.BATCHES].find_one({"_id": batch_id})
    return row is not None and row["status"] == "DONE"


async def queued_payload(redis: Any) -> EvaluateJob:
    """The one evaluation job in the queue, as the dispatcher enqueued it."""
    (job_id,) = await redis.zrange(c.QUEUE_NAME, 0, -1)
    raw = await redis.get(b"arq:job:" + job_id)
    return EvaluateJob.model_validate(deserialize(raw)["a"][0])


async def test_two_runs_of_one_rebalance_task_never_raise_the_groups_total(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Any,
) -> None:
    data = active_rebalance()
    moves = await planned(settings, db, data)
    receivers = sorted((i for i, d in moves.items() if d > 0), key=lambda i: -moves[i])
    assert len(receivers) >= 2
    original = await budgets(sandbox, list(moves))
    rule = await save_rule(db, data)
    start = datetime.now(UTC)
    workers = [start_worker(settings, tmp_path / f"worker-{n}.log") for n in (1, 2)]
    try:
        # run 1: its decreases land; its increases' live reads fail, so none is recorded
        await sandbox.set_faults(
            rules=[{"path_contains": i, "method": "GET", "code": 2} for i in receivers]
        )
        await dispatch(settings, db, now=start)
        first = await queued_payload(redis)
        await wait_for(lambda: batch_done(db, first.batch_id), timeout_s=60)
        await sandbox.clear_faults()
        assert {r["reason"] for r in await records(db, batch_id=first.batch_id)} >= {
            "live_read_failed"
        }
        # its best receiver is paused in Ads Manager: the next run's group leaves it out
        await sandbox.ads_manager_change(receivers[0], status="PAUSED")
        # run 2, on whichever worker: it finds what run 1 took and gives it back
        await dispatch(settings, db, now=start + timedelta(minutes=15))
        await wait_for(lambda: _all_done(db, rule.id, 2), timeout_s=60)
        # run 1 delivered again (a dispatcher's second enqueue after Redis lost its markers)
        queue = connect_queue(settings)
        await queue.enqueue_job(
            c.EVALUATE_JOB, first.to_job(), _job_id=evaluate_job_id(first.batch_id) + ":again"
        )
        await queue.aclose()
        await wait_for(lambda: _delivered_twice(db, first.batch_id), timeout_s=60)
    finally:
        for worker in workers:
            kill(worker)
    never_above(await successful_writes(sandbox), original)
    assert sum((await budgets(sandbox, list(original))).values()) <= sum(original.values())
    again = await records(db, batch_id=first.batch_id, reason=SUPERSEDED)
    assert again, "the second delivery of run 1 finished a plan run 2 had taken over"


async def _all_done(db: Database, rule_id: str, count: int) -> bool:
    return await db[c.BATCHES].count_documents({"rule_id": rule_id, "status": "DONE"}) == count


async def _delivered_twice(db: Database, batch_id: str) -> bool:
    row = await db[c.BATCHES].find_one({"_id": batch_id})
    return row is not None and row.get("execute_count") == 2 and row["status"] == "DONE"


async def test_a_give_back_whose_decrease_lost_its_answer_comes_back_once_settled(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    settings = settings.model_copy(update={"write_batch_size": 1})  # a call for each write
    data = rebalance_rule()
    moves = await planned(settings, db, data)
    original = await budgets(sandbox, list(moves))
    lost = min(moves, key=lambda i: moves[i])  # the biggest decrease
    rule = await save_rule(db, data)
    start = datetime.now(UTC)
    # run 1: that decrease lands at Meta and its answer is lost; no increase is made for it
    await sandbox.set_faults(
        lost_answers=[{"path_contains": lost, "method": "POST", "answer": "reset", "times": 1}]
    )
    await dispatch(settings, db, now=start)
    await work(settings)
    await sandbox.clear_faults()
    first = {r["entity_id"]: r for r in await records(db, rule_id=rule.id)}
    assert first[lost]["reason"] == "write_unconfirmed"
    took = sum(original.values()) - sum((await budgets(sandbox, list(original))).values())
    assert took == -moves[lost]  # it landed; the group lacks it
    # run 2 comes while that write is still unsettled: it can give nothing back yet, and it
    # moves budget of its own (it becomes the task's latest run)
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    second = [
        r for r in await records(db, rule_id=rule.id) if r["batch_id"] != first[lost]["batch_id"]
    ]
    assert [r for r in second if r["outcome"] == "applied"]
    # the reaper settles run 1's decreases: they landed
    await reap(settings, db, redis, now=datetime.now(UTC) + timedelta(hours=1))
    assert await db[c.ACTION_INTENTS].count_documents({"status": "pending"}) == 0
    # the runs after that give the group back what run 1 took
    for n in range(2, 6):
        await dispatch(settings, db, now=start + timedelta(minutes=15 * n))
        await work(settings)
        if sum((await budgets(sandbox, list(original))).values()) == sum(original.values()):
            break
    assert sum((await budgets(sandbox, list(original))).values()) == sum(original.values())
    never_above(await successful_writes(sandbox), original)
