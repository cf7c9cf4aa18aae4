"""Our rules exported to Meta's Ad Rules: what goes (bodies Meta's shapes accept, checked by the
sandbox's validator), what cannot (reported with its path), and the round trip: for every rule
of the expressible subset, ``import(export(r))`` is ``r``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_sandbox.adrule_specs import validate_rule
from ruleengine.rules.basics import WEEKDAYS
from ruleengine.rules.language.catalog import resolve_metric
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.meta.exporting import Exported, export_rule
from ruleengine.rules.meta.importing import TASK_ID, ImportOptions, import_rule
from ruleengine.rules.meta.vocab import PRESETS, RULE_EFFECTIVE_STATUSES, MetaAccount

USD = MetaAccount("act_1001", "USD", "America/New_York")
JPY = MetaAccount("act_1004", "JPY", "Asia/Tokyo")
OUR_DEFAULT = {"field": "effective_status", "operator": "NOT_IN", "value": ["ARCHIVED", "DELETED"]}


def base(**task: Any) -> dict[str, Any]:
    return {
        "name": "Guard",
        "format": 2,
        "level": "adset",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 30},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "guard",
                "conditions": [
                    {"metric": "spend", "period": "today", "operator": ">", "value": 12.34},
                    {"metric": "ctr", "period": "today", "operator": "<", "value": 0.8},
                ],
                "action": {"type": "pause"},
            }
            | task
        ],
    }


def export(data: dict[str, Any], account: MetaAccount = USD) -> Exported:
    result = export_rule(parse_rule(data), accounts={account.id: account})
    for exported in result.rules:
        body = exported.body
        validate_rule(body["evaluation_spec"], body["execution_spec"], body["schedule_spec"])
    return result


def errors(result: Exported) -> dict[str, str]:
    return {p.path: p.why for p in result.problems if p.severity == "error"}


def test_a_pause_rule_becomes_one_meta_rule_in_minor_units() -> None:
    result = export(base())
    (only,) = result.rules
    assert result.complete
    assert only.account == "act_1001"
    assert only.body["evaluation_spec"]["filters"] == [
        {"field": "entity_type", "value": "ADSET", "operator": "EQUAL"},
        {"field": "effective_status", "value": ["ARCHIVED", "DELETED"], "operator": "NOT_IN"},
        {"field": "time_preset", "value": "TODAY", "operator": "EQUAL"},
        {"field": "spent", "value": 1234, "operator": "GREATER_THAN"},
        {"field": "ctr", "value": 0.8, "operator": "LESS_THAN"},
    ]
    assert only.body["execution_spec"] == {"execution_type": "PAUSE"}
    assert only.body["schedule_spec"] == {"schedule_type": "SEMI_HOURLY"}


def test_any_of_a_pause_becomes_one_meta_rule_per_condition() -> None:
    result = export(base(match="any"))
    assert [r.body["name"] for r in result.rules] == ["Guard (1/2)", "Guard (2/2)"]
    assert [r.body["evaluation_spec"]["filters"][-1]["field"] for r in result.rules] == [
        "spent",
        "ctr",
    ]


def test_any_of_a_budget_change_is_not_the_same_as_two_rules() -> None:
    result = export(base(match="any", action={"type": "increase_budget", "percent": 10}))
    assert "once per passing condition" in errors(result)["tasks[0].match"]
    assert result.rules == []


def test_conditions_over_different_periods_are_an_error_with_the_path() -> None:
    data = base()
    data["tasks"][0]["conditions"][1]["period"] = "last_7d"
    result = export(data)
    assert "one time_preset" in errors(result)["tasks[0].conditions[1].period"]
    assert result.rules == []


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"operator": ">="}, "tasks[0].conditions[0].operator"),
        (
            {"compare_to": {"metric": "daily_budget"}, "value": None},
            "tasks[0].conditions[0].compare_to",
        ),
        ({"metric": "purchase_roas.omni_purchase"}, "tasks[0].conditions[0].metric"),
        ({"period": "last_90d"}, "tasks[0].conditions[0].period"),
    ],
)
def test_conditions_meta_cannot_say(change: dict[str, Any], path: str) -> None:
    data = base()
    data["tasks"][0]["conditions"] = [
        {"metric": "spend", "period": "today", "operator": ">", "value": 1} | change
    ]
    data["tasks"][0]["conditions"][0] = {
        k: v for k, v in data["tasks"][0]["conditions"][0].items() if v is not None
    }
    assert path in errors(export(data))


def test_a_then_at_a_time_of_day_becomes_a_second_rule_with_a_custom_schedule() -> None:
    data = base(action={"type": "pause", "then": {"at_time": "06:30", "do": "activate"}})
    result = export(data)
    _first, second = result.rules
    assert second.body["name"] == "Guard [then]"
    assert second.body["execution_spec"] == {"execution_type": "UNPAUSE"}
    assert second.body["schedule_spec"] == {
        "schedule_type": "CUSTOM",
        "schedule": [{"start_minute": 390}],
    }
    assert second.body["evaluation_spec"]["filters"] == [
        {"field": "entity_type", "value": "ADSET", "operator": "EQUAL"},
        {"field": "effective_status", "value": ["PAUSED"], "operator": "IN"},
    ]
    assert any("not only those" in p.why for p in result.problems)


def test_a_then_after_minutes_cannot_be_expressed() -> None:
    result = export(base(action={"type": "pause", "then": {"after_minutes": 60, "do": "activate"}}))
    assert "per-object delay" in errors(result)["tasks[0].action.then"]


def test_budget_limits_round_to_whole_minor_units_and_one_limit_only() -> None:
    action = {"type": "increase_budget", "percent": 15, "max_budget": 500}
    (only,) = export(base(action=action, cooldown_minutes=720)).rules
    assert only.body["execution_spec"] == {
        "execution_type": "CHANGE_BUDGET",
        "execution_options": [
            {
                "field": "change_spec",
                "value": {"amount": 15, "unit": "PERCENTAGE", "limit": 50000},
                "operator": "EQUAL",
            },
            {"field": "action_frequency", "value": 720, "operator": "EQUAL"},
        ],
    }
    both = {"type": "increase_budget", "percent": 15, "max_budget": 500, "min_budget": 100}
    assert "one limit" in errors(export(base(action=both)))["tasks[0].action.min_budget"]


def test_a_bid_change_by_a_percentage_is_change_bid_with_a_limit_and_a_count_limit() -> None:
    action = {"type": "change_bid", "percent": 12.5, "direction": "decrease", "min_bid": 0.805}
    result = export(base(action=action, cooldown_minutes=60, execution_count_limit=4))
    (only,) = result.rules
    assert only.body["execution_spec"] == {
        "execution_type": "CHANGE_BID",
        "execution_options": [
            {
                "field": "change_spec",
                # a minimum rounds up: never below 0.805 USD
                "value": {"amount": -12.5, "unit": "PERCENTAGE", "limit": 81},
                "operator": "EQUAL",
            },
            {"field": "action_frequency", "value": 60, "operator": "EQUAL"},
            {"field": "execution_count_limit", "value": 4, "operator": "EQUAL"},
        ],
    }
    assert result.complete
    warned = {p.path: p.why for p in result.problems}
    assert "counts from 0" in warned["tasks[0].execution_count_limit"]


def test_a_bid_set_to_an_amount_has_no_meta_equivalent() -> None:
    result = export(base(action={"type": "change_bid", "amount": 2.5}))
    assert "cannot set a bid" in errors(result)["tasks[0].action.amount"]
    both = {"type": "change_bid", "percent": 5, "direction": "increase", "min_bid": 1}
    assert "one limit" in errors(export(base(action=both)))["tasks[0].action.min_bid"]


def test_scale_to_target_is_a_budget_change_towards_a_target_field() -> None:
    action = {
        "type": "scale_to_target",
        "metric": "cost_per_action_type.mobile_app_install",
        "period": "today",
        "target": 4.5,
        "min_budget": 20,
        "max_budget": 100.509,
    }
    data = base(action=action)
    data["level"] = "campaign"
    (only,) = export(data).rules
    assert only.body["execution_spec"] == {
        "execution_type": "CHANGE_CAMPAIGN_BUDGET",
        "execution_options": [
            {
                "field": "change_spec",
                "value": {
                    "amount": 450,
                    "target_field": "cost_per_mobile_app_install",
                    "limit": [2000, 10050],
                },
                "operator": "EQUAL",
            }
        ],
    }


def test_scale_to_target_without_conditions_over_a_period_brings_its_time_preset() -> None:
    action = {"type": "scale_to_target", "metric": "ctr", "period": "last_7d", "target": 1.2}
    data = base(action=action)
    data["tasks"][0]["conditions"] = [
        {"metric": "hours_since_creation", "operator": ">", "value": 48}
    ]
    (only,) = export(data).rules
    assert only.body["evaluation_spec"]["filters"][-2:] == [
        {"field": "time_preset", "value": "LAST_7D", "operator": "EQUAL"},
        {"field": "hours_since_creation", "value": 48, "operator": "GREATER_THAN"},
    ]


@pytest.mark.parametrize(
    ("change", "path", "why"),
    [
        ({"period": "last_7d"}, "tasks[0].conditions[0].period", "target_field"),
        ({"max_change_percent": 20}, "tasks[0].action.max_change_percent", "no cap"),
        ({"min_budget": 5}, "tasks[0].action.max_budget", "both"),
        ({"metric": "purchase_roas.omni_purchase"}, "tasks[0].action.metric", "no such field"),
        ({"period": "last_90d"}, "tasks[0].conditions[0].period", "one time_preset"),
    ],
)
def test_scale_to_target_meta_cannot_say(change: dict[str, Any], path: str, why: str) -> None:
    action = {"type": "scale_to_target", "metric": "cpc", "period": "today", "target": 1}
    assert why in errors(export(base(action=action | change)))[path]


def test_count_limits_and_cooldowns_go_with_changes_only() -> None:
    result = export(base(execution_count_limit=2))
    assert "budget and bid changes only" in errors(result)["tasks[0].execution_count_limit"]
    assert result.rules == []


def test_a_timetable_in_another_timezone_than_the_account_is_an_error() -> None:
    data = base()
    data["schedule"] = {"mode": "timetable", "slots": {"mon": ["08:00"]}}
    data["timezone"] = "Europe/Berlin"
    assert "America/New_York" in errors(export(data))["timezone"]


# ---------------------------------------------------------------- the round trip

_MONEY_METRICS = [
    "spend",
    "cpc",
    "cpm",
    "daily_budget",
    "lifetime_budget",
    "cost_per_action_type.mobile_app_install",
]
_OTHER_METRICS = [
    "impressions",
    "reach",
    "clicks",
    "ctr",
    "frequency",
    "actions.link_click",
    "actions.offsite_conversion.fb_pixel_purchase",
    "website_purchase_roas.offsite_conversion.fb_pixel_purchase",
    "hours_since_creation",
]
_HALF_HOURS = [f"{m // 60:02d}:{m % 60:02d}" for m in range(0, 1440, 30)]


@st.composite
def _value(draw: st.DrawFn, metric: str, offset: int) -> float:
    if metric in _MONEY_METRICS:  # what minor units can hold
        return draw(st.integers(0, 10**9)) / offset
    return draw(st.integers(-(10**6), 10**6)) / draw(st.sampled_from([1, 4, 100]))


@st.composite
def _condition(draw: st.DrawFn, period: str, offset: int) -> dict[str, Any]:
    metric = draw(st.sampled_from(_MONEY_METRICS + _OTHER_METRICS))
    operator = draw(st.sampled_from([">", "<", "==", "!=", "IN_RANGE", "NOT_IN_RANGE"]))
    condition: dict[str, Any] = {"metric": metric, "operator": operator}
    if resolve_metric(metric).needs_period:
        condition["period"] = period
    if operator in ("IN_RANGE", "NOT_IN_RANGE"):
        condition["value"] = sorted([draw(_value(metric, offset)), draw(_value(metric, offset))])
    else:
        condition["value"] = draw(_value(metric, offset))
    return condition


_TARGET_METRICS = [
    "cpc",
    "cpm",
    "cost_per_action_type.mobile_app_install",
    "impressions",
    "clicks",
    "ctr",
    "actions.link_click",
    "website_purchase_roas.offsite_conversion.fb_pixel_purchase",
    "mobile_app_purchase_roas.app_custom_event.fb_mobile_purchase",
]


@st.composite
def _scale_to_target(draw: st.DrawFn, period: str, offset: int) -> dict[str, Any]:
    metric = draw(st.sampled_from(_TARGET_METRICS))
    money = resolve_metric(metric).money
    target = draw(st.integers(1, 10**9)) / (offset if money else draw(st.sampled_from([1, 4, 100])))
    action = {"type": "scale_to_target", "metric": metric, "period": period, "target": target}
    if draw(st.booleans()):  # Meta's limit is a range: both bounds, whole currency units
        low, high = sorted(draw(st.lists(st.integers(1, 10**6), min_size=2, max_size=2)))
        action |= {"min_budget": low, "max_budget": high}
    return action


_BIDS = st.builds(
    lambda percent, increase, limit: (
        {
            "type": "change_bid",
            "percent": percent,
            "direction": "increase" if increase else "decrease",
        }
        | ({"max_bid" if increase else "min_bid": limit} if limit else {})
    ),
    st.integers(1, 9_999).map(lambda n: n / 100),
    st.booleans(),
    st.none() | st.integers(1, 10**6),
)
_ACTIONS = st.one_of(
    st.just({"type": "pause"}),
    st.just({"type": "activate"}),
    st.just({"type": "notify", "webhook": "meta-rules"}),
    st.builds(
        lambda percent, limit: (
            {"type": "increase_budget", "percent": percent}
            | ({"max_budget": limit} if limit else {})
        ),
        st.integers(1, 100_000).map(lambda n: n / 100),
        st.none() | st.integers(1, 10**6),  # whole currency units (format 2)
    ),
    st.builds(
        lambda percent, limit: (
            {"type": "decrease_budget", "percent": percent}
            | ({"min_budget": limit} if limit else {})
        ),
        st.integers(1, 9_999).map(lambda n: n / 100),
        st.none() | st.integers(1, 10**6),
    ),
)
_FILTERS = st.lists(
    st.one_of(
        st.builds(
            lambda v: {"field": "effective_status", "operator": "IN", "value": v},
            st.lists(
                st.sampled_from(sorted(RULE_EFFECTIVE_STATUSES)),
                min_size=1,
                max_size=3,
                unique=True,
            ),
        ),
        st.builds(
            lambda v: {"field": "name", "operator": "CONTAIN", "value": v},
            st.text(
                st.characters(codec="utf-8", categories=["L", "N", "P"]), min_size=1, max_size=12
            ),
        ),
        st.builds(
            lambda v: {"field": "id", "operator": "IN", "value": v},
            st.lists(st.integers(1, 10**15).map(str), min_size=1, max_size=3),
        ),
    ),
    max_size=3,
    unique_by=lambda f: f["field"],
)


@st.composite
def _schedule(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"mode": "interval", "every_minutes": draw(st.sampled_from([30, 60]))}
    slots = draw(
        st.dictionaries(
            st.sampled_from(WEEKDAYS),
            st.lists(st.sampled_from(_HALF_HOURS), min_size=1, max_size=48, unique=True).map(
                sorted
            ),
            min_size=1,
        )
    )
    return {"mode": "timetable", "slots": slots}


@st.composite
def expressible_rules(draw: st.DrawFn) -> tuple[dict[str, Any], MetaAccount]:
    account = draw(st.sampled_from([USD, JPY]))
    period = draw(st.sampled_from(sorted(PRESETS.values())))
    action = draw(st.one_of(_ACTIONS, _BIDS, _scale_to_target(period, account.offset)))
    change = action["type"].endswith("_budget") or action["type"] in (
        "change_bid",
        "scale_to_target",
    )
    task: dict[str, Any] = {
        "id": TASK_ID,
        "match": "all",
        "conditions": draw(st.lists(_condition(period, account.offset), min_size=1, max_size=4)),
        "action": action,
    }
    if change and draw(st.booleans()):
        task["cooldown_minutes"] = draw(st.integers(1, 10_000))
    if change and draw(st.booleans()):
        task["execution_count_limit"] = draw(st.integers(1, 1_000_000))
    rule = {
        "name": draw(
            st.text(st.characters(codec="utf-8", categories=["L", "N"]), min_size=1, max_size=40)
        ),
        "format": 2,
        "status": draw(st.sampled_from(["ACTIVE", "PAUSED"])),
        # bids are ad sets'
        "level": "adset"
        if action["type"] == "change_bid"
        else draw(st.sampled_from(["campaign", "adset"])),
        "ad_accounts": [account.id],
        "filters": draw(_FILTERS),
        "schedule": draw(_schedule()),
        "timezone": account.timezone,
        "tasks": [task],
    }
    return rule, account


def _normal(rule: Rule) -> dict[str, Any]:
    """A rule's meaning: without its description; no effective_status filter is ours."""
    data = rule.model_dump(mode="json")
    data["description"] = ""
    if not any(f["field"] == "effective_status" for f in data["filters"]):
        data["filters"].append(OUR_DEFAULT)
    return data


