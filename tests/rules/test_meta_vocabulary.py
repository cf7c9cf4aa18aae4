"""Meta's Ad Rules vocabulary in the rule language: IN_RANGE / NOT_IN_RANGE, the Ad Rules
presets Insights lacks (``last_7_days``, the mature-data ``last_nd_*`` windows …) and the
special keys ``hours_since_creation`` and ``estimated_budget_spending_percentage``."""

from __future__ import annotations

import copy
import math
from datetime import UTC, date, datetime, timedelta
from typing import Any, get_args
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.errors import FieldError, RuleValidationError
from ruleengine.rules.basics import Period
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import EvalContext, evaluate_condition
from ruleengine.rules.fetch import fetch_groups
from ruleengine.rules.language.model import Condition, Rule, parse_rule
from ruleengine.rules.language.periods import (
    INSIGHTS_DATE_PRESETS,
    history_start,
    insights_period,
    preset_range,
)
from ruleengine.writes.notify import describe_conditions

NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)  # the tests' sandbox clock
TOKYO, NEW_YORK = ZoneInfo("Asia/Tokyo"), ZoneInfo("America/New_York")
ENTITY = Entity.model_validate(
    {
        "id": "120210000000001",
        "name": "[AUTO] Prospecting",
        "daily_budget": "10000",
        "created_time": "2026-11-23T06:30:00+0000",
    }
)


def ctx(**overrides: Any) -> EvalContext:
    values: dict[str, Any] = {
        "entity": ENTITY,
        "insights": {"today": {"spend": "30.00"}, "last_nd_14_8": {"spend": "150.00"}},
        "now": NOW,
        "tz": NEW_YORK,
    }
    return EvalContext(**(values | overrides))


def rule_with(condition: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "meta words",
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 30},
        "tasks": [{"id": "t", "conditions": [condition], "action": {"type": "pause"}}],
    }


def outcome(data: Any) -> Rule | list[FieldError]:
    """The rule, or the problems found in it."""
    try:
        return parse_rule(data)
    except RuleValidationError as exc:
        return exc.errors


def errors_of(data: Any) -> dict[str, str]:
    with pytest.raises(RuleValidationError) as info:
        parse_rule(data)
    return {e.path: e.message for e in info.value.errors}


SPEND = {"metric": "spend", "period": "last_nd_14_8"}
WHERE = "tasks[0].conditions[0]"

# ---------------------------------------------------------------- IN_RANGE / NOT_IN_RANGE


@pytest.mark.parametrize(
    ("operator", "bounds", "passed"),
    [
        ("IN_RANGE", [100, 200], True),
        ("IN_RANGE", [150, 200], True),  # ends are included, as "is between" in Ads Manager
        ("IN_RANGE", [100, 150], True),
        ("IN_RANGE", [150, 150], True),
        ("IN_RANGE", [150.01, 200], False),
        ("IN_RANGE", [0, 149.99], False),
        ("NOT_IN_RANGE", [100, 200], False),
        ("NOT_IN_RANGE", [150, 160], False),
        ("NOT_IN_RANGE", [151, 160], True),
        ("NOT_IN_RANGE", [-5, 149], True),
    ],
)
def test_range_operators_include_their_ends(
    operator: str, bounds: list[float], passed: bool
) -> None:
    condition = Condition.model_validate(SPEND | {"operator": operator, "value": bounds})
    result = evaluate_condition(condition, ctx())
    assert (result.actual, result.expected, result.passed) == (150.0, bounds, passed)
    assert result.as_record()["expected"] == [float(b) for b in bounds]


@pytest.mark.parametrize("operator", ["IN_RANGE", "NOT_IN_RANGE"])
def test_no_data_fails_both_range_operators(operator: str) -> None:
    condition = Condition.model_validate(
        {"metric": "ctr", "period": "today", "operator": operator, "value": [0, 1]}
    )
    result = evaluate_condition(condition, ctx())
    assert (result.actual, result.passed, result.reason) == (None, False, "no_data")


