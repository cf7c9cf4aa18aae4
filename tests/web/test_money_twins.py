"""The screens format money exactly as the server does: ``RE.money`` and its kin in
``web/static/common.js`` against ``rules/language/money.py``, on generated amounts, currencies and
fields (common.js runs in Node, with just enough of a browser around it).

Skipped where ``node`` is absent, unless ``RULEENGINE_REQUIRE_BROWSER=1`` (as the browser
tests): then it fails saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.rules.entity import ZERO_DECIMAL
from ruleengine.rules.language.money import (
    CURRENCY_SYMBOLS,
    MINOR_UNIT_FIELDS,
    format_amount,
    format_change,
    format_field_change,
    format_minor,
    format_value,
)
from ruleengine.web.views import STATIC_DIR

HARNESS = Path(__file__).parent / "js" / "common_in_node.js"
NODE = shutil.which("node")
REQUIRE = os.environ.get("RULEENGINE_REQUIRE_BROWSER", "0") not in ("", "0")
if NODE is None and not REQUIRE:
    pytest.skip("node is not installed (apt-get install -y nodejs)", allow_module_level=True)


class Twin:
    """common.js in a Node process: one JSON line per call."""

    def __init__(self, node: str) -> None:
        self._process = subprocess.Popen(
            [node, str(HARNESS), str(STATIC_DIR / "common.js")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def __call__(self, fn: str, *args: Any) -> str:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps({"fn": fn, "args": list(args)}) + "\n")
        self._process.stdin.flush()
        answer = json.loads(self._process.stdout.readline())
        assert "error" not in answer, answer["error"]
        return str(answer["ok"])

    def close(self) -> None:
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()
        self._process.wait(timeout=10)


@pytest.fixture(scope="module")
def js() -> Iterator[Twin]:
    if NODE is None:
        pytest.fail("RULEENGINE_REQUIRE_BROWSER=1 but node is not installed", pytrace=False)
    twin = Twin(NODE)
    try:
        yield twin
    finally:
        twin.close()


CURRENCIES = st.one_of(
    st.sampled_from(sorted(CURRENCY_SYMBOLS) + sorted(ZERO_DECIMAL) + ["CHF", "SEK", "PLN"]),
    st.sampled_from(["usd", "jpy", "Eur"]),
    st.none(),
    st.just(""),
)
# JSON numbers reach the page as doubles: whole amounts up to 2^53 are exact on both sides.
AMOUNTS = st.one_of(
    st.integers(min_value=-(2**53), max_value=2**53),
    st.integers(min_value=0, max_value=10**7),  # budgets as they are
    st.integers(min_value=-(10**17), max_value=10**18).map(str),  # digits as Meta sends them
    st.none(),
)
FIELDS = st.sampled_from([*sorted(MINOR_UNIT_FIELDS), "status", None])


@settings(deadline=None)  # a round trip to another process: its first is slow
@given(minor=AMOUNTS, currency=CURRENCIES)
def test_an_amount_reads_the_same_on_the_screens(js: Twin, minor: Any, currency: Any) -> None:
    assert js("money", minor, currency) == format_minor(minor, currency)


@settings(deadline=None)  # a round trip to another process: its first is slow
@given(before=AMOUNTS, after=AMOUNTS, currency=CURRENCIES)
def test_a_change_reads_the_same_on_the_screens(
    js: Twin, before: Any, after: Any, currency: Any
) -> None:
    assert js("moneyChange", before, after, currency) == format_change(before, after, currency)


@settings(deadline=None)  # a round trip to another process: its first is slow
@given(
    field=FIELDS,
    before=st.one_of(AMOUNTS, st.sampled_from(["ACTIVE", "PAUSED"])),
    after=st.one_of(AMOUNTS, st.sampled_from(["ACTIVE", "PAUSED"])),
    currency=CURRENCIES,
)
def test_any_fields_change_reads_the_same_on_the_screens(
    js: Twin, field: Any, before: Any, after: Any, currency: Any
) -> None:
    assert js("fieldChange", field, before, after, currency) == format_field_change(
        field, before, after, currency
    )
    assert js("fieldValue", field, after, currency) == format_value(field, after, currency)


@settings(deadline=None)
@given(
    value=st.one_of(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
        st.integers(min_value=-(2**53), max_value=2**53),
        st.decimals(places=3, min_value=-(10**9), max_value=10**9).map(float),  # ties: x.xx5
    ),
    currency=st.sampled_from(["USD", "JPY", "EUR", "CHF", "krw", "IDR"]),
    signed=st.booleans(),
)
def test_an_amount_in_currency_units_reads_the_same_on_the_screens(
    js: Twin, value: float, currency: str, signed: bool
) -> None:
    """Condition values and Insights money are currency units, not minor units."""
    expected = format_amount(float(value), currency, signed=signed)
    assert js("amount", value, currency, signed) == expected


def test_the_issues_examples(js: Twin) -> None:
    for currency, text in (
        ("USD", "$120.00 → $108.00 (−10 %)"),
        ("JPY", "¥12,000 → ¥10,800 (−10 %)"),
    ):
        assert (
            js("moneyChange", 12000, 10800, currency)
            == text
            == format_change(12000, 10800, currency)
        )
