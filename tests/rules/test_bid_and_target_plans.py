"""``change_bid``, ``scale_to_target`` and ``execution_count_limit`` in the rule language:
parsing (JSON-path errors), the fetch plan, and the clamp maths (never past a bound,
never the wrong way), pure."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ruleengine.errors import RuleValidationError
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import EvalContext, evaluate_task
from ruleengine.rules.fetch import fetch_groups
from ruleengine.rules.language.action_types import ChangeBidAction, ScaleToTargetAction
from ruleengine.rules.language.catalog import resolve_metric, scaling_direction
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.scaling import lower_bound, plan_bid, plan_scale, upper_bound

SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1}


def rule(action: dict[str, Any], *, level: str = "adset", **task: Any) -> dict[str, Any]:
    return {
        "name": "bids",
        "level": level,
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 30},
        "tasks": [{"id": "t", "conditions": [SPENT], "action": action, **task}],
    }


def parsed_or_paths(data: dict[str, Any]) -> tuple[Any, list[str]]:
    """The task's action, or the JSON paths of what is wrong."""
    try:
        return parse_rule(data).tasks[0].action, []
    except RuleValidationError as exc:
        return None, [e.path for e in exc.errors]


def errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(data)
    return {e.path: e.message for e in caught.value.errors}


# ---------------------------------------------------------------- parsing


def test_change_bid_takes_a_percent_with_a_direction_or_an_amount() -> None:
    up = parse_rule(rule({"type": "change_bid", "percent": 10, "direction": "increase"}))
    assert isinstance(up.tasks[0].action, ChangeBidAction)
    to = parse_rule(rule({"type": "change_bid", "amount": 2.5, "min_bid": 1, "max_bid": 4}))
    action = to.tasks[0].action
    assert isinstance(action, ChangeBidAction) and (action.amount, action.max_bid) == (2.5, 4)


@pytest.mark.parametrize(
    ("action", "path", "words"),
    [
        ({"type": "change_bid", "percent": 10}, "tasks[0].action.direction", "required"),
        ({"type": "change_bid", "direction": "increase"}, "tasks[0].action", "exactly one"),
        (
            {"type": "change_bid", "percent": 5, "amount": 3, "direction": "increase"},
            "tasks[0].action",
            "exactly one",
        ),
        (
            {"type": "change_bid", "amount": 3, "direction": "decrease"},
            "tasks[0].action.direction",
            "only with 'percent'",
        ),
        (
            {"type": "change_bid", "percent": 100, "direction": "decrease"},
            "tasks[0].action.percent",
            "below 100",
        ),
        (
            {"type": "change_bid", "amount": 3, "min_bid": 5, "max_bid": 4},
            "tasks[0].action.min_bid",
            "min_bid 5 > max_bid 4",
        ),
        ({"type": "change_bid", "amount": 0}, "tasks[0].action.amount", "greater than 0"),
        (
            {"type": "scale_to_target", "metric": "spend", "period": "last_7d", "target": 3},
            "tasks[0].action.metric",
            "cannot be a target",
        ),
        (
            {"type": "scale_to_target", "metric": "roas", "period": "last_7d", "target": 3},
            "tasks[0].action.metric",
            "did you mean",
        ),
        (
            {
                "type": "scale_to_target",
                "metric": "cpc",
                "period": "last_7d",
                "target": 3,
                "min_budget": 50,
                "max_budget": 20,
            },
            "tasks[0].action.min_budget",
            "min_budget 50 > max_budget 20",
        ),
        (
            {"type": "scale_to_target", "metric": "cpc", "period": "ever", "target": 1},
            "tasks[0].action.period",
            "input should be",
        ),
    ],
)
def test_bad_actions_are_refused_at_their_path(
    action: dict[str, Any], path: str, words: str
) -> None:
    found = errors(rule(action))
    assert path in found, found
    assert words in found[path].lower() or words in found[path]


def test_change_bid_needs_an_adset_rule() -> None:
    found = errors(rule({"type": "change_bid", "amount": 2}, level="campaign"))
    assert "ad set" in found["tasks[0].action.type"] and '"adset"' in found["tasks[0].action.type"]