def test_a_range_reads_in_the_records_and_messages() -> None:
    condition = Condition.model_validate(SPEND | {"operator": "IN_RANGE", "value": [100, 1500]})
    text = describe_conditions([evaluate_condition(condition, ctx())])
    assert text == "spend (last_nd_14_8) 150 IN_RANGE [100 to 1,500] ✓"


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        ([200, 100], "value", "low 200 > high 100"),
        ([1], "value", "takes [low, high], two numbers"),
        ([1, 2, 3], "value", "takes [low, high], two numbers"),
        (5, "value", "takes [low, high], two numbers"),
        ("1-2", "value", "takes [low, high], two numbers"),
        ({"low": 1, "high": 2}, "value", "takes [low, high], two numbers"),
        ([1, "2"], "value[1]", "a range bound must be a number"),
        ([True, 2], "value[0]", "a range bound must be a number"),
        ([None, 2], "value[0]", "a range bound must be a number"),
        ([1, float("inf")], "value[1]", "finite"),
        ([float("nan"), 1], "value[0]", "finite"),
    ],
)
def test_a_bad_range_is_named_by_its_path(value: Any, path: str, fragment: str) -> None:
    errors = errors_of(rule_with(SPEND | {"operator": "IN_RANGE", "value": value}))
    assert list(errors) == [f"{WHERE}.{path}"]
    assert fragment in errors[f"{WHERE}.{path}"]


def test_range_operators_take_a_value_and_no_compare_to() -> None:
    missing = errors_of(rule_with(SPEND | {"operator": "IN_RANGE"}))
    assert missing == {f"{WHERE}.value": "required: operator IN_RANGE takes [low, high]"}
    compare = {"compare_to": {"metric": "daily_budget"}}
    for extra in (compare, compare | {"value": [1, 2]}):
        errors = errors_of(rule_with(SPEND | {"operator": "NOT_IN_RANGE"} | extra))
        assert list(errors) == [f"{WHERE}.compare_to"]
        assert "compare_to is not allowed" in errors[f"{WHERE}.compare_to"]


def test_other_operators_refuse_a_pair() -> None:
    errors = errors_of(rule_with(SPEND | {"operator": ">", "value": [1, 2]}))
    assert errors == {
        f"{WHERE}.value": "operator > takes one number; IN_RANGE and NOT_IN_RANGE take [low, high]"
    }
    assert errors_of(rule_with(SPEND | {"operator": ">", "value": "abc"})) == {
        f"{WHERE}.value": "input should be a valid number, unable to parse string as a number"
    }


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
_OPERATORS = st.sampled_from([">", ">=", "<", "<=", "==", "!=", "IN_RANGE", "NOT_IN_RANGE"])


def _is_number(raw: Any) -> bool:
    return isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw)


@given(operator=_OPERATORS | st.text(max_size=12), value=_JSON)
def test_any_operator_and_value_is_a_rule_or_errors_at_the_condition(
    operator: str, value: Any
) -> None:
    rule = outcome(rule_with(SPEND | {"operator": operator, "value": copy.deepcopy(value)}))
    if isinstance(rule, list):
        assert rule
        assert all(e.path.startswith(WHERE) for e in rule), rule
        return
    condition = rule.tasks[0].conditions[0]
    if operator in ("IN_RANGE", "NOT_IN_RANGE"):
        assert isinstance(value, list) and len(value) == 2
        assert all(_is_number(v) for v in value) and value[0] <= value[1]
        assert condition.bounds == (float(value[0]), float(value[1]))
    else:
        assert isinstance(condition.value, float) and condition.bounds is None
    # what was accepted reads back the same and evaluates without an error
    assert parse_rule(rule.definition()).definition() == rule.definition()
    evaluate_condition(condition, ctx())


