"""Planning one ``rebalance_budget`` group from live values: what the write path writes and
the preview shows.

The group is the entities one task matched in one run. Their live budgets (and ad sets'
learning stage) are read in Batch API calls (never a multi-ID request, which apps created
since 2026-11-04 may not use); a member Meta does not answer for is left out of the group,
never moved; each entity's metric is what its verdict
read; the account's minimum daily budget and the action's bounds make the limits; what an
interrupted earlier rebalance of the task still owes its group comes from that run's
intents (:func:`~ruleengine.rules.plan.rebalance.owed`). The arithmetic is
:func:`ruleengine.rules.plan.rebalance.plan_rebalance`'s. Writes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import Any, Final

from ruleengine.acting.results import ActResult, JobRun, check_currency
from ruleengine.meta.batch import SubRequest
from ruleengine.rules.advantage import (
    META_SHARED_PCT,
    advantage_fields,
    legacy_kind,
    refusal_message,
    shares_budget,
)
from ruleengine.rules.advantage import REASON as ADVANTAGE_REASON
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import TaskVerdict
from ruleengine.rules.language.action_types import RebalanceBudgetAction
from ruleengine.rules.language.catalog import resolve_metric, scaling_direction
from ruleengine.rules.language.model import Task
from ruleengine.rules.plan.plan import percent_of
from ruleengine.rules.plan.rebalance import (
    Limits,
    Member,
    Move,
    Previous,
    Unsettled,
    owed,
    plan_rebalance,
)
from ruleengine.rules.plan.scaling import lower_bound, upper_bound
from ruleengine.rules.plan.targets import BUDGET_FIELDS, budget_refusal, live_value
from ruleengine.store.intents import IntentStore

ACTION: Final = "rebalance_budget"
#: What the change budget still lets an entity's daily budget move (entity id, live budget →
#: minor units; None: no change budget).
RoomOf = Callable[[str, int], "int | None"]
#: The live fields a rebalance reads of each entity.
READS: Final = [*BUDGET_FIELDS]


@dataclass(frozen=True)
class Pair:
    """One entity the task matched, its position in the job's list, and its verdict."""

    index: int
    entity: Entity
    task: Task
    verdict: TaskVerdict | None


@dataclass(frozen=True)
class GroupPlan:
    """A group's moves (one per member), the plan kept on each intent (``snapshot``: the
    total the group is to hold and every member's ``[id, before, after, rank]``), and the
    results of the
    pairs that are no member (no budget, not read)."""

    moves: list[Move]
    snapshot: dict[str, Any]
    refusals: dict[int, ActResult]