def test_execution_count_limit_is_bounded() -> None:
    ok = parse_rule(rule({"type": "pause"}, execution_count_limit=5))
    assert ok.tasks[0].execution_count_limit == 5
    assert "tasks[0].execution_count_limit" in errors(
        rule({"type": "pause"}, execution_count_limit=0)
    )
    too_many = rule({"type": "pause"}, execution_count_limit=1_000_001)
    assert "tasks[0].execution_count_limit" in errors(too_many)


def test_then_restore_budget_follows_scale_to_target_but_not_change_bid() -> None:
    back = {"after_minutes": 60, "do": "restore_budget"}
    scale = {"type": "scale_to_target", "metric": "cpc", "period": "last_7d", "target": 1}
    parse_rule(rule(scale | {"then": back}))
    bid = {"type": "change_bid", "amount": 2, "then": back}
    assert "tasks[0].action.then.do" in errors(rule(bid))


MONEY = st.floats(min_value=0.01, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(
    percent=st.one_of(st.none(), st.floats(min_value=-5, max_value=1200, allow_nan=False)),
    direction=st.sampled_from([None, "increase", "decrease", "sideways"]),
    amount=st.one_of(st.none(), MONEY, st.just(-1.0), st.just("2")),
    low=st.one_of(st.none(), MONEY),
    high=st.one_of(st.none(), MONEY),
)
def test_any_change_bid_either_parses_to_a_consistent_action_or_names_its_path(
    percent: float | None, direction: str | None, amount: Any, low: float | None, high: float | None
) -> None:
    action: dict[str, Any] = {"type": "change_bid"}
    for key, value in (
        ("percent", percent),
        ("direction", direction),
        ("amount", amount),
        ("min_bid", low),
        ("max_bid", high),
    ):
        if value is not None:
            action[key] = value
    data = rule(action)
    parsed, paths = parsed_or_paths(copy.deepcopy(data))
    if parsed is None:
        assert paths and all(p.startswith("tasks[0].action") for p in paths)
        return
    assert isinstance(parsed, ChangeBidAction)
    assert (parsed.percent is None) != (parsed.amount is None)
    assert (parsed.direction is None) == (parsed.percent is None)
    assert parsed.min_bid is None or parsed.max_bid is None or parsed.min_bid <= parsed.max_bid
    assert parse_rule(parsed_rule_json(data)).tasks[0].action == parsed  # a round trip


def parsed_rule_json(data: dict[str, Any]) -> str:
    return parse_rule(data).model_dump_json()


METRICS = [
    "purchase_roas.omni_purchase",
    "cost_per_action_type.purchase",
    "ctr",
    "cpc",
    "actions.purchase",
    "frequency",
    "daily_budget",
    "custom:x",
    "nope",
]


@given(
    metric=st.sampled_from(METRICS),
    target=st.one_of(MONEY, st.just(0.0), st.just(-1.0)),
    cap=st.one_of(st.none(), st.floats(min_value=-1, max_value=2000, allow_nan=False)),
)
def test_any_scale_to_target_either_parses_or_names_its_path(
    metric: str, target: float, cap: float | None
) -> None:
    action: dict[str, Any] = {
        "type": "scale_to_target",
        "metric": metric,
        "period": "last_7d",
        "target": target,
    }
    if cap is not None:
        action["max_change_percent"] = cap
    parsed, paths = parsed_or_paths(rule(action))
    if parsed is None:
        assert paths and all(p.startswith("tasks[0].action") for p in paths)
        return
    assert isinstance(parsed, ScaleToTargetAction) and parsed.target > 0
    assert scaling_direction(resolve_metric(parsed.metric)) is not None


def test_the_catalogue_says_which_way_is_better() -> None:
    def way(name: str) -> str | None:
        return scaling_direction(resolve_metric(name))

    assert way("cost_per_action_type.purchase") == way("cpm") == "lower"
    assert way("purchase_roas.omni_purchase") == way("ctr") == way("actions.lead") == "higher"
    assert way("spend") is way("frequency") is way("daily_budget") is None


# ---------------------------------------------------------------- fetch plan and evaluation


def test_the_scale_metric_is_fetched_with_the_conditions_and_read_by_the_verdict() -> None:
    scale = {
        "type": "scale_to_target",
        "metric": "purchase_roas.omni_purchase",
        "period": "last_nd_14_8",
        "target": 2,
    }
    parsed = parse_rule(rule(scale, level="campaign"))
    assert fetch_groups(parsed) == {"last_nd_14_8": ["purchase_roas"], "today": ["spend"]}
    rows = {
        "today": {"spend": "10"},
        "last_nd_14_8": {"purchase_roas": [{"action_type": "omni_purchase", "value": "3.5"}]},
    }
    ctx = EvalContext(
        entity=Entity(id="1"),
        insights=rows,
        now=datetime(2026, 12, 1, tzinfo=UTC),
        tz=ZoneInfo("UTC"),
    )
    verdict = evaluate_task(parsed.tasks[0], ctx)
    assert verdict.action_metric is not None
    assert verdict.action_metric.as_record() == {
        "metric": "purchase_roas.omni_purchase",
        "period": "last_nd_14_8",
        "actual": 3.5,
    }


# ---------------------------------------------------------------- bids


def kept_inside(plan: Plan, live: int, low: float | None, high: float | None, offset: int) -> bool:
    """Check that a move up stays at or below the upper bound and a move down at or above
    the lower one (in minor units); False when the bounds rounded past each other."""
    lower, upper = lower_bound(low, offset), upper_bound(high, offset)
    after = plan.after
    assert isinstance(after, int)
    if plan.reason in ("bid_bounds_empty", "budget_bounds_empty"):
        assert upper is not None and upper < lower and after == live
        return False
    if after > live:
        assert upper is None or after <= upper
    if after < live:
        assert after >= lower
    return True


def bid(**fields: Any) -> ChangeBidAction:
    return ChangeBidAction(type="change_bid", **fields)


def test_bounds_in_currency_units_round_to_stay_inside() -> None:
    assert upper_bound(2.509, 100) == 250 and lower_bound(0.015, 100) == 2
    assert upper_bound(499.9, 1) == 499 and lower_bound(499.1, 1) == 500
    assert lower_bound(None, 100) == 1 and upper_bound(None, 100) is None


def test_a_percent_bid_change_is_planned_from_the_live_bid() -> None:
    plan = plan_bid(bid(percent=10, direction="increase"), live=450, offset=100)
    assert (plan.field, plan.before, plan.after, plan.clamped_by) == ("bid_amount", 450, 495, [])
    capped = plan_bid(bid(percent=50, direction="increase", max_bid=5), live=450, offset=100)
    assert (capped.requested, capped.after, capped.clamped_by) == (675, 500, ["max_bid"])
    at = plan_bid(bid(percent=10, direction="increase", max_bid=4), live=450, offset=100)
    assert (at.after, at.reason) == (450, "at_max_bid")


def test_an_absolute_bid_is_converted_with_the_accounts_offset() -> None:
    assert plan_bid(bid(amount=2.5), live=450, offset=100).after == 250
    assert plan_bid(bid(amount=700), live=600, offset=1).after == 700  # yen: whole units
    low = plan_bid(bid(amount=1, min_bid=3), live=450, offset=100)
    assert (low.after, low.clamped_by) == (300, ["min_bid"])


@given(
    live=st.integers(min_value=1, max_value=10**9),
    percent=st.floats(min_value=0.01, max_value=99.99),
    up=st.booleans(),
    low=st.one_of(st.none(), st.floats(min_value=0.01, max_value=1e5)),
    high=st.one_of(st.none(), st.floats(min_value=0.01, max_value=1e5)),
    offset=st.sampled_from([1, 100]),
)
def test_a_bid_never_passes_its_bounds_nor_moves_the_wrong_way(
    live: int, percent: float, up: bool, low: float | None, high: float | None, offset: int
) -> None:
    assume(low is None or high is None or low <= high)
    action = bid(
        percent=percent, direction="increase" if up else "decrease", min_bid=low, max_bid=high
    )
    plan = plan_bid(action, live=live, offset=offset)
    after = plan.after
    assert isinstance(after, int) and after >= 1
    assert after >= live if up else after <= live  # never against the direction
    if not kept_inside(plan, live, low, high, offset):
        return
    if plan.changes:  # a change that lands inside the bounds is exactly the percentage
        exact = Decimal(live) * (100 + (1 if up else -1) * Decimal(str(percent))) / 100
        assert abs(Decimal(plan.requested) - exact) <= Decimal("0.5")  # type: ignore[arg-type]


# ---------------------------------------------------------------- scale_to_target


def scale(
    metric: str = "purchase_roas.omni_purchase", target: float = 2, **fields: Any
) -> ScaleToTargetAction:
    return ScaleToTargetAction(
        type="scale_to_target", metric=metric, period="last_7d", target=target, **fields
    )


def test_a_return_above_target_raises_the_budget_in_proportion() -> None:
    plan = plan_scale(scale(), live=10000, metric=3, offset=100, max_change_pct=100)
    assert (plan.requested, plan.after, plan.clamped_by) == (15000, 15000, [])


def test_a_cost_above_target_lowers_the_budget_in_proportion() -> None:
    cpa = scale("cost_per_action_type.purchase", target=10)
    plan = plan_scale(cpa, live=10000, metric=20, offset=100, max_change_pct=90)
    assert (plan.after, plan.clamped_by) == (5000, [])


def test_the_clamps_apply_in_order_and_say_so() -> None:
    capped = scale(max_change_percent=20, max_budget=150)
    plan = plan_scale(capped, live=10000, metric=4, offset=100, max_change_pct=50)
    assert (plan.requested, plan.after) == (20000, 12000)
    assert plan.clamped_by == ["max_budget", "max_change_percent"]
    engine = plan_scale(scale(), live=10000, metric=8, offset=100, max_change_pct=50)
    assert (engine.after, engine.clamped_by) == (15000, ["max_budget_change_pct"])
    floor = plan_scale(scale(min_budget=90), live=10000, metric=1, offset=100, max_change_pct=90)
    assert (floor.after, floor.clamped_by) == (9000, ["min_budget"])
    minimum = plan_scale(
        scale(), live=150, metric=0.2, offset=100, max_change_pct=95, account_minimum=100
    )
    assert (minimum.after, minimum.clamped_by[-1]) == (100, "min_daily_budget")


def test_above_max_budget_a_good_metric_changes_nothing() -> None:
    plan = plan_scale(scale(max_budget=50), live=10000, metric=4, offset=100, max_change_pct=50)
    assert (plan.after, plan.changes, plan.reason) == (10000, False, "at_max_budget")


@given(
    live=st.integers(min_value=1, max_value=10**9),
    metric=st.floats(min_value=0.001, max_value=1e4),
    target=st.floats(min_value=0.001, max_value=1e4),
    cost=st.booleans(),
    low=st.one_of(st.none(), st.floats(min_value=0.01, max_value=1e6)),
    high=st.one_of(st.none(), st.floats(min_value=0.01, max_value=1e6)),
    cap=st.one_of(st.none(), st.floats(min_value=0.1, max_value=1000)),
    engine_cap=st.floats(min_value=1, max_value=100),
    offset=st.sampled_from([1, 100]),
)
def test_a_scaled_budget_never_passes_a_bound_nor_moves_against_the_metric(
    live: int,
    metric: float,
    target: float,
    cost: bool,
    low: float | None,
    high: float | None,
    cap: float | None,
    engine_cap: float,
    offset: int,
) -> None:
    assume(low is None or high is None or low <= high)
    name = "cost_per_action_type.purchase" if cost else "purchase_roas.omni_purchase"
    action = scale(name, target=target, min_budget=low, max_budget=high, max_change_percent=cap)
    plan = plan_scale(action, live=live, metric=metric, offset=offset, max_change_pct=engine_cap)
    after = plan.after
    assert isinstance(after, int) and after >= 1
    ratio = Decimal(str(metric)) / Decimal(str(target))
    better = ratio < 1 if cost else ratio > 1
    worse = ratio > 1 if cost else ratio < 1
    if better:
        assert after >= live
    elif worse:
        assert after <= live
    else:
        assert after == live
    if not kept_inside(plan, live, low, high, offset):
        return
    for percent in (p for p in (cap, engine_cap) if p is not None):
        assert abs(after - live) <= Decimal(live) * Decimal(str(percent)) / 100
