"""Undoing a batch: an undo batch (``undo:<batch_id>``, or ``undo:<batch_id>:<digest>`` for
chosen executions), written through the rules' own write path.

The plan is :mod:`ruleengine.undo.plan`'s. Every change to set back (and every copy to
pause) goes through :meth:`~ruleengine.writes.executor.ActionExecutor.apply`: under the account's
write lock the live value is read again, planned from (still the ``after`` the batch wrote,
else ``changed_by_someone_else``), an intent keyed by (undo batch, ``undo:<task>``, entity)
is recorded before the write and resolved with Meta's answer. So a second request, the same
request delivered twice, or a retry after a crash reverts each change once: a done intent
answers ``already_applied``, a pending one is reconciled from the live value. An undo
already ``DONE`` is answered as it is.

An undo puts back the exact value the batch found
(:func:`~ruleengine.rules.plan.plan.plan_restore`):
the engine's guards on what rules decide — ``max_budget_change_pct``, the change budget,
oscillation holds — do not hold it; Meta's limits do (the ad set's 4 budget changes an
hour, the account's minimum daily budget, a code 17 block). A change it could not set back
is recorded ``not_reverted`` and the undo batch is not ``complete`` (its counts say how
many); a later undo naming those executions (its own batch id) tries them again.

Follow-ups the batch scheduled that have not run are cancelled (``skipped``, reason
``cancelled_by_undo``). The batch rows link each other (``undone_by`` / ``undos`` /
``undoes``); the undo row and its records say who asked (``by``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from ruleengine.accounts.facts import AccountFacts
from ruleengine.acting.results import (
    ACT_FAILURES,
    ActKey,
    ActResult,
    JobRun,
    Target,
    failure_result,
)
from ruleengine.meta.http import Cost
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.budget_schedules import SCHEDULES, ScheduleSpec, listed
from ruleengine.rules.language.model import Rule
from ruleengine.rules.plan.plan import Plan, plan_restore
from ruleengine.rules.plan.targets import live_value as read_value
from ruleengine.store.credentials import token_ref
from ruleengine.store.db import Document
from ruleengine.store.followups import WAITING, FollowupDoc
from ruleengine.store.records import BatchCounts, BatchStart, merge_record, record_key
from ruleengine.undo.plan import (
    CHANGED,
    LEFT_ALONE,
    NOT_REVERTED,
    REVERTED,
    SCHEDULE_GONE,
    UNDO_PREFIX,
    UndoItem,
    UndoPlan,
    not_undone_of,
    plan_undo,
    refuse_running,
    refuse_undo_of_undo,
    revert_state,
    select,
    state_of,
    undo_batch_id,
    undo_records,
    undone_executions,
)

if TYPE_CHECKING:
    from ruleengine.meta.reader import GraphReader
    from ruleengine.meta.writer import GraphWriter
    from ruleengine.worker.deps import Engine

log = logging.getLogger(__name__)

CANCELLED = "cancelled_by_undo"


def _reads(field: str) -> list[str]:
    return ["daily_budget", "lifetime_budget"] if field == "daily_budget" else [field]


def revert_target(item: UndoItem, *, minimum: int | None) -> Target:
    """Set ``item.field`` back to exactly ``item.before``, only while the live value is
    ``item.after`` (``minimum``: the account's minimum daily budget, if known); a budget
    schedule: delete it, while Meta still lists it."""
    assert item.field is not None
    field = item.field
    if field == SCHEDULES:
        return _delete_target(item)

    def plan(live: dict[str, Any]) -> Plan | ActResult:
        current = read_value(live, field)
        if item.action == "pause_copy":
            reason = "already_paused" if current == "PAUSED" else None
            return Plan(field, current, "PAUSED", reason=reason)
        if current != item.after:
            return ActResult("skipped", CHANGED, field, current, current)
        if field == "daily_budget":
            return plan_restore(int(item.before), live=int(current), account_minimum=minimum)
        return Plan(field, current, item.before)

    return Target(field, _reads(field), plan)


def _delete_target(item: UndoItem) -> Target:
    """Delete the schedule ``item`` made (``DELETE /{schedule_id}``) while Meta lists it."""
    made = ScheduleSpec.from_doc(item.schedule)
    assert made is not None
    assert made.schedule_id is not None
    delete = dataclasses.replace(made, op="delete")

    def plan(live: dict[str, Any]) -> Plan | ActResult:
        if delete.gone_from(listed(live.get(SCHEDULES))):
            return ActResult("skipped", SCHEDULE_GONE, SCHEDULES, item.after, item.after)
        return Plan(SCHEDULES, item.after, item.before, schedule=delete)

    return Target(SCHEDULES, [SCHEDULES], plan)


def undo_key(item: UndoItem) -> ActKey:
    """What the undo's intent of an item is recorded under (never the rule's own task)."""
    kind = "pause_copy" if item.action == "pause_copy" else f"undo:{item.field}"
    return ActKey(f"{UNDO_PREFIX}{item.task_id}", kind)


async def load(engine: Engine, batch_id: str) -> tuple[Document, list[Document], list[Document]]:
    """The batch row, its execution records and the follow-ups it scheduled."""
    refuse_undo_of_undo(batch_id)
    batch = await engine.batches.get(batch_id)
    refuse_running(batch)
    records = await engine.executions.for_batch(batch_id)
    page = await engine.followups.store.page(filters={"batch_id": batch_id}, limit=5000)
    return batch, records, page.items


@dataclass(frozen=True)
class _Planned:
    """A batch's undo plan with what reading it took: its row, the token and the clients."""

    batch: Document
    plan: UndoPlan
    token: str
    reader: GraphReader
    writer: GraphWriter


