"""``rebalance_budget`` on the write path: one task's group of one run, planned at once and
written through the batched writes, decreases first.

For each rebalancing task of a job: the group's live budgets (and ad sets' learning stage)
are read in Batch API calls; :func:`ruleengine.rules.rebalance.plan_rebalance` plans the
moves from them and from the metric each entity's verdict read, giving back first what an
interrupted earlier rebalance of the task still owes its group
(:func:`~ruleengine.rules.rebalance.owed`, from that run's intents). Then
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
from dataclasses import dataclass
from typing import Any, Final

from ruleengine.acting.results import (
    ACT_FAILURES,
    ActKey,
    ActResult,
    JobRun,
    Target,
    check_currency,
    failure_result,
)
from ruleengine.meta.batch import BatchReader, SubRequest
from ruleengine.meta.writer import GraphWriter
from ruleengine.rules.action_types import RebalanceBudgetAction
from ruleengine.rules.catalog import resolve_metric, scaling_direction
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import TaskVerdict
from ruleengine.rules.model import Task
from ruleengine.rules.plan import Plan
from ruleengine.rules.rebalance import (
    Limits,
    Member,
    Move,
    Previous,
    in_order,
    owed,
    plan_rebalance,
    trimmed,
)
from ruleengine.rules.scaling import lower_bound, upper_bound
from ruleengine.rules.targets import BUDGET_FIELDS, budget_refusal, live_value
from ruleengine.writes.batched import BatchedWrites, FieldChange

ACTION: Final = "rebalance_budget"
#: The live fields a rebalance reads of each entity.
READS: Final = [*BUDGET_FIELDS]


@dataclass(frozen=True)
class Pair:
    """One entity the task matched, its position in the job's list, and its verdict."""

    index: int
    entity: Entity
    task: Task
    verdict: TaskVerdict | None