@given(
    low=st.floats(allow_nan=False, allow_infinity=False, width=32),
    high=st.floats(allow_nan=False, allow_infinity=False, width=32),
    actual=st.floats(allow_nan=False, allow_infinity=False, width=32),
)
def test_not_in_range_is_the_negation_of_in_range(low: float, high: float, actual: float) -> None:
    low, high = min(low, high), max(low, high)
    rows = {"today": {"spend": repr(actual)}}
    seen = [
        evaluate_condition(
            Condition.model_validate(
                {"metric": "spend", "period": "today", "operator": op, "value": [low, high]}
            ),
            ctx(insights=rows),
        ).passed
        for op in ("IN_RANGE", "NOT_IN_RANGE")
    ]
    assert seen[0] != seen[1]
    if low < actual < high:
        assert seen[0]


# ---------------------------------------------------------------- periods


def account_today(zone: ZoneInfo) -> date:
    return NOW.astimezone(zone).date()


def test_last_nd_14_8_is_the_7_days_from_14_to_8_days_ago_in_the_accounts_calendar() -> None:
    # 18:00 UTC on 1 December is already 2 December in Tokyo, still 1 December in New York
    tokyo, new_york = account_today(TOKYO), account_today(NEW_YORK)
    assert (tokyo, new_york) == (date(2026, 12, 2), date(2026, 12, 1))
    assert preset_range("last_nd_14_8", tokyo) == (date(2026, 11, 18), date(2026, 11, 24))
    assert preset_range("last_nd_14_8", new_york) == (date(2026, 11, 17), date(2026, 11, 23))
    # the days of last_14d that are not in last_7d: mature for a 7-day attribution window
    last_14d, last_7d = preset_range("last_14d", tokyo), preset_range("last_7d", tokyo)
    assert last_14d is not None and last_7d is not None
    assert (last_14d[0], last_7d[0] - timedelta(days=1)) == (date(2026, 11, 18), date(2026, 11, 24))
    assert insights_period("last_nd_14_8", tokyo) == {
        "time_range": {"since": "2026-11-18", "until": "2026-11-24"}
    }


@pytest.mark.parametrize(
    ("period", "since", "until"),
    [
        ("last_2d", "2026-11-29", "2026-11-30"),
        ("last_2_days", "2026-11-30", "2026-12-01"),  # Meta's LAST_N_DAYS include today
        ("last_7_days", "2026-11-25", "2026-12-01"),
        ("last_30_days", "2026-11-02", "2026-12-01"),
        ("last_nd_30_8", "2026-11-01", "2026-11-23"),
        ("last_nd_60_29", "2026-10-02", "2026-11-02"),
        ("last_nd_180_29", "2026-06-04", "2026-11-02"),
        ("last_nd_lifetime_8", "2023-11-02", "2026-11-23"),  # as far back as Insights go
        ("last_nd_lifetime_29", "2023-11-02", "2026-11-02"),
    ],
)
def test_ad_rules_presets_are_asked_for_as_time_ranges(period: str, since: str, until: str) -> None:
    today = date(2026, 12, 1)
    assert insights_period(period, today) == {"time_range": {"since": since, "until": until}}


def test_insights_presets_stay_date_presets_and_need_no_date() -> None:
    for period in ("today", "last_7d", "this_week_sun_today", "maximum"):
        assert insights_period(period, None) == {"date_preset": period}
    with pytest.raises(ValueError, match="needs the ad account's date"):
        insights_period("last_nd_14_8", None)
    assert preset_range("this_week_sun_today", date(2026, 12, 1)) == (  # a Tuesday
        date(2026, 11, 29),
        date(2026, 12, 1),
    )


def test_history_starts_37_months_back_on_a_day_that_exists() -> None:
    assert history_start(date(2026, 12, 1)) == date(2023, 11, 2)
    assert history_start(date(2027, 3, 31)) == date(2024, 3, 1)  # 29 Feb 2024, then one day


