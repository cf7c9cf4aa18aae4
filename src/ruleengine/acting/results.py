"""What acting means, shared by the write path, copies, messages, follow-ups and the preview.

An action on one entity ends in an :class:`ActResult` (what it did, or why not).
:class:`JobRun` is the per-job context every action reads from — never a writer,
so the preview, which imports this module, cannot reach code that writes to Meta.
:func:`target_of` plans a status, budget or name action from the entity's live
value (pure planning in :mod:`ruleengine.rules.plan.plan`, plus the budget guards and the
ad account's minimum daily budget; a rule's currency amounts become minor units here,
:func:`money_scale`);
:func:`record_once` records the intent of an effect that cannot be read back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any, Literal

from redis.exceptions import RedisError

from ruleengine.accounts.facts import AccountFacts
from ruleengine.clocks import carried
from ruleengine.clocks import offset as clock_offset
from ruleengine.errors import AccountMismatch, Fenced, LockLost, LockTimeout
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.errors import GraphError, MalformedResponseError, TransientError
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.schedules import read_schedules
from ruleengine.rules.advantage import advantage_fields, merged_fields, refuses
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import TaskVerdict
from ruleengine.rules.language.action_types import (
    ChangeBidAction,
    NameTextAction,
    PercentBudgetAction,
    RebalanceBudgetAction,
    RenameAction,
    ScaleToTargetAction,
    ScheduleBudgetAction,
    SetBudgetAction,
    SpendLimitAction,
    StatusAction,
)
from ruleengine.rules.language.approval import needs_approval
from ruleengine.rules.language.budget_schedules import SCHEDULES, ScheduleSpec, listed
from ruleengine.rules.language.model import Rule, Task
from ruleengine.rules.language.money import amount_scale
from ruleengine.rules.plan.plan import Plan, percent_of
from ruleengine.rules.plan.targets import (
    INTEGER_FIELDS,
    FieldAction,
    PlanContext,
    Refused,
    field_of,
    plan_change,
    reads_of,
)
from ruleengine.store.intents import (
    EXECUTION_COUNT_LIMIT,
    Intent,
    IntentStore,
    Resolution,
    expires_at,
)

Outcome = Literal[
    "applied", "no_change", "skipped", "failed", "would_apply", "awaiting_approval", "held_out"
]
# Effects that cannot be read back from Meta afterwards: a pending one is never retried.
log = logging.getLogger(__name__)

UNVERIFIABLE = frozenset({"copies", "notify"})
#: How far back a live read lists budget schedules (:func:`since_of`).
SCHEDULES_LOOKBACK = timedelta(days=8)
#: Fields whose values are amounts in the account currency's minor units.
MONEY_FIELDS = INTEGER_FIELDS
#: Actions whose amounts are in the account's currency: none is made on an account whose
#: registered currency or timezone is not Meta's (:func:`check_currency`).
MONEY_ACTIONS = (
    PercentBudgetAction,
    SetBudgetAction,
    ChangeBidAction,
    ScaleToTargetAction,
    SpendLimitAction,
    ScheduleBudgetAction,
)
#: Actions whose amounts are in the rule's money format (format 2: currency units).
SCALED_MONEY = (PercentBudgetAction, SetBudgetAction, SpendLimitAction, ScheduleBudgetAction)
#: Actions that change one field of the entity, planned by :func:`plan_change`.
FIELD_ACTIONS = (StatusAction, RenameAction, NameTextAction, *MONEY_ACTIONS)


def reads_the_account(action: Any) -> bool:
    """True when carrying ``action`` out reads the ad account (its currency, timezone and
    minimum daily budget: :func:`check_currency`, :func:`target_of`, the rebalance)."""
    return isinstance(action, (*MONEY_ACTIONS, RebalanceBudgetAction))


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
    oscillation: dict[str, Any] | None = None  # the oscillation this change completed
    schedule: dict[str, Any] | None = None  # a budget schedule's window and value (its spec)

    @property
    def fired(self) -> bool:
        """True when the action's effect is in place (now or by an earlier delivery)."""
        return self.outcome == "applied" or self.reason == "already_applied"