async def _planned(
    engine: Engine,
    batch_id: str,
    cost: Cost,
    *,
    executions: Collection[str] | None,
    pause_copies: bool,
) -> _Planned:
    batch, records, followups = await load(engine, batch_id)
    undo_id = undo_batch_id(batch_id, select(records, executions) if executions else None)
    undone = await undone_executions(engine.executions, batch, other_than=undo_id)
    token = await engine.credentials.usable_token(token_ref(str(batch["account"])))
    reader, _batch, writer = engine.graph(cost)
    plan = await plan_undo(
        batch,
        records,
        followups,
        reader=reader,
        token=token,
        executions=executions,
        pause_copies=pause_copies,
        undone=undone,
    )
    return _Planned(batch, plan, token, reader, writer)


async def preview(
    engine: Engine,
    batch_id: str,
    *,
    executions: Collection[str] | None = None,
    pause_copies: bool = False,
    now: datetime,
) -> UndoPlan:
    """The plan, read with the engine's clients (the CLI's ``--dry-run``)."""
    del now  # the plan reads live values; the signature matches undo_batch's
    planned = await _planned(
        engine, batch_id, Cost(), executions=executions, pause_copies=pause_copies
    )
    return planned.plan


async def existing(
    engine: Engine, batch_id: str, executions: Collection[str] | None = None
) -> dict[str, Any] | None:
    """The finished undo of ``batch_id`` (of those ``executions``), if there is one."""
    chosen = None
    if executions:
        records = await engine.executions.for_batch(batch_id)
        chosen = select(records, executions)
    undo_id = undo_batch_id(batch_id, chosen)
    if await engine.batches.status(undo_id) != "DONE":
        return None
    return await result_of(engine, undo_id)


async def result_of(engine: Engine, undo_id: str) -> dict[str, Any]:
    """An undo batch's row and records, as the API and the CLI answer them (``complete``:
    no change it tried to set back was left undone)."""
    row = await engine.batches.get(undo_id)
    records = await engine.executions.for_batch(undo_id)
    return {
        "undo_batch_id": undo_id,
        "complete": row.get("not_reverted_count", 0) == 0,
        "batch": row,
        "changes": records,
    }


def undo_counts(records: Collection[Document]) -> dict[str, Any]:
    """The undo batch's own counts: changes set back, left alone, not set back; complete."""
    states = [state_of(r) for r in records]
    missed = states.count(NOT_REVERTED)
    return {
        "reverted_count": states.count(REVERTED),
        "left_alone_count": states.count(LEFT_ALONE),
        "not_reverted_count": missed,
        "complete": missed == 0,
    }


