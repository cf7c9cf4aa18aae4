"""``rebalance_budget`` against the sandbox: the group's total kept to the minor unit, budget
moved towards the better metric, decreases before increases — across a SIGKILL in the
middle of the writes — and an undo that puts every budget back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flow import (
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
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.backtest.result import BacktestRequest
from ruleengine.backtest.service import BacktestDeps, BacktestRefused, run_backtest
from ruleengine.dispatching.payload import EvaluateJob, deserialize, evaluate_job_id
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.undo.run import undo_batch
from ruleengine.worker.preview import open_preview, preview_rule

HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}
SPENT_7D = {"metric": "spend", "period": "last_7d", "operator": ">", "value": 0}
METRIC = "ctr"
ACTION = {
    "type": "rebalance_budget",
    "metric": METRIC,
    "period": "last_7d",
    "max_change_percent": 20,
}


def rebalance_rule(**extra: Any) -> dict[str, Any]:
    """Ad sets with their own daily budget on act_1001, rebalanced by CTR over 7 days."""
    action = {**ACTION, **extra.pop("action", {})}
    data = campaign_rule(action, [HAS_BUDGET, SPENT_7D], level="adset", **extra)
    data["filters"] = [{"field": "campaign.name", "operator": "CONTAIN", "value": "[AUTO]"}]
    return data


async def budgets(sandbox: SandboxAdmin, ids: list[str]) -> dict[str, int]:
    """Each ad set's daily budget as the sandbox holds it now."""
    return {i: int((await sandbox.object(i))["daily_budget"]) for i in ids}


async def group_of(db: Database) -> list[dict[str, Any]]:
    """The records of the rebalancing task of the first run (one per ad set it matched)."""
    rows = await records(db, task_id="t")
    first = rows[0]["batch_id"]
    return [r for r in rows if r["batch_id"] == first and r.get("field") == "daily_budget"]