class Rebalancer:
    """Carries out the ``rebalance_budget`` tasks of one job (see the module)."""

    def __init__(self, batched: BatchedWrites) -> None:
        self.batched = batched
        self.executor = batched.executor

    async def apply(
        self, run: JobRun, writer: GraphWriter, pairs: Sequence[Pair]
    ) -> dict[int, ActResult]:
        """The result of each pair, by its index."""
        groups: dict[str, list[Pair]] = {}
        for pair in pairs:
            groups.setdefault(pair.task.id, []).append(pair)
        results: dict[int, ActResult] = {}
        for group in groups.values():
            try:
                results |= await self._group(run, writer, group)
            except ACT_FAILURES as exc:
                results |= {p.index: failure_result(exc) for p in group}
        return results

    async def _group(
        self, run: JobRun, writer: GraphWriter, group: list[Pair]
    ) -> dict[int, ActResult]:
        task = group[0].task
        action = task.action
        assert isinstance(action, RebalanceBudgetAction)
        await check_currency(run)
        results: dict[int, ActResult] = {}
        if run.facts is not None:
            await run.facts.budget_events()  # read once per job, never under the lock
        snapshot = await self._own_plan(run, task)
        if snapshot is None:
            moves, snapshot, refusals = await self._plan(run, writer, task, action, group)
            results |= refusals
        else:  # a redelivered job: finish the plan it recorded, never make a second one
            moves = [Move(i, before, after, None) for i, before, after in snapshot["moves"]]
        by_id = {m.id: m for m in moves}
        decreases, increases = in_order(moves)
        pairs = {p.entity.id: p for p in group}
        done = await self._write(run, writer, decreases, pairs, snapshot)
        # what the increases may add: what the decreases freed, and what the plan gives back
        given_back = max(0, sum(m.delta for m in moves))
        freed = sum(int(r.before) - int(r.after) for r in done.values() if _landed(r))
        allowed = freed + given_back
        done |= await self._write(run, writer, trimmed(increases, allowed), pairs, snapshot)
        for pair in group:
            if pair.index in results:
                continue
            move = by_id.get(pair.entity.id)
            result = done.get(pair.entity.id)
            if result is None and move is not None:
                reason = move.reason or "no_move"
                result = ActResult("no_change", reason, "daily_budget", move.before, move.before)
            results[pair.index] = result or ActResult("no_change", "no_move", "daily_budget")
        return results

    async def _own_plan(self, run: JobRun, task: Task) -> dict[str, Any] | None:
        """The group plan an earlier delivery of this batch recorded, if any."""
        for doc in await self.executor.intents.for_batch(run.batch_id):
            if doc.get("task_id") == task.id and isinstance(doc.get("rebalance"), dict):
                return dict(doc["rebalance"])
        return None

    async def _plan(
        self,
        run: JobRun,
        writer: GraphWriter,
        task: Task,
        action: RebalanceBudgetAction,
        group: list[Pair],
    ) -> tuple[list[Move], dict[str, Any], dict[int, ActResult]]:
        previous_docs = await self.executor.intents.latest_of_task(
            run.rule_id, task.id, action=ACTION, other_than=run.batch_id
        )
        previous = _previous(previous_docs)
        ids = sorted({p.entity.id for p in group} | set(previous.befores if previous else ()))
        fields = READS + (["learning_stage_info"] if run.rule.level == "adset" else [])
        live = await self._read(run, writer, ids, fields)
        refusals: dict[int, ActResult] = {}
        members: list[Member] = []
        for pair in group:
            member = _member(pair, live.get(pair.entity.id), run.rule.level)
            if isinstance(member, ActResult):
                refusals[pair.index] = member
            else:
                members.append(member)
        budgets = {i: int(b["daily_budget"]) for i, b in live.items() if b.get("daily_budget")}
        give_back = owed(previous, budgets)
        plan = plan_rebalance(members, await self._limits(run, task, action), give_back=give_back)
        snapshot = {
            "total": plan.total_before + give_back,
            "moves": [[m.id, m.before, m.after] for m in plan.moves],
        }
        return plan.moves, snapshot, refusals

    async def _limits(self, run: JobRun, task: Task, action: RebalanceBudgetAction) -> Limits:
        offset = run.facts.currency_offset if run.facts is not None else 100
        minimum = await run.facts.min_daily_budget() if run.facts is not None else None
        return Limits(
            higher_is_better=scaling_direction(resolve_metric(action.metric)) == "higher",
            max_change_pct=min(
                action.max_change_percent, self.executor.settings.max_budget_change_pct
            ),
            lower=max(lower_bound(action.min_budget, offset), minimum or 1),
            upper=upper_bound(action.max_budget, offset),
            respect_learning=task.respect_learning_phase,
            learning_pct=task.max_change_pct_while_learning,
        )

    async def _read(
        self, run: JobRun, writer: GraphWriter, ids: list[str], fields: list[str]
    ) -> dict[str, dict[str, Any]]:
        """Entity id → its live fields (an entity that could not be read is left out)."""
        reads = BatchReader(
            writer.session,
            policy=run.reader.reads,
            concurrency=self.executor.settings.graph_concurrency,
        )
        wanted = ",".join(["id", *fields])
        answers = await reads.get_many(
            [SubRequest(i, {"fields": wanted}) for i in ids],
            token=run.token,
            account_id=run.account,
        )
        return {
            i: a.body
            for i, a in zip(ids, answers, strict=True)
            if a.error is None and isinstance(a.body, dict) and "id" in a.body
        }

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


def _member(pair: Pair, body: dict[str, Any] | None, level: str) -> Member | ActResult:
    """A group member from its live fields, or why it is not one (no budget, not read)."""
    if body is None:
        return ActResult("failed", "live_read_failed", "daily_budget")
    refusal = budget_refusal(level, body)
    if refusal is not None:
        return ActResult("skipped", refusal.reason, "daily_budget")
    reading = pair.verdict.action_metric if pair.verdict is not None else None
    stage = body.get("learning_stage_info")
    learning = isinstance(stage, dict) and stage.get("status") == "LEARNING"
    budget = int(live_value(body, "daily_budget"))
    return Member(pair.entity.id, budget, reading.actual if reading else None, learning)


def _planner(move: Move) -> Any:
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


def _previous(docs: list[dict[str, Any]]) -> Previous | None:
    """What the latest other rebalance of the task left, from its intents."""
    plans = [d["rebalance"] for d in docs if isinstance(d.get("rebalance"), dict)]
    if not plans:
        return None
    plan = plans[0]
    return Previous(
        total=int(plan["total"]),
        befores={str(i): int(before) for i, before, _after in plan["moves"]},
        done={d["entity_id"]: int(d["target"]) for d in docs if d.get("status") == "done"},
        pending=any(d.get("status") == "pending" for d in docs),
    )