@dataclass(frozen=True)
class JobRun:
    """The per-job context actions read from: which run, whose token, what time, which reader."""

    batch_id: str
    rule_id: str
    rule_version: int
    rule: Rule
    account: str
    token: str
    now: datetime
    reader: GraphReader
    facts: AccountFacts | None = None  # what Meta says about the account, read once if needed
    #: the job's start by MongoDB's clock, which a step of this host's does not move: what
    #: cooldowns are stamped and compared with (None: this host's ``now`` stands in)
    db_now: datetime | None = None
    #: Batch API reads (several live values in one call); None where the caller has none
    batch: BatchReader | None = None
    #: this host's monotonic clock when ``db_now`` was read (what :meth:`store_now` counts from)
    db_ticks: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def cooldown_now(self) -> datetime:
        """The time cooldowns are compared with: the job's start by MongoDB's clock."""
        return self.now if self.db_now is None else self.db_now

    def store_now(self) -> datetime:
        """MongoDB's clock now: ``db_now`` carried on by the monotonic clock, which no step of
        this host's wall clock moves (:func:`ruleengine.clocks.carried`). What every money
        time is stamped with and compared to — a write's time when it is sent, Meta's hour,
        the change budget's 24 h, whose owner is gone — without a round trip per write."""
        return carried(self.cooldown_now, self.db_ticks)

    @property
    def offset(self) -> timedelta:
        """How far this host's clock was ahead of MongoDB's at the job's start."""
        return timedelta(0) if self.db_now is None else clock_offset(self.now, self.db_now)


@dataclass(frozen=True)
class ActKey:
    """What an intent is recorded under: the task (or follow-up) and its action."""

    task_id: str
    action_type: str
    cooldown_minutes: int = 0
    execution_count_limit: int | None = None
    on_oscillation: str | None = None

    @classmethod
    def of(cls, task: Task) -> ActKey:
        """The key of a task's own action."""
        return cls(
            task.id,
            task.action.type,
            task.cooldown_minutes,
            task.execution_count_limit,
            task.on_oscillation,
        )


Planner = Callable[[dict[str, Any]], "Plan | ActResult"]


@dataclass(frozen=True)
class Target:
    """The field an action changes, the fields to re-read, and how to plan from them."""

    field: str
    reads: list[str]
    planner: Planner


def with_learning_phase(target: Target, task: Task) -> Target:
    """``target`` that also reads the ad set's ``learning_stage_info`` when the task respects
    the learning phase: while Meta says ``LEARNING`` the change is skipped
    (``in_learning_phase``), or limited to ``max_change_pct_while_learning`` of the live
    budget (``clamped_by`` names ``learning_phase``). Any other stage, or none (Meta reports
    it for delivering ad sets only), changes nothing."""
    if not task.respect_learning_phase or target.field != "daily_budget":
        return target
    limit_pct = task.max_change_pct_while_learning

    def plan_outside_learning(live: dict[str, Any]) -> Plan | ActResult:
        plan = target.planner(live)
        stage = live.get("learning_stage_info")
        if not isinstance(plan, Plan) or not plan.changes or not isinstance(stage, dict):
            return plan
        if stage.get("status") != "LEARNING":
            return plan
        if limit_pct is None:
            return ActResult(
                "skipped", "in_learning_phase", plan.field, plan.before, plan.before, plan.after
            )
        return clamp_while_learning(plan, limit_pct)

    return Target(target.field, [*target.reads, "learning_stage_info"], plan_outside_learning)


def with_approval(target: Target, task: Task, run: JobRun) -> Target:
    """``target`` whose change waits for a person when the task's ``approval`` says so: the
    plan comes back as ``awaiting_approval`` (field, before → after) and nothing is written
    (the engine stores the proposal, :mod:`ruleengine.approvals.proposing`)."""
    approval = task.approval
    if approval is None:
        return target
    scale = money_scale(run) if approval.on_budget and run.facts is not None else 1

    def plan_or_propose(live: dict[str, Any]) -> Plan | ActResult:
        plan = target.planner(live)
        if not isinstance(plan, Plan) or not plan.changes:
            return plan
        if not needs_approval(
            approval, field=plan.field, before=plan.before, after=plan.after, scale=scale
        ):
            return plan
        return ActResult(
            "awaiting_approval",
            "approval_required",
            plan.field,
            plan.before,
            plan.after,
            plan.requested,
            plan.clamped_by,
            schedule=plan.schedule_doc(),
        )

    return Target(target.field, target.reads, plan_or_propose)


