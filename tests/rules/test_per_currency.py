"""Amounts per currency, pure: the value shape (``{"USD": 20, "JPY": 3000}``) parses on money
and only on money, round-trips, and each account gets its own (``Rule.in_currency``); what a
rule's amounts leave unsaid on accounts of different currencies is named by JSON path; the
export to Meta's rules writes each account's own amount."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.errors import FieldError, NoAmountForCurrency, RuleValidationError
from ruleengine.rules.conflicts import effects
from ruleengine.rules.language.approval import BudgetAbove
from ruleengine.rules.language.catalog import resolve_metric
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.language.money import currency_problems
from ruleengine.rules.meta.exporting import export_rule
from ruleengine.rules.meta.vocab import MetaAccount

MONEY = ["spend", "cpc", "cost_per_result", "daily_budget", "action_values.omni_purchase"]
NOT_MONEY = ["impressions", "ctr", "results", "purchase_roas.omni_purchase", "current_hour"]
WHERE = "tasks[0].conditions[0].value"
CODES = st.text(alphabet=string.ascii_uppercase, min_size=3, max_size=3)
FINITE = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(10**15), 10**15))
AMOUNTS = st.dictionaries(CODES, FINITE, min_size=1, max_size=6)
REGISTERED = {"act_1001": "USD", "act_1002": "EUR", "act_1003": "USD", "act_1004": "JPY"}


def rule_with(condition: dict[str, Any], **task: Any) -> dict[str, Any]:
    spec = resolve_metric(condition["metric"])
    if spec.needs_period:
        condition = {"period": "last_7d"} | condition
    return {
        "name": "per currency",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001", "act_1004"],
        "schedule": {"mode": "interval", "every_minutes": 30},
        "tasks": [{"id": "t", "conditions": [condition], "action": {"type": "pause"}} | task],
    }


def errors_of(data: Any, **options: Any) -> dict[str, str]:
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(data, **options)
    return {e.path: e.message for e in caught.value.errors}


@settings(max_examples=150, deadline=None)
@given(amounts=AMOUNTS, metric=st.sampled_from(MONEY), operator=st.sampled_from([">", "<=", "=="]))
def test_any_map_of_codes_to_numbers_parses_on_money_and_round_trips(
    amounts: dict[str, float], metric: str, operator: str
) -> None:
    condition = {"metric": metric, "operator": operator, "value": amounts}
    rule = parse_rule(rule_with(condition))
    value = rule.tasks[0].conditions[0].value
    assert value == {code: float(amount) for code, amount in amounts.items()}
    assert parse_rule(rule.model_dump(mode="json")) == rule
    assert parse_rule(rule.definition()).checksum() == rule.checksum()
    for code, amount in amounts.items():  # each account's own, and only its own
        assert rule.in_currency(code).tasks[0].conditions[0].value == float(amount)


@settings(max_examples=100, deadline=None)
@given(amounts=AMOUNTS, metric=st.sampled_from(NOT_MONEY))
def test_a_map_on_what_is_not_money_is_refused_at_the_value(
    amounts: dict[str, float], metric: str
) -> None:
    errors = errors_of(rule_with({"metric": metric, "operator": ">", "value": amounts}))
    assert list(errors) == [WHERE]
    assert errors[WHERE] == (
        f"{metric} is not an amount of money: give one value, not one per currency"
    )


@settings(max_examples=100, deadline=None)
@given(
    pairs=st.dictionaries(CODES, st.lists(FINITE, min_size=2, max_size=2), min_size=1),
    operator=st.sampled_from(["IN_RANGE", "NOT_IN_RANGE"]),
)
def test_ranges_per_currency_parse_ordered_and_are_refused_crossed(
    pairs: dict[str, list[float]], operator: str
) -> None:
    ordered = {code: sorted(pair) for code, pair in pairs.items()}
    rule = parse_rule(rule_with({"metric": "cpc", "operator": operator, "value": ordered}))
    assert parse_rule(rule.model_dump(mode="json")) == rule
    crossed = {code: [high, low] for code, (low, high) in ordered.items() if low < high}
    if crossed:
        errors = errors_of(rule_with({"metric": "cpc", "operator": operator, "value": crossed}))
        ((path, message),) = errors.items()
        assert path.startswith(f"{WHERE}.") and "low ≤ high" in message


@settings(max_examples=200, deadline=None)
@given(
    raw=st.dictionaries(
        st.text(max_size=5),
        st.one_of(
            st.none(), st.booleans(), st.text(max_size=4), st.floats(), FINITE, st.lists(FINITE)
        ),
        max_size=4,
    ),
    metric=st.sampled_from(MONEY + NOT_MONEY),
)
def test_hostile_maps_are_refused_with_a_path_never_a_crash(
    raw: dict[str, Any], metric: str
) -> None:
    errors: list[FieldError] = []
    try:
        parse_rule(rule_with({"metric": metric, "operator": ">", "value": raw}))
    except RuleValidationError as exc:
        errors = exc.errors
    assert all(e.path.startswith(WHERE) and e.message for e in errors)


@settings(max_examples=100, deadline=None)
@given(
    amounts=st.dictionaries(
        CODES, st.floats(min_value=0.01, max_value=1e9, allow_nan=False), min_size=1
    )
)
def test_a_budget_per_currency_is_each_accounts_own_and_a_missing_one_stops_it(
    amounts: dict[str, float],
) -> None:
    data = rule_with({"metric": "spend", "operator": ">", "value": 1})
    data["tasks"][0]["action"] = {"type": "set_budget", "amount": amounts}
    rule = parse_rule(data)
    for code, amount in amounts.items():
        assert rule.in_currency(code).tasks[0].action.amount == amount
    missing = next(c for c in ("USD", "JPY", "EUR", "XXX", "ZZZ", "QQQ") if c not in amounts)
    with pytest.raises(NoAmountForCurrency) as caught:
        rule.in_currency(missing)
    assert caught.value.path == "tasks[0].action.amount"
    assert caught.value.reason == "no_amount_for_currency"


def test_a_rule_without_amounts_per_currency_is_itself_in_any_currency() -> None:
    rule = parse_rule(rule_with({"metric": "spend", "operator": ">", "value": 20}))
    assert rule.in_currency("JPY") is rule


def test_every_money_field_takes_amounts_per_currency() -> None:
    data = rule_with({"metric": "daily_budget", "operator": ">", "value": {"USD": 1, "JPY": 99}})
    data["level"] = "adset"
    actions: list[dict[str, Any]] = [
        {"type": "increase_budget", "percent": 5, "min_budget": {"USD": 1, "JPY": 100}},
        {"type": "decrease_budget", "percent": 5, "max_budget": {"USD": 9, "JPY": 900}},
        {"type": "change_bid", "amount": {"USD": 2.5, "JPY": 400}, "max_bid": {"USD": 3}},
        {"type": "scale_to_target", "metric": "cpc", "period": "last_7d", "target": {"USD": 1}},
        {
            "type": "rebalance_budget",
            "metric": "cpc",
            "period": "last_7d",
            "min_budget": {"USD": 5},
        },
    ]
    for action in actions:
        data["tasks"][0]["action"] = action
        rule = parse_rule(data)
        assert parse_rule(rule.model_dump(mode="json")) == rule
        picked = rule.in_currency("USD").tasks[0].action.model_dump(exclude_none=True)
        assert not any(isinstance(v, dict) for v in picked.values()), picked
    data["tasks"][0]["action"] = {"type": "set_budget", "amount": 10}
    data["tasks"][0]["approval"] = {"when": {"budget_above": {"USD": 100, "JPY": 15000}}}
    approval = parse_rule(data).in_currency("JPY").tasks[0].approval
    assert approval is not None and isinstance(approval.when, BudgetAbove)
    assert approval.when.budget_above == 15000


@pytest.mark.parametrize(
    ("action", "path", "fragment"),
    [
        (
            {"type": "increase_budget", "percent": 5, "min_budget": {"USD": 50}, "max_budget": 20},
            "tasks[0].action.min_budget.USD",
            "min_budget 50 > max_budget 20 (USD)",
        ),
        (
            {"type": "set_budget", "amount": {"USD": 0}},
            "tasks[0].action.amount.USD",
            "greater than 0",
        ),
        (
            {"type": "scale_to_target", "metric": "purchase_roas.omni_purchase"}
            | {"period": "last_7d", "target": {"USD": 2}},
            "tasks[0].action.target",
            "not an amount of money",
        ),
    ],
)
def test_money_fields_per_currency_are_checked_currency_by_currency(
    action: dict[str, Any], path: str, fragment: str
) -> None:
    data = rule_with({"metric": "spend", "operator": ">", "value": 1}) | {"level": "adset"}
    data["tasks"][0]["action"] = action
    errors = errors_of(data)
    assert list(errors) == [path]
    assert fragment in errors[path]


def test_a_format_1_rule_keeps_budgets_in_one_number() -> None:
    data = rule_with({"metric": "spend", "operator": ">", "value": 1}) | {"format": 1}
    data["tasks"][0]["action"] = {"type": "set_budget", "amount": {"USD": 500}}
    assert "format" in errors_of(data)["tasks[0].action.amount"]


# ---------------------------------------------------------------- against the accounts


def test_what_the_amounts_leave_unsaid_is_named_by_path() -> None:
    data = rule_with({"metric": "cost_per_result", "operator": ">", "value": 20})
    data["ad_accounts"] = ["act_1001", "act_1002", "act_1004"]
    data["tasks"][0]["action"] = {"type": "set_budget", "amount": {"USD": 30, "JPY": 4000}}
    data["tasks"][0]["approval"] = {"when": {"budget_above": 100}}
    problems = {e.path: e.message for e in currency_problems(data, REGISTERED)}
    assert problems == {
        WHERE: "the rule's accounts are in EUR, JPY and USD, where 20 is a different amount in"
        ' each: give this amount per currency, e.g. {"EUR": 20, "JPY": 20, "USD": 20} with each'
        " number in that currency's units",
        "tasks[0].action.amount": 'no amount for EUR, the currency of act_1002: add "EUR": …'
        " in EUR's own units",
        "tasks[0].approval.when.budget_above": problems["tasks[0].approval.when.budget_above"],
    }
    assert "where 100 is a different amount" in problems["tasks[0].approval.when.budget_above"]
    assert errors_of(data, accounts=REGISTERED).keys() == problems.keys()
    data["ad_accounts"] = ["act_1001", "act_1003"]  # one currency: bare amounts as ever
    data["tasks"][0]["action"]["amount"] = {"USD": 30}
    assert currency_problems(data, REGISTERED) == []
    assert parse_rule(data, accounts=REGISTERED).tasks[0].conditions[0].value == 20


def test_a_range_and_a_non_money_value_need_no_currency_but_a_bare_range_does() -> None:
    data = rule_with({"metric": "cpc", "operator": "IN_RANGE", "value": [1, 2]})
    data["tasks"][0]["conditions"].append(
        {"metric": "ctr", "period": "today", "operator": ">", "value": 1}
    )
    problems = currency_problems(data, REGISTERED)
    assert [(p.path, "[1, 2] is a different amount" in p.message) for p in problems] == [
        (WHERE, True)
    ]


# ---------------------------------------------------------------- elsewhere


def test_the_export_to_meta_writes_each_accounts_own_amount() -> None:
    data = rule_with({"metric": "spend", "operator": ">", "value": {"USD": 20, "JPY": 3000}})
    data["ad_accounts"] = ["act_1001", "act_1002", "act_1004"]
    accounts = {
        "act_1001": MetaAccount("act_1001", "USD", "America/New_York"),
        "act_1002": MetaAccount("act_1002", "EUR", "Europe/Berlin"),
        "act_1004": MetaAccount("act_1004", "JPY", "Asia/Tokyo"),
    }
    result = export_rule(parse_rule(data), accounts=accounts)
    spent = {
        r.account: next(
            f["value"] for f in r.body["evaluation_spec"]["filters"] if f["field"] == "spent"
        )
        for r in result.rules
    }
    assert spent == {"act_1001": 2000, "act_1004": 3000}  # minor units: cents, whole yen
    (problem,) = [p for p in result.problems if p.severity == "error"]
    assert (problem.path, problem.what) == (WHERE, "act_1002 (EUR)")
    assert "gives no amount in EUR" in problem.why


def test_conflict_analysis_describes_amounts_per_currency() -> None:
    data = rule_with({"metric": "spend", "operator": ">", "value": {"USD": 1}})
    data["tasks"][0]["action"] = {"type": "set_budget", "amount": {"USD": 30, "JPY": 4000}}
    rule: Rule = parse_rule(data)
    (effect,) = effects(rule.tasks[0])
    assert effect.detail == "set_budget USD 30 / JPY 4000"


def test_a_bare_zero_is_the_same_in_every_currency() -> None:
    from ruleengine.rules.language.money import currency_problems

    definition = {
        "ad_accounts": ["act_1", "act_2"],
        "format": 2,
        "tasks": [
            {
                "id": "t",
                "conditions": [
                    {"metric": "daily_budget", "operator": ">", "value": 0},
                    {"metric": "spend", "period": "today", "operator": ">", "value": 5},
                ],
                "action": {"type": "pause"},
            }
        ],
    }
    problems = currency_problems(definition, {"act_1": "USD", "act_2": "JPY"})
    assert [p.path for p in problems] == ["tasks[0].conditions[1].value"]