@given(period=st.sampled_from(get_args(Period)), today=st.dates(date(2001, 1, 1), date(2999, 1, 1)))
def test_every_period_is_a_date_preset_or_a_range_that_ends_by_today(
    period: str, today: date
) -> None:
    params = insights_period(period, today)
    if period in INSIGHTS_DATE_PRESETS:
        assert params == {"date_preset": period}
        return
    since = date.fromisoformat(params["time_range"]["since"])
    until = date.fromisoformat(params["time_range"]["until"])
    assert history_start(today) <= since <= until <= today
    if period.endswith("_days"):
        assert until == today
    else:
        assert until < today  # the other Ad Rules presets leave today out


@given(st.text(max_size=24) | st.from_regex(r"last_(nd_)?[0-9a-z_]{1,12}", fullmatch=True))
def test_any_period_name_is_a_known_period_or_an_error_at_its_path(name: str) -> None:
    rule = outcome(rule_with(SPEND | {"period": name, "operator": ">", "value": 1}))
    if isinstance(rule, list):
        assert name not in get_args(Period)
        assert [e.path for e in rule] == [f"{WHERE}.period"]
        assert "last_nd_14_8" in rule[0].message  # the message lists the names
        return
    assert name in get_args(Period)
    assert fetch_groups(rule) == {name: ["spend"]}


# ---------------------------------------------------------------- special keys


def test_hours_since_creation_is_age_hours_under_metas_name() -> None:
    seen = [
        evaluate_condition(
            Condition.model_validate({"metric": key, "operator": ">", "value": 192}), ctx()
        )
        for key in ("age_hours", "hours_since_creation")
    ]
    assert [r.actual for r in seen] == [203.5, 203.5]  # 23 Nov 06:30 → 1 Dec 18:00
    assert [r.metric for r in seen] == ["age_hours", "hours_since_creation"]
    rule = parse_rule(rule_with({"metric": "hours_since_creation", "operator": ">", "value": 1}))
    assert "created_time" in rule.entity_fields()
    assert fetch_groups(rule) == {}  # not an Insights field


ESTIMATE = {"metric": "estimated_budget_spending_percentage", "operator": ">", "value": 0}


def test_the_estimate_extrapolates_todays_spend_to_the_accounts_midnight() -> None:
    # 13:00 in New York: 13 of 24 hours gone, $30 spent of a $100 budget → $55.38 by midnight
    result = evaluate_condition(Condition.model_validate(ESTIMATE), ctx())
    assert result.actual == pytest.approx(30 * 24 / 13)
    spent = evaluate_condition(
        Condition.model_validate(ESTIMATE | {"metric": "budget_spent_pct"}), ctx()
    )
    assert spent.actual == 30.0
    rule = parse_rule(rule_with(ESTIMATE))
    assert fetch_groups(rule) == {"today": ["spend"]}
    assert "daily_budget" in rule.entity_fields()


def test_the_estimate_counts_the_hours_of_a_dst_day_and_waits_an_hour() -> None:
    # 1 November 2026 is New York's 25-hour day: at 12:00 EST 13 of its hours are gone
    noon = datetime(2026, 11, 1, 17, 0, tzinfo=UTC)
    result = evaluate_condition(Condition.model_validate(ESTIMATE), ctx(now=noon))
    assert result.actual == pytest.approx(30 * 25 / 13)
    early = datetime(2026, 12, 1, 5, 30, tzinfo=UTC)  # 00:30 in New York
    result = evaluate_condition(Condition.model_validate(ESTIMATE), ctx(now=early))
    assert (result.actual, result.reason) == (None, "no_data")
    no_budget = Entity.model_validate({"id": "1", "name": "x", "lifetime_budget": "50000"})
    result = evaluate_condition(Condition.model_validate(ESTIMATE), ctx(entity=no_budget))
    assert (result.actual, result.reason) == (None, "no_data")
