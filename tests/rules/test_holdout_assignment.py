"""Holdouts, pure: the option parsed strictly, the assignment stable and converging to its
share, and the impact measure (difference in differences with a bootstrap interval)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.errors import RuleValidationError
from ruleengine.rules.holdout import Holdout, holdout_draw, is_held_out
from ruleengine.rules.impact import MIN_ENTITIES, Decision, Hourly, measure
from ruleengine.rules.model import parse_rule

T0 = datetime(2026, 11, 20, 14, 30, tzinfo=UTC)


def rule_with(holdout: Any = None) -> dict[str, Any]:
    task: dict[str, Any] = {
        "id": "t",
        "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
        "action": {"type": "pause"},
    }
    if holdout is not None:
        task["holdout"] = holdout
    return {
        "name": "Held",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "timezone": "UTC",
        "tasks": [task],
    }


def test_the_option_is_a_percent_from_1_to_50_with_an_optional_salt() -> None:
    rule = parse_rule(rule_with({"percent": 30}))
    assert rule.tasks[0].holdout == Holdout(percent=30)
    assert "holdout" not in parse_rule(rule_with()).definition()["tasks"][0]
    for bad, path in [
        ({"percent": 0}, "tasks[0].holdout.percent"),
        ({"percent": 51}, "tasks[0].holdout.percent"),
        ({"percent": 10, "share": 1}, "tasks[0].holdout.share"),
        ({}, "tasks[0].holdout.percent"),
    ]:
        with pytest.raises(RuleValidationError) as caught:
            parse_rule(rule_with(bad))
        assert path in str(caught.value), caught.value


@settings(max_examples=25, deadline=None)
@given(percent=st.floats(1, 50), salt=st.text(max_size=8), rule_id=st.text(min_size=1, max_size=12))
def test_the_held_out_share_converges_to_the_percent(
    percent: float, salt: str, rule_id: str
) -> None:
    holdout = Holdout(percent=percent, salt=salt)
    n = 4000
    held = sum(is_held_out(rule_id, "t", f"1202{i:08d}", holdout) for i in range(n))
    # 4.5 standard deviations of a binomial share: fails about once in 150,000 examples
    sd = (percent / 100 * (1 - percent / 100) / n) ** 0.5
    assert abs(held / n - percent / 100) < 4.5 * sd


@given(
    rule_id=st.text(min_size=1, max_size=12),
    task_id=st.text(min_size=1, max_size=8),
    entity_id=st.text(min_size=1, max_size=16),
    percent=st.floats(1, 50),
    salt=st.text(max_size=8),
)
def test_assignment_never_flips_while_the_setting_is_unchanged(
    rule_id: str, task_id: str, entity_id: str, percent: float, salt: str
) -> None:
    holdout = Holdout(percent=percent, salt=salt)
    first = is_held_out(rule_id, task_id, entity_id, holdout)
    assert all(is_held_out(rule_id, task_id, entity_id, holdout) == first for _ in range(5))
    # the same setting parsed again from a rule document decides the same
    again = Holdout.model_validate(holdout.model_dump())
    assert is_held_out(rule_id, task_id, entity_id, again) == first
    draw = holdout_draw(rule_id, task_id, entity_id, salt)
    assert 0 <= draw < 1 and first == (draw < percent / 100)
    # raising the percent only moves entities into the held-out group
    more = Holdout(percent=min(50, percent + 10), salt=salt)
    assert not first or is_held_out(rule_id, task_id, entity_id, more)
    assert not is_held_out(rule_id, task_id, entity_id, None)


def _series(
    profit_per_hour: float, *, from_: datetime, hours: int, spend: float = 10.0
) -> dict[datetime, Hourly]:
    start = from_.replace(minute=0, second=0, microsecond=0)
    return {
        start + timedelta(hours=h): Hourly(
            spend=spend, purchases=1, revenue=spend + profit_per_hour
        )
        for h in range(hours)
    }


def _world(
    effect_per_hour: float, *, acted: int, held: int
) -> tuple[list[Decision], dict[str, Any]]:
    """Entities with a baseline of +1/h; acted ones earn ``effect_per_hour`` more after T0."""
    decisions, hours = [], {}
    for i in range(acted + held):
        entity, is_held = f"e{i}", i >= acted
        before = _series(1.0, from_=T0 - timedelta(hours=30), hours=30)
        after_profit = 1.0 + (0 if is_held else effect_per_hour) + (i % 3) * 0.1
        after = _series(after_profit, from_=T0 + timedelta(hours=1), hours=30)
        hours[entity] = before | after
        decisions.append(Decision(entity, T0, is_held))
    return decisions, hours


def test_the_effect_is_acted_minus_held_out_change_with_an_interval_around_it() -> None:
    decisions, hours = _world(2.0, acted=12, held=6)
    impact = measure("t", decisions, hours, window="24h", now=T0 + timedelta(days=2), measured=True)
    assert (impact.acted, impact.held_out, impact.enough) == (12, 6, True)
    profit = impact.effects["profit"]
    assert profit.low <= 48 <= profit.high and profit.effect == pytest.approx(48, abs=3)
    assert impact.total_profit_effect == pytest.approx(profit.effect * 12)
    assert len(impact.chart["acted"]) == 24 and impact.chart["acted"][0] > 1.5


def test_below_the_minimum_or_before_the_window_ends_there_is_not_enough_data() -> None:
    decisions, hours = _world(2.0, acted=12, held=MIN_ENTITIES - 1)
    impact = measure("t", decisions, hours, window="24h", now=T0 + timedelta(days=2), measured=True)
    assert not impact.enough and not impact.effects and "not enough data yet" in impact.note
    decisions, hours = _world(2.0, acted=12, held=6)
    early = measure(
        "t", decisions, hours, window="24h", now=T0 + timedelta(hours=20), measured=True
    )
    assert (early.acted_complete, early.enough) == (0, False)


def test_without_a_holdout_the_effect_is_not_measured() -> None:
    decisions, hours = _world(2.0, acted=12, held=0)
    impact = measure(
        "t", decisions, hours, window="24h", now=T0 + timedelta(days=2), measured=False
    )
    assert (impact.acted, impact.effects, impact.chart) == (12, {}, {})
    assert impact.note.startswith("not measured")


def test_an_entity_whose_delivery_could_not_be_read_is_counted_not_measured() -> None:
    decisions, hours = _world(2.0, acted=12, held=6)
    del hours["e0"]  # e.g. Graph refused its rows: not the same as "delivered nothing"
    impact = measure("t", decisions, hours, window="24h", now=T0 + timedelta(days=2), measured=True)
    assert (impact.acted, impact.acted_complete) == (12, 11)
