"""Action planning, pure: from the live value to the absolute value to write.

The worker re-reads the live value right before writing and asks this module
for the target. Writing an absolute value (never "+20 %") is what makes a
repeated write harmless. Budgets are clamped to the action's bounds, then to
the engine-wide change cap, then to the ad account's minimum daily budget (Meta
refuses anything lower), and never move against the action's direction.

Budget arithmetic is exact (``Decimal``, never binary floats) with one rule each:
a percentage change is rounded **half up** to the nearest minor unit
(10,005 × 1.1 = 11,005.5 → 11,006), and the engine-wide cap is rounded **down**
(never more than ``max_budget_change_pct`` of the live budget).
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal

from ruleengine.rules.language.action_types import (
    NameTextAction,
    PercentBudgetAction,
    RenameAction,
    SetBudgetAction,
    StatusAction,
)
from ruleengine.rules.language.budget_schedules import ScheduleSpec, fit
from ruleengine.rules.language.money import budget_in_minor_units
from ruleengine.rules.language.template import render_template


@dataclass(frozen=True)
class Plan:
    """What to write: ``before`` → ``after``, or why nothing changes.

    Attributes:
        field: the Graph field to write (``daily_budget``, ``status``, ``name``).
        before: the live value.
        after: the value to write (equal to ``before`` when nothing changes).
        requested: the value before clamping (budgets only).
        clamped_by: the guardrails that changed ``requested``.
        reason: why nothing changes, when ``changes`` is false.
        schedule: what a budget schedule's write sends (``field`` ``budget_schedules``:
            ``before`` the live daily budget, ``after`` the one in the window).
    """

    field: str
    before: int | str
    after: int | str
    requested: int | str | None = None
    clamped_by: list[str] = dataclasses.field(default_factory=list)
    reason: str | None = None
    schedule: ScheduleSpec | None = None

    @property
    def changes(self) -> bool:
        """True when writing would change Meta's value."""
        return self.before != self.after

    def schedule_doc(self) -> dict[str, object] | None:
        """What an intent and a record keep of a schedule's write (None for any other)."""
        return None if self.schedule is None else self.schedule.as_doc()


def refit(plan: Plan) -> Plan:
    """A schedule's plan whose ``after`` a guard moved, fitted to Meta's units again (the
    increase rounded down: never past the guard); any other plan as it is."""
    spec = plan.schedule
    if spec is None or spec.op != "create":
        return plan
    before, after = int(plan.before), int(plan.after)
    fitted, scheduled = fit(spec, before, after)
    if scheduled <= before:  # nothing of the increase is left in Meta's units
        return dataclasses.replace(plan, after=before, schedule=fitted)
    return dataclasses.replace(plan, after=scheduled, schedule=fitted)


def plan_budget(
    action: PercentBudgetAction | SetBudgetAction,
    *,
    live: int,
    max_change_pct: float,
    account_minimum: int | None = None,
    scale: int = 1,
) -> Plan:
    """The daily budget to write, from the live budget (minor units).

    ``scale`` is how many minor units one unit of the action's amounts is
    (:func:`~ruleengine.rules.language.money.amount_scale`: the currency's offset for a format-2
    rule, 1 for amounts already in minor units); a maximum rounds down, a minimum up.
    ``account_minimum`` is the ad account's ``min_daily_budget``: a target below it
    is raised to it (``clamped_by`` names ``min_daily_budget``), so a decrease stops
    at the minimum (``at_min_budget``) instead of being refused by Meta every run.
    """
    minor = budget_in_minor_units(action, scale=scale)
    if isinstance(action, SetBudgetAction):
        assert minor.amount is not None  # a set_budget always has its amount
        requested = minor.amount
        lower, upper = 1, None
    else:
        sign = 1 if action.type == "increase_budget" else -1
        requested = percent_of(live, 100 + sign * _decimal(action.percent), rounding=ROUND_HALF_UP)
        lower, upper = minor.min_budget or 1, minor.max_budget
    target, clamped = _clamp(requested, lower, upper, live=live, max_change_pct=max_change_pct)
    if account_minimum is not None and target < account_minimum:
        target, clamped = account_minimum, [*clamped, "min_daily_budget"]
    if isinstance(action, PercentBudgetAction):
        # never move against the action: a decrease below min_budget must not raise the budget
        target = max(target, live) if action.type == "increase_budget" else min(target, live)
    reason = None if target != live else _why_unchanged(clamped)
    return Plan("daily_budget", live, target, requested, clamped, reason)