async def undo_batch(
    engine: Engine,
    batch_id: str,
    *,
    by: str,
    now: datetime,
    executions: Collection[str] | None = None,
    pause_copies: bool = False,
) -> dict[str, Any]:
    """Undo ``batch_id`` (see the module); answers the undo batch's row and records."""
    done = await existing(engine, batch_id, executions)
    if done is not None:
        return done | {"existing": True}
    started = time.perf_counter()
    cost = Cost()
    planned = await _planned(
        engine, batch_id, cost, executions=executions, pause_copies=pause_copies
    )
    batch, plan = planned.batch, planned.plan
    undo_id = plan.undo_batch_id
    run = await _run_of(engine, planned, now=now)
    start = _start_of(engine, batch, plan, now=now)
    await engine.batches.start(start, now=now, store_now=run.cooldown_now)
    await engine.batches.link_undo(batch_id, undo_id, by=by, now=now)
    results = await _revert_all(engine, run, planned.writer, plan)
    cancelled = await cancel_followups(engine, plan, undo_id, now=now)
    await keep(engine, batch, undo_id, results, by=by, now=now)
    rows = list((await engine.executions.by_key(undo_id)).values())
    # before the undo is DONE: a crash here leaves it to be run (and noted) again
    every = await undo_records(engine.executions, await engine.batches.get(batch_id))
    await engine.batches.note_not_undone(batch_id, not_undone_of(every))
    await engine.batches.finish(
        undo_id,
        status="DONE",
        now=now,
        progress={"done": len(plan.items), "total": len(plan.items)},
        **BatchCounts.of(rows).as_fields(),
        **undo_counts(rows),
        undoes=batch_id,
        by=by,
        pause_copies=pause_copies,
        cancelled_followups=cancelled,
        graph=cost.as_dict(),
        duration_s=round(time.perf_counter() - started, 6),
    )
    log.info("batch %s undone by %s (%s)", batch_id, undo_id, by)
    return await result_of(engine, undo_id)


def _start_of(engine: Engine, batch: Document, plan: UndoPlan, *, now: datetime) -> BatchStart:
    return BatchStart(
        batch_id=plan.undo_batch_id,
        rule_id=str(batch["rule_id"]),
        rule_name=str(batch.get("rule_name")),
        rule_version=int(batch["rule_version"]),
        account=str(batch["account"]),
        level=str(batch.get("level")),
        scheduled_at=now,
        total=len(plan.items),
        job_id=None,
        worker=engine.worker,
    )


async def _run_of(engine: Engine, planned: _Planned, *, now: datetime) -> JobRun:
    """The undo's run: the undone rule version (its level decides Meta's ad-set limit)."""
    batch, reader, token = planned.batch, planned.reader, planned.token
    account = str(batch["account"])
    version = await engine.rules.version(str(batch["rule_id"]), int(batch["rule_version"]))
    rule = Rule.model_validate({**version.definition, "status": "ACTIVE"})
    credentials = await engine.credentials.get(account)
    db_now = await engine.intents.db_time()
    return JobRun(
        batch_id=planned.plan.undo_batch_id,
        rule_id=str(batch["rule_id"]),
        rule_version=int(batch["rule_version"]),
        rule=rule,
        account=account,
        token=token,
        now=now,
        reader=reader,
        facts=AccountFacts(reader, account=credentials, token=token, now=db_now),
        db_now=db_now,
    )


async def _revert_all(
    engine: Engine, run: JobRun, writer: GraphWriter, plan: UndoPlan
) -> list[tuple[UndoItem, ActResult]]:
    """Each item set back through the write path, without the engine's guards; a rebalance
    group's raises only as far as its lowers freed (:class:`_Groups`)."""
    budgets = any(i.action == "revert" and i.field == "daily_budget" for i in plan.items)
    minimum = await run.facts.min_daily_budget() if budgets and run.facts is not None else None
    results: list[tuple[UndoItem, ActResult]] = []
    groups = _Groups()
    for item in sorted(plan.items, key=_raises_a_budget):  # lowered first: see below
        if item.action == "none":
            results.append((item, ActResult("skipped", item.reason, item.field)))
            continue
        held = groups.holds_back(item)
        if held is not None:
            results.append((item, held))
            continue
        entity = Entity(id=item.entity_id, name=item.entity_name or item.entity_id)
        target = revert_target(item, minimum=minimum)
        try:
            result = await engine.executor.apply(
                run, writer, entity, undo_key(item), target, guarded=False
            )
        except ACT_FAILURES as exc:
            result = failure_result(exc)
        groups.count(item, result)
        results.append((item, result))
    return results


#: Why an undo did not raise a rebalance member back: its group's lowers freed too little.
GROUP_TOTAL: Final = "would_raise_group_total"


