"""The actions a task can take, and ``then``: the delayed second step of an action.

Each action is a model of its own, told apart by ``type``; :data:`Action` is their
discriminated union. Budgets are in the account currency's units (a rule of format 2;
minor units in the old format 1 — :mod:`ruleengine.rules.language.money` converts them at the Graph
boundary), bounded by :data:`~ruleengine.rules.basics.MAX_BUDGET`; templates may only hold
plain ``{placeholders}``. The two actions that came with Meta's Ad Rules vocabulary,
``change_bid`` and ``scale_to_target``, take money in the account currency's units
(``2.5`` is $2.50) whatever the rule's format: minor units exist only at the Graph boundary.
Every amount may instead be given per currency (:mod:`ruleengine.rules.language.per_currency`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from ruleengine.rules.basics import (
    NOTIFY_PLACEHOLDERS,
    RENAME_PLACEHOLDERS,
    Period,
    RuleModel,
    parse_hhmm,
)
from ruleengine.rules.language.catalog import UnknownMetricError, resolve_metric, scaling_direction
from ruleengine.rules.language.per_currency import Amount, BudgetAmount, check_bounds
from ruleengine.rules.language.template import check_template
from ruleengine.rules.language.validation import PathError

MONEY = (
    "account currency units (format 2; minor units in the old format 1), or one amount per"
    ' currency: {"USD": 500, "JPY": 75000}'
)
#: The longest window (and furthest start) a ``schedule_budget`` takes: a week (the engine's
#: bound; Meta's reference states none).
MAX_SCHEDULE_HOURS = 168
UNITS = 'currency units (2.5 = $2.50), or one amount per currency: {"USD": 2.5, "JPY": 400}'
FollowUpDo = Literal["activate", "pause", "restore_budget", "restore_name", "notify"]


class FollowUp(RuleModel):
    """``then``: a delayed second step, e.g. pause now and re-activate in 2 hours."""

    after_minutes: int | None = Field(default=None, ge=1, le=10_080)
    at_time: str | None = None
    do: FollowUpDo
    webhook: str | None = None
    template: str | None = None

    @field_validator("at_time")
    @classmethod
    def _hhmm(cls, value: str | None) -> str | None:
        if value is not None:
            parse_hhmm(value)
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        return None if value is None else check_template(value, NOTIFY_PLACEHOLDERS)

    @model_validator(mode="after")
    def _when(self) -> FollowUp:
        if (self.after_minutes is None) == (self.at_time is None):
            raise ValueError("give exactly one of 'after_minutes' or 'at_time' (HH:MM)")
        if self.do == "notify" and not self.webhook:
            raise PathError("webhook", "required when 'do' is 'notify'")
        return self


class _Action(RuleModel):
    then: FollowUp | None = None


class StatusAction(_Action):
    """Set the entity's status."""

    type: Literal["pause", "activate"]


class PercentBudgetAction(_Action):
    """Change the live daily budget by a percentage, clamped to ``min_budget``/``max_budget``."""

    type: Literal["increase_budget", "decrease_budget"]
    percent: float = Field(gt=0, le=1000)
    max_budget: BudgetAmount | None = Field(default=None, description=MONEY)
    min_budget: BudgetAmount | None = Field(default=None, description=MONEY)

    @model_validator(mode="after")
    def _bounds(self) -> PercentBudgetAction:
        if self.type == "decrease_budget" and self.percent >= 100:
            raise PathError("percent", "a decrease must be below 100 %; use 'pause' to stop spend")
        check_bounds(self.min_budget, self.max_budget, ("min_budget", "max_budget"))
        return self


class SetBudgetAction(_Action):
    """Set the daily budget to an absolute amount."""

    type: Literal["set_budget"]
    amount: BudgetAmount = Field(description=MONEY)


#: An ad set's spend limits under an Advantage campaign budget (Meta's ad set reference:
#: "daily_spend_cap — Daily spend cap of the ad set defined in your account currency. To use
#: this field, daily budget must be specified in the Campaign"; the min spend target is
#: "not a guarantee but our best effort"; the lifetime twins go with a lifetime budget).
SpendLimitField = Literal[
    "daily_spend_cap", "daily_min_spend_target", "lifetime_spend_cap", "lifetime_min_spend_target"
]