def with_task_guards(target: Target, task: Task, run: JobRun) -> Target:
    """``target`` under its task's own guards: the learning phase, then approval (what a run,
    a batched write and a preview all plan through)."""
    return with_approval(with_learning_phase(target, task), task, run)


def clamp_while_learning(plan: Plan, limit_pct: float) -> Plan:
    """``plan`` with its budget move limited to ``limit_pct`` of the live budget (rounded
    down, as the engine-wide cap is)."""
    before, after = int(plan.before), int(plan.after)
    cap = percent_of(before, Decimal(str(limit_pct)), rounding=ROUND_DOWN)
    if abs(after - before) <= cap:
        return plan
    after = before + cap if after > before else before - cap
    clamped = [*plan.clamped_by, "learning_phase"]
    return dataclasses.replace(plan, after=after, clamped_by=clamped)


def refused(refusal: Refused, *, current: Any = None) -> ActResult:
    """A planner's refusal as the record's result (``current``: the live value, if read)."""
    error = {"message": refusal.message} if refusal.message else None
    return ActResult(refusal.outcome, refusal.reason, refusal.field, current, current, error=error)


def as_result(planned: Plan | Refused) -> Plan | ActResult:
    """A planner's answer as the write path takes it: a plan, or a result that ends it."""
    return refused(planned) if isinstance(planned, Refused) else planned


async def target_of(
    action: Any, run: JobRun, *, max_change_pct: float, verdict: TaskVerdict | None = None
) -> Target:
    """How a status, budget, bid or name action plans its absolute target from the live object
    (:func:`ruleengine.rules.plan.targets.plan_change`, which the backtest's replay calls too).

    A budget or bid action reads the ad account first (once per job: its minimum daily
    budget, currency and timezone) and raises AccountMismatch when the registered currency
    or timezone is not Meta's (:func:`check_currency`); ``scale_to_target`` scales by the
    metric its ``verdict`` read.
    """
    if not isinstance(action, FIELD_ACTIONS):
        raise ValueError(f"no write path for action type {action.type}")
    if isinstance(action, MONEY_ACTIONS):
        await check_currency(run)
    ctx = await _context(action, run, max_change_pct=max_change_pct, verdict=verdict)

    def plan(live: dict[str, Any]) -> Plan | ActResult:
        return as_result(plan_change(action, live, ctx))

    # the campaign's Advantage+ state too: legacy ones refuse all but status changes
    extra = advantage_fields(run.rule.level) if refuses(action.type) else []
    return Target(field_of(action), merged_fields([*reads_of(action), *extra]), plan)


async def _context(
    action: FieldAction, run: JobRun, *, max_change_pct: float, verdict: TaskVerdict | None
) -> PlanContext:
    """What planning ``action`` needs of this run: the account's minimum (for budgets), the
    currency, the rule's date (for names), the metric a ``scale_to_target`` read."""
    budgets = isinstance(action, PercentBudgetAction | SetBudgetAction | ScaleToTargetAction)
    minimum = await run.facts.min_daily_budget() if budgets and run.facts is not None else None
    reading = verdict.action_metric if verdict is not None else None
    return PlanContext(
        level=run.rule.level,
        rule_name=run.rule.name,
        today=run.now.astimezone(run.rule.zone()).date(),
        offset=run.facts.currency_offset if run.facts is not None else None,
        scale=money_scale(run) if isinstance(action, SCALED_MONEY) else 1,
        max_change_pct=max_change_pct,
        account_minimum=minimum,
        metric=reading.actual if reading is not None else None,
        now=run.now,
        tz=run.rule.zone(),
    )


