"""Action planning: absolute targets from live values, clamps, no doubled names."""

from __future__ import annotations

import math
from datetime import date
from decimal import Decimal
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.language.action_types import (
    NameTextAction,
    PercentBudgetAction,
    RenameAction,
    SetBudgetAction,
    StatusAction,
)
from ruleengine.rules.plan.plan import plan_budget, plan_name, plan_restore, plan_status

TODAY = date(2026, 12, 1)


def increase(percent: float, **bounds: int) -> PercentBudgetAction:
    return PercentBudgetAction(type="increase_budget", percent=percent, **bounds)


def decrease(percent: float, **bounds: int) -> PercentBudgetAction:
    return PercentBudgetAction(type="decrease_budget", percent=percent, **bounds)


def test_increase_is_an_absolute_target_from_the_live_budget() -> None:
    plan = plan_budget(increase(20), live=10000, max_change_pct=50)
    assert (plan.before, plan.after, plan.clamped_by) == (10000, 12000, [])


def test_max_budget_clamps_and_at_the_cap_nothing_changes() -> None:
    plan = plan_budget(increase(20, max_budget=11000), live=10000, max_change_pct=50)
    assert (plan.after, plan.clamped_by) == (11000, ["max_budget"])
    capped = plan_budget(increase(20, max_budget=10000), live=10000, max_change_pct=50)
    assert (capped.changes, capped.reason) == (False, "at_max_budget")


def test_min_budget_clamps_a_decrease_and_never_raises_the_budget() -> None:
    plan = plan_budget(decrease(50, min_budget=8000), live=10000, max_change_pct=90)
    assert (plan.after, plan.clamped_by) == (8000, ["min_budget"])
    below = plan_budget(decrease(10, min_budget=8000), live=5000, max_change_pct=90)
    assert (below.after, below.changes, below.reason) == (5000, False, "at_min_budget")


def test_a_decrease_stops_at_the_accounts_minimum_daily_budget() -> None:
    plan = plan_budget(decrease(50), live=150, max_change_pct=90, account_minimum=100)
    assert (plan.requested, plan.after, plan.clamped_by) == (75, 100, ["min_daily_budget"])
    at = plan_budget(decrease(50), live=100, max_change_pct=90, account_minimum=100)
    assert (at.after, at.changes, at.reason, at.clamped_by) == (
        100,
        False,
        "at_min_budget",
        ["min_daily_budget"],
    )
    # a budget already under a raised minimum is left alone by a decrease, never raised
    under = plan_budget(decrease(10), live=80, max_change_pct=90, account_minimum=100)
    assert (under.after, under.reason) == (80, "at_min_budget")


def test_set_budget_below_the_accounts_minimum_sets_the_minimum() -> None:
    action = SetBudgetAction(type="set_budget", amount=50)
    plan = plan_budget(action, live=120, max_change_pct=90, account_minimum=100)
    assert (plan.after, plan.clamped_by) == (100, ["min_daily_budget"])


def test_engine_wide_change_cap_wins() -> None:
    plan = plan_budget(increase(300), live=10000, max_change_pct=50)
    assert (plan.requested, plan.after, plan.clamped_by) == (
        40000,
        15000,
        ["max_budget_change_pct"],
    )
    jump = plan_budget(
        SetBudgetAction(type="set_budget", amount=100000), live=10000, max_change_pct=50
    )
    assert jump.after == 15000


def test_status_plan_knows_when_nothing_changes() -> None:
    assert plan_status(StatusAction(type="pause"), live="ACTIVE").after == "PAUSED"
    same = plan_status(StatusAction(type="pause"), live="PAUSED")
    assert (same.changes, same.reason) == (False, "already_paused")


def test_append_and_prepend_never_double() -> None:
    append = NameTextAction(type="append_to_name", text=" [X]")
    first = plan_name(append, live="Camp", rule_name="r", today=TODAY)
    assert first.after == "Camp [X]"
    again = plan_name(append, live=str(first.after), rule_name="r", today=TODAY)
    assert (again.changes, again.reason) == (False, "already_named")
    prepend = NameTextAction(type="prepend_to_name", text="[P] ")
    assert plan_name(prepend, live="[P] Camp", rule_name="r", today=TODAY).changes is False