class SpendLimitAction(_Action):
    """Set an ad set's spend cap or minimum spend target, or scale it by a percentage.

    Under an Advantage campaign budget Meta steers an ad set by these limits, not by a
    budget of its own. Money (``amount``, ``min_budget``, ``max_budget``) is like a budget
    action's; the write path is the budget's (live read, clamp, intent, undo, approvals).
    """

    type: Literal["set_spend_limit", "increase_spend_limit", "decrease_spend_limit"]
    field: SpendLimitField
    amount: BudgetAmount | None = Field(default=None, description=MONEY)
    percent: float | None = Field(default=None, gt=0, le=1000)
    max_budget: BudgetAmount | None = Field(default=None, description=MONEY)
    min_budget: BudgetAmount | None = Field(default=None, description=MONEY)

    @model_validator(mode="after")
    def _shape(self) -> SpendLimitAction:
        if self.type == "set_spend_limit":
            if self.amount is None or self.percent is not None:
                raise PathError("amount", "set_spend_limit takes 'amount' (and no 'percent')")
        elif self.percent is None or self.amount is not None:
            raise PathError("percent", f"{self.type} takes 'percent' (and no 'amount')")
        if self.type == "decrease_spend_limit" and (self.percent or 0) >= 100:
            raise PathError("percent", "a decrease must be below 100 %")
        check_bounds(self.min_budget, self.max_budget, ("min_budget", "max_budget"))
        return self

    def as_budget_action(self) -> PercentBudgetAction | SetBudgetAction:
        """The budget action that plans the same arithmetic on the limit's live value."""
        if self.type == "set_spend_limit":
            assert self.amount is not None  # checked above
            return SetBudgetAction(type="set_budget", amount=self.amount)
        kind = "increase_budget" if self.type == "increase_spend_limit" else "decrease_budget"
        assert self.percent is not None
        return PercentBudgetAction(
            type=kind, percent=self.percent, max_budget=self.max_budget, min_budget=self.min_budget
        )


def _quarter_hours(value: float, what: str) -> float:
    if value * 4 != int(value * 4):
        raise ValueError(f"{what} must be whole quarter hours (0.25, 0.5, 1.75 …), not {value}")
    return value


class ScheduleWindow(RuleModel):
    """When a scheduled budget is in force: ``hours`` long, ``start_in_hours`` after the run
    (0: from the next quarter hour), or from ``start`` to ``end`` local time (HH:MM in the
    rule's timezone: the window of today, or of tomorrow once today's is over; an ``end``
    before ``start`` runs past midnight). Meta's windows fall on quarter hours, so do these.
    """

    hours: float | None = Field(default=None, gt=0, le=MAX_SCHEDULE_HOURS)
    start_in_hours: float | None = Field(default=None, ge=0, le=MAX_SCHEDULE_HOURS)
    start: str | None = None
    end: str | None = None

    @field_validator("hours", "start_in_hours")
    @classmethod
    def _quarters(cls, value: float | None) -> float | None:
        return None if value is None else _quarter_hours(value, "a window's hours")

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, value: str | None) -> str | None:
        if value is not None and parse_hhmm(value).minute % 15:
            raise ValueError(f"'{value}' is not on a quarter hour (:00, :15, :30, :45)")
        return value

    @model_validator(mode="after")
    def _one_form(self) -> ScheduleWindow:
        local = self.start is not None or self.end is not None
        if local == (self.hours is not None):
            raise ValueError(
                "give either 'hours' (and 'start_in_hours') or 'start' and 'end' (HH:MM local)"
            )
        if local and (self.start is None or self.end is None or self.start == self.end):
            raise PathError("end", "a local window needs a 'start' and a different 'end'")
        if local and self.start_in_hours is not None:
            raise PathError("start_in_hours", "only with 'hours'; a local window has its start")
        return self