async def check_currency(run: JobRun) -> None:
    """Raise AccountMismatch when the run's ad account is registered with another currency or
    timezone than Meta's: a budget or bid computed from it would be scaled wrong (100 times,
    between cents and yen) or meant for another day. Nothing is checked without ``facts``."""
    if run.facts is None:
        return
    state = await run.facts.mismatch()
    if state is None:
        return
    raise AccountMismatch(
        state.explain(run.account),
        reason=state.reason,
        details=state.model_dump(mode="json"),
    )


def money_scale(run: JobRun) -> int:
    """Minor units per unit of the rule's amounts on this run's account (the Graph boundary)."""
    if run.rule.format == 1:
        return 1  # the old format names budgets in minor units already
    if run.facts is None:
        raise ValueError("a format-2 budget action needs the account's currency (JobRun.facts)")
    return amount_scale(run.rule.format, run.facts.currency_offset)


async def read_live(
    reader: GraphReader, run: JobRun, entity: Entity, fields: list[str]
) -> dict[str, Any]:
    """The entity's ``fields`` as Meta holds them now; ``budget_schedules`` (not a field: an
    edge) the schedules Meta holds of it that end after the run's time."""
    own = [name for name in fields if name != SCHEDULES]
    live = await reader.get_object(
        entity.id, token=run.token, fields=["id", *own], account_id=run.account
    )
    if SCHEDULES in fields:
        live[SCHEDULES] = await read_schedules(
            reader, entity.id, token=run.token, account_id=run.account, since=since_of(run.now)
        )
    return live


def since_of(now: datetime) -> int:
    """From when a live read lists an object's schedules (Unix seconds): those ending after
    :data:`SCHEDULES_LOOKBACK` before ``now`` — every schedule a pending intent may have made
    (a window starts at most a week after its run and lasts at most a week), found again to
    settle it, and every one a new window could overlap."""
    return int((now - SCHEDULES_LOOKBACK).timestamp())


def unchanged(plan: Plan) -> ActResult:
    """The result of a plan that leaves the live value as it is."""
    return ActResult(
        "no_change",
        plan.reason,
        plan.field,
        plan.before,
        plan.after,
        plan.requested,
        plan.clamped_by,
        schedule=plan.schedule_doc(),
    )


def applied(plan: Plan, response: Any = None) -> ActResult:
    """The result of a plan Meta applied (``response``: Meta's answer)."""
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
        schedule=plan.schedule_doc(),
    )


def not_applied(
    plan: Plan, outcome: Outcome, reason: str, error: dict[str, Any] | None = None
) -> ActResult:
    """The result of a plan that did not change the live value (``before`` stays)."""
    return ActResult(
        outcome,
        reason,
        plan.field,
        plan.before,
        plan.before,
        plan.requested,
        plan.clamped_by,
        error,
        schedule=plan.schedule_doc(),
    )


def would_do(plan: Plan | ActResult) -> ActResult:
    """What a dry run reports for a plan: ``would_apply`` (a schedule's window and value in
    ``schedule``), or why nothing would change."""
    if isinstance(plan, ActResult):
        return plan
    if not plan.changes:
        return unchanged(plan)
    return ActResult(
        "would_apply",
        None,
        plan.field,
        plan.before,
        plan.after,
        plan.requested,
        plan.clamped_by,
        schedule=plan.schedule_doc(),
    )


def pending_plan(intent: Intent) -> Plan:
    """The plan a pending intent recorded, to send again once the live value shows it did not
    land (a budget schedule's with what it sends)."""
    spec = ScheduleSpec.from_doc(intent.schedule)
    return Plan(intent.field, intent.before, intent.target, schedule=spec)


def settled(intent: Intent) -> ActResult:
    """The result for an intent an earlier delivery of this batch already settled."""
    if intent.status == "done":
        return ActResult(
            "no_change",
            "already_applied",
            intent.field,
            intent.before,
            intent.target,
            response=intent.response,
            schedule=intent.schedule,
        )
    return ActResult(
        "skipped",
        "previous_attempt_failed",
        intent.field,
        intent.before,
        intent.before,
        schedule=intent.schedule,
    )


