"""Meta's ``REBALANCE_BUDGET`` ↔ ``rebalance_budget``: ``MATCHED_ONLY_PROPORTIONAL`` imports
and exports (the sandbox's validator takes what is exported), and the round trip keeps the
rule; the types that move budget to ad sets the rule did not match are errors with a path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from graph_sandbox.adrule_specs import validate_rule
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.meta.exporting import export_rule
from ruleengine.rules.meta.importing import Imported, ImportOptions, import_rule
from ruleengine.rules.meta.vocab import MetaAccount

FIXTURES = Path(__file__).parents[1] / "fixtures" / "meta_rules"
USD = MetaAccount("act_1001", "USD", "America/New_York")
OPTION = "execution_spec.execution_options[0].value"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((FIXTURES / f"{name}.json").read_bytes())
    return data


def imported(raw: dict[str, Any]) -> Imported:
    return import_rule(raw, account=USD, options=ImportOptions(activate=True))


def problems(result: Any, severity: str) -> dict[str, str]:
    return {p.path: p.why for p in result.problems if p.severity == severity}


def test_matched_only_proportional_imports_as_a_rebalance_by_the_cost() -> None:
    result = imported(fixture("rebalance_matched_only_cost_per_install"))
    assert result.rule is not None, [p.line() for p in result.problems]
    rule = parse_rule(result.rule)
    assert rule.level == "adset"
    assert result.rule["tasks"][0]["action"] == {
        "type": "rebalance_budget",
        "metric": "cost_per_action_type.mobile_app_install",
        "period": "last_7d",
    }
    assert "worst to the best" in problems(result, "warning")[OPTION]


def test_the_docs_matched_only_example_imports_with_the_campaign_caveat() -> None:
    result = imported(fixture("rebalance_matched_only_proportional"))
    assert result.rule is not None, [p.line() for p in result.problems]
    action = result.rule["tasks"][0]["action"]
    assert action == {
        "type": "rebalance_budget",
        "metric": "actions.video_view",
        "period": "maximum",
    }
    assert "within each campaign" in problems(result, "warning")[f"{OPTION}.is_cross_campaign"]


@pytest.mark.parametrize(
    ("change", "path", "why"),
    [
        ({"is_inverse": False}, f"{OPTION}.is_inverse", "lower-is-better"),
        ({"target_count": 3}, f"{OPTION}.target_count", "every matched one"),
        ({"target_field": "frequency"}, f"{OPTION}.target_field", "neither"),
        ({"target_field": "cpa"}, f"{OPTION}.target_field", "name the action"),
        ({"type": "PROPORTIONAL"}, f"{OPTION}.type", "pauses the matched ones"),
    ],
)
def test_what_does_not_map_is_an_error_with_its_path(
    change: dict[str, Any], path: str, why: str
) -> None:
    raw = copy.deepcopy(fixture("rebalance_matched_only_cost_per_install"))
    raw["execution_spec"]["execution_options"][0]["value"].update(change)
    result = imported(raw)
    assert result.rule is None
    assert why in problems(result, "error")[path]


def _exported(rule: Rule) -> dict[str, Any]:
    exported = export_rule(rule, accounts={USD.id: USD})
    assert exported.complete, [p.line() for p in exported.problems]
    (only,) = exported.rules
    body = only.body
    validate_rule(body["evaluation_spec"], body["execution_spec"], body["schedule_spec"])
    return body


def test_the_fixture_round_trips_through_our_rule_to_the_same_execution_spec() -> None:
    raw = fixture("rebalance_matched_only_cost_per_install")
    result = imported(raw)
    assert result.rule is not None
    rule = parse_rule(result.rule)
    body = _exported(rule)
    assert body["execution_spec"] == raw["execution_spec"]
    back = imported(body)
    assert back.rule is not None, [p.line() for p in back.problems]
    assert parse_rule(back.rule).tasks == rule.tasks


@pytest.mark.parametrize(
    ("metric", "period", "inverse"),
    [
        ("website_purchase_roas.offsite_conversion.fb_pixel_purchase", "last_7d", False),
        ("ctr", "last_3d", False),
        ("cpc", "yesterday", True),
        ("cost_per_action_type.link_click", "last_14d", True),
    ],
)
def test_our_rebalance_exports_and_imports_back_as_itself(
    metric: str, period: str, inverse: bool
) -> None:
    rule = parse_rule(
        {
            "name": "Rebalance",
            "format": 2,
            "level": "adset",
            "ad_accounts": [USD.id],
            "schedule": {"mode": "interval", "every_minutes": 60},
            "timezone": "America/New_York",
            "tasks": [
                {
                    "id": "meta",
                    "conditions": [
                        {"metric": "spend", "period": period, "operator": ">", "value": 10}
                    ],
                    "action": {"type": "rebalance_budget", "metric": metric, "period": period},
                }
            ],
        }
    )
    body = _exported(rule)
    spec = body["execution_spec"]["execution_options"][0]["value"]
    assert spec["type"] == "MATCHED_ONLY_PROPORTIONAL" and spec["is_inverse"] is inverse
    back = imported(body)
    assert back.rule is not None, [p.line() for p in back.problems]
    assert parse_rule(back.rule).tasks[0].action == rule.tasks[0].action


def test_what_meta_cannot_say_of_a_rebalance_is_reported_with_its_path() -> None:
    base: dict[str, Any] = {
        "name": "Rebalance",
        "format": 2,
        "level": "campaign",
        "ad_accounts": [USD.id],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "tasks": [
            {
                "id": "t",
                "conditions": [
                    {"metric": "spend", "period": "last_7d", "operator": ">", "value": 1}
                ],
                "action": {"type": "rebalance_budget", "metric": "ctr", "period": "last_7d"},
            }
        ],
    }
    campaign = export_rule(parse_rule(base), accounts={USD.id: USD})
    assert "ad set budgets" in problems(campaign, "error")["tasks[0].action.type"]
    bounded = copy.deepcopy(base) | {"level": "adset"}
    bounded["tasks"][0]["action"]["max_budget"] = 100
    result = export_rule(parse_rule(bounded), accounts={USD.id: USD})
    assert "no budget bounds" in problems(result, "error")["tasks[0].action.max_budget"]