def tasks_of(pairs: Sequence[Pair]) -> list[list[Pair]]:
    """``pairs`` grouped by task, in the order the tasks come."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.task.id, []).append(pair)
    return list(groups.values())


async def plan_group(
    run: JobRun,
    intents: IntentStore,
    group: Sequence[Pair],
    *,
    max_change_pct: float,
    room_of: RoomOf | None = None,
) -> GroupPlan:
    """The moves of one task's group, planned from live budgets (see the module);
    ``room_of``: what the change budget still lets each entity move.

    Raises what stops a money action (the account's currency, reading Meta).
    """
    task = group[0].task
    action = task.action
    assert isinstance(action, RebalanceBudgetAction)
    await check_currency(run)
    docs = await intents.latest_of_task(
        run.rule_id, task.id, action=ACTION, other_than=run.batch_id
    )
    previous = previous_of(docs, await carried_statuses(intents, task.id, docs))
    ids = sorted({p.entity.id for p in group} | set(previous.befores if previous else ()))
    fields = ["id", *READS, *advantage_fields(run.rule.level)]
    fields += ["learning_stage_info"] if run.rule.level == "adset" else []
    live = await read_live(run, ids, fields, needed=set(previous.befores if previous else ()))
    refusals: dict[int, ActResult] = {}
    members: list[Member] = []
    for pair in group:
        member = member_of(pair, live.get(pair.entity.id), run.rule.level, room_of)
        if isinstance(member, ActResult):
            refusals[pair.index] = member
        else:
            members.append(member)
    members = [_with_meta_share(m, live.get(m.id), action.max_change_percent) for m in members]
    budgets = {i: int(b["daily_budget"]) for i, b in live.items() if b.get("daily_budget")}
    debt = owed(previous, budgets)
    limits = await limits_of(run, task, action, max_change_pct=max_change_pct)
    plan = plan_rebalance(members, limits, give_back=debt.amount)
    snapshot: dict[str, Any] = {
        "total": plan.total_before + debt.amount,
        "moves": [[m.id, m.before, m.after, m.rank] for m in plan.moves],
    }
    if debt.unsettled:  # what the run after this one gives back once they are settled
        snapshot["unsettled"] = [u.as_list() for u in debt.unsettled]
    return GroupPlan(plan.moves, snapshot, refusals)


async def limits_of(
    run: JobRun, task: Task, action: RebalanceBudgetAction, *, max_change_pct: float
) -> Limits:
    """How far this run may move budgets: the action's caps and bounds (currency units to
    minor units), the account's minimum daily budget, the task's learning-phase options."""
    offset = run.facts.currency_offset if run.facts is not None else 100
    minimum = await run.facts.min_daily_budget() if run.facts is not None else None
    return Limits(
        higher_is_better=scaling_direction(resolve_metric(action.metric)) == "higher",
        max_change_pct=min(action.max_change_percent, max_change_pct),
        lower=max(lower_bound(action.min_budget, offset), minimum or 1),
        upper=upper_bound(action.max_budget, offset),
        respect_learning=task.respect_learning_phase,
        learning_pct=task.max_change_pct_while_learning,
    )


async def read_live(
    run: JobRun, ids: Sequence[str], fields: list[str], *, needed: Set[str] = frozenset()
) -> dict[str, Any]:
    """The live fields of ``ids``: Batch API GETs where the run has a batch reader, else one
    GET each (never a multi-ID request, which new apps may not use). A member Meta would not
    answer for is left out (absent: ``live_read_failed``, never moved); one of ``needed``
    (the previous run's entities, which what is owed is counted from) fails the whole read.
    """
    if run.batch is not None:
        joined = ",".join(fields)
        requests = [SubRequest(i, {"fields": joined}) for i in ids]
        results = await run.batch.get_many(requests, token=run.token, account_id=run.account)
        live: dict[str, Any] = {}
        for object_id, result in zip(ids, results, strict=True):
            if result.error is not None and object_id in needed:
                raise result.error
            if result.error is None and isinstance(result.body, dict):
                live[object_id] = result.body
        return live
    bodies = await asyncio.gather(
        *(
            run.reader.get_object(i, token=run.token, fields=fields, account_id=run.account)
            for i in ids
        )
    )
    return dict(zip(ids, bodies, strict=True))


def _with_meta_share(member: Member, body: dict[str, Any] | None, max_pct: float) -> Member:
    """A member whose campaign shares ad set budgets: Meta moves up to 20 % of its daily
    budget between the campaign's ad sets itself, so the engine's own move per run is held
    to what is left of ``max_change_percent`` beyond that share (0 at the default of 20)."""
    if body is None or not shares_budget(body):
        return member
    left = Decimal(str(max(0.0, max_pct - META_SHARED_PCT)))
    share_room = percent_of(member.budget, left, rounding=ROUND_DOWN)
    room = share_room if member.room is None else min(member.room, share_room)
    return dataclasses.replace(member, room=room)


def member_of(
    pair: Pair, body: dict[str, Any] | None, level: str, room_of: RoomOf | None = None
) -> Member | ActResult:
    """A group member from its live fields, or why it is not one (no budget, not read)."""
    if body is None:
        return ActResult("failed", "live_read_failed", "daily_budget")
    if (kind := legacy_kind(body)) is not None:
        error = {"message": refusal_message(kind, ACTION)}
        return ActResult("skipped", ADVANTAGE_REASON, "daily_budget", error=error)
    refusal = budget_refusal(level, body)
    if refusal is not None:
        return ActResult("skipped", refusal.reason, "daily_budget")
    reading = pair.verdict.action_metric if pair.verdict is not None else None
    stage = body.get("learning_stage_info")
    learning = isinstance(stage, dict) and stage.get("status") == "LEARNING"
    budget = int(live_value(body, "daily_budget"))
    room = room_of(pair.entity.id, budget) if room_of is not None else None
    return Member(pair.entity.id, budget, reading.actual if reading else None, learning, room)


def _plan_of(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    plans = [d["rebalance"] for d in docs if isinstance(d.get("rebalance"), dict)]
    return plans[0] if plans else None


async def carried_statuses(
    intents: IntentStore, task_id: str, docs: list[dict[str, Any]]
) -> dict[tuple[str, str], str]:
    """(batch, entity) → the status now of each write the latest rebalance carried unsettled
    (one query, only when it carried any)."""
    plan = _plan_of(docs)
    carried = plan.get("unsettled") if plan is not None else None
    if not carried:
        return {}
    found = await intents.of_keys((str(u[0]), task_id, str(u[1])) for u in carried)
    return {(batch, entity): intent.status for (batch, _, entity), intent in found.items()}


def previous_of(
    docs: list[dict[str, Any]], statuses: dict[tuple[str, str], str] | None = None
) -> Previous | None:
    """What the latest other rebalance of the task left, from its intents (``statuses``:
    those of the writes it carried, :func:`carried_statuses`)."""
    plan = _plan_of(docs)
    if plan is None:
        return None
    known = statuses or {}
    carried = [
        Unsettled(str(b), str(e), str(owes_if), int(amount), known.get((str(b), str(e)), "gone"))
        for b, e, owes_if, amount in plan.get("unsettled") or []
    ]
    return Previous(
        total=int(plan["total"]),
        befores={str(move[0]): int(move[1]) for move in plan["moves"]},
        done={d["entity_id"]: int(d["target"]) for d in docs if d.get("status") == "done"},
        pending={d["entity_id"]: int(d["target"]) for d in docs if d.get("status") == "pending"},
        batch=str(docs[0]["batch_id"]),
        carried=carried,
    )


def unmoved(pair: Pair, move: Move | None, result: ActResult | None) -> ActResult:
    """The record of a member the run did not write: why it stayed (``no_move`` when the
    plan gave it nothing to move, or the plan's reason: ``no_data``, ``in_learning_phase``)."""
    if result is not None:
        return result
    if move is None:
        return ActResult("no_change", "no_move", "daily_budget")
    reason = move.reason or "no_move"
    return ActResult("no_change", reason, "daily_budget", move.before, move.before)
