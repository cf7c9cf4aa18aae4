"""7-day and 28-day view attribution stopped returning data on 2026-01-12 (Meta's blog "Ads
Insights API Metric Availability Updates", 2025-10-16): asked for, they are refused with the
reason and the nearest window that still exists."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_meta_import import BERLIN, errors, fixture

from ruleengine.errors import RuleValidationError
from ruleengine.rules.language.catalog import gone_window
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.meta.importing import ImportOptions, import_document

RULE: dict[str, Any] = {
    "name": "r",
    "format": 2,
    "level": "campaign",
    "ad_accounts": ["act_1001"],
    "schedule": {"mode": "interval", "every_minutes": 15},
    "tasks": [{"id": "t", "conditions": [], "action": {"type": "pause"}}],
}


@pytest.mark.parametrize("window", ["7d_view", "28d_view", "7D_VIEW", "28d_view_first_conversion"])
def test_the_gone_windows_name_the_nearest_left(window: str) -> None:
    why = gone_window(window)
    assert why is not None and "2026-01-12" in why and "1d_view" in why


@pytest.mark.parametrize("window", ["1d_view", "7d_click", "28d_click", "1d_ev", "default"])
def test_the_windows_meta_still_returns_pass(window: str) -> None:
    assert gone_window(window) is None


def test_a_rule_metric_on_a_gone_window_is_rejected_at_its_path() -> None:
    data = copy.deepcopy(RULE)
    data["tasks"][0]["conditions"] = [
        {
            "metric": "actions.offsite_conversion.fb_pixel_purchase.7d_view",
            "period": "last_7d",
            "operator": ">",
            "value": 1,
        }
    ]
    with pytest.raises(RuleValidationError) as refused:
        parse_rule(data)
    assert "7d_click for the same length" in str(refused.value)
    assert "tasks[0].conditions[0].metric" in str(refused.value)


@pytest.mark.parametrize(("window", "longer"), [("7D_VIEW", "7d_click"), ("28D_VIEW", "28d_click")])
def test_an_imported_meta_rule_with_a_gone_window_is_not_converted(
    window: str, longer: str
) -> None:
    rule = fixture("scheduled_change_budget_count_limit")
    filters = rule["evaluation_spec"]["filters"]
    filters.append({"field": "attribution_window", "value": window, "operator": "EQUAL"})
    (result,) = import_document(rule, account=BERLIN, options=ImportOptions())
    assert result.rule is None
    path = f"evaluation_spec.filters[{len(filters) - 1}]"
    why = errors(result)[path]
    assert "2026-01-12" in why and "1d_view" in why and longer in why
