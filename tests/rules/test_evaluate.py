"""Pure evaluation: the numbers a condition sees, the 6 operators, all/any, no data."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import EvalContext, evaluate_condition, evaluate_task
from ruleengine.rules.fetch import custom_metric_names, fetch_groups
from ruleengine.rules.language.model import Condition, Task, parse_rule

NOW = datetime(2026, 12, 1, 18, 30, tzinfo=UTC)
ENTITY = Entity.model_validate(
    {
        "id": "120210000000001",
        "name": "[AUTO] Prospecting",
        "daily_budget": "10000",
        "created_time": "2026-11-28T18:30:00+0000",
    }
)
ROWS = {
    "today": {"spend": "60.00", "impressions": "12000", "clicks": "240", "ctr": "2.0"},
    "last_7d": {
        "spend": "700.00",
        "purchase_roas": [{"action_type": "omni_purchase", "value": "3.5"}],
        "actions": [{"action_type": "omni_purchase", "value": "40"}],
    },
}


def ctx(**overrides: Any) -> EvalContext:
    values: dict[str, Any] = {
        "entity": ENTITY,
        "insights": ROWS,
        "now": NOW,
        "tz": ZoneInfo("Asia/Jakarta"),
    }
    return EvalContext(**(values | overrides))


def cond(**data: Any) -> Condition:
    return Condition.model_validate(data)


@pytest.mark.parametrize(
    ("operator", "value", "passed"),
    [
        (">", 59, True),
        (">=", 60, True),
        ("<", 60, False),
        ("<=", 60, True),
        ("==", 60, True),
        ("!=", 60, False),
    ],
)
def test_six_operators(operator: str, value: float, passed: bool) -> None:
    result = evaluate_condition(
        cond(metric="spend", period="today", operator=operator, value=value), ctx()
    )
    assert result.passed is passed
    assert result.actual == 60.0


def test_dotted_keys_pick_the_action_type() -> None:
    result = evaluate_condition(
        cond(metric="purchase_roas.omni_purchase", period="last_7d", operator=">", value=3), ctx()
    )
    assert (result.actual, result.passed) == (3.5, True)


def test_missing_count_is_zero_but_missing_ratio_is_no_data() -> None:
    purchases = evaluate_condition(
        cond(metric="actions.omni_purchase", period="today", operator="==", value=0), ctx()
    )
    assert (purchases.actual, purchases.passed) == (0.0, True)
    roas = evaluate_condition(
        cond(metric="purchase_roas.omni_purchase", period="today", operator="<", value=1), ctx()
    )
    assert (roas.actual, roas.passed, roas.reason) == (None, False, "no_data")
    nothing = evaluate_condition(
        cond(metric="cpc", period="yesterday", operator=">", value=0), ctx()
    )
    assert nothing.reason == "no_data"


def test_metric_versus_metric_with_multiplier_in_currency_units() -> None:
    result = evaluate_condition(
        cond(
            metric="spend",
            period="today",
            operator=">",
            compare_to={"metric": "daily_budget", "multiplier": 0.5},
        ),
        ctx(),
    )
    # daily_budget 10000 cents = $100; half of it is $50; spend $60 passes
    assert (result.expected, result.passed, result.compare_to) == (50.0, True, "0.5 × daily_budget")


def test_special_keys() -> None:
    c = ctx()
    values = {
        name: evaluate_condition(cond(metric=name, operator=">", value=-1), c).actual
        for name in (
            "current_hour",
            "hours_left_today",
            "age_hours",
            "budget_spent_pct",
            "daily_budget",
        )
    }
    assert values["current_hour"] == 1.0  # 18:30 UTC is 01:30 in Jakarta
    assert values["hours_left_today"] == 22.5
    assert values["age_hours"] == 72.0
    assert values["budget_spent_pct"] == 60.0
    assert values["daily_budget"] == 100.0
    lifetime = evaluate_condition(cond(metric="lifetime_budget", operator=">", value=0), c)
    assert lifetime.reason == "no_data"


def test_custom_metric_lookup_and_missing_value() -> None:
    lookup = {"target_roas": 2.0}.get
    result = evaluate_condition(
        cond(metric="custom:target_roas", operator="<", value=3), ctx(custom=lookup)
    )
    assert (result.actual, result.passed) == (2.0, True)
    missing = evaluate_condition(
        cond(metric="custom:other", operator="<", value=3), ctx(custom=lookup)
    )
    assert missing.reason == "no_data"


def test_all_and_any() -> None:
    conditions = [
        {"metric": "spend", "period": "today", "operator": ">", "value": 100},
        {"metric": "ctr", "period": "today", "operator": ">", "value": 1},
    ]
    action = {"type": "pause"}
    every = Task.model_validate(
        {"id": "a", "match": "all", "conditions": conditions, "action": action}
    )
    some = Task.model_validate(
        {"id": "b", "match": "any", "conditions": conditions, "action": action}
    )
    assert evaluate_task(every, ctx()).passed is False
    verdict = evaluate_task(some, ctx())
    assert verdict.passed is True
    assert [c.passed for c in verdict.conditions] == [False, True]


def test_fetch_groups_by_period_with_comparators_and_without_special_keys() -> None:
    rule = parse_rule(
        {
            "name": "r",
            "level": "campaign",
            "ad_accounts": ["act_1"],
            "schedule": {"mode": "interval", "every_minutes": 5},
            "custom_metrics": {"spreadsheet_id": "s"},
            "tasks": [
                {
                    "id": "t",
                    "conditions": [
                        {
                            "metric": "actions.purchase",
                            "period": "last_7d",
                            "operator": ">",
                            "value": 1,
                        },
                        {
                            "metric": "actions.lead",
                            "period": "last_7d",
                            "operator": ">",
                            "value": 1,
                        },
                        {
                            "metric": "cpc",
                            "period": "today",
                            "operator": ">",
                            "compare_to": {"metric": "cpm", "period": "last_7d"},
                        },
                        {
                            "metric": "spend",
                            "period": "today",
                            "operator": ">",
                            "compare_to": {"metric": "daily_budget"},
                        },
                        {"metric": "custom:margin", "operator": ">", "value": 1},
                        {"metric": "current_hour", "operator": ">", "value": 1},
                        {"metric": "budget_spent_pct", "operator": ">", "value": 1},
                    ],
                    "action": {"type": "pause"},
                }
            ],
        }
    )
    assert fetch_groups(rule) == {"last_7d": ["actions", "cpm"], "today": ["cpc", "spend"]}
    assert custom_metric_names(rule) == ["margin"]
    assert "daily_budget" in rule.entity_fields()
