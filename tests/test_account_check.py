"""Which currency and timezone an account is registered with: Meta's, or the ones given where
Meta could not say — never a given one Meta contradicts (pure)."""

from __future__ import annotations

import pytest

from ruleengine.accounts.currency import settle
from ruleengine.errors import AccountCheckError
from ruleengine.meta.adaccount import AdAccount

YEN = AdAccount(150, "JPY", "Asia/Tokyo")


@pytest.mark.parametrize(
    ("currency", "timezone"),
    [(None, None), ("JPY", None), ("jpy", "Asia/Tokyo"), (None, "Asia/Tokyo")],
)
def test_metas_values_are_registered_and_the_same_given_ones_accepted(
    currency: str | None, timezone: str | None
) -> None:
    assert settle("act_1004", YEN, currency=currency, timezone=timezone) == ("JPY", "Asia/Tokyo")


@pytest.mark.parametrize(
    ("currency", "timezone", "field", "said"),
    [
        ("USD", None, "currency", "the currency JPY, not USD"),
        (None, "UTC", "timezone", "the timezone Asia/Tokyo, not UTC"),
        ("USD", "UTC", "currency", "the currency JPY"),
    ],
)
def test_a_given_value_meta_contradicts_is_refused_naming_its_field(
    currency: str | None, timezone: str | None, field: str, said: str
) -> None:
    with pytest.raises(AccountCheckError, match=said) as raised:
        settle("act_1004", YEN, currency=currency, timezone=timezone)
    assert raised.value.field == field


def test_without_metas_word_both_values_must_be_given() -> None:
    assert settle("act_1", None, currency="eur", timezone="Europe/Berlin") == (
        "EUR",
        "Europe/Berlin",
    )
    with pytest.raises(AccountCheckError, match="did not say the timezone") as raised:
        settle("act_1", AdAccount(currency="EUR"), currency=None, timezone=None)
    assert raised.value.field == "timezone"
    assert settle("act_1", AdAccount(currency="EUR"), currency=None, timezone="UTC") == (
        "EUR",
        "UTC",
    )
