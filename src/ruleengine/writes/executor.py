"""The write path: one change of status, budget, bid or name on one entity, safe to repeat.

Per ad account, writes are sequential across all workers: a fenced, renewed
Redis lock (:mod:`ruleengine.writes.lock`) is held around the write only (never around
fetches, never while waiting out a rate limit). Inside it the action checks the
task's cooldown and ``execution_count_limit`` again (another run of the rule may have
fired since the job's cooldown stage), re-reads the live value, plans the absolute
target (clamped), records an *intent* keyed by batch + task + entity, checks that the
lock and its fence are still its own, writes through the instrumented writer, and
marks the intent done with Meta's answer (compare-and-set). Intents are recorded and
moved under the lock's fence: a worker another has taken the account over from
records nothing more (a write it had sent is ``write_unconfirmed``, left pending for
the reaper). A redelivered job finds the done intent
and writes nothing (``already_applied``); a pending intent of its own batch is
reconciled against the live value before anything is written. A pending intent
of *another* batch on the same field blocks the write until its owner is
provably gone (then it is settled from the live value first, :mod:`ruleengine.writes.settling`),
so two changes computed from the same live value can never both land.

Copies and messages have their own modules (:mod:`ruleengine.writes.copies`,
:mod:`ruleengine.writes.notify`); follow-ups reuse :meth:`ActionExecutor.apply`
(:mod:`ruleengine.followups.running`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ruleengine.acting.rebalance import Pair
from ruleengine.acting.results import (
    ACT_FAILURES,
    ActKey,
    ActResult,
    FreshPair,
    JobRun,
    Target,
    applied,
    failure_result,
    fired_elsewhere,
    give_up_unsent,
    intent_doc,
    not_applied,
    pending_plan,
    read_live,
    reconcile,
    settled,
    target_of,
    unanswered,
    unchanged,
    with_task_guards,
)
from ruleengine.guards.cross_rule import CrossRuleGuards, GuardRound, intent_fields
from ruleengine.meta.errors import GraphError, RateLimitError
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.writer import GraphWriter, WriteContext
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import TaskVerdict
from ruleengine.rules.language.action_types import (
    DuplicateAction,
    NotifyAction,
    RebalanceBudgetAction,
)
from ruleengine.rules.language.model import Task
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import SPEND_LIMIT_FIELDS, live_value
from ruleengine.settings import Settings
from ruleengine.store.intents import WRITE_UNCONFIRMED, Intent, IntentStore
from ruleengine.writes.batched import BatchedWrites, FieldChange
from ruleengine.writes.copies import duplicate
from ruleengine.writes.lock import AccountLocks, Fenced, HeldLock, LockLost
from ruleengine.writes.meta_limits import budget_check, budget_history, counts_toward_limit, refuse
from ruleengine.writes.notify import Message, Notifier, send_many, task_message
from ruleengine.writes.rebalance import Rebalancer
from ruleengine.writes.settling import IntentSettler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Step:
    """One locked write step: the run, the writer, what to read and how to plan the target."""

    run: JobRun
    writer: GraphWriter
    entity: Entity
    key: ActKey
    target: Target
    reader: GraphReader  # reads without rate-limit waits (those happen outside the lock)
    guarded: bool = True  # False: the cross-rule guards do not apply (an undo)


def writes_a_field(task: Task) -> bool:
    """True for a status, budget or name action (a copy or a message is not a field write)."""
    return not isinstance(task.action, NotifyAction | DuplicateAction)


async def write_plan(writer: GraphWriter, run: JobRun, entity: Entity, plan: Plan) -> Any:
    """Write a plan through the instrumented writer: its field's absolute value, or the budget
    schedule it makes (or deletes)."""
    if plan.schedule is None:
        return await write_field(writer, run, entity, plan.field, plan.after)
    ctx = WriteContext(run.account, entity.id, run.rule_id, run.batch_id)
    return await writer.write_schedule(plan.schedule, token=run.token, ctx=ctx)


async def write_field(
    writer: GraphWriter, run: JobRun, entity: Entity, field: str, value: Any
) -> Any:
    """Write one absolute value through the instrumented writer."""
    ctx = WriteContext(run.account, entity.id, run.rule_id, run.batch_id)
    if field == "status":
        return await writer.set_status(str(value), token=run.token, ctx=ctx)
    if field == "daily_budget":
        return await writer.set_budget("daily_budget", int(value), token=run.token, ctx=ctx)
    if field == "name":
        return await writer.set_name(str(value), token=run.token, ctx=ctx)
    if field == "bid_amount":
        return await writer.set_bid(int(value), token=run.token, ctx=ctx)
    if field in SPEND_LIMIT_FIELDS:
        return await writer.set_spend_limit(field, int(value), token=run.token, ctx=ctx)
    raise ValueError(f"no writer for the field {field}")


class ActionExecutor:
    """Carries out task actions for one worker process."""

    def __init__(
        self,
        settings: Settings,
        *,
        intents: IntentStore,
        settler: IntentSettler,
        locks: AccountLocks,
        notifier: Notifier,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        guards: CrossRuleGuards | None = None,
    ) -> None:
        self.settings = settings
        self.intents = intents
        self.guards = guards  # the change budget and oscillation holds (None: none)
        self.settler = settler
        self.locks = locks
        self.notifier = notifier
        self.sleep = sleep
        self.batched = BatchedWrites(self)
        self.rebalancer = Rebalancer(self.batched)

    async def act_many(
        self,
        run: JobRun,
        writer: GraphWriter,
        pairs: Sequence[tuple[Entity, Task]],
        verdicts: Sequence[TaskVerdict | None] | None = None,
    ) -> list[ActResult]:
        """Carry out many status, budget, bid and name actions of one job at once, in Batch
        API calls (:mod:`ruleengine.writes.batched`); each pair's result, in order.
        ``verdicts`` (in the same order) carry what ``scale_to_target`` scales by and what
        ``rebalance_budget`` ranks by (:mod:`ruleengine.writes.rebalance`: a task's group at
        once)."""
        results: dict[int, ActResult] = {}
        changes: dict[int, FieldChange] = {}
        rebalanced: list[Pair] = []
        for index, (entity, task) in enumerate(pairs):
            verdict = verdicts[index] if verdicts is not None else None
            if isinstance(task.action, RebalanceBudgetAction):
                rebalanced.append(Pair(index, entity, task, verdict))
                continue
            try:
                target = await target_of(
                    task.action,
                    run,
                    max_change_pct=self.settings.max_budget_change_pct,
                    verdict=verdict,
                )
                target = with_task_guards(target, task, run)
            except ACT_FAILURES as exc:
                results[index] = failure_result(exc)
                continue
            changes[index] = FieldChange(entity, ActKey.of(task), target)
        applied = await self.batched.apply(run, writer, list(changes.values()))
        results |= dict(zip(changes, applied, strict=True))
        if rebalanced:
            results |= await self.rebalancer.apply(run, writer, rebalanced)
        return [results[i] for i in range(len(pairs))]

    async def notify_many(
        self, run: JobRun, pairs: Sequence[tuple[Entity, Task, TaskVerdict | None]]
    ) -> list[ActResult]:
        """Send the ``notify`` messages of one job, a chunk at a time
        (:func:`~ruleengine.writes.notify.send_many`); each pair's result, in order."""
        messages = []
        for entity, task, verdict in pairs:
            action = task.action
            assert isinstance(action, NotifyAction)
            messages.append(
                Message(
                    entity,
                    ActKey.of(task),
                    action.webhook,
                    task_message(run, entity, task, action.template, verdict=verdict),
                    {"batch_id": run.batch_id, "entity_id": entity.id},
                )
            )
        try:
            return await send_many(self.notifier, self.intents, run, messages)
        except ACT_FAILURES as exc:
            return [failure_result(exc) for _ in messages]

    async def act(
        self, run: JobRun, writer: GraphWriter, entity: Entity, task: Task, verdict: TaskVerdict
    ) -> ActResult:
        """Carry out ``task.action`` on ``entity`` (its conditions passed)."""
        action = task.action
        if isinstance(action, RebalanceBudgetAction):  # a group of one
            return (await self.rebalancer.apply(run, writer, [Pair(0, entity, task, verdict)]))[0]
        try:
            if isinstance(action, NotifyAction):
                return (await self.notify_many(run, [(entity, task, verdict)]))[0]
            if isinstance(action, DuplicateAction):
                return await duplicate(
                    run,
                    writer,
                    entity,
                    task,
                    action,
                    intents=self.intents,
                    locks=self.locks,
                    settler=self.settler,
                )
            target = await target_of(
                action, run, max_change_pct=self.settings.max_budget_change_pct, verdict=verdict
            )
            target = with_task_guards(target, task, run)
            return await self.apply(run, writer, entity, ActKey.of(task), target)
        except ACT_FAILURES as exc:
            return failure_result(exc)

    async def apply(
        self,
        run: JobRun,
        writer: GraphWriter,
        entity: Entity,
        key: ActKey,
        target: Target,
        *,
        guarded: bool = True,
    ) -> ActResult:
        """Change ``target.field`` of ``entity`` once for (batch, key), under the account lock.

        ``guarded`` False (an undo putting back a recorded value): the cross-rule guards —
        the change budget, oscillation holds and detection — do not apply; Meta's limits
        (:func:`~ruleengine.writes.meta_limits.budget_check`) and the intent protocol do.
        Raises what stops it before a write could be tried (the lock, Redis, reading
        the live value); see :func:`~ruleengine.acting.results.failure_result`.
        """
        if counts_toward_limit(run, target.field) and run.facts is not None:
            # the activity log is read once per job, here: never under the lock
            await run.facts.budget_events()
        # Inside the lock a rate limit is not waited out: the lock is released, the wait
        # happens outside it, and the whole locked section starts again from the live read.
        reader = run.reader.with_reads(run.reader.reads.without_rate_limit_waits())
        step = _Step(run, writer, entity, key, target, reader, guarded)
        for attempt in itertools.count(1):
            try:
                async with self.locks.hold(run.account) as lock:
                    return await self._apply_locked(step, lock)
            except RateLimitError as exc:
                wait = run.reader.reads.rate_limit_wait(exc, attempt=attempt)
                if wait is None:
                    raise
                log.info(
                    "rate limited reading %s; retrying in %.1fs outside the lock", entity.id, wait
                )
                await self.sleep(wait)
        raise AssertionError("unreachable")

    async def _apply_locked(self, step: _Step, lock: HeldLock) -> ActResult:
        run, entity, key, field_name = step.run, step.entity, step.key, step.target.field
        intents = self.intents.under(lock.fence)  # recorded and settled under the lock's fence
        intent = await intents.get(run.batch_id, key.task_id, entity.id)
        if intent is not None and intent.status != "pending":
            return settled(intent)
        if intent is None:
            fresh = {0: FreshPair(key, entity.id, field_name)}
            if skipped := await fired_elsewhere(intents, run, fresh):
                return skipped[0]
        live = await read_live(step.reader, run, entity, step.target.reads)
        if intent is not None:  # a crash left it pending: look before writing again
            return await self._reconcile(intent, live_value(live, field_name), step, lock)
        others = await intents.pending_elsewhere([entity.id], other_than=run.batch_id)
        value = live_value(live, field_name)
        blocked = await self.settler.under(lock.fence).blocking(
            run, field_name, value, [d for d in others if d["field"] == field_name]
        )
        if blocked is not None:
            return blocked
        plan = step.target.planner(live)
        if isinstance(plan, ActResult):
            return plan
        if not plan.changes:
            return unchanged(plan)
        guards = self.guards if step.guarded else None
        guard = None if guards is None else await guards.look(run, [entity.id])
        checked = plan if guard is None else guard.check(entity, plan)
        if isinstance(checked, ActResult):
            return checked
        plan = checked
        history = await budget_history(intents, run, [(entity, plan.field)])
        refused = await budget_check(history, run, entity, plan)
        if refused is not None:
            return refused
        intent = await intents.begin(
            intent_doc(run, entity, key, plan) | intent_fields(key), now=run.store_now()
        )
        if not intent.created:
            return settled(intent)
        return await self._write(intent, plan, step, lock, guard)

    async def _write(
        self,
        intent: Intent,
        plan: Plan,
        step: _Step,
        lock: HeldLock,
        guard: GuardRound | None = None,
    ) -> ActResult:
        intents = self.intents.under(lock.fence)
        try:
            await lock.check()
        except LockLost as exc:  # nothing was sent: the intent did not happen
            await give_up_unsent(intents, [intent.id], "lock_lost", now=step.run.store_now())
            return not_applied(plan, "failed", "lock_lost", {"message": str(exc)})
        try:
            return await self._send(intents, intent, plan, step, guard)
        except Fenced as exc:  # sent, but the account is a newer holder's: the reaper settles it
            log.warning("intent %s fenced out after its write: %s", intent.id, exc)
            # flagged: a settler that dies between the intent and this record leaves it to repair
            await self.intents.flag_unconfirmed([intent.id])
            return not_applied(plan, "failed", WRITE_UNCONFIRMED, {"message": str(exc)})

    async def _send(
        self,
        intents: IntentStore,
        intent: Intent,
        plan: Plan,
        step: _Step,
        guard: GuardRound | None,
    ) -> ActResult:
        """Write, and settle the intent from Meta's answer (under the lock's fence)."""
        run = step.run
        try:
            response = await write_plan(step.writer, run, step.entity, plan)
        except GraphError as exc:
            if not unanswered(exc):
                return await refuse(intents, intent, plan, run, exc, now=run.store_now())
            # No answer (timeout, broken connection, a 5xx without Meta's error body): the
            # write may still land. The intent stays pending — its cooldown in force, the
            # field blocked for other runs — until it is settled from the live value.
            await intents.unconfirmed(intent.id, error=exc.as_dict())
            return not_applied(plan, "failed", WRITE_UNCONFIRMED, exc.as_dict())
        if not await intents.resolve(
            intent.id, status="done", now=run.store_now(), response=response, changed=True
        ):
            log.error(
                "intent %s was settled by someone else while its write was in flight", intent.id
            )
        result = applied(plan, response)
        if guard is not None:
            result.oscillation = await guard.landed(step.entity, step.key, plan)
        return result

    async def _reconcile(self, intent: Intent, live: Any, step: _Step, lock: HeldLock) -> ActResult:
        settler = self.settler.under(lock.fence)
        result = await settler.settle_own(intent, live, now=step.run.store_now())
        if result is not None:
            return result
        return await self._write(intent, pending_plan(intent), step, lock)


__all__ = [
    "ActionExecutor",
    "reconcile",
    "unanswered",
    "write_field",
    "write_plan",
    "writes_a_field",
]
