"""Rules at ``"level": "ad"``, pure: validation, the rankings' ordered scale, ``results`` and
``cost_per_result`` with their indicator, and filters on an ad's ad set and campaign."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.errors import RuleValidationError
from ruleengine.rules.conflicts import RuleEntry, find_conflicts
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import EvalContext, evaluate_condition, evaluate_task
from ruleengine.rules.filtering import LocalFilter, wire
from ruleengine.rules.language.catalog import RANKING_SCALE, RANKING_UNKNOWN
from ruleengine.rules.language.model import Condition, parse_rule
from ruleengine.writes.notify import describe_conditions

NOW = datetime(2026, 10, 1, 12, tzinfo=UTC)
PURCHASES = "actions:offsite_conversion.fb_pixel_purchase"
RANKINGS = ("quality_ranking", "engagement_rate_ranking", "conversion_rate_ranking")
ORDERED = (">", ">=", "<", "<=", "==", "!=")


def ad_rule(conditions: list[dict[str, Any]], action: dict[str, Any] | None = None) -> Any:
    return {
        "name": "ads",
        "format": 2,
        "level": "ad",
        "ad_accounts": ["act_1"],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "tasks": [{"id": "t", "conditions": conditions, "action": action or {"type": "pause"}}],
    }


def problems(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(data)
    return [(e.path, e.message) for e in caught.value.errors]


def ctx(row: dict[str, Any] | None, period: str = "last_7d") -> EvalContext:
    insights = {period: row} if row is not None else {}
    return EvalContext(Entity(id="1"), insights, NOW, ZoneInfo("UTC"))


RANKING = {"metric": "quality_ranking", "period": "last_7d", "operator": "<=", "value": "AVERAGE"}


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "action",
    [
        {"type": "pause"},
        {"type": "activate", "then": {"after_minutes": 60, "do": "pause"}},
        {"type": "rename", "template": "{name} [off]"},
        {"type": "append_to_name", "text": " [x]"},
        {"type": "prepend_to_name", "text": "[x] "},
        {"type": "notify", "webhook": "ops"},
        {"type": "duplicate"},
    ],
)
def test_the_actions_an_ad_takes_validate(action: dict[str, Any]) -> None:
    rule = parse_rule(ad_rule([RANKING], action))
    assert rule.level == "ad" and rule.entity_fields()[:5] == [
        "id", "name", "created_time", "effective_status", "status",
    ]  # fmt: skip
    assert {"adset_id", "campaign_id"} <= set(rule.entity_fields())


@pytest.mark.parametrize(
    ("action", "path"),
    [
        ({"type": "increase_budget", "percent": 10}, "tasks[0].action.type"),
        ({"type": "set_budget", "amount": 50}, "tasks[0].action.type"),
        ({"type": "change_bid", "percent": 10, "direction": "increase"}, "tasks[0].action.type"),
        ({"type": "duplicate", "deep_copy": True}, "tasks[0].action.deep_copy"),
    ],
)
def test_budget_bid_and_deep_copy_actions_are_refused_on_ads(
    action: dict[str, Any], path: str
) -> None:
    [(where, message)] = problems(ad_rule([RANKING], action))
    assert where == path
    assert "ad set" in message or "no children" in message


def test_budget_metrics_are_refused_on_ads_and_rankings_elsewhere() -> None:
    budget = {"metric": "daily_budget", "operator": ">", "value": 1}
    [(where, message)] = problems(ad_rule([RANKING, budget]))
    assert where == "tasks[0].conditions[1].metric" and "ad set" in message
    on_adsets = ad_rule([RANKING]) | {"level": "adset"}
    [(where, message)] = problems(on_adsets)
    assert where == "tasks[0].conditions[0].metric" and '"level": "ad"' in message


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"value": "UNKNOWN"}, "value"),
        ({"value": "average"}, "value"),
        ({"value": 3}, "value"),
        ({"operator": "IN_RANGE", "value": ["AVERAGE", "ABOVE_AVERAGE"]}, "value"),
        ({"value": None, "compare_to": {"metric": "engagement_rate_ranking"}}, "compare_to"),
    ],
)
def test_bad_ranking_values_are_refused_with_the_json_path(
    change: dict[str, Any], path: str
) -> None:
    condition = {k: v for k, v in (RANKING | change).items() if v is not None}
    assert f"tasks[0].conditions[0].{path}" in [
        where for where, _ in problems(ad_rule([condition]))
    ]


def test_a_number_metric_compared_with_a_ranking_is_refused() -> None:
    cpc = {"metric": "cpc", "period": "last_7d", "operator": ">"}
    with_ranking = cpc | {"compare_to": {"metric": "quality_ranking"}}
    [(where, _)] = problems(ad_rule([with_ranking]))
    assert where == "tasks[0].conditions[0].compare_to.metric"
    [(where, _)] = problems(ad_rule([cpc | {"value": "AVERAGE"}]))
    assert where == "tasks[0].conditions[0].value"


@given(st.text(max_size=20).filter(lambda v: v not in RANKING_SCALE))
def test_any_text_off_the_scale_is_refused(value: str) -> None:
    data = ad_rule([RANKING | {"value": value}])
    assert [p for p, _ in problems(data)] == ["tasks[0].conditions[0].value"]


# ---------------------------------------------------------------- rankings


@given(
    metric=st.sampled_from(RANKINGS),
    operator=st.sampled_from(ORDERED),
    expected=st.sampled_from(RANKING_SCALE),
    actual=st.sampled_from((*RANKING_SCALE, RANKING_UNKNOWN)),
)
def test_rankings_compare_on_the_scale_and_unknown_never_matches(
    metric: str, operator: str, expected: str, actual: str
) -> None:
    condition = Condition(metric=metric, period="last_7d", operator=operator, value=expected)
    result = evaluate_condition(condition, ctx({metric: actual}))
    assert (result.actual, result.expected) == (actual, expected)
    if actual == RANKING_UNKNOWN:
        assert not result.passed and result.reason == "no_data"
        return
    a, e = RANKING_SCALE.index(actual), RANKING_SCALE.index(expected)
    wanted = {">": a > e, ">=": a >= e, "<": a < e, "<=": a <= e, "==": a == e, "!=": a != e}
    assert result.passed == wanted[operator]
    # the ordering is consistent: exactly one of <, ==, > holds, and <= is < or ==
    row = ctx({metric: actual})
    verdicts = {
        op: evaluate_condition(condition.model_copy(update={"operator": op}), row).passed
        for op in ORDERED
    }
    assert [verdicts["<"], verdicts["=="], verdicts[">"]].count(True) == 1
    assert verdicts["<="] == (verdicts["<"] or verdicts["=="])
    assert verdicts["!="] == (not verdicts["=="])


def test_an_ad_without_a_row_or_a_ranking_has_no_data() -> None:
    condition = Condition.model_validate(RANKING)
    for row in (None, {}, {"quality_ranking": 3}):
        result = evaluate_condition(condition, ctx(row))
        assert (result.passed, result.actual, result.reason) == (False, None, "no_data")


# ---------------------------------------------------------------- results


def _results(value: str | None, indicator: str = PURCHASES) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"indicator": indicator}
    if value is not None:
        entry["values"] = [{"value": value, "attribution_windows": ["default"]}]
    return [entry]


def test_results_and_cost_per_result_read_the_row_s_own_indicator() -> None:
    row = {"results": _results("38"), "cost_per_result": _results("5.262105")}
    rule = parse_rule(
        ad_rule(
            [
                {"metric": "results", "period": "last_7d", "operator": ">=", "value": 38},
                {"metric": "cost_per_result", "period": "last_7d", "operator": ">", "value": 5},
            ]
        )
    )
    verdict = evaluate_task(rule.tasks[0], ctx(row))
    assert verdict.passed
    records = [c.as_record() for c in verdict.conditions]
    assert [(r["actual"], r["indicator"]) for r in records] == [
        (38.0, PURCHASES),
        (5.262105, PURCHASES),
    ]


def test_a_row_without_results_counts_zero_and_has_no_cost() -> None:
    row = {"results": _results(None), "cost_per_result": _results(None)}
    results = Condition(metric="results", period="last_7d", operator="==", value=0)
    cost = Condition(metric="cost_per_result", period="last_7d", operator=">", value=0)
    assert evaluate_condition(results, ctx(row)).passed
    seen = evaluate_condition(cost, ctx(row))
    assert (seen.passed, seen.reason, seen.indicator) == (False, "no_data", PURCHASES)
    assert evaluate_condition(results, ctx(None)).actual == 0.0  # no row: no delivery


def test_several_indicators_are_no_single_result() -> None:
    row = {"results": _results("3") + _results("9", "actions:onsite_conversion.lead_grouped")}
    seen = evaluate_condition(
        Condition(metric="results", period="last_7d", operator=">=", value=0), ctx(row)
    )
    assert (seen.passed, seen.actual, seen.reason) == (False, None, "no_data")
    assert seen.indicator == f"{PURCHASES} + actions:onsite_conversion.lead_grouped"


def test_records_of_other_metrics_have_no_indicator() -> None:
    seen = evaluate_condition(
        Condition(metric="spend", period="last_7d", operator=">", value=0), ctx({"spend": "3"})
    )
    assert "indicator" not in seen.as_record()


# ---------------------------------------------------------------- filters


def _ad(ad_id: str, name: str, status: str, adset: str, campaign: str) -> dict[str, Any]:
    return {
        "id": ad_id,
        "name": name,
        "effective_status": status,
        "adset_id": adset,
        "campaign_id": campaign,
    }


ADS = [
    _ad("31", "red", "ACTIVE", "21", "11"),
    _ad("32", "blue", "ADSET_PAUSED", "22", "12"),
    _ad("33", "old", "ARCHIVED", "22", "12"),
]
ADSETS = {"21": {"id": "21", "name": "Broad"}, "22": {"id": "22", "name": "Lookalike"}}
CAMPAIGNS = {"11": {"id": "11", "name": "Sales"}, "12": {"id": "12", "name": "Leads"}}


def _select(filtering: list[dict[str, Any]]) -> list[str]:
    local = LocalFilter("ad", wire(filtering))
    return [a["id"] for a in local.select(ADS, CAMPAIGNS, adsets=ADSETS)]


def test_ads_filter_on_their_ad_set_and_campaign() -> None:
    assert _select([]) == ["31", "32"]
    assert _select([{"field": "adset.name", "operator": "CONTAIN", "value": "look"}]) == ["32"]
    assert _select([{"field": "campaign.name", "operator": "EQUAL", "value": "Sales"}]) == ["31"]
    assert _select([{"field": "adset.id", "operator": "IN", "value": ["22"]}]) == ["32"]
    assert _select([{"field": "campaign.id", "operator": "EQUAL", "value": 11}]) == ["31"]
    assert _select([{"field": "ad.name", "operator": "EQUAL", "value": "red"}]) == ["31"]
    status = [{"field": "effective_status", "operator": "IN", "value": ["ARCHIVED"]}]
    assert _select(status) == ["33"]
    local = LocalFilter(
        "ad",
        wire(
            [
                {"field": "adset.name", "operator": "CONTAIN", "value": "x"},
                {"field": "campaign.name", "operator": "CONTAIN", "value": "x"},
            ]
        ),
    )
    assert local.parent_levels == {"adset": {"name"}, "campaign": {"name"}}
    assert {"adset_id", "campaign_id"} <= local.fields


def test_a_rule_s_filters_at_level_ad_are_checked() -> None:
    data = copy.deepcopy(ad_rule([RANKING]))
    data["filters"] = [{"field": "campaign.objective", "operator": "EQUAL", "value": "X"}]
    [(where, _)] = problems(data)
    assert where == "filters[0].field"


def test_a_notification_names_the_indicator_and_the_ranking_labels() -> None:
    row = {"results": _results("12", "actions:link_click"), "quality_ranking": "AVERAGE"}
    results = Condition(metric="results", period="last_7d", operator=">=", value=10)
    ranking = Condition.model_validate(RANKING)
    text = describe_conditions([evaluate_condition(c, ctx(row)) for c in (results, ranking)])
    assert text == (
        "results (last_7d) [actions:link_click] 12 >= 10 ✓;"
        " quality_ranking (last_7d) AVERAGE <= AVERAGE ✓"
    )


# ---------------------------------------------------------------- rules that fight


def test_ad_rules_that_pause_and_activate_the_same_ads_are_found_and_rankings_decide() -> None:
    pause = parse_rule(ad_rule([RANKING | {"operator": "<=", "value": "BELOW_AVERAGE_20"}]))
    activate = parse_rule(
        ad_rule([RANKING | {"operator": ">=", "value": "BELOW_AVERAGE_35"}], {"type": "activate"})
    )
    overlapping = parse_rule(
        ad_rule([RANKING | {"operator": ">=", "value": "BELOW_AVERAGE_10"}], {"type": "activate"})
    )
    entries = [
        RuleEntry("p", "pause weak", pause),
        RuleEntry("a", "activate fair", activate),
        RuleEntry("o", "activate any", overlapping),
    ]
    found = {(f.a.rule_id, f.b.rule_id): f for f in find_conflicts(entries)}
    # BELOW_AVERAGE_20 or worse and BELOW_AVERAGE_35 or better never hold together
    by_pair = {frozenset(k): v.conditions for k, v in found.items()}
    assert by_pair[frozenset({"p", "o"})] == "can_fire_together"
    assert by_pair.get(frozenset({"p", "a"}), "cannot_fire_together") == "cannot_fire_together"
