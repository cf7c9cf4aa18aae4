"""Undoing a ``rebalance_budget``: the group's total never ends above what it was before the
undo. A receiver's budget that cannot be lowered back — edited by hand since, Meta's 4 budget
changes an hour used up — frees nothing, so the donors it was paid by are not raised for it;
an undo naming only the donors raises nothing. Each change the undo could not set back says
why."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flow import (
    dispatch,
    engine_for,
    kill,
    records,
    sandbox_quiet,
    save_rule,
    start_worker,
    successful_writes,
    wait_for,
    work,
    write_in_flight,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.undo.run import undo_batch
from test_rebalance import budgets, group_of, rebalance_rule

GROUP_TOTAL = "would_raise_group_total"  # why a donor is not raised back


async def rebalanced(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> tuple[str, list[dict[str, Any]]]:
    """One rebalance of act_1001's ad sets, run at the real time (the sandbox agrees on the
    hour): its batch and the records of the members it moved, the biggest receiver first."""
    at = datetime.now(UTC).replace(microsecond=0)
    await sandbox.set_clock(at)
    await save_rule(db, rebalance_rule(), now=at)
    await dispatch(settings, db, now=at)
    await work(settings)
    moved = [r for r in await group_of(db) if r["outcome"] == "applied"]
    assert [r for r in moved if r["after"] > r["before"]]
    assert [r for r in moved if r["after"] < r["before"]]
    moved.sort(key=lambda r: r["before"] - r["after"])
    return str(moved[0]["batch_id"]), moved


async def undone(
    settings: Settings, db: Database, batch_id: str, executions: list[str] | None = None
) -> dict[str, Any]:
    async with engine_for(settings, db) as engine:
        return await undo_batch(
            engine, batch_id, by="api", now=datetime.now(UTC), executions=executions
        )


def by_entity(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["entity_id"]: r for r in result["changes"]}


async def test_undo_leaves_a_receiver_edited_by_hand_and_raises_no_donor_for_it(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch_id, moved = await rebalanced(settings, db, sandbox)
    receiver = moved[0]  # the one that received most
    await sandbox.ads_manager_change(receiver["entity_id"], daily_budget=receiver["after"] + 700)
    ids = [r["entity_id"] for r in moved]
    total_before_undo = sum((await budgets(sandbox, ids)).values())

    result = await undone(settings, db, batch_id)

    assert sum((await budgets(sandbox, ids)).values()) <= total_before_undo
    changes = by_entity(result)
    assert changes[receiver["entity_id"]]["reason"] == "changed_by_someone_else"
    held = [c for c in changes.values() if c["reason"] == GROUP_TOTAL]
    assert held, "a donor was raised back with budget its receiver never gave up"
    for change in held:  # each says it was not set back, and why
        assert change["revert"] == "not_reverted"
        assert change["error"]["freed"] < change["error"]["needed"]
    assert not result["complete"]
    # the other receivers were lowered back, and the donors the lowers paid for raised back
    lowered = [
        c for c in changes.values() if c["outcome"] == "applied" and c["after"] < c["before"]
    ]
    assert len(lowered) == len([r for r in moved if r["after"] > r["before"]]) - 1


async def test_undo_raises_no_donor_while_metas_hour_holds_a_receiver_back(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch_id, moved = await rebalanced(settings, db, sandbox)
    receiver = moved[0]
    # three changes in Ads Manager, ending on what the rebalance wrote: with its own, Meta's 4
    for value in (receiver["after"] + 100, receiver["after"] + 200, receiver["after"]):
        await sandbox.ads_manager_change(receiver["entity_id"], daily_budget=value)
    ids = [r["entity_id"] for r in moved]
    total_before_undo = sum((await budgets(sandbox, ids)).values())

    result = await undone(settings, db, batch_id)

    assert sum((await budgets(sandbox, ids)).values()) <= total_before_undo
    changes = by_entity(result)
    assert changes[receiver["entity_id"]]["reason"] == "meta_budget_change_limit"
    assert [c for c in changes.values() if c["reason"] == GROUP_TOTAL]
    assert all(w["ok"] for w in await sandbox.writes())  # Meta's code 17 was never met


async def test_an_undo_naming_only_the_donors_raises_nothing(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch_id, moved = await rebalanced(settings, db, sandbox)
    donors = [r for r in moved if r["after"] < r["before"]]
    ids = [r["entity_id"] for r in moved]
    total_before_undo = sum((await budgets(sandbox, ids)).values())
    writes = len(await sandbox.writes())

    rows = {r["entity_id"]: r for r in await records(db, batch_id=batch_id)}
    result = await undone(
        settings, db, batch_id, [str(rows[d["entity_id"]]["_id"]) for d in donors]
    )

    assert sum((await budgets(sandbox, ids)).values()) <= total_before_undo
    assert len(await sandbox.writes()) == writes
    assert {c["reason"] for c in result["changes"]} == {GROUP_TOTAL}


async def test_an_undo_killed_between_its_lowers_and_raises_finishes_with_the_total_whole(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Any,
) -> None:
    """The undo runs on a worker that is SIGKILLed once its lowers have landed, with its first
    raise at Meta: the group is below its total meanwhile, never above; asked again, the undo
    counts the lowers it finds made and raises the donors back — the total whole again."""
    batch_id, moved = await rebalanced(settings, db, sandbox)
    before = {r["entity_id"]: r["before"] for r in moved}
    receivers = {r["entity_id"] for r in moved if r["after"] > r["before"]}
    after_batch = sum(r["after"] for r in moved)
    writes = len(await successful_writes(sandbox))
    await sandbox.set_faults(write_latency_ms=2000)
    worker = start_worker(settings, tmp_path / "worker.log", write_batch_size="1")
    queue = connect_queue(settings)
    payload = {"batch_id": batch_id, "by": "api", "executions": None, "pause_copies": False}
    await queue.enqueue_job(c.UNDO_JOB, payload, _job_id=f"undo:{batch_id}")
    await queue.aclose()

    async def first_raise_on_its_way() -> bool:
        sent = [w["id"] for w in (await successful_writes(sandbox))[writes:]]
        if not receivers <= set(sent):
            return False
        return await write_in_flight(sandbox)

    try:
        await wait_for(first_raise_on_its_way, timeout_s=60)
    finally:
        kill(worker)
    await wait_for(lambda: sandbox_quiet(sandbox))
    await sandbox.clear_faults()
    await redis.delete(c.QUEUE_NAME)
    result = await undone(settings, db, batch_id)  # asked again

    assert await budgets(sandbox, list(before)) == before
    assert result["complete"]
    running = {r["entity_id"]: r["after"] for r in moved}
    for write in (await successful_writes(sandbox))[writes:]:  # replayed in Meta's order
        running[write["id"]] = int(write["params"]["daily_budget"])
        assert sum(running.values()) <= after_batch
