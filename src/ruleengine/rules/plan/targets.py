"""What an action plans from an entity's live fields: the one planner every write obeys.

The live write path (:mod:`ruleengine.acting.results`, re-reading each entity under the
account's lock) and the backtest's replay (:mod:`ruleengine.rules.replay.run`, on a simulated
entity) both call :func:`plan_change` for a task's action and :func:`plan_follow_up` for a
``then``: the guards (an object without a daily budget, an ad set without a bid, a
``scale_to_target`` metric missing or zero), the clamps (``max_budget_change_pct``,
``min_budget``/``max_budget``, the account's minimum daily budget) and the arithmetic are
stated once, so what a backtest says a rule would have done is what the engine does. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_DOWN, Decimal
from typing import Any, Final, Literal, get_args
from zoneinfo import ZoneInfo

from ruleengine.rules.advantage import REASON as ADVANTAGE_REASON
from ruleengine.rules.advantage import legacy_kind, refusal_message, refuses
from ruleengine.rules.language.action_types import (
    ChangeBidAction,
    NameTextAction,
    PercentBudgetAction,
    RenameAction,
    ScaleToTargetAction,
    ScheduleBudgetAction,
    SetBudgetAction,
    SpendLimitAction,
    SpendLimitField,
    StatusAction,
)
from ruleengine.rules.language.budget_schedules import (
    QUARTER_HOUR_S,
    SCHEDULES,
    ScheduleSpec,
    ValueType,
    fit,
    listed,
    window_of,
)
from ruleengine.rules.language.money import budget_in_minor_units
from ruleengine.rules.plan.plan import Plan, percent_of, plan_budget, plan_name, plan_status
from ruleengine.rules.plan.scaling import plan_bid, plan_scale

#: The budget fields of a campaign or ad set (a campaign budget is one of them or neither).
BUDGET_FIELDS: Final = ("daily_budget", "lifetime_budget")
#: An ad set's spend limits under an Advantage campaign budget (``SpendLimitAction``).
SPEND_LIMIT_FIELDS: Final[tuple[str, ...]] = get_args(SpendLimitField)
#: Graph fields the engine compares as integers (Meta answers them as strings).
INTEGER_FIELDS: Final = (*BUDGET_FIELDS, "bid_amount", *SPEND_LIMIT_FIELDS)
#: Bid strategies under which Meta bids alone: an ad set with one takes no ``bid_amount``.
NO_BID_STRATEGIES: Final = frozenset({"LOWEST_COST_WITHOUT_CAP", "LOWEST_COST_WITH_MIN_ROAS"})
_EMPTY: Final = (None, "", "0", 0)

#: The actions that change one field of the entity (the others copy it or send a message).
FieldAction = (
    StatusAction
    | RenameAction
    | NameTextAction
    | PercentBudgetAction
    | SetBudgetAction
    | ChangeBidAction
    | ScaleToTargetAction
    | SpendLimitAction
    | ScheduleBudgetAction
)


@dataclass(frozen=True)
class Refused:
    """Why an action cannot run on this object: nothing is planned and nothing written.

    Attributes:
        reason: the record's reason (``no_daily_budget``, ``no_bid``, ``no_data`` …).
        field: the field the action would have changed.
        outcome: ``skipped`` (the object is not one the action applies to) or ``failed``.
        message: what a person reads, when the reason alone does not say it.
    """

    reason: str
    field: str
    outcome: Literal["skipped", "failed"] = "skipped"
    message: str | None = None


@dataclass(frozen=True)
class PlanContext:
    """What planning needs besides the action and the live fields.

    Attributes:
        level: ``campaign`` or ``adset`` (a campaign may carry a lifetime budget instead).
        rule_name: for renames' ``{rule}``.
        today: the rule's date, for renames' ``{date}``.
        offset: the account currency's minor units per unit (None: not known).
        scale: minor units per unit of a budget action's amounts (format 1: 1).
        max_change_pct: the engine's cap on one budget move.
        account_minimum: the ad account's minimum daily budget (None: not known).
        metric: what a ``scale_to_target`` scales by, as its condition read it.
        now: the run's time (a ``schedule_budget``'s window starts from it).
        tz: the rule's timezone (a local window's).
    """

    level: str
    rule_name: str = ""
    today: date | None = None
    offset: int | None = None
    scale: int = 1
    max_change_pct: float = 50.0
    account_minimum: int | None = None
    metric: float | None = None
    now: datetime | None = None
    tz: ZoneInfo | None = None


def field_of(action: FieldAction) -> str:
    """The Graph field an action changes."""
    if isinstance(action, StatusAction):
        return "status"
    if isinstance(action, RenameAction | NameTextAction):
        return "name"
    if isinstance(action, ChangeBidAction):
        return "bid_amount"
    if isinstance(action, SpendLimitAction):
        return action.field
    if isinstance(action, ScheduleBudgetAction):
        return SCHEDULES
    return "daily_budget"


def reads_of(action: FieldAction) -> list[str]:
    """The live fields an action plans from (what the write path re-reads)."""
    if isinstance(action, ChangeBidAction):
        return ["bid_amount", "bid_strategy"]
    if isinstance(action, SpendLimitAction):  # and whether its campaign's budget allows it
        return [action.field, "campaign{daily_budget,lifetime_budget}"]
    if isinstance(action, PercentBudgetAction | SetBudgetAction | ScaleToTargetAction):
        return list(BUDGET_FIELDS)
    if isinstance(action, ScheduleBudgetAction):  # the live budget, and Meta's schedules
        return [*BUDGET_FIELDS, SCHEDULES]
    return [field_of(action)]


def live_value(live: Mapping[str, Any], field_name: str) -> Any:
    """A field of a Graph object as the engine compares it (budgets and bids as integers)."""
    value = live.get(field_name)
    if field_name in INTEGER_FIELDS and value not in (None, ""):
        return int(value)
    return value


def budget_refusal(level: str, live: Mapping[str, Any]) -> Refused | None:
    """Why a daily-budget action cannot run on this object, if it cannot."""
    if live.get("daily_budget") not in _EMPTY:
        return None
    if level == "campaign" and live.get("lifetime_budget") in _EMPTY:
        return Refused("no_campaign_budget", "daily_budget")
    return Refused("no_daily_budget", "daily_budget")


def bid_refusal(live: Mapping[str, Any]) -> Refused | None:
    """Why ``change_bid`` cannot run on this ad set, if it cannot: it has no bid."""
    strategy = live.get("bid_strategy")
    if strategy not in NO_BID_STRATEGIES and live.get("bid_amount") not in _EMPTY:
        return None
    message = f"the ad set's bid_strategy {strategy} takes no bid_amount; Meta bids alone"
    return Refused("no_bid", "bid_amount", message=message)


def plan_change(action: FieldAction, live: Mapping[str, Any], ctx: PlanContext) -> Plan | Refused:
    """The change ``action`` makes to an object whose fields are ``live`` — or why it makes
    none. Every guard and clamp of the write path is here (the learning phase, approval,
    the change budget and Meta's hourly limit are applied around it by its callers)."""
    if refuses(action.type) and (kind := legacy_kind(live)) is not None:
        # Meta no longer lets the API change legacy Advantage+ campaigns (rules/advantage.py)
        message = refusal_message(kind, action.type)
        return Refused(ADVANTAGE_REASON, field_of(action), message=message)
    if isinstance(action, StatusAction):
        return plan_status(action, live=str(live.get("status")))
    if isinstance(action, RenameAction | NameTextAction):
        if ctx.today is None:
            raise ValueError("a rename needs the rule's date (PlanContext.today)")
        name = str(live.get("name", ""))
        return plan_name(action, live=name, rule_name=ctx.rule_name, today=ctx.today)
    if isinstance(action, ChangeBidAction):
        return _plan_bid(action, live, ctx)
    if isinstance(action, SpendLimitAction):
        return _plan_spend_limit(action, live, ctx)
    if isinstance(action, ScheduleBudgetAction):
        return plan_schedule(action, live, ctx)
    refused = budget_refusal(ctx.level, live)
    if refused is not None:
        return refused
    budget = int(live["daily_budget"])
    if isinstance(action, ScaleToTargetAction):
        return _plan_scaled(action, budget, ctx)
    return plan_budget(
        action,
        live=budget,
        max_change_pct=ctx.max_change_pct,
        account_minimum=ctx.account_minimum,
        scale=ctx.scale,
    )


def _plan_bid(action: ChangeBidAction, live: Mapping[str, Any], ctx: PlanContext) -> Plan | Refused:
    if ctx.offset is None:
        return Refused("currency_unknown", "bid_amount", outcome="failed")
    refused = bid_refusal(live)
    if refused is not None:
        return refused
    return plan_bid(action, live=int(live["bid_amount"]), offset=ctx.offset)


def _plan_spend_limit(
    action: SpendLimitAction, live: Mapping[str, Any], ctx: PlanContext
) -> Plan | Refused:
    """A spend limit planned like a budget (the same percentage cap and bounds), from its live
    value; refused where Meta takes none: an ad set without a campaign budget of the same
    kind (Meta's ad set reference: "daily budget must be specified in the Campaign").

    A limit the ad set does not have yet can only be set (there is nothing to scale); setting
    it is not capped by ``max_budget_change_pct`` (there is no live value to take a percentage
    of) — a cap or a minimum target moves spend between the campaign's ad sets, never past
    the campaign's budget. Meta's minimum daily budget does not apply to a limit.
    """
    field = action.field
    if ctx.offset is None:
        return Refused("currency_unknown", field, outcome="failed")
    campaign = live.get("campaign")
    needed = "daily_budget" if field.startswith("daily_") else "lifetime_budget"
    if not isinstance(campaign, Mapping) or campaign.get(needed) in _EMPTY:
        message = (
            f"{field} works only under a campaign {needed.replace('_', ' ')} (an Advantage"
            " campaign budget); this ad set's campaign has none"
        )
        return Refused("no_campaign_budget", field, message=message)
    current = int(live.get(field) or 0)
    budget_action = action.as_budget_action()
    if current == 0:
        if not isinstance(budget_action, SetBudgetAction):
            message = f"the ad set has no {field} to scale; set one with set_spend_limit"
            return Refused("no_spend_limit", field, message=message)
        amount = budget_in_minor_units(budget_action, scale=ctx.scale).amount or 0
        return Plan(field, 0, amount, amount)
    plan = plan_budget(
        budget_action, live=current, max_change_pct=ctx.max_change_pct, scale=ctx.scale
    )
    return dataclasses.replace(plan, field=field)


def plan_schedule(
    action: ScheduleBudgetAction, live: Mapping[str, Any], ctx: PlanContext
) -> Plan | Refused:
    """A budget schedule's plan: its window
    (:func:`~ruleengine.rules.language.budget_schedules.window_of`), the daily budget in it —
    ``multiplier`` times the live budget (rounded down) or ``amount`` — held to ``max_budget`` and
    ``max_budget_change_pct`` of the live budget like a budget increase, fitted to Meta's units
    (never past the clamps). Refused where Meta holds no daily budget to raise, where a schedule
    Meta holds overlaps the window, or where nothing of the window is left."""
    if ctx.offset is None:
        return Refused("currency_unknown", SCHEDULES, outcome="failed")
    if live.get("daily_budget") in _EMPTY:
        message = (
            f"a budget schedule raises a daily budget; this {ctx.level} has none (a lifetime"
            " budget, or its campaign's budget)"
        )
        return Refused("no_daily_budget", SCHEDULES, message=message)
    if ctx.now is None or ctx.tz is None:
        raise ValueError("a schedule needs the run's time and the rule's timezone")
    window = window_of(action.window, now=ctx.now, tz=ctx.tz)
    if window is None:
        message = "nothing of the window is left on quarter hours (Meta's windows fall on them)"
        return Refused("window_too_short", SCHEDULES, message=message)
    before = int(live["daily_budget"])
    kind: ValueType = "MULTIPLIER" if action.multiplier is not None else "ABSOLUTE"
    spec = ScheduleSpec("create", *window, value_type=kind, offset=ctx.offset)
    for held in listed(live.get(SCHEDULES)):
        if held.overlaps(*window):
            message = (
                f"the window {spec.window_text(ctx.tz)} overlaps the budget schedule {held.id}"
                " Meta holds; one schedule at a time (delete that one, or choose another window)"
            )
            return Refused("schedule_overlap", SCHEDULES, message=message)
    requested, after, clamped = _scheduled_budget(action, before, ctx)
    spec, after = fit(spec, before, after)
    if after <= before:
        reason = "at_max_budget" if "max_budget" in clamped else "no_change"
        return Plan(SCHEDULES, before, before, requested, clamped, reason, schedule=spec)
    return Plan(SCHEDULES, before, after, requested, clamped, schedule=spec)


def approved_schedule(
    spec: ScheduleSpec, live: Mapping[str, Any], *, before: int, after: int, now: datetime
) -> Plan | Refused:
    """An approved schedule, written only while the live daily budget is still ``before``:
    its window as approved, or what is left of it once its start has passed (quarter hours;
    refused once nothing is); refused when a schedule Meta holds overlaps it."""
    current = live.get("daily_budget")
    if current in _EMPTY or int(current) != before:
        return Refused("changed_by_someone_else", SCHEDULES)
    start = max(spec.time_start, -(-int(now.timestamp()) // QUARTER_HOUR_S) * QUARTER_HOUR_S)
    if start >= spec.time_end:
        message = f"the window {spec.window_text()} (UTC) is over"
        return Refused("window_passed", SCHEDULES, message=message)
    spec = dataclasses.replace(spec, time_start=start)
    for held in listed(live.get(SCHEDULES)):
        if held.overlaps(spec.time_start, spec.time_end):
            message = f"the window overlaps the budget schedule {held.id} Meta holds"
            return Refused("schedule_overlap", SCHEDULES, message=message)
    return Plan(SCHEDULES, before, after, schedule=spec)


def _scheduled_budget(
    action: ScheduleBudgetAction, before: int, ctx: PlanContext
) -> tuple[int, int, list[str]]:
    """What the action asks for in the window, and that held to its clamps (minor units)."""
    minor = budget_in_minor_units(action, scale=ctx.scale)
    if action.multiplier is not None:
        requested = percent_of(before, Decimal(str(action.multiplier)) * 100, rounding=ROUND_DOWN)
    else:
        assert minor.amount is not None  # checked by the model
        requested = minor.amount
    after, clamped = requested, []
    if minor.max_budget is not None and after > minor.max_budget:
        after, clamped = minor.max_budget, ["max_budget"]
    cap = percent_of(before, Decimal(str(ctx.max_change_pct)), rounding=ROUND_DOWN)
    if after > before + cap:
        after, clamped = before + cap, [*clamped, "max_budget_change_pct"]
    return requested, after, clamped


def _plan_scaled(action: ScaleToTargetAction, budget: int, ctx: PlanContext) -> Plan | Refused:
    if ctx.offset is None:
        return Refused("currency_unknown", "daily_budget", outcome="failed")
    if ctx.metric is None:
        return Refused("no_data", "daily_budget")
    if ctx.metric <= 0:  # no ratio to scale by: a cost of 0, or a return of nothing yet
        return Refused("metric_zero", "daily_budget")
    return plan_scale(
        action,
        live=budget,
        metric=ctx.metric,
        offset=ctx.offset,
        max_change_pct=ctx.max_change_pct,
        account_minimum=ctx.account_minimum,
    )


@dataclass(frozen=True)
class FollowUpTarget:
    """What a follow-up (``then``) puts back: the field, the value, what it reads first."""

    field: str
    value: Any
    reads: list[str]


def follow_up_target(do: str, *, previous: Any) -> FollowUpTarget:
    """The field and value a ``then`` of kind ``do`` writes (``previous``: the value the
    action replaced, for ``restore_budget`` and ``restore_name``)."""
    if do in ("activate", "pause"):
        return FollowUpTarget("status", "ACTIVE" if do == "activate" else "PAUSED", ["status"])
    if do == "restore_budget":
        return FollowUpTarget("daily_budget", previous, list(BUDGET_FIELDS))
    return FollowUpTarget("name", previous, ["name"])


def plan_follow_up(
    do: str,
    live: Mapping[str, Any],
    *,
    action_field: str | None,
    action_left: Any,
    previous: Any,
    max_change_pct: float,
) -> Plan | Refused:
    """What a ``then`` writes, re-checked against the live object: the action's own field
    changed since (by a person, or another rule) is left alone (``changed_by_someone_else``);
    a restored budget goes through the same cap as any budget move."""
    target = follow_up_target(do, previous=previous)
    current = live_value(live, target.field)
    if action_field == target.field and current != action_left:
        return Refused("changed_by_someone_else", target.field)
    if target.value is None:
        return Refused("nothing_to_restore", target.field)
    if target.field == "daily_budget":
        if current in _EMPTY:
            return Refused("no_daily_budget", "daily_budget")
        restore = SetBudgetAction(type="set_budget", amount=int(target.value))
        return plan_budget(restore, live=int(current), max_change_pct=max_change_pct)
    reason = None if current != target.value else f"already_{str(target.value).lower()}"
    status_reason = reason if target.field == "status" else None
    return Plan(target.field, current, target.value, reason=status_reason)
