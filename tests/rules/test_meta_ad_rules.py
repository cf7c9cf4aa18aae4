"""Meta's Ad Rules at ``entity_type`` ``AD``: imported as ``"level": "ad"`` rules, exported
back, with money in the account currency's minor units at Meta and currency units here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_sandbox.adrule_specs import validate_rule
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.meta.exporting import export_rule
from ruleengine.rules.meta.importing import ImportOptions, import_document, import_rule
from ruleengine.rules.meta.vocab import PRESETS, MetaAccount

FIXTURES = Path(__file__).parents[1] / "fixtures" / "meta_rules"
USD = MetaAccount("act_1001", "USD", "America/New_York")
JPY = MetaAccount("act_1004", "JPY", "Asia/Tokyo")
ACTIVE_OR_REVIEW = {
    "field": "effective_status",
    "operator": "IN",
    "value": ["ACTIVE", "PENDING_REVIEW"],
}


def imported(name: str, account: MetaAccount = USD) -> dict[str, Any]:
    document = orjson.loads((FIXTURES / f"{name}.json").read_bytes())
    (result,) = import_document(document, account=account, options=ImportOptions(activate=True))
    assert result.rule is not None, [p.line() for p in result.problems]
    assert not [p for p in result.problems if p.severity == "error"]
    parse_rule(result.rule, new=True)  # a valid rule, as a save takes it
    return result.rule


def test_pause_ads_with_a_cpc_above_150_cents_over_7_days() -> None:
    rule = imported("ad_pause_cpc_last_7_days")
    assert (rule["level"], rule["filters"]) == ("ad", [ACTIVE_OR_REVIEW])
    assert rule["schedule"] == {"mode": "interval", "every_minutes": 30}
    (task,) = rule["tasks"]
    # Meta's 150 is minor units: $1.50
    assert task["conditions"] == [
        {"metric": "cpc", "period": "last_7_days", "operator": ">", "value": 1.5}
    ]
    assert task["action"] == {"type": "pause"}
    # on a yen account 150 is ¥150
    assert imported("ad_pause_cpc_last_7_days", JPY)["tasks"][0]["conditions"][0]["value"] == 150


def test_notify_on_ads_seen_more_than_4_times_over_3_days() -> None:
    rule = imported("ad_notify_frequency_last_3_days")
    assert rule["level"] == "ad"
    (task,) = rule["tasks"]
    assert task["conditions"] == [
        {"metric": "frequency", "period": "last_3_days", "operator": ">", "value": 4}
    ]
    assert task["action"] == {"type": "notify", "webhook": "meta-rules"}


def _round_trip(rule: Rule, account: MetaAccount = USD) -> tuple[dict[str, Any], Rule]:
    exported = export_rule(rule, accounts={account.id: account})
    assert exported.complete, [p.line() for p in exported.problems]
    (only,) = exported.rules
    body = only.body
    validate_rule(body["evaluation_spec"], body["execution_spec"], body["schedule_spec"])
    back = import_rule(body, account=account, options=ImportOptions(activate=True))
    assert back.rule is not None, [p.line() for p in back.problems]
    return body, parse_rule(back.rule)


def _meaning(rule: Rule) -> dict[str, Any]:
    return rule.model_dump(mode="json") | {"description": ""}


def test_the_fixtures_export_to_what_was_imported() -> None:
    for name in ("ad_pause_cpc_last_7_days", "ad_notify_frequency_last_3_days"):
        rule = parse_rule(imported(name))
        body, back = _round_trip(rule)
        assert _meaning(back) == _meaning(rule)
        filters = body["evaluation_spec"]["filters"]
        assert {"field": "entity_type", "value": "AD", "operator": "EQUAL"} in filters
    body, _ = _round_trip(parse_rule(imported("ad_pause_cpc_last_7_days")))
    assert {"field": "cpc", "value": 150, "operator": "GREATER_THAN"} in body["evaluation_spec"][
        "filters"
    ]


def test_results_and_cost_per_result_are_metas_results_and_cost_per() -> None:
    document = orjson.loads((FIXTURES / "ad_pause_cpc_last_7_days.json").read_bytes())
    document["evaluation_spec"]["filters"][2] = {
        "field": "cost_per",
        "value": 2500,
        "operator": "GREATER_THAN",
    }
    document["evaluation_spec"]["filters"].append(
        {"field": "results", "value": 3, "operator": "GREATER_THAN"}
    )
    (result,) = import_document(document, account=USD)
    assert result.rule is not None, [p.line() for p in result.problems]
    assert result.rule["tasks"][0]["conditions"] == [
        {"metric": "cost_per_result", "period": "last_7_days", "operator": ">", "value": 25},
        {"metric": "results", "period": "last_7_days", "operator": ">", "value": 3},
    ]
    body, back = _round_trip(parse_rule(result.rule))
    assert {"field": "cost_per", "value": 2500, "operator": "GREATER_THAN"} in body[
        "evaluation_spec"
    ]["filters"]
    assert _meaning(back) == _meaning(parse_rule(result.rule))


def test_a_budget_change_of_ads_is_refused_with_the_reason() -> None:
    document = orjson.loads((FIXTURES / "ad_pause_cpc_last_7_days.json").read_bytes())
    document["execution_spec"] = {
        "execution_type": "CHANGE_BUDGET",
        "execution_options": [
            {
                "field": "change_spec",
                "value": {"amount": 10, "unit": "PERCENTAGE"},
                "operator": "EQUAL",
            }
        ],
    }
    (result,) = import_document(document, account=USD)
    assert result.rule is None
    assert [p.line() for p in result.problems] == [
        "execution_spec.execution_type: CHANGE_BUDGET — CHANGE_BUDGET changes adset budgets,"
        " and the rule looks at ads"
    ]


def test_rankings_have_no_meta_rule_field_and_are_reported_on_export() -> None:
    rule = parse_rule(imported("ad_pause_cpc_last_7_days"))
    data = rule.model_dump(mode="json")
    data["tasks"][0]["conditions"].append(
        {"metric": "quality_ranking", "period": "last_7_days", "operator": "<=", "value": "AVERAGE"}
    )
    exported = export_rule(parse_rule(data), accounts={USD.id: USD})
    assert not exported.complete
    assert any(p.path.endswith("conditions[1].metric") for p in exported.problems)


_AD_METRICS = ["spend", "cpc", "cpm", "impressions", "clicks", "ctr", "frequency", "results"]


@st.composite
def ad_rules(draw: st.DrawFn) -> tuple[dict[str, Any], MetaAccount]:
    account = draw(st.sampled_from([USD, JPY]))
    period = draw(st.sampled_from(sorted(PRESETS.values())))
    conditions = []
    for metric in draw(st.lists(st.sampled_from(_AD_METRICS), min_size=1, max_size=3)):
        money = metric in ("spend", "cpc", "cpm")
        value = draw(st.integers(0, 10**7)) / (account.offset if money else 1)
        operator = draw(st.sampled_from([">", "<", "==", "!="]))
        conditions.append(
            {"metric": metric, "period": period, "operator": operator, "value": value}
        )
    action = draw(
        st.sampled_from(
            [{"type": "pause"}, {"type": "activate"}, {"type": "notify", "webhook": "meta-rules"}]
        )
    )
    statuses = st.sampled_from(["ACTIVE", "PAUSED", "ADSET_PAUSED"])
    status = draw(st.lists(statuses, min_size=1, unique=True))
    rule = {
        "name": "ads",
        "format": 2,
        "level": "ad",
        "ad_accounts": [account.id],
        "filters": [{"field": "effective_status", "operator": "IN", "value": status}],
        "schedule": {"mode": "interval", "every_minutes": draw(st.sampled_from([30, 60]))},
        "timezone": account.timezone,
        "tasks": [{"id": "meta", "conditions": conditions, "action": action}],
    }
    return rule, account


@settings(max_examples=150, deadline=None)
@given(ad_rules())
def test_export_then_import_of_an_ad_rule_is_the_rule(
    case: tuple[dict[str, Any], MetaAccount],
) -> None:
    data, account = case
    rule = parse_rule(data)
    _, back = _round_trip(rule, account)
    assert _meaning(back) == _meaning(rule)
