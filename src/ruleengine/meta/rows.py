"""Insights rows of adjacent date ranges added into one: which fields add up, and the sum.

A timed-out Insights request over several days can be asked again as shorter ranges
only when every field it asks for is additive — its value over the whole range is
the sum of its values over the parts (spend, impressions, clicks, action counts and
values); ratios, reach and frequency are not. Numbers are summed as decimals, so
``"10.10"`` and ``"0.95"`` make ``"11.05"`` exactly.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Final

# Fields whose value over a range is the sum of its values over the parts (a split by
# range is exact for these only); and fields that name the row rather than measure it.
ADDITIVE_FIELDS: Final = frozenset(
    {"spend", "impressions", "clicks", "inline_link_clicks", "actions", "action_values"}
)
IDENTITY_FIELDS: Final = frozenset(
    {
        "account_id",
        "account_name",
        "account_currency",
        "campaign_id",
        "campaign_name",
        "adset_id",
        "adset_name",
        "ad_id",
        "ad_name",
        "objective",
        "date_start",
        "date_stop",
    }
)
_ACTION_LISTS: Final = ("actions", "action_values")


def sum_rows(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two rows of the same entity over adjacent ranges as one row over both (additive fields)."""
    merged = {**second, **first}
    for name in ADDITIVE_FIELDS - set(_ACTION_LISTS):
        if name in first or name in second:
            merged[name] = _add(first.get(name), second.get(name))
    for name in _ACTION_LISTS:
        if name in first or name in second:
            merged[name] = _add_actions(first.get(name), second.get(name))
    for name, pick in (("date_start", min), ("date_stop", max)):
        dates = [row[name] for row in (first, second) if isinstance(row.get(name), str)]
        if dates:
            merged[name] = pick(dates)
    return merged


def _decimal(value: Any) -> Decimal:
    try:
        return Decimal(str(value)) if value is not None else Decimal(0)
    except InvalidOperation:
        return Decimal(0)


def _add(a: Any, b: Any) -> str:
    return str(_decimal(a) + _decimal(b))


def _add_actions(a: Any, b: Any) -> list[dict[str, Any]]:
    totals: dict[str, Decimal] = {}
    for entries in (a, b):
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("action_type"), str):
                kind = entry["action_type"]
                totals[kind] = totals.get(kind, Decimal(0)) + _decimal(entry.get("value"))
    return [{"action_type": kind, "value": str(value)} for kind, value in totals.items()]
