"""Money as a person reads it (rules/language/money.py): the account currency's symbol and decimals,
the change in percent, exact for any whole amount."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.language.money import (
    MINOR_UNIT_FIELDS,
    format_change,
    format_field_change,
    format_minor,
    format_value,
    whole_minor,
)
from ruleengine.rules.plan.targets import INTEGER_FIELDS


@pytest.mark.parametrize(
    ("before", "after", "currency", "text"),
    [
        (12000, 10800, "USD", "$120.00 → $108.00 (−10 %)"),
        (12000, 10800, "JPY", "¥12,000 → ¥10,800 (−10 %)"),
        (30000, 27000, "usd", "$300.00 → $270.00 (−10 %)"),
        (10000, 10750, "EUR", "€100.00 → €107.50 (+7.5 %)"),
        (3, 2, "GBP", "£0.03 → £0.02 (−33.3 %)"),
        (100, 2000, "CHF", "1.00 CHF → 20.00 CHF (+1,900 %)"),
        (10000, 10004, "USD", "$100.00 → $100.04 (+<0.1 %)"),
        (5000, 5000, "KRW", "₩5,000 → ₩5,000 (0 %)"),
        (0, 500, "USD", "$0.00 → $5.00"),  # no percentage of nothing
        ("27000", "30000", "USD", "$270.00 → $300.00 (+11.1 %)"),  # Meta's strings
        (None, 500, "USD", "— → $5.00"),
        (12000, 10800, None, "12000 → 10800 (−10 %)"),  # the account is not registered
    ],
)
def test_a_change_reads_as_money_with_its_percentage(
    before: object, after: object, currency: str | None, text: str
) -> None:
    assert format_change(before, after, currency) == text


def test_an_amount_has_its_currencys_decimals_and_symbol_or_code() -> None:
    assert format_minor(123456789, "EUR") == "€1,234,567.89"
    assert format_minor(123456789, "IDR") == "Rp123,456,789"  # zero-decimal on Meta
    assert format_minor(123456789, "HUF") == "123,456,789 HUF"  # zero-decimal, no symbol
    assert format_minor(-5, "USD") == "-$0.05"
    assert format_minor(12.5, "USD") == "12.5"  # not a whole amount: its text
    assert format_minor(True, "USD") == "True"


def test_fields_other_than_money_read_as_text() -> None:
    assert format_field_change("status", "ACTIVE", "PAUSED", "USD") == "ACTIVE → PAUSED"
    assert format_field_change("daily_budget", 12000, 10800, "JPY") == "¥12,000 → ¥10,800 (−10 %)"
    assert format_value("bid_amount", 250, "USD") == "$2.50"
    assert format_value("name", None, "USD") == "—"


def test_the_money_fields_are_the_write_paths_integer_fields() -> None:
    # and a budget schedule's record: the daily budget before → in its window
    assert set(INTEGER_FIELDS) | {"budget_schedules"} == MINOR_UNIT_FIELDS


@given(
    minor=st.integers(min_value=-(10**15), max_value=10**15),
    currency=st.sampled_from(["USD", "JPY", "EUR", "KRW", "CHF", "SEK", "IDR", "TWD"]),
)
def test_the_text_reads_back_as_the_amount(minor: int, currency: str) -> None:
    text = format_minor(minor, currency)
    digits = "".join(ch for ch in text if ch.isdigit() or ch == ".")
    offset = 1 if currency in {"JPY", "KRW", "IDR", "TWD"} else 100
    assert Decimal(digits) * offset == abs(minor)
    assert text.startswith("-") == (minor < 0)


@given(
    before=st.integers(min_value=1, max_value=10**14),
    after=st.integers(min_value=0, max_value=10**14),
)
def test_the_percentage_is_the_change_to_a_tenth(before: int, after: int) -> None:
    text = format_change(before, after, "USD").rsplit("(", 1)[1].rstrip(")")
    exact = Decimal(after - before) * 100 / before
    if text.lstrip("+−").startswith("<"):
        assert 0 < abs(exact) < Decimal("0.05")
        return
    shown = Decimal(text.replace("−", "-").replace(" %", "").replace(",", ""))
    assert abs(shown - exact) <= Decimal("0.05")
    assert whole_minor(str(before)) == before
