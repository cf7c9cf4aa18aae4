"""The change budget: how far one entity may move in a rolling 24 h, summed over every rule.

Two limits, each a setting a rule's ``change_budget`` overrides (:class:`ChangeLimits`):

* ``max_daily_budget_change_pct`` — the daily budget's moves in the window, each counted
  by its size (up or down alike), summed, may not exceed this percentage of the **budget
  before the window's first change** (the *base*). Compounding is therefore measured
  against that base, never against the live value: with 30 %, a base of 100.00 moved
  +20 % to 120.00 leaves 10.00, so the next +20 % (to 144.00) is clamped to 130.00 =
  base × 1.30. A change beyond what is left is clamped to it (``clamped_by`` names
  ``change_budget``); with nothing left it is skipped (``change_budget_exhausted``).
* ``max_status_changes_per_day`` — status flips (pause/activate) in the window.

The changes counted are the intents of every rule on the entity, ``done`` or still
``pending`` (a pending write may have landed), read under the account's write lock —
where every intent of the account is recorded — so two rules, two workers or a worker
killed after its intent cannot together move an entity past its budget. Changes made
outside the engine are not counted (Meta's activity log is not read for them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Final

from ruleengine.acting.results import ActResult, not_applied
from ruleengine.rules.language.budget_schedules import SCHEDULES
from ruleengine.rules.language.model import Rule
from ruleengine.rules.plan.plan import Plan, percent_of, refit
from ruleengine.rules.plan.targets import SPEND_LIMIT_FIELDS
from ruleengine.settings import Settings
from ruleengine.store.intents import PastChange

#: Why a change is not made: the entity's change budget for the 24 h is used up.
CHANGE_BUDGET_EXHAUSTED: Final = "change_budget_exhausted"
#: The ``clamped_by`` entry of a change the budget clamped (or refused).
CHANGE_BUDGET: Final = "change_budget"
WINDOW: Final = timedelta(hours=24)
#: The money fields whose moves the budget percentage limits: the daily budget, the budget a
#: schedule puts in its window (``budget_schedules``: its increase counts at the moment it is
#: scheduled, with the daily budget's moves), and the ad set spend limits that stand for it
#: under an Advantage campaign budget.
BUDGET_LIKE: Final = ("daily_budget", SCHEDULES, *SPEND_LIMIT_FIELDS)
#: Fields whose moves one change budget counts together: a schedule raises the daily budget.
SHARED: Final = {
    "daily_budget": ("daily_budget", SCHEDULES),
    SCHEDULES: ("daily_budget", SCHEDULES),
}
#: The fields the change budget limits.
LIMITED_FIELDS: Final = (*BUDGET_LIKE, "status")


@dataclass(frozen=True)
class ChangeLimits:
    """The limits one rule's changes are held to (``None``: no limit)."""

    budget_pct: float | None = None
    status_changes: int | None = None

    @classmethod
    def of(cls, settings: Settings, rule: Rule) -> ChangeLimits:
        """The settings' limits, each overridden by the rule's ``change_budget`` when it sets it."""
        own = rule.change_budget
        pct = own.max_daily_budget_change_pct if own is not None else None
        flips = own.max_status_changes_per_day if own is not None else None
        return cls(
            budget_pct=pct if pct is not None else settings.max_daily_budget_change_pct,
            status_changes=flips if flips is not None else settings.max_status_changes_per_day,
        )


def _moves(changes: Sequence[PastChange]) -> list[tuple[int, int]]:
    return [
        (c.before, c.target)
        for c in changes
        if isinstance(c.before, int) and isinstance(c.target, int) and c.before != c.target
    ]


def budget_left(changes: Sequence[PastChange], *, live: int, pct: float) -> int:
    """Minor units the daily budget may still move: ``pct`` of the base (the budget before
    the window's first change, or ``live`` when there was none), less every move since."""
    moves = _moves(changes)
    base = moves[0][0] if moves else live
    allowed = percent_of(base, Decimal(str(pct)), rounding=ROUND_DOWN)
    return allowed - sum(abs(after - before) for before, after in moves)


def limit_change(
    plan: Plan, changes: Sequence[PastChange], limits: ChangeLimits
) -> Plan | ActResult:
    """The plan as the change budget lets it through: unchanged, clamped, or skipped.

    ``changes`` are the entity's changes of ``plan.field`` in the last 24 h, oldest first
    (of the daily budget and its schedules together, for either: :data:`SHARED`).
    """
    if plan.field in BUDGET_LIKE and limits.budget_pct is not None:
        return _limit_budget(plan, changes, limits.budget_pct)
    if plan.field == "status" and limits.status_changes is not None:
        flips = len([c for c in changes if c.before != c.target])
        if flips >= limits.status_changes:
            message = (
                f"the status changed {flips} times in 24 h (every rule);"
                f" the limit is {limits.status_changes}"
            )
            return _exhausted(plan, {"message": message, "changes_24h": flips})
    return plan


def _limit_budget(plan: Plan, changes: Sequence[PastChange], pct: float) -> Plan | ActResult:
    before, after = plan.before, plan.after
    if not isinstance(before, int) or not isinstance(after, int):
        return plan
    left = budget_left(changes, live=before, pct=pct)
    if abs(after - before) <= left:
        return plan
    moved = sum(abs(a - b) for b, a in _moves(changes))
    if left <= 0:
        message = (
            f"the daily budget moved {moved} in 24 h (every rule); the limit is {pct:g} %"
            " of the budget before the first of those changes"
        )
        return _exhausted(plan, {"message": message, "moved_24h": moved, "limit_pct": pct})
    target = before + left if after > before else before - left
    clamped = [*plan.clamped_by, CHANGE_BUDGET]
    # a schedule's increase is fitted to Meta's units again, rounded down: within what is left
    fitted = refit(dataclasses.replace(plan, after=target, clamped_by=clamped))
    if not fitted.changes:
        return _exhausted(
            plan, {"message": "what is left of the change budget is below Meta's unit"}
        )
    return fitted


def _exhausted(plan: Plan, error: dict[str, object]) -> ActResult:
    result = not_applied(plan, "skipped", CHANGE_BUDGET_EXHAUSTED, dict(error))
    result.requested = plan.requested if plan.requested is not None else plan.after
    result.clamped_by = [*plan.clamped_by, CHANGE_BUDGET]
    return result
