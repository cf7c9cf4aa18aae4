"""``budget_utilization``: spend against the daily budget over a period, so that a day at up
to 175 % (Meta's 75 % daily flexibility) is told apart from a week over budget."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import EvalContext, resolve
from ruleengine.rules.fetch import fetch_groups
from ruleengine.rules.language.catalog import resolve_metric
from ruleengine.rules.language.model import parse_rule

NOW = datetime(2026, 12, 5, 18, 0, tzinfo=UTC)
SPEC = resolve_metric("budget_utilization")


def ctx(daily_budget: int | None, insights: dict[str, dict[str, str]]) -> EvalContext:
    return EvalContext(Entity(id="1", daily_budget=daily_budget), insights, NOW, ZoneInfo("UTC"))


def test_a_flexible_day_reads_over_100_while_its_week_is_within_budget() -> None:
    # $100 a day: $170 spent today (1.7×, allowed), $680 over the last 7 days (under 7×)
    seen = ctx(10000, {"today": {"spend": "170.00"}, "last_7d": {"spend": "680.00"}})
    assert resolve(SPEC, "today", seen) == 170.0
    assert abs(resolve(SPEC, "last_7d", seen) - 680 / 7) < 1e-9  # type: ignore[operator]
    assert resolve(SPEC, None, seen) == 170.0  # default: today


def test_no_daily_budget_or_an_open_period_is_no_data() -> None:
    assert resolve(SPEC, "today", ctx(None, {"today": {"spend": "1"}})) is None
    assert resolve(SPEC, "maximum", ctx(10000, {"maximum": {"spend": "1"}})) is None


def test_the_period_of_the_condition_is_fetched() -> None:
    rule = parse_rule(
        {
            "name": "r",
            "format": 2,
            "level": "adset",
            "ad_accounts": ["act_1001"],
            "schedule": {"mode": "interval", "every_minutes": 30},
            "tasks": [
                {
                    "id": "t",
                    "conditions": [
                        {
                            "metric": "budget_utilization",
                            "period": "last_7d",
                            "operator": ">",
                            "value": 100,
                        }
                    ],
                    "action": {"type": "decrease_budget", "percent": 10},
                }
            ],
        }
    )
    assert fetch_groups(rule) == {"last_7d": ["spend"]}
    assert "daily_budget" in rule.entity_fields()
