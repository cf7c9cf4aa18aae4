"""Meta's currency offsets, and the minimum daily budget the sandbox asks in each currency.

Meta's currency table gives every currency an *offset*: how many budget units make
one unit of the currency. Exactly eleven currencies have offset 1 — their budgets
and Insights money are whole units (¥5000 is ``"5000"``); every other one has
offset 100 (``"5000"`` is 50.00).

Meta's minimum daily budget is 1.00 USD a day (for ad sets charged per impression)
in USD, EUR, JPY and the other "high-value" currencies, and 0.50 USD in the rest,
converted at the day's exchange rate. The sandbox fixes one value per currency in
minor units instead of following exchange rates.
"""

from __future__ import annotations

from typing import Final

#: Meta's currencies with offset 1 (no minor unit in budgets).
ZERO_DECIMAL: Final = frozenset(
    {"CLP", "COP", "CRC", "HUF", "ISK", "IDR", "JPY", "KRW", "PYG", "TWD", "VND"}
)

#: Minimum daily budgets in minor units: 1.00 USD in USD, EUR and GBP, about 1.00 USD in
#: yen (¥150), about 0.50 USD in rupiah (Rp 10,000, rounded up as Ads Manager shows it).
MIN_DAILY_BUDGETS: Final = {"USD": 100, "EUR": 100, "GBP": 100, "JPY": 150, "IDR": 10_000}
#: Any other currency: 100 minor units (1.00, or 100 whole units of a zero-decimal one).
DEFAULT_MIN_DAILY_BUDGET: Final = 100


def offset(currency: str) -> int:
    """Budget units per currency unit: 1 for the zero-decimal currencies, else 100."""
    return 1 if currency.upper() in ZERO_DECIMAL else 100


def min_daily_budget(currency: str) -> int:
    """The smallest daily budget (minor units) the sandbox accepts in ``currency``."""
    return MIN_DAILY_BUDGETS.get(currency.upper(), DEFAULT_MIN_DAILY_BUDGET)


def money(amount: int, currency: str) -> str:
    """``amount`` minor units as people read it: ``1.00 USD``, ``150 JPY``."""
    if offset(currency) == 1:
        return f"{amount} {currency}"
    return f"{amount / 100:.2f} {currency}"