class _Groups:
    """What each ``rebalance_budget`` group's lowers have freed so far in this undo, and what
    its raises may still take: an undo never leaves a group above its total before the undo.
    A lower that is not made — the budget changed by hand since, Meta's 4 changes an hour,
    the account's minimum, a failed read — frees nothing, so the raise it paid for is not
    made either (``would_raise_group_total``, not reverted); one made after a crash counts
    as found (``already_applied``)."""

    def __init__(self) -> None:
        self.freed: dict[str, int] = defaultdict(int)

    def holds_back(self, item: UndoItem) -> ActResult | None:
        """The result of a raise its group cannot pay for, or None when it may go."""
        if item.group is None or not _raises_a_budget(item):
            return None
        need, room = int(item.before) - int(item.after), self.freed[item.group]
        if need <= room:
            return None
        message = (
            f"setting it back would raise the group's total: its other budgets set back"
            f" freed {room} of the {need} it needs"
        )
        error = {"message": message, "freed": room, "needed": need}
        return ActResult(
            "skipped", GROUP_TOTAL, item.field, item.after, item.after, item.before, error=error
        )

    def count(self, item: UndoItem, result: ActResult) -> None:
        """Add what a lower freed, take what a raise took."""
        if item.group is None or not result.fired:
            return
        before, after = result.before, result.after
        if isinstance(before, int) and isinstance(after, int):
            self.freed[item.group] += before - after


def _raises_a_budget(item: UndoItem) -> bool:
    """True for a revert that raises a daily budget: those go after the ones that lower one,
    so that undoing a ``rebalance_budget`` never holds its group above its total meanwhile."""
    if item.field != "daily_budget" or item.action != "revert":
        return False
    return isinstance(item.before, int) and isinstance(item.after, int) and item.before > item.after


async def cancel_followups(
    engine: Engine, plan: UndoPlan, undo_id: str, *, now: datetime
) -> list[str]:
    """Cancel the plan's follow-ups that still wait; the keys of those cancelled (or already
    cancelled by an earlier attempt of this undo)."""
    store = engine.followups.store
    cancelled: list[str] = []
    for row in plan.followups:
        current = await store.get(str(row["key"]))
        if current is None:
            continue
        if current.status in WAITING:
            await store.mark(current, "skipped", reason=CANCELLED, now=now)
            current = await store.get(current.id) or current
        if _cancelled(current):
            cancelled.append(current.id)
    return cancelled


def _cancelled(doc: FollowupDoc) -> bool:
    return doc.status == "skipped" and doc.reason == CANCELLED


async def keep(
    engine: Engine,
    batch: Document,
    undo_id: str,
    results: list[tuple[UndoItem, ActResult]],
    *,
    by: str,
    now: datetime,
) -> None:
    """The undo's execution records, merged with what an earlier attempt recorded."""

    earlier = await engine.executions.by_key(undo_id)
    docs = [_record(batch, undo_id, item, result, by=by, now=now) for item, result in results]
    merged = [
        _merged(earlier.get(d["key"]), d, merge_record(earlier.get(d["key"]), d)) for d in docs
    ]
    await engine.executions.upsert_many([d for d in merged if d is not earlier.get(d["key"])])


def _merged(earlier: Document | None, doc: dict[str, Any], merged: Document) -> Document:
    """``merged``, and when it is a record the reaper recovered from an intent (the undo's
    process died before keeping its records), what only the undo knows added to it: which
    execution it undoes, who asked, what became of the change."""
    if earlier is None or merged is not earlier or "undoes_execution" in earlier:
        return merged
    return doc | {k: v for k, v in earlier.items() if k != "_id"}


def _record(
    batch: Document, undo_id: str, item: UndoItem, result: ActResult, *, by: str, now: datetime
) -> dict[str, Any]:
    task = f"{UNDO_PREFIX}{item.task_id}"
    acted = item.action != "none"
    return {
        "key": record_key(undo_id, task, item.entity_id),
        "batch_id": undo_id,
        "kind": "undo",
        "undoes": item.record_key,
        "undoes_execution": item.execution_id,
        "by": by,
        "rule_id": batch.get("rule_id"),
        "rule_name": batch.get("rule_name"),
        "rule_version": batch.get("rule_version"),
        "account": batch.get("account"),
        "level": batch.get("level"),
        "task_id": task,
        "entity_id": item.entity_id,
        "entity_name": item.entity_name,
        "outcome": result.outcome,
        "revert": revert_state(item.action, result.outcome, result.reason),
        "executed": result.outcome == "applied",
        "reason": result.reason,
        "action": {"type": item.action if acted else "none"},
        "field": result.field or item.field,
        "before": result.before if acted else item.before,
        "after": result.after if acted else item.after,
        "live": item.live,
        "planned": {"before": item.after, "after": item.before},
        "requested": result.requested,
        "clamped_by": result.clamped_by,
        "schedule": result.schedule or item.schedule,
        "error": result.error,
        "response": result.response,
        "passed": True,
        "conditions": [],
        "created_at": now,
    }
