"""The write path: one action on one entity, safe to repeat.

Per ad account, writes are sequential across all workers: a fenced, renewed
Redis lock (:mod:`ruleengine.locks`) is held around the write only (never around
fetches, never while waiting out a rate limit). Inside it the action checks the
task's cooldown again (another run of the rule may have fired since the job's
cooldown stage), re-reads the live value, plans the absolute target (clamped),
records an *intent* keyed by batch + task + entity, checks that the lock is
still its own, writes through the instrumented writer, and marks the intent done
with Meta's answer (compare-and-set). A redelivered job finds the done intent
and writes nothing (``already_applied``); a pending intent of its own batch is
reconciled against the live value before anything is written. A pending intent
of *another* batch on the same field blocks the write until its owner is
provably gone (then it is settled from the live value first), so two changes
computed from the same live value can never both land.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.followups import FollowupDoc
from ruleengine.locks import AccountLocks, HeldLock, LockLost, LockTimeout
from ruleengine.meta.errors import (
    GraphError,
    MalformedResponseError,
    RateLimitError,
    TransientError,
)
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.writer import GraphWriter, WriteContext
from ruleengine.notify import MessageContext, Notifier, NotifyError, describe_conditions, render
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import TaskVerdict
from ruleengine.rules.model import (
    DuplicateAction,
    NameTextAction,
    NotifyAction,
    PercentBudgetAction,
    RenameAction,
    Rule,
    SetBudgetAction,
    StatusAction,
    Task,
)
from ruleengine.rules.plan import Plan, plan_budget, plan_name, plan_status
from ruleengine.settings import Settings
from ruleengine.store.intents import Intent, IntentStatus, IntentStore, hour_ago
from ruleengine.store.records import BatchStore

log = logging.getLogger(__name__)

Outcome = Literal["applied", "no_change", "skipped", "failed", "would_apply"]
Clock = Callable[[], datetime]
# Effects that cannot be read back from Meta afterwards: a pending one is never retried.
UNVERIFIABLE = frozenset({"copies", "notify"})


def utcnow() -> datetime:
    """The current time, aware UTC."""
    return datetime.now(UTC)


@dataclass
class ActResult:
    """What an action did (or why not), for the execution record."""

    outcome: Outcome
    reason: str | None = None
    field: str | None = None
    before: Any = None
    after: Any = None
    requested: Any = None
    clamped_by: list[str] = dataclasses.field(default_factory=list)
    error: dict[str, Any] | None = None
    response: Any = None
    until: datetime | None = None  # a cooldown found in force under the lock: until when

    @property
    def fired(self) -> bool:
        """True when the action's effect is in place (now or by an earlier delivery)."""
        return self.outcome == "applied" or self.reason == "already_applied"


@dataclass(frozen=True)
class JobRun:
    """The per-job context actions need."""

    batch_id: str
    rule_id: str
    rule_version: int
    rule: Rule
    account: str
    token: str
    now: datetime
    reader: GraphReader
    writer: GraphWriter | None  # None in a dry run (preview)

    @property
    def dry_run(self) -> bool:
        """True when nothing may be written anywhere."""
        return self.writer is None

    def write_context(self, entity_id: str) -> WriteContext:
        """Who is writing, for the writer's logs and error reports."""
        return WriteContext(self.account, entity_id, self.rule_id, self.batch_id)


@dataclass(frozen=True)
class ActKey:
    """What an intent is recorded under: the task (or follow-up) and its action."""

    task_id: str
    action_type: str
    cooldown_minutes: int = 0

    @classmethod
    def of(cls, task: Task) -> ActKey:
        """The key of a task's own action."""
        return cls(task.id, task.action.type, task.cooldown_minutes)


Planner = Callable[[dict[str, Any]], "Plan | ActResult"]
Writer = Callable[[Plan], Awaitable[Any]]