def intent_doc(run: JobRun, entity: Entity, key: ActKey, plan: Plan) -> dict[str, Any]:
    """The ``action_intents`` document of a planned change (with its ``expires_at`` unless it
    is kept for good, :func:`ruleengine.store.intents.expires_at`)."""
    expiry = expires_at(
        cooling_from=run.cooldown_now,
        cooldown_minutes=key.cooldown_minutes,
        counted=key.execution_count_limit is not None,
        action=key.action_type,
    )
    doc = {
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
        "cooldown_minutes": key.cooldown_minutes,
        "cooling_from": run.cooldown_now,  # a cooldown runs on MongoDB's clock
    }
    # what was asked for and what clamped it, where a limit did (a reader takes none for absent)
    if plan.requested is not None:
        doc["requested"] = plan.requested
    if plan.clamped_by:
        doc["clamped_by"] = plan.clamped_by
    if plan.schedule is not None:  # what a schedule's write sends, to find it at Meta again
        doc["schedule"] = plan.schedule.as_doc()
    return doc if expiry is None else doc | {"expires_at": expiry}


@dataclass(frozen=True)
class FreshPair:
    """A (task, entity) the job is about to act on, with no intent of its batch yet, and the
    field its action changes (``copies`` for a copy)."""

    key: ActKey
    entity_id: str
    field: str


async def fired_elsewhere(
    intents: IntentStore, run: JobRun, pairs: Mapping[int, FreshPair]
) -> dict[int, ActResult]:
    """The ``pairs`` another run of the rule has acted on since this job's cooldown stage,
    skipped: still cooling down (``next_execute_not_reached``, until when) or at the task's
    ``execution_count_limit``.

    The job's cooldown stage looked before its fetches; a run of the same rule that
    overlaps this one (a job longer than the interval, a backlog) may have recorded its
    intent since. Looked at again under the account's write lock, where every intent of
    the account is recorded, the gap is closed. One query for the cooldowns, one for the
    counts.
    """
    skipped = await _cooling(intents, run, pairs)
    rest = {index: pair for index, pair in pairs.items() if index not in skipped}
    return skipped | await _at_count_limit(intents, run, rest)


async def _cooling(
    intents: IntentStore, run: JobRun, pairs: Mapping[int, FreshPair]
) -> dict[int, ActResult]:
    cooling = {i: p for i, p in pairs.items() if p.key.cooldown_minutes > 0}
    if not cooling:
        return {}
    active = await intents.cooling(
        run.rule_id,
        [(p.key.task_id, p.entity_id) for p in cooling.values()],
        now=run.cooldown_now,
        longest_minutes=max(p.key.cooldown_minutes for p in cooling.values()),
        other_than=run.batch_id,
    )
    return {
        index: ActResult("skipped", "next_execute_not_reached", field=pair.field, until=until)
        for index, pair in cooling.items()
        if (until := active.get((pair.key.task_id, pair.entity_id))) is not None
    }


async def _at_count_limit(
    intents: IntentStore, run: JobRun, pairs: Mapping[int, FreshPair]
) -> dict[int, ActResult]:
    limited = {i: p for i, p in pairs.items() if p.key.execution_count_limit is not None}
    if not limited:
        return {}
    counts = await intents.execution_counts(
        run.rule_id,
        [(p.key.task_id, p.entity_id) for p in limited.values()],
        other_than=run.batch_id,
    )
    return {
        index: ActResult("skipped", EXECUTION_COUNT_LIMIT, field=pair.field)
        for index, pair in limited.items()
        if counts.get((pair.key.task_id, pair.entity_id), 0)
        >= (pair.key.execution_count_limit or 0)
    }


async def give_up_unsent(
    intents: IntentStore, intent_ids: Sequence[Any], reason: str, *, now: datetime
) -> None:
    """Intents whose writes were never sent: ``failed`` with ``reason`` (``lock_lost``,
    ``token_refused``). A holder fenced out leaves them pending instead: the account is a
    newer holder's now, and the reaper settles them from the live values."""
    resolutions = [Resolution(intent_id, "failed", {"reason": reason}) for intent_id in intent_ids]
    with contextlib.suppress(Fenced):
        await intents.resolve_many(resolutions, now=now)


