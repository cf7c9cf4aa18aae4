"""The write path: one action on one entity, safe to repeat.

Per ad account, writes are sequential across all workers: a short Redis lock
is held around the write only (never around fetches). Inside it the action
re-reads the live value, plans the absolute target (clamped), records an
*intent* keyed by batch + task + entity, writes through the instrumented
writer, and marks the intent done with Meta's answer. A redelivered job finds
the done intent and writes nothing (``already_applied``); a pending intent
left by a crash is reconciled against the live value before anything is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.followups import FollowupDoc
from ruleengine.meta.errors import GraphError
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
from ruleengine.store.records import CooldownStore, Intent, IntentStore, hour_ago

log = logging.getLogger(__name__)

Outcome = Literal["applied", "no_change", "skipped", "failed", "would_apply"]

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


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


class LockTimeout(Exception):
    """The account's write lock stayed busy for too long."""


class AccountLocks:
    """Short per-ad-account Redis locks around writes (sequential writes per account)."""

    def __init__(self, redis: Any, *, timeout_s: float, hold_ms: int = 30_000) -> None:
        self._redis = redis
        self._timeout_s = timeout_s
        self._hold_ms = hold_ms

    @asynccontextmanager
    async def hold(self, account: str) -> AsyncIterator[None]:
        """Hold the lock of ``account`` for the block."""
        key = f"{c.ACCOUNT_LOCK_PREFIX}{account}"
        token = uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        delay = 0.005
        while not await self._redis.set(key, token, nx=True, px=self._hold_ms):
            if loop.time() > deadline:
                raise LockTimeout(f"the write lock of {account} stayed busy for {self._timeout_s}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
        try:
            yield
        finally:
            try:
                await self._redis.eval(_RELEASE, 1, key, token)
            except RedisError:
                log.warning("could not release the write lock of %s; it expires by itself", account)


Planner = Callable[[dict[str, Any]], "Plan | ActResult"]
Writer = Callable[[Plan], Awaitable[Any]]


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
    """Settles intents a dead worker left pending, from the live value Meta holds now."""

    def __init__(self, intents: IntentStore, cooldowns: CooldownStore) -> None:
        self.intents = intents
        self.cooldowns = cooldowns

    async def settle(self, intent: dict[str, Any], live: Any, *, now: datetime) -> str:
        """``done`` (and its cooldown written) when ``live`` is the target, else ``failed``."""
        if live == intent["target"]:
            await self.intents.resolve(
                intent["_id"], status="done", now=now, changed=True, reconciled=True
            )
            minutes = intent.get("cooldown_minutes") or 0
            if minutes and intent.get("rule_id"):
                until = intent["created_at"] + timedelta(minutes=minutes)
                await self.cooldowns.set_many(
                    intent["rule_id"], [(intent["task_id"], intent["entity_id"], until)]
                )
            return "done"
        await self.intents.resolve(intent["_id"], status="failed", now=now, reason="not_applied")
        return "failed"


class ActionExecutor:
    """Carries out task actions for one worker process."""

    def __init__(
        self,
        settings: Settings,
        *,
        intents: IntentStore,
        cooldowns: CooldownStore,
        locks: AccountLocks,
        notifier: Notifier,
    ) -> None:
        self.settings = settings
        self.intents = intents
        self.settler = IntentSettler(intents, cooldowns)
        self.locks = locks
        self.notifier = notifier

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

    async def _read_live(self, run: JobRun, entity: Entity, fields: list[str]) -> dict[str, Any]:
        return await run.reader.get_object(
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
            return self._preview(planner(await self._read_live(run, entity, fields)), field_name)
        async with self.locks.hold(run.account):
            intent = await self.intents.get(run.batch_id, key.task_id, entity.id)
            if intent is not None and intent.status != "pending":
                return _settled(intent)
            live = await self._read_live(run, entity, fields)
            if intent is not None:  # a crash left it pending: look before writing again
                return await self._reconcile(intent, live_value(live, field_name), writer, run)
            if await self._settled_leftovers(run, entity, field_name, live):
                value = live_value(live, field_name)
                return ActResult("skipped", "previous_write_reconciled", field_name, value, value)
            plan = planner(live)
            if isinstance(plan, ActResult):
                return plan
            if not plan.changes:
                return _unchanged(plan)
            if await self._budget_limit_reached(run, entity, field_name):
                return ActResult(
                    "skipped", "meta_budget_change_limit", field=field_name, before=plan.before
                )
            intent = await self.intents.begin(self._intent_doc(run, entity, key, plan), now=run.now)
            if not intent.created:
                return _settled(intent)
            return await self._write(intent, plan, writer, run)

    async def _settled_leftovers(
        self, run: JobRun, entity: Entity, field_name: str, live: dict[str, Any]
    ) -> bool:
        """Settle pending intents of other batches on this field; True if one had landed."""
        stale = await self.intents.stale_for_entity(entity.id, field_name, other_than=run.batch_id)
        value = live_value(live, field_name)
        results = [await self.settler.settle(doc, value, now=run.now) for doc in stale]
        return "done" in results

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

    async def _write(self, intent: Intent, plan: Plan, writer: Writer, run: JobRun) -> ActResult:
        try:
            response = await writer(plan)
        except GraphError as exc:
            await self.intents.resolve(intent.id, status="failed", now=run.now, error=exc.as_dict())
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
        await self.intents.resolve(
            intent.id, status="done", now=run.now, response=response, changed=True
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

    async def _reconcile(self, intent: Intent, live: Any, writer: Writer, run: JobRun) -> ActResult:
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
            return await self._write(intent, plan, writer, run)
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
        async with self.locks.hold(run.account):
            intent = await self._once(run, entity, ActKey.of(task), "copies", entity.name, None)
            if isinstance(intent, ActResult):
                return intent
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
        await self._read_live(run, entity, ["name"])  # the entity must still exist
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


def _is_budget_limit(exc: GraphError) -> bool:
    return bool(getattr(exc, "budget_change_limit", False))


def _settled(intent: Intent) -> ActResult:
    if intent.status == "done":
        return ActResult("no_change", "already_applied", intent.field, intent.before, intent.target)
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


__all__ = ["AccountLocks", "ActResult", "ActionExecutor", "JobRun", "reconcile"]
