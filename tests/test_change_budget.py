"""The change budget and oscillation detection, pure: compounding, clamps, swings; and the
rule-level ``change_budget`` / task ``on_oscillation`` fields' validation (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flow import campaign_rule
from ruleengine.acting.results import ActResult
from ruleengine.errors import RuleValidationError
from ruleengine.guards.change_budget import ChangeLimits, budget_left, limit_change
from ruleengine.guards.oscillation import detect, swings
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.plan.plan import Plan
from ruleengine.settings import Settings
from ruleengine.store.intents import PastChange

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def change(before: Any, after: Any, *, field: str = "daily_budget", rule: str = "r1") -> PastChange:
    return PastChange(NOW, "b", rule, "t", "1", "c", field, before, after)


def test_compounding_is_measured_against_the_budget_before_the_first_change() -> None:
    # 30 %: +20 % (10,000 → 12,000) leaves 1,000; the next +20 % (to 14,400) becomes 13,000
    history = [change(10_000, 12_000)]
    assert budget_left(history, live=12_000, pct=30) == 1_000
    plan = limit_change(Plan("daily_budget", 12_000, 14_400), history, ChangeLimits(30))
    assert isinstance(plan, Plan)
    assert (plan.after, plan.clamped_by) == (13_000, ["change_budget"])


def test_moves_down_count_by_their_size_too() -> None:
    history = [change(10_000, 12_000), change(12_000, 10_000)]  # moved 4,000 of 3,000
    result = limit_change(Plan("daily_budget", 10_000, 11_000), history, ChangeLimits(30))
    assert isinstance(result, ActResult)
    assert (result.outcome, result.reason) == ("skipped", "change_budget_exhausted")
    assert result.after == 10_000 and "change_budget" in result.clamped_by


def test_a_first_change_beyond_the_budget_is_clamped_and_no_limit_lets_everything_through() -> None:
    plan = limit_change(Plan("daily_budget", 10_000, 15_000), [], ChangeLimits(30))
    assert isinstance(plan, Plan) and plan.after == 13_000
    free = Plan("daily_budget", 10_000, 15_000)
    assert limit_change(free, [change(1, 2)], ChangeLimits()) == free


def test_status_flips_stop_at_the_limit() -> None:
    flips = [change("ACTIVE", "PAUSED", field="status"), change("PAUSED", "ACTIVE", field="status")]
    plan = Plan("status", "ACTIVE", "PAUSED")
    assert limit_change(plan, flips[:1], ChangeLimits(status_changes=2)) == plan
    result = limit_change(plan, flips, ChangeLimits(status_changes=2))
    assert isinstance(result, ActResult) and result.reason == "change_budget_exhausted"


def test_a_rule_overrides_each_setting_it_names() -> None:
    settings = Settings(max_daily_budget_change_pct=50, max_status_changes_per_day=6)
    rule = parse_rule(
        campaign_rule(
            {"type": "pause"}, [{"metric": "spend", "period": "today", "operator": ">", "value": 1}]
        )
        | {"change_budget": {"max_daily_budget_change_pct": 30}}
    )
    assert ChangeLimits.of(settings, rule) == ChangeLimits(30, 6)


def test_swings_count_runs_of_one_direction() -> None:
    assert swings([change(1, 2), change(2, 3)]) == 1
    assert swings([change(1, 2), change(2, 1), change(1, 2)]) == 3
    assert swings([change(1, 2), change(2, 1), change(1, 1), change(1, 0)]) == 2
    statuses = [
        change("ACTIVE", "PAUSED", field="status"),
        change("PAUSED", "ACTIVE", field="status", rule="r2"),
        change("ACTIVE", "PAUSED", field="status"),
    ]
    found = detect(statuses, threshold=3)
    assert found is not None and found.rules == ["r1", "r2"] and not found.hold
    assert detect(statuses[:2], threshold=3) is None


def test_names_never_oscillate() -> None:
    names = [change("a", "b", field="name"), change("b", "a", field="name")] * 2
    assert detect(names, threshold=2) is None


def test_window_expiry_is_the_callers_it_counts_what_it_is_given() -> None:
    old = PastChange(NOW - timedelta(hours=25), "b", "r", "t", "1", None, "daily_budget", 1, 2)
    assert budget_left([old], live=2, pct=100) == 0  # base 1, moved 1


# ---------------------------------------------------------------- validation (hypothesis)

SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1}


def _parse(data: dict[str, Any]) -> Rule | RuleValidationError:
    try:
        return parse_rule(data)
    except RuleValidationError as exc:
        return exc


def _rule(**extra: Any) -> dict[str, Any]:
    return campaign_rule({"type": "increase_budget", "percent": 10}, [SPENT]) | extra


@given(
    pct=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=3)
    ),
    flips=st.one_of(st.integers(min_value=-5, max_value=2000), st.floats(), st.none()),
)
def test_change_budget_values_are_accepted_or_refused_with_their_json_path(
    pct: Any, flips: Any
) -> None:
    data = _rule(
        change_budget={"max_daily_budget_change_pct": pct, "max_status_changes_per_day": flips}
    )
    rule = _parse(data)
    if isinstance(rule, RuleValidationError):
        paths = {e.path for e in rule.errors}
        assert paths and all(p.startswith("change_budget.") for p in paths)
        return
    assert rule.change_budget is not None
    value = rule.change_budget.max_daily_budget_change_pct
    assert value is not None and 0 < value <= 10_000


@given(
    extra=st.dictionaries(st.text(min_size=1, max_size=8), st.integers(), min_size=1, max_size=2)
)
def test_unknown_change_budget_keys_are_refused(extra: dict[str, Any]) -> None:
    data = _rule(change_budget={"max_daily_budget_change_pct": 30, **extra})
    known = {"max_daily_budget_change_pct", "max_status_changes_per_day"}
    if set(extra) <= known:
        return
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(data)
    # (a key such as "[" is joined without a dot: the path formatter reads it as an index)
    assert all(e.path.startswith("change_budget") for e in caught.value.errors)


@given(value=st.one_of(st.text(max_size=6), st.none(), st.integers()))
def test_on_oscillation_is_hold_or_nothing(value: Any) -> None:
    data = _rule()
    data["tasks"][0]["on_oscillation"] = value
    rule = _parse(data)
    if value in ("hold", None):
        assert isinstance(rule, Rule) and rule.tasks[0].on_oscillation == value
    else:
        assert isinstance(rule, RuleValidationError)
        assert {e.path for e in rule.errors} == {"tasks[0].on_oscillation"}


def test_unset_guards_leave_the_versioned_definition_as_it_was() -> None:
    data = _rule()
    rule = parse_rule(data)
    definition = rule.definition()
    assert "change_budget" not in definition and "on_oscillation" not in definition["tasks"][0]
    for name in ("respect_learning_phase", "max_change_pct_while_learning"):
        assert name not in definition["tasks"][0]
    data["tasks"][0]["on_oscillation"] = "hold"
    held = parse_rule(data | {"change_budget": {"max_status_changes_per_day": 2}}).definition()
    assert held["tasks"][0]["on_oscillation"] == "hold"
    assert held["change_budget"] == {
        "max_daily_budget_change_pct": None,
        "max_status_changes_per_day": 2,
    }
    assert parse_rule(held).definition() == held