async def record_once(
    intents: IntentStore,
    run: JobRun,
    entity: Entity,
    key: ActKey,
    *,
    field: str,
    before: Any,
    target: Any,
    recheck: bool = False,
) -> Intent | ActResult:
    """An intent for an effect that cannot be verified afterwards (a copy, a message).

    Returns the new intent, or the result to record instead: a pending intent of this
    batch is given up (the copy or message may have gone out before a crash, and that
    cannot be checked — never risk it twice), a settled one is reported as settled.
    ``recheck`` (a copy, under the account's write lock): the cooldown and the
    ``execution_count_limit`` are looked at again first, as for a field write
    (:func:`fired_elsewhere`).
    """
    intent = await intents.get(run.batch_id, key.task_id, entity.id)
    if intent is not None and intent.status == "pending":
        await intents.resolve(
            intent.id, status="failed", now=run.store_now(), reason="unverifiable"
        )
        return ActResult("skipped", "pending_intent_unverifiable", field=field)
    if intent is not None:
        return settled(intent)
    if recheck and (
        skipped := await fired_elsewhere(intents, run, {0: FreshPair(key, entity.id, field)})
    ):
        return skipped[0]
    doc = intent_doc(run, entity, key, Plan(field, before, target))
    intent = await intents.begin(doc, now=run.store_now())
    return intent if intent.created else settled(intent)


def reconcile(intent: Intent, live: Any) -> Literal["done", "write", "changed", "unknown"]:
    """What to do with a pending intent given the live value.

    ``done``: the earlier write landed. ``write``: it did not (live is still the
    value before). ``changed``: someone else changed the value meanwhile. A budget
    schedule's (``live``: the schedules Meta lists): ``done`` when it is there (a deletion:
    gone); a new one not there is ``unknown`` — it cannot be sent again, for its request may
    still land (:func:`schedule_landed`) — a deletion not made yet is ``write``.
    """
    if intent.field == SCHEDULES:
        landed = schedule_landed(intent, live)
        if landed is not None:
            return "done"
        spec = ScheduleSpec.from_doc(intent.schedule)
        return "write" if spec is not None and spec.op == "delete" else "unknown"
    if live == intent.target:
        return "done"
    if live == intent.before:
        return "write"
    return "changed"


def schedule_landed(intent: Intent, live: Any, claimed: frozenset[str] = frozenset()) -> str | None:
    """Where a schedule intent's write stands at Meta, from the schedules it lists (``live``):
    a new schedule's id when Meta holds it (one no other intent ``claimed``); a deletion's
    schedule id once Meta no longer lists it; None when it has not landed (yet)."""
    spec = ScheduleSpec.from_doc(intent.schedule)
    if spec is None:
        return None
    found = listed(live)
    if spec.op == "delete":
        return spec.schedule_id if spec.gone_from(found) else None
    return spec.is_at(found, claimed)


def unanswered(exc: GraphError) -> bool:
    """True when Meta did not answer a write with a verdict, so it may have landed.

    A timeout, a broken connection or a 5xx without Meta's error body; or a success
    status whose body is not what the API promises. An error Meta answered (a code) did
    not apply the write.
    """
    if isinstance(exc, TransientError):
        return exc.code is None
    return isinstance(exc, MalformedResponseError) and (exc.http_status or 200) < 400


def failure_result(exc: Exception) -> ActResult:
    """An action stopped by the account lock, Redis, Graph (reading the live value) or the
    account's registered currency."""
    if isinstance(exc, AccountMismatch):
        return ActResult("failed", exc.reason, error={"message": str(exc), **exc.details})
    if isinstance(exc, LockTimeout):
        return ActResult("failed", "account_lock_timeout", error={"message": str(exc)})
    if isinstance(exc, LockLost):
        return ActResult("failed", "lock_lost", error={"message": str(exc)})
    if isinstance(exc, RedisError):
        return ActResult("failed", "lock_unavailable", error={"message": str(exc)})
    if isinstance(exc, GraphError):
        return ActResult("failed", "live_read_failed", error=exc.as_dict())
    raise exc


ACT_FAILURES = (AccountMismatch, LockTimeout, LockLost, RedisError, GraphError)
