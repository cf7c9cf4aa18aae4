"""Approvals: a person approves a task's planned change before it is written (docs/rules.md
"Approvals") — when one is needed, how long a proposal waits, whom to tell."""

from __future__ import annotations

import math
from typing import Any, Final, Literal, get_args

from pydantic import Field, field_validator

from ruleengine.rules.basics import RuleModel
from ruleengine.rules.language.action_types import SpendLimitField
from ruleengine.rules.language.per_currency import per_currency
from ruleengine.rules.language.validation import PathError


class BudgetChangePctAbove(RuleModel):
    """Approval when a budget moves by more than this percentage of its live value."""

    budget_change_pct_above: float = Field(gt=0, le=10_000, allow_inf_nan=False)


class BudgetAbove(RuleModel):
    """Approval when a new budget is above this amount (the rule's money units: currency
    units in format 2, minor units in the old format 1), or above each currency's own."""

    budget_above: float | dict[str, float]


class Approval(RuleModel):
    """A person approves the task's planned change before it is written (docs/rules.md
    "Approvals"): ``when`` it needs approval, how long a proposal waits, whom to tell."""

    when: Literal["always"] | BudgetChangePctAbove | BudgetAbove
    expires_after_minutes: int = Field(default=120, ge=1, le=60 * 24 * 30)
    #: The webhook the proposal is announced to; unset: the first one the rule's tasks name.
    webhook: str | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _when(cls, raw: Any) -> Any:
        # one message naming the three shapes, not one per member of the union
        if raw == "always":
            return raw
        shapes = '"always", {"budget_change_pct_above": 30} or {"budget_above": 1000}'
        if not isinstance(raw, dict) or len(raw) != 1:
            raise ValueError(f"give one of {shapes}, not {raw!r:.60}")
        ((key, value),) = raw.items()
        if key == "budget_change_pct_above":
            return BudgetChangePctAbove(budget_change_pct_above=_threshold(value, key))
        if key != "budget_above":
            raise PathError(str(key), f"unknown condition of approval; give one of {shapes}")
        if isinstance(value, dict):
            try:
                return BudgetAbove(budget_above=per_currency(value, _amount))
            except PathError as exc:
                raise PathError(f"{key}.{exc.subpath}", str(exc)) from None
            except ValueError as exc:
                raise PathError(key, str(exc)) from None
        return BudgetAbove(budget_above=_threshold(value, key))

    @property
    def on_budget(self) -> bool:
        """True when ``when`` looks at a budget (only budget actions can say so)."""
        return not isinstance(self.when, str)


def _amount(value: Any) -> float:
    """A ``budget_above`` amount: a finite number, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, not {value!r:.40}")
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a finite number, 0 or more")
    return float(value)


def _threshold(value: Any, key: str) -> float:
    """``value`` of ``key``, checked; a problem as a PathError on ``key``."""
    try:
        number = _amount(value)
    except ValueError as exc:
        if key == "budget_change_pct_above" and "0 or more" in str(exc):
            raise PathError(key, "must be a finite number above 0") from None
        raise PathError(key, str(exc)) from None
    if key == "budget_change_pct_above" and number == 0:
        raise PathError(key, "must be a finite number above 0")
    if key == "budget_change_pct_above" and number > 10_000:
        raise PathError(key, "must be at most 10000 (%)")
    return number


#: The fields a ``budget_above`` / ``budget_change_pct_above`` approval looks at.
APPROVED_MONEY_FIELDS: Final = frozenset(
    {"daily_budget", "budget_schedules", *get_args(SpendLimitField)}
)


def needs_approval(
    approval: Approval | None, *, field: str, before: Any, after: Any, scale: int
) -> bool:
    """True when a planned change of ``field`` from ``before`` to ``after`` waits for a person.

    ``scale``: minor units per unit of the rule's money (``budget_above`` is in those units,
    budgets in minor units).
    """
    if approval is None:
        return False
    when = approval.when
    if isinstance(when, str):
        return True
    if field not in APPROVED_MONEY_FIELDS or before is None or after is None:
        return False
    if isinstance(when, BudgetAbove):
        if isinstance(when.budget_above, dict):
            raise TypeError("a per-currency budget_above is picked per account first (in_currency)")
        return float(after) > when.budget_above * scale
    if not before:
        return True  # from nothing, any change is infinitely large
    return abs(float(after) - float(before)) * 100 / float(before) > when.budget_change_pct_above