def test_rename_renders_the_template_once() -> None:
    rename = RenameAction(type="rename", template="{name} [FATIGUE {date}]")
    plan = plan_name(rename, live="Adset 1", rule_name="Flag", today=TODAY)
    assert plan.after == "Adset 1 [FATIGUE 2026-12-01]"
    assert plan_name(rename, live=str(plan.after), rule_name="Flag", today=TODAY).changes is False


# ---------------------------------------------------------------- exact budget arithmetic

budgets = st.integers(min_value=1, max_value=10**15)
percents = st.decimals(min_value="0.01", max_value="999.99", places=2)


def _half_up(value: Fraction) -> int:
    return math.floor(value + Fraction(1, 2))


def test_a_half_cent_rounds_up_where_float_arithmetic_rounded_to_even() -> None:
    # 2,505 × 0.5 = 1,252.5 exactly; round() on floats gave 1,252 (half to even)
    assert plan_budget(decrease(50), live=2505, max_change_pct=90).after == 1253
    assert plan_budget(increase(10), live=10005, max_change_pct=50).after == 11006


@given(live=budgets, percent=percents, up=st.booleans())
def test_percent_changes_are_exact_and_round_half_up(live: int, percent: Decimal, up: bool) -> None:
    if not up and percent >= 100:
        percent = percent % 100 or Decimal("0.01")
    action = increase(float(percent)) if up else decrease(float(percent))
    plan = plan_budget(action, live=live, max_change_pct=1_000_000)
    sign = 1 if up else -1
    exact = Fraction(live) * (100 + sign * Fraction(percent)) / 100
    assert plan.requested == max(_half_up(exact), 0)
    assert isinstance(plan.after, int)


@given(live=budgets, percent=percents, cap=st.decimals(min_value="0.01", max_value="100", places=2))
def test_the_change_cap_never_lets_more_than_its_percentage_through(
    live: int, percent: Decimal, cap: Decimal
) -> None:
    plan = plan_budget(increase(float(percent)), live=live, max_change_pct=float(cap))
    assert isinstance(plan.after, int)
    assert Fraction(int(plan.after) - live) <= Fraction(live) * Fraction(cap) / 100
    assert int(plan.after) - live == min(
        int(plan.requested or 0) - live, math.floor(Fraction(live) * Fraction(cap) / 100)
    )


@given(
    live=budgets,
    percent=st.decimals(min_value="0.01", max_value="99.99", places=2),
    minimum=st.integers(min_value=1, max_value=10**6),
)
def test_a_decrease_never_goes_below_the_minimum_nor_above_the_live_budget(
    live: int, percent: Decimal, minimum: int
) -> None:
    plan = plan_budget(
        decrease(float(percent)), live=live, max_change_pct=100, account_minimum=minimum
    )
    assert isinstance(plan.after, int)
    assert plan.after <= live
    assert plan.after >= min(minimum, live)
    if plan.after == minimum and int(plan.requested or 0) < minimum:
        # the action's own floor (1 when not given) may have stopped it first
        assert {"min_daily_budget", "min_budget"} & set(plan.clamped_by)


@given(
    value=budgets,
    live=budgets,
    minimum=st.one_of(st.none(), st.integers(min_value=1, max_value=10**6)),
)
def test_an_undo_restores_the_exact_budget_or_nothing_below_metas_minimum(
    value: int, live: int, minimum: int | None
) -> None:
    plan = plan_restore(value, live=live, account_minimum=minimum)
    assert (plan.field, plan.before, plan.requested) == ("daily_budget", live, value)
    if minimum is not None and value < minimum:
        assert (plan.after, plan.reason, plan.clamped_by) == (
            live,
            "at_min_budget",
            ["min_daily_budget"],
        )
    else:  # no percentage cap, however far the value is from the live budget
        assert (plan.after, plan.clamped_by) == (value, [])
        assert plan.changes == (value != live)