def plan_restore(value: int, *, live: int, account_minimum: int | None = None) -> Plan:
    """An undo's daily budget: exactly ``value``, the budget the undone change found.

    No percentage cap and no action bounds (those guard what rules decide; an undo puts
    back a known value). Meta's minimum still holds: a ``value`` below the ad account's
    ``min_daily_budget`` is not written (``at_min_budget``, ``requested`` says what it was).
    """
    if account_minimum is not None and value < account_minimum:
        return Plan("daily_budget", live, live, value, ["min_daily_budget"], "at_min_budget")
    return Plan("daily_budget", live, value, value, reason=None if value != live else "no_change")


def _clamp(
    value: int, lower: int, upper: int | None, *, live: int, max_change_pct: float
) -> tuple[int, list[str]]:
    clamped: list[str] = []
    if upper is not None and value > upper:
        value, clamped = upper, [*clamped, "max_budget"]
    if value < lower:
        value, clamped = lower, [*clamped, "min_budget"]
    cap = percent_of(live, _decimal(max_change_pct), rounding=ROUND_DOWN)
    if value > live + cap:
        value, clamped = live + cap, [*clamped, "max_budget_change_pct"]
    elif value < live - cap:
        value, clamped = live - cap, [*clamped, "max_budget_change_pct"]
    return value, clamped


def _decimal(value: float) -> Decimal:
    # str() gives the shortest decimal that reads back as the same float: 20.1 → "20.1"
    return Decimal(str(value))


def percent_of(amount: int, percent: Decimal, *, rounding: str) -> int:
    """``amount × percent / 100`` in whole minor units, rounded as ``rounding`` says."""
    exact = Decimal(amount) * percent / 100
    return int(exact.quantize(Decimal(1), rounding=rounding))


def _why_unchanged(clamped: list[str]) -> str:
    if "max_budget" in clamped:
        return "at_max_budget"
    if "min_budget" in clamped or "min_daily_budget" in clamped:
        return "at_min_budget"
    return "no_change"


def plan_status(action: StatusAction, *, live: str) -> Plan:
    """``ACTIVE``/``PAUSED`` from the live configured status."""
    target = "PAUSED" if action.type == "pause" else "ACTIVE"
    reason = None if live != target else f"already_{target.lower()}"
    return Plan("status", live, target, reason=reason)


def plan_name(
    action: RenameAction | NameTextAction, *, live: str, rule_name: str, today: date
) -> Plan:
    """The new name from the live name; appending or prepending never doubles the text."""
    if isinstance(action, NameTextAction):
        if action.type == "append_to_name":
            done = live.endswith(action.text)
            target = live if done else live + action.text
        else:
            done = live.startswith(action.text)
            target = live if done else action.text + live
        return Plan("name", live, target, reason="already_named" if done else None)
    values = {"name": live, "date": today.isoformat(), "rule": rule_name}
    target = render_template(action.template, values)
    if target != live and _already_wrapped(action.template, live, rule_name, today):
        target = live
    return Plan("name", live, target, reason=None if target != live else "already_named")


def _already_wrapped(template: str, live: str, rule_name: str, today: date) -> bool:
    """True when ``live`` already carries the literal text the template puts around ``{name}``."""
    try:
        if not any(name == "name" for _, name, _, _ in string.Formatter().parse(template)):
            return False
    except ValueError:
        return False
    head, _, tail = template.partition("{name}")
    values = {"date": today.isoformat(), "rule": rule_name}
    prefix = render_template(head, values)
    suffix = render_template(tail, values | {"name": ""})
    return bool(prefix or suffix) and live.startswith(prefix) and live.endswith(suffix)