class ScheduleBudgetAction(_Action):
    """Schedule a higher daily budget for a window (Meta's budget schedules, ``POST
    /{id}/budget_schedules``): ``multiplier`` times the live budget, or the daily budget
    ``amount``, clamped like a budget increase; Meta puts the budget back when the window ends.
    """

    type: Literal["schedule_budget"]
    multiplier: float | None = Field(default=None, gt=1, le=10)
    amount: BudgetAmount | None = Field(default=None, description=MONEY)
    max_budget: BudgetAmount | None = Field(default=None, description=MONEY)
    window: ScheduleWindow

    @model_validator(mode="after")
    def _shape(self) -> ScheduleBudgetAction:
        if (self.multiplier is None) == (self.amount is None):
            raise ValueError(
                "give exactly one of 'multiplier' (e.g. 1.5) or 'amount' (the daily budget"
                " during the window)"
            )
        if self.then is not None:
            raise PathError(
                "then", "a budget schedule ends by itself: Meta puts the budget back after it"
            )
        return self


class RenameAction(_Action):
    """Rename from a template with ``{name}``, ``{date}``, ``{rule}``."""

    type: Literal["rename"]
    template: str = Field(min_length=1, max_length=400)

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, RENAME_PLACEHOLDERS)


class NameTextAction(_Action):
    """Append or prepend a text to the live name, never twice."""

    type: Literal["append_to_name", "prepend_to_name"]
    text: str = Field(min_length=1, max_length=200)


class DuplicateAction(_Action):
    """Copy the entity through ``POST /{id}/copies``."""

    type: Literal["duplicate"]
    status_option: Literal["ACTIVE", "PAUSED", "INHERITED_FROM_SOURCE"] = "PAUSED"
    rename_suffix: str = " - Copy"
    deep_copy: bool = False


class NotifyAction(_Action):
    """Post a rendered message to a webhook named in the settings."""

    type: Literal["notify"]
    webhook: str = Field(min_length=1)
    template: str = Field(
        default="{rule}: {action} on {entity_name} ({entity_id}) — {conditions}",
        min_length=1,
        max_length=4000,
    )

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, NOTIFY_PLACEHOLDERS)


class ChangeBidAction(_Action):
    """Change an ad set's ``bid_amount``: by a percentage of the live bid, or to an amount.

    Money (``amount``, ``min_bid``, ``max_bid``) is in the account currency's units.
    """

    type: Literal["change_bid"]
    percent: float | None = Field(default=None, gt=0, le=1000)
    direction: Literal["increase", "decrease"] | None = None
    amount: Amount | None = Field(default=None, description=UNITS)
    min_bid: Amount | None = Field(default=None, description=UNITS)
    max_bid: Amount | None = Field(default=None, description=UNITS)

    @model_validator(mode="after")
    def _shape(self) -> ChangeBidAction:
        if (self.percent is None) == (self.amount is None):
            raise ValueError(
                "give exactly one of 'percent' (with 'direction') or 'amount' (the new bid)"
            )
        if self.percent is not None and self.direction is None:
            raise PathError("direction", "required with 'percent': 'increase' or 'decrease'")
        if self.amount is not None and self.direction is not None:
            raise PathError("direction", "only with 'percent'; 'amount' is the new bid itself")
        if self.direction == "decrease" and (self.percent or 0) >= 100:
            raise PathError("percent", "a decrease must be below 100 %")
        check_bounds(self.min_bid, self.max_bid, ("min_bid", "max_bid"))
        return self


def _ranked_metric(value: str, what: str) -> str:
    """``value`` when it names an Insights metric with a better direction (higher or lower)."""
    try:
        spec = resolve_metric(value)
    except UnknownMetricError as exc:
        raise ValueError(str(exc)) from None
    if scaling_direction(spec) is None:
        raise ValueError(
            f"'{value}' cannot be {what}: use an Insights metric where higher is better"
            " (a ROAS, a CTR, a count) or a cost (cpc, cost_per_action_type.<type> …);"
            " see docs/rules.md"
        )
    return value


