"""A rule's ``effective_status`` filter takes exactly Meta's values, as the sandbox does."""

from __future__ import annotations

from typing import Any

import pytest

from graph_sandbox.reads import EFFECTIVE_STATUSES as GRAPH_EFFECTIVE_STATUSES
from ruleengine.errors import RuleValidationError
from ruleengine.rules.language.model import EFFECTIVE_STATUSES, parse_rule

#: Meta's list for the ``effective_status`` parameter of its listing edges.
META = {
    "ACTIVE",
    "PAUSED",
    "DELETED",
    "PENDING_REVIEW",
    "DISAPPROVED",
    "PREAPPROVED",
    "PENDING_BILLING_INFO",
    "CAMPAIGN_PAUSED",
    "ARCHIVED",
    "ADSET_PAUSED",
    "IN_PROCESS",
    "WITH_ISSUES",
}


def _rule(statuses: list[str]) -> dict[str, Any]:
    return {
        "name": "Status filter",
        "level": "adset",
        "ad_accounts": ["act_1001"],
        "filters": [{"field": "effective_status", "operator": "IN", "value": statuses}],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": "t",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "pause"},
            }
        ],
    }


def test_the_rule_model_and_the_sandbox_know_metas_list() -> None:
    assert set(EFFECTIVE_STATUSES) == META
    assert set(GRAPH_EFFECTIVE_STATUSES) == META


@pytest.mark.parametrize("status", sorted(META))
def test_every_meta_status_is_a_valid_filter_value(status: str) -> None:
    assert parse_rule(_rule([status])).filters[0].value == [status]


def test_a_status_meta_does_not_have_is_refused() -> None:
    with pytest.raises(RuleValidationError) as info:
        parse_rule(_rule(["ACTIVE", "RUNNING"]))
    assert [e.path for e in info.value.errors] == ["filters[0].value[1]"]
