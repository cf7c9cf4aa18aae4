"""The entity as listed, and currency offsets as Meta's currency table gives them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.entity import ZERO_DECIMAL, currency_offset

# Meta's currency table (developers.facebook.com/docs/marketing-api/currencies): offset 1.
METAS_ZERO_DECIMAL = {"CLP", "COP", "CRC", "HUF", "ISK", "IDR", "JPY", "KRW", "PYG", "TWD", "VND"}


def test_exactly_metas_zero_decimal_currencies_have_offset_1() -> None:
    assert set(ZERO_DECIMAL) == METAS_ZERO_DECIMAL
    assert all(currency_offset(code) == 1 for code in METAS_ZERO_DECIMAL)
    assert all(currency_offset(code.lower()) == 1 for code in METAS_ZERO_DECIMAL)


def test_every_other_currency_is_in_cents() -> None:
    for code in ("USD", "EUR", "GBP", "UGX", "BHD", "KWD", "INR", "MXN"):
        assert currency_offset(code) == 100, code
    assert currency_offset(None) == 100
    assert currency_offset("") == 100


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=3, max_size=3))
def test_offsets_are_1_or_100_and_1_only_for_metas_list(code: str) -> None:
    assert currency_offset(code) == (1 if code in METAS_ZERO_DECIMAL else 100)