@dataclass(frozen=True)
class _Step:
    """One locked write step: what to read, how to plan the target and how to write it."""

    run: JobRun
    entity: Entity
    key: ActKey
    field_name: str
    fields: list[str]
    planner: Planner
    writer: Writer
    reader: GraphReader  # reads without rate-limit waits (those happen outside the lock)


def _budget_guard(level: str, live: dict[str, Any]) -> ActResult | None:
    if live.get("daily_budget") not in (None, "", "0", 0):
        return None
    if level == "campaign" and live.get("lifetime_budget") in (None, "", "0", 0):
        return ActResult("skipped", "no_campaign_budget", field="daily_budget")
    return ActResult("skipped", "no_daily_budget", field="daily_budget")


def reconcile(intent: Intent, live: Any) -> Literal["done", "write", "changed"]:
    """What to do with a pending intent given the live value.

    ``done``: the earlier write landed. ``write``: it did not (live is still the
    value before). ``changed``: someone else changed the value meanwhile.
    """
    if live == intent.target:
        return "done"
    if live == intent.before:
        return "write"
    return "changed"


class IntentSettler:
    """Settles pending intents whose owner is gone, from the live value Meta holds now."""

    def __init__(
        self,
        intents: IntentStore,
        batches: BatchStore,
        *,
        orphan_after_s: float,
        clock: Clock = utcnow,
    ) -> None:
        self.intents = intents
        self.batches = batches
        self.orphan_after_s = orphan_after_s
        self.clock = clock

    async def owner_gone(self, intent: dict[str, Any]) -> bool:
        """True when the job that recorded ``intent`` can no longer be writing.

        Its job started longer ago than a job may run plus a lock's lifetime, or
        the reaper marked its batch ABANDONED.
        """
        cutoff = self.clock() - timedelta(seconds=self.orphan_after_s)
        if intent["created_at"] < cutoff:
            return True
        return await self.batches.status(intent["batch_id"]) == "ABANDONED"

    async def settle(
        self, intent: dict[str, Any], live: Any, *, now: datetime
    ) -> IntentStatus | None:
        """``done`` when ``live`` is the target, else ``failed``; None if someone settled it first.

        Copies and messages cannot be read back: a pending one is ``failed`` as
        ``unverifiable`` and never sent again.
        """
        if intent["field"] in UNVERIFIABLE:
            status: IntentStatus = "failed"
            fields: dict[str, Any] = {"reason": "unverifiable"}
        elif live == intent["target"]:
            status, fields = "done", {"changed": True, "reconciled": True}
        else:
            status, fields = "failed", {"reason": "not_applied", "live": live}
        settled = await self.intents.resolve(intent["_id"], status=status, now=now, **fields)
        return status if settled else None


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
    ) -> None:
        self.settings = settings
        self.intents = intents
        self.settler = settler
        self.locks = locks
        self.notifier = notifier
        self.sleep = sleep

    async def act(self, run: JobRun, entity: Entity, task: Task, verdict: TaskVerdict) -> ActResult:
        """Carry out ``task.action`` on ``entity`` (its conditions passed)."""
        action = task.action
        try:
            if isinstance(action, NotifyAction):
                return await self._notify(run, entity, task, action, verdict)
            if isinstance(action, DuplicateAction):
                return await self._duplicate(run, entity, task, action)
            field_name, fields, planner, writer = self._parts(run, entity, action)
            return await self._apply(
                run, entity, ActKey.of(task), field_name, fields, planner, writer
            )
        except LockTimeout as exc:
            return ActResult("failed", "account_lock_timeout", error={"message": str(exc)})
        except LockLost as exc:
            return ActResult("failed", "lock_lost", error={"message": str(exc)})
        except RedisError as exc:
            return ActResult("failed", "lock_unavailable", error={"message": str(exc)})
        except GraphError as exc:  # reading the live value failed
            return ActResult("failed", "live_read_failed", error=exc.as_dict())

    def _parts(
        self, run: JobRun, entity: Entity, action: Any
    ) -> tuple[str, list[str], Planner, Writer]:
        ctx = run.write_context(entity.id)
        writer = run.writer
        if isinstance(action, StatusAction):

            def status_plan(live: dict[str, Any]) -> Plan | ActResult:
                return plan_status(action, live=str(live.get("status")))

            async def status_write(plan: Plan) -> Any:
                assert writer is not None
                return await writer.set_status(str(plan.after), token=run.token, ctx=ctx)

            return "status", ["status"], status_plan, status_write
        if isinstance(action, PercentBudgetAction | SetBudgetAction):
            return (
                "daily_budget",
                ["daily_budget", "lifetime_budget"],
                self._budget_planner(run, entity, action),
                self._budget_writer(run, ctx),
            )
        if isinstance(action, RenameAction | NameTextAction):

            def name_plan(live: dict[str, Any]) -> Plan | ActResult:
                today = run.now.astimezone(run.rule.zone()).date()
                return plan_name(
                    action, live=str(live.get("name", "")), rule_name=run.rule.name, today=today
                )

            async def name_write(plan: Plan) -> Any:
                assert writer is not None
                return await writer.set_name(str(plan.after), token=run.token, ctx=ctx)

            return "name", ["name"], name_plan, name_write
        raise ValueError(f"no write path for action type {action.type}")

    def _budget_planner(
        self, run: JobRun, entity: Entity, action: PercentBudgetAction | SetBudgetAction
    ) -> Planner:
        def budget_plan(live: dict[str, Any]) -> Plan | ActResult:
            guard = _budget_guard(run.rule.level, live)
            if guard is not None:
                return guard
            return plan_budget(
                action,
                live=int(live["daily_budget"]),
                max_change_pct=self.settings.max_budget_change_pct,
            )

        return budget_plan

    @staticmethod
    def _budget_writer(run: JobRun, ctx: WriteContext) -> Writer:
        async def budget_write(plan: Plan) -> Any:
            assert run.writer is not None
            return await run.writer.set_budget(
                "daily_budget", int(plan.after), token=run.token, ctx=ctx
            )

        return budget_write

    @staticmethod
    async def _read_live(
        reader: GraphReader, run: JobRun, entity: Entity, fields: list[str]
    ) -> dict[str, Any]:
        return await reader.get_object(
            entity.id, token=run.token, fields=["id", *fields], account_id=run.account
        )

    async def _apply(
        self,
        run: JobRun,
        entity: Entity,
        key: ActKey,
        field_name: str,
        fields: list[str],
        planner: Planner,
        writer: Writer,
    ) -> ActResult:
        if run.dry_run:
            live = await self._read_live(run.reader, run, entity, fields)
            return self._preview(planner(live), field_name)
        # Inside the lock a rate limit is not waited out: the lock is released, the wait
        # happens outside it, and the whole locked section starts again from the live read.
        reader = run.reader.with_reads(run.reader.reads.without_rate_limit_waits())
        step = _Step(run, entity, key, field_name, fields, planner, writer, reader)
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
        run, entity, key, field_name = step.run, step.entity, step.key, step.field_name
        intent = await self.intents.get(run.batch_id, key.task_id, entity.id)
        if intent is not None and intent.status != "pending":
            return _settled(intent)
        if intent is None and (until := await self._cooling(run, entity, key)) is not None:
            return ActResult("skipped", "next_execute_not_reached", field=field_name, until=until)
        live = await self._read_live(step.reader, run, entity, step.fields)
        if intent is not None:  # a crash left it pending: look before writing again
            return await self._reconcile(intent, live_value(live, field_name), step, lock)
        blocked = await self._settle_others(run, entity, field_name, live)
        if blocked is not None:
            return blocked
        plan = step.planner(live)
        if isinstance(plan, ActResult):
            return plan
        if not plan.changes:
            return _unchanged(plan)
        if await self._budget_limit_reached(run, entity, field_name):
            return ActResult(
                "skipped", "meta_budget_change_limit", field=field_name, before=plan.before
            )
        doc = self._intent_doc(run, entity, key, plan) | {"lock_fence": lock.fence}
        intent = await self.intents.begin(doc, now=run.now)
        if not intent.created:
            return _settled(intent)
        return await self._write(intent, plan, step, lock)

    async def _cooling(self, run: JobRun, entity: Entity, key: ActKey) -> datetime | None:
        """Until when another run of the rule keeps this (task, entity) cooling down, if it does.

        The job's cooldown stage looked before its fetches; a run of the same rule that
        overlaps this one (a job longer than the interval, a backlog) may have recorded
        its intent since. Looking again under the account's write lock, where every
        intent of the account is recorded, closes that gap.
        """
        if key.cooldown_minutes <= 0:
            return None
        pair = (key.task_id, entity.id)
        active = await self.intents.cooling(
            run.rule_id,
            [pair],
            now=run.now,
            longest_minutes=key.cooldown_minutes,
            other_than=run.batch_id,
        )
        return active.get(pair)

    async def _settle_others(
        self, run: JobRun, entity: Entity, field_name: str, live: dict[str, Any]
    ) -> ActResult | None:
        """Pending intents of other batches on this field: settle them, or do not write.

        A pending intent seen under the lock belongs to a job that no longer holds
        it. Until that job is provably gone its write may still land, so writing
        now could lose one of the two changes: skip, and let a later run decide.
        """
        value = live_value(live, field_name)
        settled: list[IntentStatus | None] = []
        for doc in await self.intents.pending_elsewhere(
            entity.id, field_name, other_than=run.batch_id
        ):
            if not await self.settler.owner_gone(doc):
                message = f"batch {doc['batch_id']} has a write on {field_name} not yet settled"
                return ActResult(
                    "skipped",
                    "write_pending_elsewhere",
                    field_name,
                    value,
                    value,
                    error={"message": message},
                )
            settled.append(await self.settler.settle(doc, value, now=run.now))
        if "done" in settled:
            return ActResult("skipped", "previous_write_reconciled", field_name, value, value)
        return None

    async def _budget_limit_reached(self, run: JobRun, entity: Entity, field_name: str) -> bool:
        if run.rule.level != "adset" or field_name != "daily_budget":
            return False
        since = hour_ago(run.now)
        changes = await self.intents.budget_changes_since(entity.id, since=since)
        return changes >= c.ADSET_BUDGET_CHANGES_PER_HOUR

    @staticmethod
    def _intent_doc(run: JobRun, entity: Entity, key: ActKey, plan: Plan) -> dict[str, Any]:
        return {
            "batch_id": run.batch_id,
            "task_id": key.task_id,
            "entity_id": entity.id,
            "entity_name": entity.name,
            "rule_id": run.rule_id,
            "rule_version": run.rule_version,
            "account": run.account,
            "action": key.action_type,
            "field": plan.field,
            "before": plan.before,
            "target": plan.after,
            "requested": plan.requested,
            "clamped_by": plan.clamped_by,
            "cooldown_minutes": key.cooldown_minutes,
        }

    async def _write(self, intent: Intent, plan: Plan, step: _Step, lock: HeldLock) -> ActResult:
        run = step.run
        try:
            await lock.check()
        except LockLost as exc:  # nothing was sent: the intent did not happen
            await self.intents.resolve(intent.id, status="failed", now=run.now, reason="lock_lost")
            return ActResult(
                "failed",
                "lock_lost",
                plan.field,
                plan.before,
                plan.before,
                error={"message": str(exc)},
            )
        try:
            response = await step.writer(plan)
        except GraphError as exc:
            if unanswered(exc):
                # No answer (timeout, broken connection, a 5xx without Meta's error body): the
                # write may still land. The intent stays pending — its cooldown in force, the
                # field blocked for other runs — until the reaper settles it from the live value.
                await self.intents.note(intent.id, error=exc.as_dict())
                reason = "write_unconfirmed"
            else:
                await self.intents.resolve(
                    intent.id, status="failed", now=run.now, error=exc.as_dict()
                )
                reason = "meta_budget_change_limit" if _is_budget_limit(exc) else "write_failed"
            return ActResult(
                "failed",
                reason,
                plan.field,
                plan.before,
                plan.before,
                plan.requested,
                plan.clamped_by,
                exc.as_dict(),
            )
        if not await self.intents.resolve(
            intent.id, status="done", now=run.now, response=response, changed=True
        ):
            log.error(
                "intent %s was settled by someone else while its write was in flight", intent.id
            )
        return ActResult(
            "applied",
            None,
            plan.field,
            plan.before,
            plan.after,
            plan.requested,
            plan.clamped_by,
            None,
            response,
        )

    async def _reconcile(self, intent: Intent, live: Any, step: _Step, lock: HeldLock) -> ActResult:
        run = step.run
        verdict = reconcile(intent, live)
        log.info(
            "reconciling pending intent %s (batch %s): %s", intent.id, intent.batch_id, verdict
        )
        if verdict == "done":
            await self.intents.resolve(
                intent.id, status="done", now=run.now, changed=True, reconciled=True
            )
            return ActResult(
                "no_change", "already_applied", intent.field, intent.before, intent.target
            )
        if verdict == "write":
            plan = Plan(intent.field, intent.before, intent.target)
            return await self._write(intent, plan, step, lock)
        await self.intents.resolve(
            intent.id, status="failed", now=run.now, reason="changed_by_someone_else"
        )
        return ActResult("skipped", "changed_by_someone_else", intent.field, live, live)

    @staticmethod
    def _preview(plan: Plan | ActResult, field_name: str) -> ActResult:
        if isinstance(plan, ActResult):
            return plan
        if not plan.changes:
            return _unchanged(plan)
        return ActResult(
            "would_apply",
            None,
            field_name,
            plan.before,
            plan.after,
            plan.requested,
            plan.clamped_by,
        )

    # ---------------------------------------------------------------- copies and messages

    async def _once(
        self, run: JobRun, entity: Entity, key: ActKey, field_name: str, before: Any, target: Any
    ) -> Intent | ActResult:
        """An intent for an effect that cannot be verified afterwards (copies, messages)."""
        intent = await self.intents.get(run.batch_id, key.task_id, entity.id)
        if intent is not None and intent.status == "pending":
            # Did the copy/message go out before the crash? It cannot be checked: never risk twice.
            await self.intents.resolve(
                intent.id, status="failed", now=run.now, reason="unverifiable"
            )
            return ActResult("skipped", "pending_intent_unverifiable", field=field_name)
        if intent is not None:
            return _settled(intent)
        plan = Plan(field_name, before, target)
        intent = await self.intents.begin(self._intent_doc(run, entity, key, plan), now=run.now)
        return intent if intent.created else _settled(intent)

    async def _duplicate(
        self, run: JobRun, entity: Entity, task: Task, action: DuplicateAction
    ) -> ActResult:
        if run.dry_run or run.writer is None:
            return ActResult("would_apply", None, "copies", entity.name, f"copy of {entity.id}")
        async with self.locks.hold(run.account) as lock:
            intent = await self._once(run, entity, ActKey.of(task), "copies", entity.name, None)
            if isinstance(intent, ActResult):
                return intent
            try:
                await lock.check()
            except LockLost as exc:
                await self.intents.resolve(
                    intent.id, status="failed", now=run.now, reason="lock_lost"
                )
                return ActResult("failed", "lock_lost", "copies", error={"message": str(exc)})
            try:
                copied = await run.writer.copy(
                    status_option=action.status_option,
                    rename_suffix=action.rename_suffix,
                    deep_copy=action.deep_copy,
                    token=run.token,
                    ctx=run.write_context(entity.id),
                )
            except GraphError as exc:
                await self.intents.resolve(
                    intent.id, status="failed", now=run.now, error=exc.as_dict()
                )
                return ActResult(
                    "failed", "write_failed", "copies", entity.id, None, error=exc.as_dict()
                )
            await self.intents.resolve(
                intent.id, status="done", now=run.now, response={"copied_id": copied}
            )
            return ActResult(
                "applied", None, "copies", entity.id, copied, response={"copied_id": copied}
            )

    async def _notify(
        self, run: JobRun, entity: Entity, task: Task, action: NotifyAction, verdict: TaskVerdict
    ) -> ActResult:
        message = self.message(run, entity, task, action.template, verdict=verdict)
        if run.dry_run:
            return ActResult("would_apply", None, "notify", None, message)
        intent = await self._once(run, entity, ActKey.of(task), "notify", None, action.webhook)
        if isinstance(intent, ActResult):
            return intent
        context = {"batch_id": run.batch_id, "entity_id": entity.id}
        return await self._deliver(intent, action.webhook, message, run, context)

    async def _deliver(
        self, intent: Intent, webhook: str, message: str, run: JobRun, context: dict[str, Any]
    ) -> ActResult:
        """Send a notification recorded by ``intent`` and resolve the intent with the outcome."""
        try:
            await self.notifier.send(webhook, message, context=context)
        except NotifyError as exc:
            error = {"message": str(exc)}
            await self.intents.resolve(intent.id, status="failed", now=run.now, error=error)
            return ActResult("failed", "notify_failed", "notify", None, message, error=error)
        await self.intents.resolve(intent.id, status="done", now=run.now)
        return ActResult("applied", None, "notify", None, message)

    # ---------------------------------------------------------------- follow-ups

    async def follow_up(self, run: JobRun, entity: Entity, followup: FollowupDoc) -> ActResult:
        """Carry out a follow-up after re-checking the live state it expects.

        Skips with ``changed_by_someone_else`` when the field the original action
        changed no longer holds the value it left, and with ``entity_gone`` when
        the entity no longer exists.
        """
        key = ActKey(f"{followup.task_id}:then", f"then:{followup.do}")
        try:
            if followup.do == "notify":
                return await self._followup_notify(run, entity, key, followup)
            field_name, fields, target = _followup_target(followup)
            planner = _followup_planner(followup, field_name, target, self.settings)
            writer = self._followup_writer(run, entity, field_name)
            return await self._apply(run, entity, key, field_name, fields, planner, writer)
        except GraphError as exc:
            if exc.code in (100, 803):
                return ActResult("skipped", "entity_gone", error=exc.as_dict())
            return ActResult("failed", "live_read_failed", error=exc.as_dict())
        except LockTimeout as exc:
            return ActResult("failed", "account_lock_timeout", error={"message": str(exc)})
        except LockLost as exc:
            return ActResult("failed", "lock_lost", error={"message": str(exc)})
        except RedisError as exc:
            return ActResult("failed", "lock_unavailable", error={"message": str(exc)})

    def _followup_writer(self, run: JobRun, entity: Entity, field_name: str) -> Writer:
        ctx = run.write_context(entity.id)

        async def write(plan: Plan) -> Any:
            assert run.writer is not None
            if field_name == "status":
                return await run.writer.set_status(str(plan.after), token=run.token, ctx=ctx)
            if field_name == "daily_budget":
                return await run.writer.set_budget(
                    "daily_budget", int(plan.after), token=run.token, ctx=ctx
                )
            return await run.writer.set_name(str(plan.after), token=run.token, ctx=ctx)

        return write

    async def _followup_notify(
        self, run: JobRun, entity: Entity, key: ActKey, followup: FollowupDoc
    ) -> ActResult:
        await self._read_live(run.reader, run, entity, ["name"])  # the entity must still exist
        template = followup.template or "{rule}: follow-up on {entity_name} ({entity_id})"
        task = key.task_id.removesuffix(":then")
        context = MessageContext(
            rule=run.rule.name,
            task=task,
            level=run.rule.level,
            account=run.account,
            entity_id=entity.id,
            entity_name=entity.name,
            action=key.action_type,
            before=followup.previous,
            after=followup.set_value,
        )
        message = render(template, context.values(now=run.now, tz=run.rule.zone()))
        intent = await self._once(run, entity, key, "notify", None, followup.webhook)
        if isinstance(intent, ActResult):
            return intent
        assert followup.webhook is not None  # the model requires it for "notify"
        return await self._deliver(
            intent, followup.webhook, message, run, {"followup": followup.id}
        )

    @staticmethod
    def message(
        run: JobRun,
        entity: Entity,
        task: Task,
        template: str,
        *,
        verdict: TaskVerdict | None = None,
        action: str | None = None,
        before: Any = None,
        after: Any = None,
    ) -> str:
        """Render a notification for ``entity``."""
        context = MessageContext(
            rule=run.rule.name,
            task=task.id,
            level=run.rule.level,
            account=run.account,
            entity_id=entity.id,
            entity_name=entity.name,
            action=action or task.action.type,
            before=before,
            after=after,
            conditions=describe_conditions(verdict.conditions) if verdict else "",
        )
        return render(template, context.values(now=run.now, tz=run.rule.zone()))


