"""Meta's Ad Rules imported: every fixture of Meta's documentation (tests/fixtures/meta_rules,
whose README says what each means) becomes a rule with that meaning, or is reported not
mappable with the reason; the read-back form imports as the POST form; hostile JSON never
crashes the importer and always yields a report with paths."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.meta.importing import Imported, ImportOptions, import_document, import_rule
from ruleengine.rules.meta.vocab import MetaAccount

FIXTURES = Path(__file__).parents[1] / "fixtures" / "meta_rules"
BERLIN = MetaAccount("act_1002", "EUR", "Europe/Berlin")
YEN = MetaAccount("act_1004", "JPY", "Asia/Tokyo")
EVERY_DAY = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
HALF_HOURS = [f"{m // 60:02d}:{m % 60:02d}" for m in range(0, 1440, 30)]
ACTIVE_OR_REVIEW = {
    "field": "effective_status",
    "operator": "IN",
    "value": ["ACTIVE", "PENDING_REVIEW"],
}


def fixture(name: str) -> Any:
    return orjson.loads((FIXTURES / f"{name}.json").read_bytes())


def one(name: str, account: MetaAccount = BERLIN, **options: Any) -> Imported:
    (result,) = import_document(fixture(name), account=account, options=ImportOptions(**options))
    return result


def task(result: Imported) -> dict[str, Any]:
    assert result.rule is not None, [p.line() for p in result.problems]
    parse_rule(result.rule)  # a valid rule of the language
    assert result.rule["format"] == 2
    (only,) = result.rule["tasks"]
    return only


def errors(result: Imported) -> dict[str, str]:
    return {p.path: p.why for p in result.problems if p.severity == "error"}


def warnings(result: Imported) -> dict[str, str]:
    return {p.path: p.why for p in result.problems if p.severity == "warning"}


# ---------------------------------------------------------------- the docs' examples


def test_scheduled_ids_impressions_needs_the_level_and_then_keeps_ids_status_and_7_days() -> None:
    assert "level" in errors(one("scheduled_ids_impressions"))["evaluation_spec.filters"]
    result = one("scheduled_ids_impressions", level="adset")
    t = task(result)
    assert result.rule is not None
    assert result.rule["level"] == "adset"
    assert result.rule["filters"] == [
        {"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]},
        {"field": "id", "operator": "IN", "value": ["101", "102", "103"]},
    ]
    assert t["conditions"] == [
        {"metric": "impressions", "period": "last_7_days", "operator": ">", "value": 10000}
    ]
    assert t["action"] == {"type": "notify", "webhook": "meta-rules"}


def test_lifetime_budget_adsets_of_three_campaigns_younger_than_48_hours() -> None:
    result = one("scheduled_lifetime_budget_adsets")
    t = task(result)
    assert result.rule is not None
    assert result.rule["filters"] == [
        {"field": "campaign.id", "operator": "IN", "value": ["101", "102", "103"]},
        ACTIVE_OR_REVIEW,  # Meta's implicit filter, made explicit
    ]
    assert t["conditions"] == [
        {"metric": "lifetime_budget", "operator": ">", "value": 0},
        {"metric": "hours_since_creation", "operator": "<", "value": 48},
    ]


def test_raise_budgets_10_percent_at_most_5_times_per_ad_set() -> None:
    result = one("scheduled_change_budget_count_limit")
    t = task(result)
    assert result.rule is not None
    assert result.rule["level"] == "adset"
    assert t["action"] == {"type": "increase_budget", "percent": 10}
    assert t["execution_count_limit"] == 5  # per (rule, task, entity): per object of Meta's rule
    assert errors(result) == {}
    # Meta's count so far is not ours: said, not hidden
    assert "already made" in warnings(result)["execution_spec.execution_options[1]"]


def test_pause_with_user_ids_pauses_and_says_no_email_is_sent() -> None:
    result = one("scheduled_pause_user_ids")
    t = task(result)
    assert t["action"] == {"type": "pause"}
    assert t["conditions"] == [{"metric": "current_hour", "operator": ">=", "value": 0}]
    assert "no e-mail" in warnings(result)["execution_spec.execution_options[0]"]


def test_campaign_objective_of_ad_sets_is_a_filter() -> None:
    result = one("evaluation_campaign_objective")
    task(result)
    assert result.rule is not None
    assert result.rule["filters"][0] == {
        "field": "campaign.objective",
        "operator": "EQUAL",
        "value": "WEBSITE_CLICKS",
    }


def test_cut_budgets_by_30_percent_at_midnight_on_tuesdays_and_fridays() -> None:
    result = one("change_spec_budget_tue_fri")
    t = task(result)
    assert result.rule is not None
    assert result.rule["schedule"] == {
        "mode": "timetable",
        "slots": {"tue": ["00:00"], "fri": ["00:00"]},
    }
    assert result.rule["timezone"] == "Europe/Berlin"  # the ad account's, where Meta runs it
    assert t["conditions"] == [
        {"metric": "impressions", "period": "maximum", "operator": ">", "value": 8000},
        {"metric": "frequency", "period": "maximum", "operator": ">", "value": 5},
    ]
    assert t["action"] == {"type": "decrease_budget", "percent": 30}


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("change_spec_bid_target_cpi", "cost_per_mobile_app_install"),
        ("roas_mobile_app_bid", "mobile_app_purchase_roas"),
    ],
)
def test_bids_moved_towards_a_target_are_not_mappable_change_bid_has_no_target(
    name: str, field: str
) -> None:
    result = one(name)  # no entity_type: CHANGE_BID acts on ad sets
    assert result.rule is None
    path = "execution_spec.execution_options[0].value.target_field"
    assert errors(result) == {path: errors(result)[path]}  # the only error
    assert "change_bid" in errors(result)[path]
    assert "no target" in errors(result)[path]
    assert any(p.what == field for p in result.problems)


def test_website_roas_over_mature_days_raises_budgets_20_percent() -> None:
    result = one("roas_website_budget")
    t = task(result)
    assert result.rule is not None
    assert result.rule["level"] == "adset"  # from CHANGE_BUDGET
    assert result.rule["filters"][0] == {"field": "id", "operator": "IN", "value": ["123"]}
    assert t["conditions"] == [
        {"metric": "hours_since_creation", "operator": ">", "value": 192},
        {
            "metric": "website_purchase_roas.offsite_conversion.fb_pixel_purchase",
            "period": "last_nd_14_8",
            "operator": ">",
            "value": 0.5,
        },
    ]
    assert t["action"] == {"type": "increase_budget", "percent": 20}
    assert "attribution" in warnings(result)["evaluation_spec.filters[2]"]


@pytest.mark.parametrize(
    "name",
    [
        "rebalance_inverse_proportional",
        "rebalance_even",
        "rebalance_no_pause_proportional",
    ],
)
def test_rebalances_to_ad_sets_the_rule_did_not_match_are_not_mappable(name: str) -> None:
    result = one(name)
    assert result.rule is None
    path = "execution_spec.execution_options[0].value.type"
    assert "among the matched entities only" in errors(result)[path]


@pytest.mark.parametrize(
    "name",
    [
        "trigger_metadata_creation",
        "trigger_metadata_update",
        "trigger_metadata_update_over_1000",
        "trigger_stats_milestone",
        "trigger_stats_change",
    ],
)
def test_trigger_rules_are_not_mappable(name: str) -> None:
    result = one(name)
    assert result.rule is None
    assert "schedule" in errors(result)["evaluation_spec.evaluation_type"]
    assert "schedule_spec" not in errors(result)  # a trigger rule has none: not another problem


def test_ping_endpoint_is_named_too() -> None:
    assert "webhook" in errors(one("trigger_metadata_creation"))["execution_spec.execution_type"]


@pytest.mark.parametrize(
    ("name", "slots"),
    [
        ("custom_schedule_daily_10am", {key: ["10:00"] for key in EVERY_DAY}),
        ("custom_schedule_weekends", {"sat": HALF_HOURS, "sun": HALF_HOURS}),
        ("custom_schedule_wednesday_2am", {"wed": ["02:00"]}),
        (
            "custom_schedule_weekdays_and_weekend_noon",
            dict.fromkeys(("mon", "tue", "wed", "thu", "fri"), HALF_HOURS)
            | {"sat": ["12:00", "12:30"], "sun": ["12:00", "12:30"]},
        ),
    ],
)
def test_custom_schedules_become_timetables_in_the_accounts_timezone(
    name: str, slots: dict[str, list[str]]
) -> None:
    result = one(name)
    task(result)
    assert result.rule is not None
    assert result.rule["schedule"] == {"mode": "timetable", "slots": slots}
    assert result.rule["timezone"] == "Europe/Berlin"


def test_every_fixture_is_covered_by_a_test_above() -> None:
    covered = {
        "scheduled_ids_impressions", "scheduled_lifetime_budget_adsets",
        "scheduled_change_budget_count_limit", "scheduled_pause_user_ids",
        "evaluation_campaign_objective", "change_spec_budget_tue_fri",
        "change_spec_bid_target_cpi", "roas_website_budget", "roas_mobile_app_bid",
        "rebalance_inverse_proportional", "rebalance_even", "rebalance_no_pause_proportional",
        "rebalance_matched_only_proportional", "rebalance_matched_only_cost_per_install",
        "trigger_metadata_creation",
        "trigger_metadata_update", "trigger_metadata_update_over_1000", "trigger_stats_milestone",
        "trigger_stats_change", "custom_schedule_daily_10am", "custom_schedule_weekends",
        "custom_schedule_wednesday_2am", "custom_schedule_weekdays_and_weekend_noon",
        "readback_library_page", "readback_trigger_rule", "readback_api_calls_fields",
        # tests/rules/test_meta_ad_rules.py
        "ad_pause_cpc_last_7_days", "ad_notify_frequency_last_3_days",
    }  # fmt: skip
    assert {p.stem for p in FIXTURES.glob("*.json")} == covered


# ---------------------------------------------------------------- read-back form


def _without_origin(result: Imported) -> dict[str, Any]:
    assert result.rule is not None
    return {**result.rule, "description": ""}


def test_the_read_back_page_imports_as_the_post_form() -> None:
    page = import_document(fixture("readback_library_page"), account=BERLIN)
    assert [r.meta_id for r in page] == ["120260010000009", "120260010000010"]
    assert _without_origin(page[0]) == _without_origin(one("change_spec_budget_tue_fri"))
    assert page[0].rule is not None
    assert page[0].rule["description"] == "Imported from Meta ad rule 120260010000009 of act_1002"
    assert errors(page[1]) == errors(one("roas_mobile_app_bid"))


def test_the_read_back_trigger_rule_is_reported_as_the_post_form() -> None:
    (read_back,) = import_document(fixture("readback_trigger_rule"), account=BERLIN)
    assert errors(read_back) == errors(one("trigger_stats_change"))


def test_a_read_back_without_schedule_spec_says_so() -> None:
    first, *_ = import_document(fixture("readback_api_calls_fields"), account=BERLIN)
    assert "schedule_spec" in errors(first)["schedule_spec"]


def test_a_rule_of_another_account_is_refused() -> None:
    page = fixture("readback_library_page")
    (result, _) = import_document(page, account=YEN)
    assert "another ad account" in errors(result)["account_id"]


# ---------------------------------------------------------------- money and the rest


def _budget_rule(
    amount: Any, limit: Any, *, kind: str = "CHANGE_CAMPAIGN_BUDGET"
) -> dict[str, Any]:
    return {
        "name": "budget",
        "evaluation_spec": {
            "evaluation_type": "SCHEDULE",
            "filters": [
                {"field": "time_preset", "value": "TODAY", "operator": "EQUAL"},
                {"field": "spent", "value": 25000, "operator": "GREATER_THAN"},
                {"field": "cpc", "value": [150, "275"], "operator": "IN_RANGE"},
            ],
        },
        "execution_spec": {
            "execution_type": kind,
            "execution_options": [
                {
                    "field": "change_spec",
                    "value": {"amount": amount, "unit": "PERCENTAGE", "limit": limit},
                    "operator": "EQUAL",
                },
                {"field": "action_frequency", "value": "1440", "operator": "EQUAL"},
            ],
        },
        "schedule_spec": {"schedule_type": "SEMI_HOURLY"},
    }


@pytest.mark.parametrize(
    ("account", "spend", "cpc", "limit"),
    [
        (MetaAccount("act_1001", "USD", "America/New_York"), 250, [1.5, 2.75], 500),
        (YEN, 25000, [150, 275], 50000),
    ],
)
def test_money_arrives_in_the_account_currencys_units(
    account: MetaAccount, spend: int, cpc: list[float], limit: int
) -> None:
    result = import_rule(_budget_rule("20", "50000"), account=account)
    t = task(Imported(0, None, "", result.rule, result.problems))
    assert t["conditions"] == [
        {"metric": "spend", "period": "today", "operator": ">", "value": spend},
        {"metric": "cpc", "period": "today", "operator": "IN_RANGE", "value": cpc},
    ]
    assert t["action"] == {"type": "increase_budget", "percent": 20, "max_budget": limit}
    assert t["cooldown_minutes"] == 1440
    assert result.rule is not None
    assert result.rule["level"] == "campaign"
    assert result.rule["schedule"] == {"mode": "interval", "every_minutes": 30}


def test_a_decrease_limit_is_a_minimum_and_a_fixed_amount_is_not_mappable() -> None:
    result = import_rule(_budget_rule(-25, 1000), account=BERLIN)
    assert task(Imported(0, None, "", result.rule, []))["action"] == {
        "type": "decrease_budget",
        "percent": 25,
        "min_budget": 10,
    }
    raw = _budget_rule(-1000, 5000)
    raw["execution_spec"]["execution_options"][0]["value"]["unit"] = "ACCOUNT_CURRENCY"
    fixed = import_rule(raw, account=BERLIN)
    assert "fixed amount" in errors(fixed)["execution_spec.execution_options[0].value.unit"]


def _change_rule(
    kind: str, spec: dict[str, Any], *options: dict[str, Any], preset: str | None = "LAST_7D"
) -> dict[str, Any]:
    filters = [{"field": "entity_type", "value": "ADSET", "operator": "EQUAL"}]
    if preset is not None:
        filters.append({"field": "time_preset", "value": preset, "operator": "EQUAL"})
    others = [
        {"field": name, "value": value, "operator": "EQUAL"}
        for option in options
        for name, value in option.items()
    ]
    return {
        "name": "change",
        "evaluation_spec": {"evaluation_type": "SCHEDULE", "filters": filters},
        "execution_spec": {
            "execution_type": kind,
            "execution_options": [
                {"field": "change_spec", "value": spec, "operator": "EQUAL"},
                *others,
            ],
        },
        "schedule_spec": {"schedule_type": "DAILY"},
    }


USD = MetaAccount("act_1001", "USD", "America/New_York")


@pytest.mark.parametrize(
    ("spec", "action"),
    [
        (
            {"amount": "15", "unit": "PERCENTAGE", "limit": "250"},
            {"type": "change_bid", "percent": 15, "direction": "increase", "max_bid": 2.5},
        ),
        (
            {"amount": -12.5, "unit": "PERCENTAGE", "limit": 80},
            {"type": "change_bid", "percent": 12.5, "direction": "decrease", "min_bid": 0.8},
        ),
        (
            {"amount": 5, "unit": "PERCENTAGE"},
            {"type": "change_bid", "percent": 5, "direction": "increase"},
        ),
    ],
)
def test_a_bid_changed_by_a_percentage_is_change_bid_with_its_limit_in_currency_units(
    spec: dict[str, Any], action: dict[str, Any]
) -> None:
    raw = _change_rule("CHANGE_BID", spec, {"execution_count_limit": "3"}, {"action_frequency": 60})
    result = import_rule(raw, account=USD)
    t = task(result)
    assert t["action"] == action
    assert (t["execution_count_limit"], t["cooldown_minutes"]) == (3, 60)
    assert result.rule is not None
    assert result.rule["level"] == "adset"


def test_a_bid_changed_by_a_fixed_amount_is_not_change_bid_which_sets_the_bid() -> None:
    raw = _change_rule("CHANGE_BID", {"amount": 100, "unit": "ACCOUNT_CURRENCY", "limit": 500})
    why = errors(import_rule(raw, account=USD))["execution_spec.execution_options[0].value.unit"]
    assert "increment" in why
    assert "new bid itself" in why


def test_change_bid_on_campaigns_is_refused() -> None:
    raw = _change_rule("CHANGE_BID", {"amount": 5, "unit": "PERCENTAGE"})
    raw["evaluation_spec"]["filters"][0]["value"] = "CAMPAIGN"
    assert "ad set bids" in errors(import_rule(raw, account=USD))["execution_spec.execution_type"]


@pytest.mark.parametrize(
    ("kind", "level", "account", "spec", "action"),
    [
        (
            "CHANGE_BUDGET",
            "adset",
            USD,
            {
                "amount": 500,
                "target_field": "cost_per_mobile_app_install",
                "limit": [2000, "10000"],
            },
            {
                "type": "scale_to_target",
                "metric": "cost_per_action_type.mobile_app_install",
                "period": "last_7d",
                "target": 5,  # a cost: minor units → dollars
                "min_budget": 20,
                "max_budget": 100,
            },
        ),
        (
            "CHANGE_CAMPAIGN_BUDGET",
            "campaign",
            YEN,
            {"amount": "2.5", "target_field": "website_purchase_roas", "unit": "PERCENTAGE"},
            {
                "type": "scale_to_target",
                "metric": "website_purchase_roas.offsite_conversion.fb_pixel_purchase",
                "period": "last_7d",
                "target": 2.5,  # a ROAS is no money: as it is
            },
        ),
    ],
)
def test_a_budget_change_towards_a_target_field_is_scale_to_target(
    kind: str, level: str, account: MetaAccount, spec: dict[str, Any], action: dict[str, Any]
) -> None:
    raw = _change_rule(kind, spec, {"execution_count_limit": 2})
    raw["evaluation_spec"]["filters"][0]["value"] = level.upper()
    result = import_rule(raw, account=account)
    t = task(result)
    assert t["action"] == action
    assert t["execution_count_limit"] == 2
    # Meta does not give its formula: ours is named, as a warning
    assert "proportionally" in warnings(result)["execution_spec.execution_options[0].value"]


@pytest.mark.parametrize(
    ("spec", "preset", "path", "why"),
    [
        ({"amount": 5, "target_field": "cpc", "limit": 5000}, "TODAY", "limit", "range"),
        ({"amount": 5, "target_field": "cpc"}, None, "target_field", "no time_preset"),
        ({"amount": 5, "target_field": "spent"}, "TODAY", "target_field", "neither"),
        ({"amount": 5, "target_field": "frequency"}, "TODAY", "target_field", "neither"),
        ({"amount": 5, "target_field": "cpa"}, "TODAY", "target_field", "name the action"),
        ({"amount": 0, "target_field": "cpc"}, "TODAY", "amount", "above 0"),
    ],
)
def test_target_fields_ruleengine_cannot_scale_by_are_reported(
    spec: dict[str, Any], preset: str | None, path: str, why: str
) -> None:
    result = import_rule(_change_rule("CHANGE_BUDGET", spec, preset=preset), account=USD)
    assert result.rule is None
    assert why in errors(result)[f"execution_spec.execution_options[0].value.{path}"]


def test_execution_count_limit_outside_changes_or_its_bounds_is_reported() -> None:
    paused = _change_rule("CHANGE_BUDGET", {"amount": 5, "unit": "PERCENTAGE"})
    paused["execution_spec"] = {
        "execution_type": "PAUSE",
        "execution_options": [{"field": "execution_count_limit", "value": 2, "operator": "EQUAL"}],
    }
    why = errors(import_rule(paused, account=USD))["execution_spec.execution_options[0].field"]
    assert "CHANGE_BUDGET and CHANGE_BID only" in why
    for value in (0, 1_000_001, "2.5", True):
        raw = _change_rule(
            "CHANGE_BUDGET", {"amount": 5, "unit": "PERCENTAGE"}, {"execution_count_limit": value}
        )
        assert "execution_spec.execution_options[1].value" in errors(import_rule(raw, account=USD))


def test_unpause_rules_get_metas_implicit_status_of_unpause() -> None:
    raw = fixture("scheduled_pause_user_ids")
    raw["execution_spec"] = {"execution_type": "UNPAUSE"}
    result = import_rule(raw, account=BERLIN)
    assert result.rule is not None
    assert result.rule["filters"] == [
        {"field": "effective_status", "operator": "NOT_IN", "value": ["ARCHIVED", "DELETED"]}
    ]
    assert task(result)["action"] == {"type": "activate"}


def test_activate_makes_enabled_rules_active_and_leaves_disabled_ones_paused() -> None:
    page = fixture("readback_library_page")
    page["data"][1]["status"] = "DISABLED"
    page["data"][1]["execution_spec"] = {"execution_type": "PAUSE"}
    results = import_document(
        page, account=BERLIN, options=ImportOptions(activate=True, level="adset")
    )
    assert [r.rule["status"] if r.rule else None for r in results] == ["ACTIVE", "PAUSED"]
    assert "not enabled" in warnings(results[1])["status"]


def test_same_names_in_one_document_are_made_unique() -> None:
    rule = fixture("scheduled_pause_user_ids")
    results = import_document([rule, copy.deepcopy(rule)], account=BERLIN)
    assert [r.name for r in results] == ["Rule 1", "Rule 1 (2)"]


def test_an_unknown_timezone_is_reported_for_a_timetable() -> None:
    result = one("custom_schedule_wednesday_2am", account=MetaAccount("act_9", "USD"))
    assert result.rule is not None
    assert result.rule["timezone"] == "UTC"
    assert "not known" in warnings(result)["schedule_spec"]


# ---------------------------------------------------------------- hostile input

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
_KEYS = ["evaluation_spec", "execution_spec", "schedule_spec", "name", "status", "account_id"]


def _check(results: list[Imported]) -> None:
    for result in results:
        assert result.rule is not None or result.errors
        assert all(p.path and isinstance(p.why, str) and p.why for p in result.problems)
        if result.rule is not None:
            parse_rule(result.rule)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_any_json_gives_a_report_never_a_crash(document: Any) -> None:
    _check(import_document(document, account=BERLIN))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(p.stem for p in FIXTURES.glob("*.json"))),
    st.lists(st.tuples(st.sampled_from(_KEYS), _json), max_size=3),
    st.data(),
)
def test_damaged_fixtures_give_reports_never_crashes(
    name: str, damage: list[tuple[str, Any]], data: st.DataObject
) -> None:
    document = fixture(name)
    rules = document.get("data", [document])
    for key, value in damage:
        target = rules[0]
        if key in ("evaluation_spec", "execution_spec") and isinstance(target.get(key), dict):
            spec = target[key]
            inner = data.draw(st.sampled_from(sorted(spec) or ["x"]))
            spec[inner] = value
        else:
            target[key] = value
    _check(import_document(document, account=YEN, options=ImportOptions(level="adset")))


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["roas_website_budget", "change_spec_budget_tue_fri", "readback_library_page"]),
    st.integers(min_value=0, max_value=4),
    st.sampled_from(["field", "value", "operator"]),
    _json | st.sampled_from(["effective_status", "time_preset", "id", "IN", "EQUAL", "spent"]),
)
def test_damaged_filters_give_reports_never_crashes(
    name: str, index: int, key: str, value: Any
) -> None:
    document = fixture(name)
    rule = document["data"][0] if "data" in document else document
    filters = rule["evaluation_spec"]["filters"]
    filters[index % len(filters)][key] = value
    _check(import_document(document, account=BERLIN))
