"""Money in rules: format 2 amounts in currency units, minor units only at the Graph boundary,
and the one-time migration of format-1 definitions."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flow import campaign_rule
from ruleengine.errors import RuleValidationError
from ruleengine.rules.basics import MAX_BUDGET
from ruleengine.rules.entity import ZERO_DECIMAL, currency_offset
from ruleengine.rules.language.action_types import PercentBudgetAction, SetBudgetAction
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.language.money import (
    MinorBudget,
    amount_scale,
    budget_in_minor_units,
    explain_old_format,
    migrate_definition,
    migrate_stored,
    to_minor,
)
from ruleengine.rules.plan.plan import plan_budget

SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1}
CURRENCIES = ["USD", "EUR", "JPY", "KRW", "IDR", "GBP", "CLP"]


def rule_doc(action: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A format-1 document (no "format") on act_1001."""
    data = campaign_rule(action, [SPENT], name="money")
    del data["format"]
    return data | top


def test_a_max_of_500_is_50000_cents_in_usd_and_500_yen_in_jpy() -> None:
    action = PercentBudgetAction(type="increase_budget", percent=40, max_budget=500)
    usd = plan_budget(action, live=45000, max_change_pct=100, scale=amount_scale(2, 100))
    jpy = plan_budget(action, live=450, max_change_pct=100, scale=amount_scale(2, 1))
    assert (usd.after, usd.clamped_by) == (50000, ["max_budget"])
    assert (jpy.after, jpy.clamped_by) == (500, ["max_budget"])


def test_a_set_budget_of_123_45_usd_is_12345_cents() -> None:
    action = SetBudgetAction(type="set_budget", amount=123.45)
    assert plan_budget(action, live=12000, max_change_pct=100, scale=100).after == 12345


def test_format_1_amounts_are_minor_units_already() -> None:
    assert amount_scale(1, 100) == amount_scale(1, 1) == 1
    action = PercentBudgetAction(type="increase_budget", percent=40, max_budget=50000)
    assert plan_budget(action, live=45000, max_change_pct=100, scale=1).after == 50000


def test_rounding_at_the_boundary_never_crosses_a_bound() -> None:
    # 10.005 USD: a max rounds down, a min up, an amount half up
    top = PercentBudgetAction(type="increase_budget", percent=1, max_budget=10.005)
    floor = PercentBudgetAction(type="decrease_budget", percent=1, min_budget=10.001)
    assert budget_in_minor_units(top, scale=100).max_budget == 1000
    assert budget_in_minor_units(floor, scale=100).min_budget == 1001
    # both inside one minor unit: no whole amount satisfies both, the maximum wins
    both = PercentBudgetAction(
        type="increase_budget", percent=1, max_budget=10.005, min_budget=10.001
    )
    assert budget_in_minor_units(both, scale=100) == MinorBudget(min_budget=1000, max_budget=1000)
    amount = SetBudgetAction(type="set_budget", amount=10.005)
    assert budget_in_minor_units(amount, scale=100).amount == 1001
    # below one minor unit: still a budget of 1, never 0 (to_minor itself is exact: 0)
    tiny = SetBudgetAction(type="set_budget", amount=0.001)
    assert budget_in_minor_units(tiny, scale=100).amount == 1
    assert to_minor(0.001, 100, rounding="ROUND_FLOOR") == 0


amounts = st.decimals(min_value="0.01", max_value="10000000", places=3).map(float)
lives = st.integers(min_value=1, max_value=10**11)


@given(
    live=lives,
    percent=st.floats(min_value=0.01, max_value=1000),
    bounds=st.lists(amounts, min_size=2, max_size=2).map(sorted),
    currency=st.sampled_from(CURRENCIES),
    up=st.booleans(),
)
def test_conversion_never_lets_a_budget_cross_max_or_min(
    live: int, percent: float, bounds: list[float], currency: str, up: bool
) -> None:
    low, high = bounds
    offset = currency_offset(currency)
    if not up:
        percent = min(percent, 99.0)
    action = PercentBudgetAction(
        type="increase_budget" if up else "decrease_budget",
        percent=percent,
        min_budget=low,
        max_budget=high,
    )
    plan = plan_budget(action, live=live, max_change_pct=1000, scale=amount_scale(2, offset))
    after = Fraction(int(plan.after), offset)  # back in currency units, exactly
    if up and plan.after != live:
        assert after <= Fraction(Decimal(str(high)))  # an increase never passes max_budget
    room = math.ceil(Fraction(Decimal(str(low))) * offset) <= Fraction(Decimal(str(high))) * offset
    if not up and plan.after != live and room:
        # a decrease never goes under min_budget (when a whole minor unit lies between the
        # bounds: else the maximum wins) nor under 1 minor unit
        assert after >= Fraction(Decimal(str(low))) or int(plan.after) == 1


