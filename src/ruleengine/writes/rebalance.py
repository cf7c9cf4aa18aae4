"""``rebalance_budget`` on the write path: one task's group of one run, planned at once and
written through the batched writes, decreases first.

For each rebalancing task of a job: :func:`ruleengine.acting.rebalance.plan_group` plans
the group's moves from its live budgets (the planning the preview shows too), giving back
first what an interrupted earlier rebalance of the task still owes its group. Then
:class:`~ruleengine.writes.batched.BatchedWrites` writes the **decreases**, and only then the
**increases**, cut down to what the decreases actually freed: a crash between the two, a
decrease refused by Meta or clamped by the change budget, never leaves the group's total
above what it was. Each write re-reads its entity under the account lock and goes out only
if the live budget is still the one the plan read (else ``changed_by_someone_else``); each
intent keeps the group's plan (``rebalance``), so a redelivered job finishes the same plan
instead of making a new one, and the next run knows what an interrupted one owes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ruleengine.acting.rebalance import READS, Pair, RoomOf, plan_group, tasks_of, unmoved
from ruleengine.acting.results import (
    ACT_FAILURES,
    ActKey,
    ActResult,
    JobRun,
    Planner,
    Target,
    check_currency,
    failure_result,
)
from ruleengine.guards.change_budget import WINDOW, budget_left
from ruleengine.meta.writer import GraphWriter
from ruleengine.rules.model import Task
from ruleengine.rules.plan import Plan
from ruleengine.rules.rebalance import Move, in_order, trimmed
from ruleengine.rules.targets import live_value
from ruleengine.writes.batched import BatchedWrites, FieldChange


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
        await check_currency(run)
        if run.facts is not None:
            await run.facts.budget_events()  # read once per job, never under the lock
        results: dict[int, ActResult] = {}
        snapshot = await self._own_plan(run, group[0].task)
        if snapshot is None:
            plan = await plan_group(
                run,
                self.executor.intents,
                group,
                max_change_pct=self.executor.settings.max_budget_change_pct,
                room_of=await self._room(run, group),
            )
            moves, snapshot = plan.moves, plan.snapshot
            results |= plan.refusals
        else:  # a redelivered job: finish the plan it recorded, never make a second one
            moves = [Move(m[0], m[1], m[2], None, None, m[3]) for m in snapshot["moves"]]
        decreases, increases = in_order(moves)
        pairs = {p.entity.id: p for p in group}
        done = await self._write(run, writer, decreases, pairs, snapshot)
        # what the increases may add: what the decreases freed, and what the plan gives back
        given_back = max(0, sum(m.delta for m in moves))
        freed = sum(int(r.before) - int(r.after) for r in done.values() if _landed(r))
        allowed = freed + given_back
        done |= await self._write(run, writer, trimmed(increases, allowed), pairs, snapshot)
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
        since = run.now - WINDOW

        def room(entity_id: str, live: int) -> int | None:
            if (entity_id, "daily_budget") in seen.holds.active:
                return 0
            if pct is None:
                return None
            changes = seen.changes.get((entity_id, "daily_budget"), [])
            return budget_left([c for c in changes if c.at >= since], live=live, pct=pct)

        return room

    async def _own_plan(self, run: JobRun, task: Task) -> dict[str, Any] | None:
        """The group plan an earlier delivery of this batch recorded, if any."""
        for doc in await self.executor.intents.for_batch(run.batch_id):
            if doc.get("task_id") == task.id and isinstance(doc.get("rebalance"), dict):
                return dict(doc["rebalance"])
        return None

    async def _write(
        self,
        run: JobRun,
        writer: GraphWriter,
        moves: list[Move],
        pairs: Mapping[str, Pair],
        snapshot: dict[str, Any],
    ) -> dict[str, ActResult]:
        """Write ``moves`` (entity id → result) through the batched writes."""
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
        results = await self.batched.apply(run, writer, changes)
        return {c.entity.id: r for c, r in zip(changes, results, strict=True)}


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
