"""Meta's ad rules API as its SDK of mid-2026 has it: the execution types UPDATE_LAX_BUDGET,
UPDATE_LAX_DURATION, AD_RECOMMENDATION_APPLY, DCO and UPDATE_CREATIVE, the ``is_once_off``
flag and the DELIVERY_INSIGHTS_CHANGE trigger. None has a ruleengine equivalent (Meta's
reference lists them without saying what they do): each is reported with its reason."""

from __future__ import annotations

import copy

import pytest
from test_meta_import import BERLIN, errors, fixture

from ruleengine.rules.meta.importing import ImportOptions, import_document

NEW_TYPES = ["UPDATE_LAX_BUDGET", "UPDATE_LAX_DURATION", "AD_RECOMMENDATION_APPLY", "DCO"]


@pytest.mark.parametrize("execution_type", [*NEW_TYPES, "UPDATE_CREATIVE"])
def test_the_new_execution_types_are_reported_with_their_reason(execution_type: str) -> None:
    rule = copy.deepcopy(fixture("scheduled_change_budget_count_limit"))
    rule["execution_spec"] = {"execution_type": execution_type}
    (result,) = import_document(rule, account=BERLIN, options=ImportOptions())
    assert result.rule is None
    why = errors(result)["execution_spec.execution_type"]
    assert execution_type in why or "documents" in why
    assert "an action ruleengine does not have" not in why  # a reason of its own


def test_is_once_off_is_reported_and_false_is_harmless() -> None:
    rule = copy.deepcopy(fixture("scheduled_change_budget_count_limit"))
    rule["execution_spec"]["is_once_off"] = True
    (result,) = import_document(rule, account=BERLIN, options=ImportOptions())
    assert result.rule is None
    assert "is_once_off" in errors(result)["execution_spec.is_once_off"]
    rule["execution_spec"]["is_once_off"] = False
    (result,) = import_document(rule, account=BERLIN, options=ImportOptions())
    assert result.rule is not None


def test_a_delivery_insights_change_trigger_is_named() -> None:
    rule = copy.deepcopy(fixture("scheduled_change_budget_count_limit"))
    rule["evaluation_spec"]["evaluation_type"] = "TRIGGER"
    rule["evaluation_spec"]["trigger"] = {
        "type": "DELIVERY_INSIGHTS_CHANGE",
        "field": "delivery_status",
        "value": "LEARNING_LIMITED",
        "operator": "EQUAL",
    }
    (result,) = import_document(rule, account=BERLIN, options=ImportOptions())
    assert result.rule is None
    assert "DELIVERY_INSIGHTS_CHANGE" in errors(result)["evaluation_spec.trigger.type"]


def test_a_spend_limit_action_has_no_meta_rule_to_export() -> None:
    from ruleengine.rules.language.model import parse_rule
    from ruleengine.rules.meta.exporting import export_rule
    from ruleengine.rules.meta.vocab import MetaAccount

    rule = parse_rule(
        {
            "name": "caps",
            "format": 2,
            "level": "adset",
            "ad_accounts": ["act_1003"],
            "schedule": {"mode": "interval", "every_minutes": 30},
            "tasks": [
                {
                    "id": "t",
                    "conditions": [
                        {"metric": "spend", "period": "today", "operator": ">", "value": 1}
                    ],
                    "action": {
                        "type": "set_spend_limit",
                        "field": "daily_spend_cap",
                        "amount": 80,
                    },
                }
            ],
        }
    )
    exported = export_rule(rule, accounts={"act_1003": MetaAccount("act_1003", "USD", "UTC")})
    assert any(
        p.path.endswith(".action.type") and "no such action" in p.why for p in exported.problems
    )