@given(
    minor=st.integers(min_value=1, max_value=MAX_BUDGET),
    currency=st.sampled_from(CURRENCIES),
    field=st.sampled_from(["max_budget", "min_budget"]),
)
def test_migrating_then_converting_back_is_exact(minor: int, currency: str, field: str) -> None:
    offset = currency_offset(currency)
    old = rule_doc({"type": "increase_budget", "percent": 10, field: minor})
    new = migrate_definition(old, offset)
    rule = parse_rule(new, new=True)
    action = rule.tasks[0].action
    assert isinstance(action, PercentBudgetAction)
    assert getattr(budget_in_minor_units(action, scale=offset), field) == minor
    amount = migrate_definition(rule_doc({"type": "set_budget", "amount": minor}), offset)
    set_action = parse_rule(amount).tasks[0].action
    assert isinstance(set_action, SetBudgetAction)
    assert budget_in_minor_units(set_action, scale=offset).amount == minor


def test_migration_puts_format_after_the_name_and_converts_only_money() -> None:
    old = rule_doc({"type": "increase_budget", "percent": 20, "max_budget": 50000}, timezone="UTC")
    new = migrate_definition(old, 100)
    assert list(new)[:3] == ["name", "format", "level"]
    action = new["tasks"][0]["action"]
    assert action == {"type": "increase_budget", "percent": 20, "max_budget": 500}
    assert new["tasks"][0]["conditions"] == old["tasks"][0]["conditions"]
    assert old["tasks"][0]["action"]["max_budget"] == 50000  # the input is left alone
    cents = migrate_definition(rule_doc({"type": "set_budget", "amount": 12345}), 100)
    assert cents["tasks"][0]["action"]["amount"] == 123.45


def test_a_rule_on_accounts_of_different_decimals_is_not_migrated() -> None:
    old = rule_doc({"type": "set_budget", "amount": 50000}, ad_accounts=["act_1001", "act_1004"])
    migration = migrate_stored(old, {"act_1001": "USD", "act_1004": "JPY"})
    assert migration.definition is None
    assert migration.problem is not None and "act_1004 JPY" in migration.problem
    same = migrate_stored(old, {"act_1001": "USD", "act_1004": "EUR"})
    assert same.definition is not None and same.definition["tasks"][0]["action"]["amount"] == 500


def test_an_account_of_unknown_currency_blocks_only_rules_with_budgets() -> None:
    budget = rule_doc({"type": "set_budget", "amount": 50000})
    migration = migrate_stored(budget, {})
    assert migration.definition is None and "act_1001" in (migration.problem or "")
    pause = migrate_stored(rule_doc({"type": "pause"}), {})
    assert pause.definition is not None and pause.definition["format"] == 2


def test_format_1_budgets_must_be_whole_minor_units() -> None:
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(rule_doc({"type": "set_budget", "amount": 500.5}))
    (error,) = caught.value.errors
    assert error.path == "tasks[0].action.amount" and '"format": 2' in error.message
    assert parse_rule(rule_doc({"type": "set_budget", "amount": 500.5}, format=2))


def test_saving_requires_format_2_with_the_migrate_hint() -> None:
    old = rule_doc({"type": "set_budget", "amount": 50000})
    for doc in (old, old | {"format": 1}):
        with pytest.raises(RuleValidationError) as caught:
            parse_rule(doc, new=True)
        assert caught.value.errors[0].path == "format"
        assert "ruleengine rules migrate" in caught.value.errors[0].message
    assert parse_rule(old).format == 1  # stored rules still parse
    # other problems are listed too, after the format
    with pytest.raises(RuleValidationError) as both:
        parse_rule(old | {"level": "ads"}, new=True)
    assert [e.path for e in both.value.errors] == ["format", "level"]


def test_a_format_1_definition_reads_back_unchanged() -> None:
    old = rule_doc({"type": "increase_budget", "percent": 20, "max_budget": 50000})
    definition = parse_rule(old).definition()
    assert "format" not in definition  # same checksum as before formats existed
    assert definition["tasks"][0]["action"]["max_budget"] == 50000
    assert parse_rule(old | {"format": 2}).definition()["format"] == 2


def test_validate_explains_an_old_file_in_the_given_currency() -> None:
    old = rule_doc({"type": "increase_budget", "percent": 20, "max_budget": 50000})
    usd = explain_old_format(old, "USD", path="scale.json")
    assert "tasks[0].action.max_budget: 50000 minor units = 500.00 in USD" in usd
    assert "ruleengine rules migrate scale.json --currency USD --write" in usd[-1]
    assert "tasks[0].action.max_budget: 50000 minor units = 50000 in JPY" in explain_old_format(
        old, "jpy"
    )


@given(
    amount=st.decimals(min_value="0.001", max_value="1000000", places=3),
    currency=st.sampled_from(sorted(ZERO_DECIMAL | {"USD", "EUR"})),
)
def test_an_amount_converts_to_the_nearest_minor_unit(amount: Decimal, currency: str) -> None:
    offset = currency_offset(currency)
    minor = to_minor(float(amount), offset, rounding="ROUND_HALF_UP")
    assert abs(Fraction(minor) - Fraction(amount) * offset) <= Fraction(1, 2)