async def test_a_rebalance_keeps_the_total_to_the_cent_and_moves_budget_to_the_better(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    reading = open_preview(settings, db=db)
    try:  # what the preview says is what the run then does
        preview = await preview_rule(
            reading, parse_rule(rebalance_rule()), rule_id="r", version=1, now=datetime.now(UTC)
        )
    finally:
        await reading.close()
    assert await successful_writes(sandbox) == []
    would = {r["entity_id"]: r["after"] for r in preview.records if r["outcome"] == "would_apply"}
    await save_rule(db, rebalance_rule())
    await dispatch(settings, db)
    await work(settings)
    rows = await group_of(db)
    ids = [r["entity_id"] for r in rows]
    assert would == {r["entity_id"]: r["after"] for r in rows if r["outcome"] == "applied"}
    assert len(ids) >= 6
    before = {r["entity_id"]: r["before"] for r in rows}
    after = await budgets(sandbox, ids)
    assert sum(after.values()) == sum(before.values())
    moved = [r for r in rows if r["outcome"] == "applied"]
    assert moved
    for row in moved:  # before → after, and the metric that decided it
        assert after[row["entity_id"]] == row["after"] != row["before"]
        assert row["action_metric"]["metric"] == METRIC
        assert row["action_metric"]["actual"] is not None
    losers = [r for r in moved if r["after"] < r["before"]]
    winners = [r for r in moved if r["after"] > r["before"]]
    assert losers and winners
    worst_winner = min(r["action_metric"]["actual"] for r in winners)
    best_loser = max(r["action_metric"]["actual"] for r in losers)
    assert worst_winner > best_loser
    writes = await successful_writes(sandbox)
    assert sorted(w["id"] for w in writes) == sorted(r["entity_id"] for r in moved)
    # every decrease was sent before any increase
    kinds = ["down" if int(w["params"]["daily_budget"]) < before[w["id"]] else "up" for w in writes]
    assert kinds == sorted(kinds, key=lambda k: k == "up")


async def test_undo_of_a_rebalance_sets_every_budget_back(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    await save_rule(db, rebalance_rule())
    await dispatch(settings, db)
    await work(settings)
    rows = await group_of(db)
    before = {r["entity_id"]: r["before"] for r in rows}
    batch_id = rows[0]["batch_id"]
    moved = [r for r in rows if r["outcome"] == "applied"]
    assert len(moved) >= 4
    writes = len(await successful_writes(sandbox))
    async with engine_for(settings, db) as engine:
        result = await undo_batch(engine, batch_id, by="api", now=datetime.now(UTC))
    assert [c["outcome"] for c in result["changes"]] == ["applied"] * len(moved)
    assert await budgets(sandbox, list(before)) == before
    # the undo lowered the budgets the rebalance had raised before it raised the others
    undo_writes = (await successful_writes(sandbox))[writes:]
    total = sum(before.values())
    running = {r["entity_id"]: r["after"] for r in rows}
    for write in undo_writes:
        running[write["id"]] = int(write["params"]["daily_budget"])
        assert sum(running.values()) <= total


async def test_a_worker_killed_in_the_middle_of_a_rebalance_never_raises_the_total(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    rule = await save_rule(db, rebalance_rule(cooldown_minutes=60))
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    original = await killed_among_the_decreases(settings, db, redis, sandbox, tmp_path, rule.id)
    await reap(settings, db, redis, now=start + timedelta(hours=1))
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    await each_budget_once_and_the_total_whole(sandbox, db, original)


async def killed_among_the_decreases(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, tmp_path: Path, rule: str
) -> dict[str, int]:
    """A worker's run of the dispatched rebalance, SIGKILLed after its first decrease landed,
    with the next one's intent recorded and its write at Meta; each member's budget before."""
    # one write a call, each held 3 s at Meta: room to see the condition and kill inside it
    await sandbox.set_faults(write_latency_ms=3000)
    worker = start_worker(settings, tmp_path / "worker.log", write_batch_size="1")

    async def next_write_on_its_way() -> bool:
        written = [w["id"] for w in await successful_writes(sandbox)]
        query = {"status": "pending", "entity_id": {"$nin": written}}
        if not written or not await db[c.ACTION_INTENTS].count_documents(query):
            return False
        return await write_in_flight(sandbox)

    try:
        await wait_for(next_write_on_its_way, timeout_s=60)
    finally:
        kill(worker)
    await wait_for(lambda: sandbox_quiet(sandbox))  # a write the dead worker sent still lands
    await sandbox.clear_faults()
    first = [d async for d in db[c.ACTION_INTENTS].find({"rule_id": rule})]
    assert all(d["target"] < d["before"] for d in first)  # killed among the decreases
    plan = first[0]["rebalance"]
    original = {move[0]: move[1] for move in plan["moves"]}
    assert plan["total"] == sum(original.values())
    landed = await budgets(sandbox, list(original))
    assert sum(landed.values()) < plan["total"]  # decreases only: lower, never higher
    await redis.delete(c.QUEUE_NAME)  # the dead worker's job would block an in-process burst
    return original


async def each_budget_once_and_the_total_whole(
    sandbox: SandboxAdmin, db: Database, original: dict[str, int]
) -> None:
    """No budget written twice, the total never above the original at any write, and back
    to it in the end; no intent left pending."""
    total = sum(original.values())
    writes = await successful_writes(sandbox)
    ids = [w["id"] for w in writes]
    assert len(ids) == len(set(ids)), "a budget was changed twice"
    running = dict(original)
    for write in writes:  # replayed in the order Meta received them
        running[write["id"]] = int(write["params"]["daily_budget"])
        assert sum(running.values()) <= total
    assert sum((await budgets(sandbox, list(original))).values()) == total
    assert await db[c.ACTION_INTENTS].count_documents({"status": "pending"}) == 0


async def test_a_backtest_of_a_rebalance_is_refused_with_the_task(
    settings: Settings, db: Database, accounts: list[str]
) -> None:
    async with BacktestDeps.open(settings, db) as deps:
        request = BacktestRequest(parse_rule(rebalance_rule()))
        with pytest.raises(BacktestRefused, match=r"task 't'.*rebalance_budget"):
            await run_backtest(deps, request, now=datetime.now(UTC))


async def test_the_change_budget_bounds_every_move_and_the_total_still_holds(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    data = rebalance_rule() | {"change_budget": {"max_daily_budget_change_pct": 10}}
    await save_rule(db, data)
    start = datetime.now(UTC)
    for run in range(2):  # the second run finds every moved budget's 10 % used up
        await dispatch(settings, db, now=start + timedelta(minutes=15 * run))
        await work(settings)
    rows = await group_of(db)
    before = {r["entity_id"]: r["before"] for r in rows}
    after = await budgets(sandbox, list(before))
    assert sum(after.values()) == sum(before.values())
    assert any(after[i] != b for i, b in before.items())
    for entity_id, base in before.items():
        assert abs(after[entity_id] - base) <= base // 10, entity_id
    clamped = [r for r in await records(db) if "change_budget" in (r.get("clamped_by") or [])]
    assert not clamped  # planned within the change budget: no write of it was cut short
    assert not [r for r in await records(db) if r.get("reason") == "change_budget_exhausted"]


async def test_an_ad_set_in_learning_keeps_its_budget_and_the_others_rebalance(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    data = rebalance_rule()
    data["tasks"][0]["respect_learning_phase"] = True
    await save_rule(db, data)
    await dispatch(settings, db)
    await work(settings)
    rows = await group_of(db)
    learning = [r for r in rows if r["entity_name"] == "Prospecting US 3 - Lookalike 1%"]
    assert [(r["outcome"], r["reason"]) for r in learning] == [("no_change", "in_learning_phase")]
    before = {r["entity_id"]: r["before"] for r in rows}
    after = await budgets(sandbox, list(before))
    assert after[learning[0]["entity_id"]] == learning[0]["before"]
    assert sum(after.values()) == sum(before.values())
    assert [r for r in rows if r["outcome"] == "applied"]


async def test_a_redelivered_rebalance_finishes_the_plan_it_recorded(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    rule = await save_rule(db, rebalance_rule(cooldown_minutes=60))
    await dispatch(settings, db)
    raw = await redis.get(b"arq:job:" + (await redis.zrange(c.QUEUE_NAME, 0, 0))[0])
    payload = EvaluateJob.model_validate(deserialize(raw)["a"][0])
    original = await killed_among_the_decreases(settings, db, redis, sandbox, tmp_path, rule.id)
    queue = connect_queue(settings)  # the same batch again, as arq redelivers a lost job
    await queue.enqueue_job(
        c.EVALUATE_JOB, payload.to_job(), _job_id=evaluate_job_id(payload.batch_id) + ":again"
    )
    await queue.aclose()
    await work(settings)
    await each_budget_once_and_the_total_whole(sandbox, db, original)
    batches = {d["batch_id"] async for d in db[c.ACTION_INTENTS].find({"rule_id": rule.id})}
    assert batches == {payload.batch_id}  # one plan, finished by the second delivery


async def test_campaign_budgets_rebalance_too_and_keep_their_total(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    data = campaign_rule(ACTION, [SPENT_7D])  # every delivering campaign of act_1001
    await save_rule(db, data)
    await dispatch(settings, db)
    await work(settings)
    rows = await records(db, task_id="t")
    members = [r for r in rows if r["outcome"] in ("applied", "no_change")]
    assert len(members) >= 3
    before = {r["entity_id"]: r["before"] for r in members}
    after = await budgets(sandbox, list(before))
    assert sum(after.values()) == sum(before.values())
    assert [r for r in members if r["outcome"] == "applied"]
    # a campaign whose ad sets hold the budgets, or with a lifetime budget, is no member
    skipped = {r["reason"] for r in rows if r["outcome"] == "skipped"}
    assert skipped <= {"no_campaign_budget", "no_daily_budget"}
