"""Holdouts, pure: the option parsed strictly, the assignment stable and converging to its
share (the impact measure: tests/rules/test_impact_measure.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.errors import RuleValidationError
from ruleengine.rules.impact.holdout import Holdout, holdout_draw, is_held_out
from ruleengine.rules.language.model import parse_rule


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
