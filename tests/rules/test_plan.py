"""Action planning: absolute targets from live values, clamps, no doubled names."""

from __future__ import annotations

from datetime import date

from ruleengine.rules.model import (
    NameTextAction,
    PercentBudgetAction,
    RenameAction,
    SetBudgetAction,
    StatusAction,
)
from ruleengine.rules.plan import plan_budget, plan_name, plan_status

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
