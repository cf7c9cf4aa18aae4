"""The rule builder's vocabulary agrees with the catalogue and the rule format it describes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.language.catalog import Source, known_names, resolve_metric, scaling_direction
from ruleengine.rules.language.model import EFFECTIVE_STATUSES, FILTER_FIELDS, rule_json_schema
from ruleengine.rules.language.vocabulary import METRIC_TEXTS, UNITS, vocabulary

VOCABULARY = vocabulary()
SCHEMA = rule_json_schema()
DEFS = SCHEMA["$defs"]
ENTRIES: list[dict[str, Any]] = [m for g in VOCABULARY["metrics"] for m in g["metrics"]]
CONCRETE = [m for m in ENTRIES if not m["pattern"]]
PATTERNS = [m for m in ENTRIES if m["pattern"]]
MONEY_UNITS = {"money"}


def _enum(prop: dict[str, Any]) -> list[Any]:
    """The enum of a schema property, through an ``anyOf`` with null."""
    for option in prop.get("anyOf", [prop]):
        if "enum" in option:
            return list(option["enum"])
    raise AssertionError(f"no enum in {prop}")


def test_every_known_metric_has_a_label_unit_and_description() -> None:
    assert set(METRIC_TEXTS) == set(known_names())
    for name, (label, unit, description) in METRIC_TEXTS.items():
        assert label and description.endswith("."), name
        assert unit in UNITS, name


def test_every_known_metric_is_offered_once_and_patterns_are_exactly_the_templates() -> None:
    names = [m["name"] for m in ENTRIES]
    assert len(names) == len(set(names))
    assert set(known_names()) <= set(names)
    assert {m["name"] for m in PATTERNS} == {n for n in known_names() if "<" in n}
    assert all(m["name"] in known_names() for m in PATTERNS)


def test_the_groups_are_the_contract_s_in_order() -> None:
    assert [g["group"] for g in VOCABULARY["metrics"]] == [
        "Spend and cost",
        "Delivery",
        "Clicks",
        "Conversions",
        "Value and ROAS",
        "Results",
        "Cost per result",
        "Rankings (ads)",
        "Budget",
        "Time",
        "Custom",
    ]
    assert set(ENTRIES[0]) == {
        "name", "label", "description", "unit", "needs_period", "target", "pattern", "levels",
    }  # fmt: skip


@pytest.mark.parametrize("entry", CONCRETE, ids=lambda m: m["name"])
def test_every_concrete_name_resolves_and_agrees_with_the_catalogue(entry: dict[str, Any]) -> None:
    spec = resolve_metric(entry["name"])
    assert (entry["unit"] in MONEY_UNITS) == spec.money
    assert entry["needs_period"] == spec.needs_period
    assert entry["target"] == scaling_direction(spec)
    assert entry["unit"] in UNITS and entry["label"] and entry["description"]


def test_common_dotted_names_are_listed_with_ads_manager_labels() -> None:
    labels = {m["name"]: m["label"] for m in CONCRETE}
    assert labels["actions.omni_purchase"] == "Purchases"
    assert labels["action_values.omni_purchase"] == "Purchase value"
    assert labels["purchase_roas.omni_purchase"] == "ROAS (purchases)"
    assert labels["cost_per_action_type.omni_purchase"] == "Cost per purchase"
    assert labels["cost_per_action_type.lead"] == "Cost per lead"
    assert labels["actions.add_to_cart"] == "Adds to cart"
    by_name = {m["name"]: m for m in ENTRIES}
    assert by_name["spend"]["unit"] == "money" and by_name["spend"]["target"] is None
    assert by_name["purchase_roas.omni_purchase"]["unit"] == "multiple"
    assert "÷" in by_name["purchase_roas.omni_purchase"]["description"]
    assert by_name["cost_per_action_type.omni_purchase"]["target"] == "lower"
    assert by_name["current_hour"]["needs_period"] is False
    assert by_name["custom:<name>"]["pattern"] is True


@given(
    entry=st.sampled_from([m for m in PATTERNS if m["name"] != "custom:<name>"]),
    action_type=st.from_regex(r"[a-z0-9_]{1,20}(\.[a-z0-9_]{1,20}){0,2}", fullmatch=True),
)
def test_a_pattern_entry_describes_every_name_it_stands_for(
    entry: dict[str, Any], action_type: str
) -> None:
    spec = resolve_metric(entry["name"].replace("<action_type>", action_type))
    assert (entry["unit"] in MONEY_UNITS) == spec.money
    assert (entry["needs_period"], entry["target"]) == (spec.needs_period, scaling_direction(spec))


@given(name=st.from_regex(r"[a-z0-9_]{1,64}", fullmatch=True))
def test_the_custom_pattern_describes_every_custom_name(name: str) -> None:
    (entry,) = [m for m in PATTERNS if m["name"] == "custom:<name>"]
    spec = resolve_metric(f"custom:{name}")
    assert spec.source is Source.CUSTOM
    assert (entry["needs_period"], entry["target"]) == (False, None)


def test_every_period_the_schema_takes_is_listed_or_an_alias_of_a_listed_one() -> None:
    accepted = _enum(DEFS["Condition"]["properties"]["period"])
    listed = [p["value"] for p in VOCABULARY["periods"]]
    aliases = VOCABULARY["period_aliases"]
    assert len(listed) == len(set(listed)) and all(p["label"] for p in VOCABULARY["periods"])
    assert set(listed) | set(aliases) == set(accepted)
    assert not set(listed) & set(aliases)
    assert set(aliases.values()) <= set(listed)
    labels = {p["value"]: p["label"] for p in VOCABULARY["periods"]}
    assert labels["last_nd_14_8"] == "Days 14 to 8 ago"
    assert labels["last_3d"] != labels["last_3_days"]  # today left out / included


def test_operators_are_the_schema_s_with_labels() -> None:
    ops = {o["value"]: o["label"] for o in VOCABULARY["operators"]}
    assert list(ops) == _enum(DEFS["Condition"]["properties"]["operator"])
    assert (ops["IN_RANGE"], ops["NOT_IN_RANGE"]) == ("is between", "is not between")
    filter_ops = [o["value"] for o in VOCABULARY["filter_operators"]]
    assert filter_ops == _enum(DEFS["Filter"]["properties"]["operator"])
    assert all(o["label"] for o in VOCABULARY["filter_operators"])


def test_filter_fields_are_exactly_those_meta_allows_per_level() -> None:
    fields = VOCABULARY["filter_fields"]
    assert set(fields) == set(FILTER_FIELDS)
    for level, allowed in FILTER_FIELDS.items():
        assert {f["field"] for f in fields[level]} == allowed
        assert len(fields[level]) == len(allowed)
        for f in fields[level]:
            assert f["kind"] in {"text", "status", "choice", "id", "number"} and f["label"]
            assert ("values" in f) == (f["kind"] in {"status", "choice"})
            if f["kind"] == "status":
                assert f["values"] == VOCABULARY["effective_statuses"][level]
            if f["kind"] == "choice":
                assert all(v.startswith("OUTCOME_") for v in f["values"])


def test_statuses_are_the_level_s_subset_of_meta_s() -> None:
    statuses = VOCABULARY["effective_statuses"]
    assert set(statuses) == set(FILTER_FIELDS)
    for values in statuses.values():
        assert set(values) <= EFFECTIVE_STATUSES and "ACTIVE" in values
    assert "ADSET_PAUSED" not in statuses["campaign"] + statuses["adset"]
    assert {"ADSET_PAUSED", "DISAPPROVED"} <= set(statuses["ad"])
    assert "CAMPAIGN_PAUSED" in statuses["adset"]
    assert "CAMPAIGN_PAUSED" not in statuses["campaign"]


def test_action_kinds_are_the_schema_discriminator_s() -> None:
    mapping = DEFS["Task"]["properties"]["action"]["discriminator"]["mapping"]
    kinds = VOCABULARY["action_kinds"]
    assert {k["type"] for k in kinds} == set(mapping) and len(kinds) == len(mapping)
    levels = {k["type"]: k["levels"] for k in kinds}
    assert levels["change_bid"] == ["adset"] and levels["pause"] == ["campaign", "adset", "ad"]
    assert levels["increase_budget"] == ["campaign", "adset"]
    assert [v["value"] for v in VOCABULARY["levels"]] == ["campaign", "adset", "ad"]
    assert all(k["label"] for k in kinds)


def test_rankings_are_read_on_ads_only_and_budgets_above_them() -> None:
    by_name = {m["name"]: m for m in ENTRIES}
    assert by_name["quality_ranking"]["levels"] == ["ad"]
    assert by_name["quality_ranking"]["scale"][0] == "BELOW_AVERAGE_10"
    assert by_name["daily_budget"]["levels"] == ["campaign", "adset"]
    assert by_name["cost_per_result"]["levels"] == ["campaign", "adset", "ad"]
    assert "own indicator" in by_name["results"]["description"]


def test_followups_are_the_schema_s() -> None:
    followups = [f["value"] for f in VOCABULARY["followups"]]
    assert followups == _enum(DEFS["FollowUp"]["properties"]["do"])


def test_timezones_are_iana_names_without_the_posix_and_right_copies() -> None:
    zones = VOCABULARY["timezones"]
    assert zones == sorted(zones) and "UTC" in zones and "Asia/Jakarta" in zones
    assert not any(z.startswith(("posix/", "right/")) for z in zones)


def test_the_whole_document_is_json_and_the_schema_is_the_rule_s() -> None:
    assert orjson.loads(orjson.dumps(VOCABULARY)) == VOCABULARY
    assert VOCABULARY["schema"] == SCHEMA
    assert vocabulary() == VOCABULARY  # the same document on every call
    assert "omni_purchase" in VOCABULARY["action_types"]