class ScaleToTargetAction(_Action):
    """Move the daily budget in proportion to how far ``metric`` is from ``target``.

    Meta's ``change_spec.target_field``: for a metric where higher is better (ROAS) the
    new budget is ``live × metric / target``, for a cost (lower is better)
    ``live × target / metric``; the catalogue says which a metric is. Money
    (``min_budget``, ``max_budget``, and ``target`` when the metric is money) is in the
    account currency's units.
    """

    type: Literal["scale_to_target"]
    metric: str
    period: Period
    target: Amount
    min_budget: Amount | None = Field(default=None, description=UNITS)
    max_budget: Amount | None = Field(default=None, description=UNITS)
    max_change_percent: float | None = Field(default=None, gt=0, le=1000)

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        return _ranked_metric(value, "a target")

    @model_validator(mode="after")
    def _bounds(self) -> ScaleToTargetAction:
        check_bounds(self.min_budget, self.max_budget, ("min_budget", "max_budget"))
        if isinstance(self.target, dict) and not resolve_metric(self.metric).money:
            raise PathError(
                "target",
                f"{self.metric} is not an amount of money: its target is one number,"
                " not one per currency",
            )
        return self


class RebalanceBudgetAction(_Action):
    """Move daily budget from the worst to the best of the entities the task matched in one run
    by ``metric`` over ``period``, their total kept to the minor unit (Meta's
    ``REBALANCE_BUDGET``, planned by :func:`ruleengine.rules.plan.rebalance.plan_rebalance`).

    ``max_change_percent``: the most one entity's budget moves in one run, as a percentage of
    its live budget. Money (``min_budget``, ``max_budget``) is in the account currency's units.
    """

    type: Literal["rebalance_budget"]
    metric: str
    period: Period
    max_change_percent: float = Field(default=20, gt=0, le=100)
    min_budget: Amount | None = Field(default=None, description=UNITS)
    max_budget: Amount | None = Field(default=None, description=UNITS)

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        return _ranked_metric(value, "what a rebalance ranks by")

    @model_validator(mode="after")
    def _bounds(self) -> RebalanceBudgetAction:
        check_bounds(self.min_budget, self.max_budget, ("min_budget", "max_budget"))
        if self.then is not None:
            raise PathError(
                "then",
                "a rebalance moves budget between entities; no follow-up undoes one entity"
                " of it alone (undo the whole batch with 'ruleengine undo')",
            )
        return self


Action = Annotated[
    StatusAction
    | PercentBudgetAction
    | SetBudgetAction
    | RenameAction
    | NameTextAction
    | DuplicateAction
    | NotifyAction
    | ChangeBidAction
    | ScaleToTargetAction
    | RebalanceBudgetAction
    | SpendLimitAction
    | ScheduleBudgetAction,
    Field(discriminator="type"),
]
ACTION_TYPES = (
    "pause",
    "activate",
    "increase_budget",
    "decrease_budget",
    "set_budget",
    "rename",
    "append_to_name",
    "prepend_to_name",
    "duplicate",
    "notify",
    "change_bid",
    "scale_to_target",
    "rebalance_budget",
    "set_spend_limit",
    "increase_spend_limit",
    "decrease_spend_limit",
    "schedule_budget",
)
#: Actions that schedule a budget for a window (Meta's budget schedules).
SCHEDULE_ACTIONS = frozenset({"schedule_budget"})
#: Actions on an ad set's spend limits (its budget's part under an Advantage campaign budget).
SPEND_LIMIT_ACTIONS = frozenset({"set_spend_limit", "increase_spend_limit", "decrease_spend_limit"})
BUDGET_ACTIONS = frozenset(
    {"increase_budget", "decrease_budget", "set_budget", "scale_to_target", "rebalance_budget"}
)
#: Actions that only ad sets can take (Meta's ``bid_amount`` and spend limits are an ad set's).
ADSET_ACTIONS = frozenset({"change_bid"} | SPEND_LIMIT_ACTIONS)
NAME_ACTIONS = frozenset({"rename", "append_to_name", "prepend_to_name"})


def check_then(action: Any) -> None:
    then: FollowUp | None = action.then
    if then is None:
        return
    if then.do == "restore_budget" and action.type not in BUDGET_ACTIONS:
        raise PathError("then.do", "'restore_budget' follows a budget action only")
    if then.do == "restore_name" and action.type not in NAME_ACTIONS:
        raise PathError("then.do", "'restore_name' follows a rename/append/prepend action only")
    if then.do in ("activate", "pause") and action.type in ("notify", "duplicate"):
        raise PathError("then.do", f"'{then.do}' cannot follow '{action.type}'")