def _followup_target(followup: FollowupDoc) -> tuple[str, list[str], Any]:
    if followup.do in ("activate", "pause"):
        return "status", ["status"], "ACTIVE" if followup.do == "activate" else "PAUSED"
    if followup.do == "restore_budget":
        return "daily_budget", ["daily_budget", "lifetime_budget"], followup.previous
    return "name", ["name"], followup.previous


def _followup_planner(
    followup: FollowupDoc, field_name: str, target: Any, settings: Settings
) -> Planner:
    def plan(live: dict[str, Any]) -> Plan | ActResult:
        current = live_value(live, field_name)
        if followup.field == field_name and current != followup.set_value:
            # someone (or something) changed what the rule set: leave their change alone
            return ActResult("skipped", "changed_by_someone_else", field_name, current, current)
        if field_name == "daily_budget":
            restore = SetBudgetAction(type="set_budget", amount=int(target))
            return plan_budget(
                restore, live=int(current), max_change_pct=settings.max_budget_change_pct
            )
        reason = None if current != target else f"already_{str(target).lower()}"
        return Plan(field_name, current, target, reason=reason if field_name == "status" else None)

    return plan


def live_value(live: dict[str, Any], field_name: str) -> Any:
    """A field of a Graph object as the engine compares it (budgets as integers)."""
    value = live.get(field_name)
    if field_name in ("daily_budget", "lifetime_budget") and value not in (None, ""):
        return int(value)
    return value


def unanswered(exc: GraphError) -> bool:
    """True when Meta did not answer a write with a verdict, so it may have landed.

    A timeout, a broken connection or a 5xx without Meta's error body; or a success
    status whose body is not what the API promises. An error Meta answered (a code) did
    not apply the write.
    """
    if isinstance(exc, TransientError):
        return exc.code is None
    return isinstance(exc, MalformedResponseError) and (exc.http_status or 200) < 400


def _is_budget_limit(exc: GraphError) -> bool:
    return bool(getattr(exc, "budget_change_limit", False))


def _settled(intent: Intent) -> ActResult:
    if intent.status == "done":
        return ActResult(
            "no_change",
            "already_applied",
            intent.field,
            intent.before,
            intent.target,
            response=intent.response,
        )
    return ActResult(
        "skipped", "previous_attempt_failed", intent.field, intent.before, intent.before
    )


def _unchanged(plan: Plan) -> ActResult:
    return ActResult(
        "no_change",
        plan.reason,
        plan.field,
        plan.before,
        plan.after,
        plan.requested,
        plan.clamped_by,
    )


__all__ = ["ActResult", "ActionExecutor", "IntentSettler", "JobRun", "reconcile"]
