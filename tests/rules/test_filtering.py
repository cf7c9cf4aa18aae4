"""Rule filters applied locally (the comparison with the sandbox is tests/test_listings.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ruleengine.rules.filtering import EVERY_STATUS, LocalFilter, wire

CAMPAIGNS = [
    {"id": "11", "name": "[AUTO] Prospecting US 1", "effective_status": "ACTIVE"},
    {"id": "12", "name": "[auto] retargeting", "effective_status": "PAUSED"},
    {"id": "13", "name": "Clearance", "effective_status": "ARCHIVED"},
    {"id": "14", "name": "Gone", "effective_status": "DELETED"},
    {"id": "15", "name": "5", "effective_status": "WITH_ISSUES", "objective": "OUTCOME_LEADS"},
]


def ids(level: str, filtering: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[str]:
    return [str(i["id"]) for i in LocalFilter(level, wire(filtering)).select(items)]


def test_archived_and_deleted_objects_only_for_filters_that_name_a_status() -> None:
    assert ids("campaign", [], CAMPAIGNS) == ["11", "12", "15"]
    everything = [{"field": "effective_status", "operator": "NOT_IN", "value": ["PAUSED"]}]
    assert ids("campaign", everything, CAMPAIGNS) == ["11", "13", "14", "15"]
    assert ids("campaign", EVERY_STATUS, CAMPAIGNS) == ["11", "12", "13", "14", "15"]
    named = [{"field": "name", "operator": "NOT_EQUAL", "value": "x"}]
    assert ids("campaign", named, CAMPAIGNS) == ["11", "12", "15"]


def test_contain_ignores_case_and_equal_does_not() -> None:
    contain = [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}]
    assert ids("campaign", contain, CAMPAIGNS) == ["11", "12"]
    equal = [{"field": "name", "operator": "EQUAL", "value": "[AUTO] PROSPECTING US 1"}]
    assert ids("campaign", equal, CAMPAIGNS) == []


def test_numbers_compare_as_numbers_and_text_fails_number_operators() -> None:
    assert ids("campaign", [{"field": "name", "operator": "EQUAL", "value": 5.0}], CAMPAIGNS) == [
        "15"
    ]
    above = [{"field": "id", "operator": "GREATER_THAN", "value": 11.5}]
    assert ids("campaign", above, CAMPAIGNS) == ["12", "15"]
    assert ids("campaign", [{"field": "name", "operator": "LESS_THAN", "value": 9}], CAMPAIGNS) == [
        "15"
    ]
    listed = [{"field": "id", "operator": "IN", "value": [12.0, "15"]}]
    assert ids("campaign", listed, CAMPAIGNS) == ["12", "15"]


def test_not_operators_keep_objects_without_the_field() -> None:
    no_leads = [{"field": "objective", "operator": "NOT_EQUAL", "value": "OUTCOME_LEADS"}]
    assert ids("campaign", no_leads, CAMPAIGNS) == ["11", "12"]
    leads = [{"field": "objective", "operator": "NOT_IN", "value": ["OUTCOME_SALES"]}]
    assert ids("campaign", leads, CAMPAIGNS) == ["11", "12", "15"]


def test_ad_sets_read_their_campaign_for_campaign_fields() -> None:
    adsets = [
        {"id": "21", "name": "a", "effective_status": "ACTIVE", "campaign_id": "11"},
        {"id": "22", "name": "b", "effective_status": "CAMPAIGN_PAUSED", "campaign_id": "12"},
    ]
    parents = {str(c["id"]): c for c in CAMPAIGNS}
    by_name = LocalFilter(
        "adset", wire([{"field": "campaign.name", "operator": "CONTAIN", "value": "retarget"}])
    )
    assert by_name.parent_fields == {"name"}
    assert [a["id"] for a in by_name.select(adsets, parents)] == ["22"]
    by_id = LocalFilter("adset", wire([{"field": "campaign.id", "operator": "EQUAL", "value": 11}]))
    assert by_id.parent_fields == set()
    assert by_id.fields == {"campaign_id", "effective_status"}
    assert [a["id"] for a in by_id.select(adsets)] == ["21"]
    own = LocalFilter("adset", wire([{"field": "adset.name", "operator": "EQUAL", "value": "b"}]))
    assert [a["id"] for a in own.select(adsets)] == ["22"]


def test_operators_and_fields_that_cannot_be_applied_locally_are_refused() -> None:
    with pytest.raises(ValueError, match="IN_RANGE"):
        LocalFilter("campaign", [{"field": "id", "operator": "IN_RANGE", "value": [1, 2]}])
    with pytest.raises(ValueError, match=r"adset\.name"):
        LocalFilter("campaign", [{"field": "adset.name", "operator": "EQUAL", "value": "x"}])
