"""``rebalance_budget`` on the write path: one task's group of one run, planned at once and
written through the batched writes, decreases first — all in one hold of the account's write
lock.

For each rebalancing task of a job, under the account's lock:
:func:`ruleengine.acting.rebalance.plan_group` plans the group's moves from its live budgets
(the planning the preview shows too), giving back first what an earlier rebalance of the task
still owes its group. Then :class:`~ruleengine.writes.batched.BatchedWrites` writes the
**decreases**, and only then the **increases**, cut down to what the decreases actually freed:
a crash between the two, a decrease refused by Meta or clamped by the change budget, never
leaves the group's total above what it was. Holding the lock from the plan to the last
increase makes one rebalance of a (rule, task, account) at a time: another run of the task —
a backlog, a second worker — waits for it (or gives up, ``account_lock_timeout``), and then
plans from what this one left, never from the moment between its decreases and increases
(it would count what the decreases freed as owed, and give it again).

Each write re-reads its entity and goes out only if the live budget is still the one the plan
read (else ``changed_by_someone_else``); each intent keeps the group's plan (``rebalance``), so
a redelivered job finishes the same plan instead of making a new one — unless a later run of
the task has planned since (by the lock's fence), which took over what this one owed: then it
writes nothing more (``superseded_by_later_run``) — and the next run knows what an interrupted
one owes, and which writes it carried unsettled.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ruleengine.acting.rebalance import (
    ACTION,
    READS,
    Pair,
    RoomOf,
    plan_group,
    tasks_of,
    unmoved,
)
from ruleengine.acting.results import (
    ACT_FAILURES,
    ActKey,
    ActResult,
    JobRun,
    Planner,
    Target,
    check_currency,
    failure_result,
    settled,
)
from ruleengine.guards.change_budget import WINDOW, budget_left
from ruleengine.meta.errors import RateLimitError
from ruleengine.meta.writer import GraphWriter
from ruleengine.rules.language.model import Task
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.rebalance import Move, in_order, trimmed
from ruleengine.rules.plan.targets import live_value
from ruleengine.store.intents import Intent
from ruleengine.writes.batched import BatchedWrites, FieldChange
from ruleengine.writes.lock import HeldLock


class Rebalancer:
    """Carries out the ``rebalance_budget`` tasks of one job (see the module)."""

    def __init__(self, batched: BatchedWrites) -> None:
        self.batched = batched
        self.executor = batched.executor

    async def apply(
        self, run: JobRun, writer: GraphWriter, pairs: Sequence[Pair]
    ) -> dict[int, ActResult]:
        """The result of each pair, by its index."""
        results: dict[int, ActResult] = {}
        for group in tasks_of(pairs):
            try:
                results |= await self._group(run, writer, group)
            except ACT_FAILURES as exc:
                results |= {p.index: failure_result(exc) for p in group}
        return results

    async def _group(
        self, run: JobRun, writer: GraphWriter, group: list[Pair]
    ) -> dict[int, ActResult]:
        """One task's group, planned and written in one hold of the account's write lock: no
        other run of the task plans while this one is between its decreases and its
        increases (it would count what they freed as owed, and give it again). A rate limit
        met inside is waited out after releasing the lock; the group then starts again from
        the plan it recorded."""
        await check_currency(run)
        if run.facts is not None:  # read once per job, never under the lock
            await run.facts.budget_events()
            await run.facts.min_daily_budget()
        policy = run.reader.reads
        locked = dataclasses.replace(
            run, reader=run.reader.with_reads(policy.without_rate_limit_waits())
        )
        for attempt in itertools.count(1):
            try:
                async with self.executor.locks.hold(run.account) as lock:
                    return await self._locked(locked, writer, group, lock)
            except RateLimitError as exc:
                wait = policy.rate_limit_wait(exc, attempt=attempt)
                if wait is None:
                    raise
                await self.executor.sleep(wait)
        raise AssertionError("unreachable")

    async def _locked(
        self, run: JobRun, writer: GraphWriter, group: list[Pair], lock: HeldLock
    ) -> dict[int, ActResult]:
        results: dict[int, ActResult] = {}
        task = group[0].task
        own = await self._own(run, task)
        if own.snapshot is None:
            plan = await plan_group(
                run,
                self.executor.intents,
                group,
                max_change_pct=self.executor.settings.max_budget_change_pct,
                room_of=await self._room(run, group),
            )
            moves, snapshot = plan.moves, plan.snapshot
            results |= plan.refusals
        elif await self._superseded(run, task, own):
            return superseded(group, own.intents)
        else:  # a redelivered job: finish the plan it recorded, never make a second one
            snapshot = own.snapshot
            moves = [Move(m[0], m[1], m[2], None, None, m[3]) for m in snapshot["moves"]]
        decreases, increases = in_order(moves)
        pairs = {p.entity.id: p for p in group}
        done = await self._write(run, writer, decreases, pairs, snapshot, lock)
        # what the increases may add: what the decreases freed, and what the plan gives back
        given_back = max(0, sum(m.delta for m in moves))
        freed = sum(int(r.before) - int(r.after) for r in done.values() if _landed(r))
        allowed = freed + given_back
        done |= await self._write(run, writer, trimmed(increases, allowed), pairs, snapshot, lock)
        by_id = {m.id: m for m in moves}
        for pair in group:
            if pair.index not in results:
                move, result = by_id.get(pair.entity.id), done.get(pair.entity.id)
                results[pair.index] = unmoved(pair, move, result)
        return results

    async def _room(self, run: JobRun, group: list[Pair]) -> RoomOf | None:
        """What the change budget (every rule's changes in 24 h) still lets each member
        move, and nothing for one held for oscillating: planned within it, so the writes'
        own check of the change budget clamps no move and the total stays whole."""
        guards = self.executor.guards
        if guards is None:
            return None
        seen = await guards.look(run, [p.entity.id for p in group])
        pct = seen.limits.budget_pct
        since = run.store_now() - WINDOW

        def room(entity_id: str, live: int) -> int | None:
            if (entity_id, "daily_budget") in seen.holds.active:
                return 0
            if pct is None:
                return None
            changes = seen.changes.get((entity_id, "daily_budget"), [])
            return budget_left([c for c in changes if c.at >= since], live=live, pct=pct)

        return room

    async def _own(self, run: JobRun, task: Task) -> _Own:
        """The group plan an earlier delivery of this batch recorded, if any, with its intents."""
        mine = [
            d
            for d in await self.executor.intents.for_batch(run.batch_id)
            if d.get("task_id") == task.id and isinstance(d.get("rebalance"), dict)
        ]
        return _Own(dict(mine[0]["rebalance"]) if mine else None, mine)

    async def _superseded(self, run: JobRun, task: Task, own: _Own) -> bool:
        """True when a later run of the task has recorded its plan since this batch's (by the
        write lock's fence, which only grows): it counted what this one left — its
        decreases, its increases never made — and gave back what was owed; finishing this
        plan now would give it again."""
        later = await self.executor.intents.latest_of_task(
            run.rule_id, task.id, action=ACTION, other_than=run.batch_id
        )
        fence = max((int(d.get("lock_fence") or 0) for d in own.intents), default=0)
        return any(int(d.get("lock_fence") or 0) > fence for d in later)

    async def _write(
        self,
        run: JobRun,
        writer: GraphWriter,
        moves: list[Move],
        pairs: Mapping[str, Pair],
        snapshot: dict[str, Any],
        lock: HeldLock,
    ) -> dict[str, ActResult]:
        """Write ``moves`` (entity id → result) through the batched writes, under ``lock``."""
        changes = [
            FieldChange(
                pairs[m.id].entity,
                ActKey.of(pairs[m.id].task),
                Target("daily_budget", READS, _planner(m)),
                extra={"rebalance": snapshot},
            )
            for m in moves
            if m.id in pairs and m.delta != 0
        ]
        if not changes:
            return {}
        results = await self.batched.apply_held(run, writer, changes, lock)
        return {c.entity.id: r for c, r in zip(changes, results, strict=True)}


@dataclass(frozen=True)
class _Own:
    """What an earlier delivery of this batch recorded for the task: its plan and intents."""

    snapshot: dict[str, Any] | None
    intents: list[dict[str, Any]]


#: Why a redelivered rebalance writes nothing more: a later run of its task planned since.
SUPERSEDED = "superseded_by_later_run"


def superseded(group: Sequence[Pair], intents: Sequence[dict[str, Any]]) -> dict[int, ActResult]:
    """The results of a redelivered group whose plan a later run of the task took over: what
    its intents settled, and nothing more written."""
    by_entity = {d["entity_id"]: Intent.from_mongo(d, created=False) for d in intents}
    results: dict[int, ActResult] = {}
    for pair in group:
        intent = by_entity.get(pair.entity.id)
        if intent is not None and intent.status != "pending":
            results[pair.index] = settled(intent)
        else:
            message = "a later run of the task has planned the group since; nothing more is written"
            results[pair.index] = ActResult(
                "skipped", SUPERSEDED, "daily_budget", error={"message": message}
            )
    return results


def _planner(move: Move) -> Planner:
    """The write of one move: its budget, while the live one is still what the plan read."""

    def plan(live: dict[str, Any]) -> Plan | ActResult:
        current = live_value(live, "daily_budget")
        if current != move.before:
            return ActResult(
                "skipped", "changed_by_someone_else", "daily_budget", current, current, move.after
            )
        return Plan("daily_budget", move.before, move.after, move.after)

    return plan


def _landed(result: ActResult) -> bool:
    return result.fired and isinstance(result.before, int) and isinstance(result.after, int)