@settings(max_examples=300, deadline=None)
@given(expressible_rules())
def test_import_of_export_is_the_rule(case: tuple[dict[str, Any], MetaAccount]) -> None:
    data, account = case
    rule = parse_rule(data)
    exported = export_rule(rule, accounts={account.id: account})
    assert exported.complete, [p.line() for p in exported.problems]
    (only,) = exported.rules
    body = only.body
    validate_rule(body["evaluation_spec"], body["execution_spec"], body["schedule_spec"])
    back = import_rule(body, account=account, options=ImportOptions(activate=True))
    assert back.rule is not None, [p.line() for p in back.problems]
    assert _normal(parse_rule(back.rule)) == _normal(rule)


def test_the_change_budget_and_the_oscillation_hold_stay_behind_with_a_warning() -> None:
    data = base(on_oscillation="hold") | {"change_budget": {"max_status_changes_per_day": 2}}
    result = export(data)
    assert len(result.rules) == 1 and errors(result) == {}
    warned = {p.path for p in result.problems if p.severity == "warning"}
    assert {"change_budget", "tasks[0].on_oscillation"} <= warned


def test_respecting_the_learning_phase_is_exported_with_a_warning() -> None:
    data = base(
        action={"type": "increase_budget", "percent": 20},
        respect_learning_phase=True,
    )
    data["level"] = "adset"
    result = export(data)
    assert result.complete and len(result.rules) == 1
    warned = {p.path: (p.severity, p.why) for p in result.problems}
    severity, why = warned["tasks[0].respect_learning_phase"]
    assert severity == "warning" and "learning phase" in why


def test_an_approval_is_exported_with_a_warning_that_meta_changes_at_once() -> None:
    data = base(
        action={"type": "increase_budget", "percent": 50},
        approval={"when": {"budget_change_pct_above": 30}},
    )
    result = export(data)
    assert result.complete and len(result.rules) == 1
    warned = {p.path: (p.severity, p.why) for p in result.problems}
    severity, why = warned["tasks[0].approval"]
    assert severity == "warning" and "approval" in why and "at once" in why


def test_a_holdout_is_exported_with_a_warning_that_meta_has_none() -> None:
    result = export(base(action={"type": "pause"}, holdout={"percent": 20}))
    assert result.complete and len(result.rules) == 1
    warned = {p.path: (p.severity, p.why) for p in result.problems}
    severity, why = warned["tasks[0].holdout"]
    assert severity == "warning" and "no holdouts" in why and "every object" in why
