"""Insights metric fields, computed from totals and formatted the way Meta formats them.

Numbers are strings; money is in major units (``"123.45"``; ``"12345"`` in a
zero-decimal currency such as JPY, whose offset is 1). A ratio whose
denominator is zero is left out, and so is any action-list entry that is zero,
so a client sees exactly the gaps it would see from Meta.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from graph_sandbox.delivery import Totals

#: Conversions without ``use_unified_attribution_setting=true`` use Meta's older
#: attribution (longer click window), which finds this many times more.
LEGACY_ATTRIBUTION_FACTOR = 1.3

ActionList = list[dict[str, str]]


def with_attribution(totals: Totals, *, unified: bool) -> Totals:
    """The totals as a client sees them with or without the unified attribution setting."""
    if unified:
        return totals
    f = LEGACY_ATTRIBUTION_FACTOR
    return totals._replace(
        add_to_cart=round(totals.add_to_cart * f),
        initiate_checkout=round(totals.initiate_checkout * f),
        purchases=round(totals.purchases * f),
        purchase_value_cents=round(totals.purchase_value_cents * f),
        leads=round(totals.leads * f),
    )


def _money(cents: float) -> str:
    return f"{cents / 100:.2f}"


def _ratio(numerator: float, denominator: float, factor: float = 1.0) -> str | None:
    return f"{numerator * factor / denominator:.6f}" if denominator else None


def _action_counts(t: Totals) -> list[tuple[str, int]]:
    return [
        ("link_click", t.link_clicks),
        ("landing_page_view", t.landing_page_views),
        ("add_to_cart", t.add_to_cart),
        ("omni_add_to_cart", t.add_to_cart),
        ("offsite_conversion.fb_pixel_add_to_cart", t.add_to_cart),
        ("initiate_checkout", t.initiate_checkout),
        ("omni_initiated_checkout", t.initiate_checkout),
        ("offsite_conversion.fb_pixel_initiate_checkout", t.initiate_checkout),
        ("purchase", t.purchases),
        ("omni_purchase", t.purchases),
        ("offsite_conversion.fb_pixel_purchase", t.purchases),
        ("lead", t.leads),
        ("onsite_conversion.lead_grouped", t.leads),
    ]


_PURCHASE_TYPES = ("purchase", "omni_purchase", "offsite_conversion.fb_pixel_purchase")


def _actions(t: Totals) -> ActionList | None:
    entries = [{"action_type": k, "value": str(n)} for k, n in _action_counts(t) if n]
    return entries or None


def _action_values(t: Totals) -> ActionList | None:
    if not t.purchase_value_cents:
        return None
    value = _money(t.purchase_value_cents)
    return [{"action_type": kind, "value": value} for kind in _PURCHASE_TYPES]


def _cost_per_action(t: Totals) -> ActionList | None:
    entries = [
        {"action_type": kind, "value": f"{t.spend_cents / 100 / n:.6f}"}
        for kind, n in _action_counts(t)
        if n
    ]
    return entries or None


def _roas(t: Totals, action_type: str) -> ActionList | None:
    if not (t.purchase_value_cents and t.spend_cents):
        return None
    return [{"action_type": action_type, "value": f"{t.purchase_value_cents / t.spend_cents:.6f}"}]


_FIELDS: dict[str, Callable[[Totals], Any]] = {
    "spend": lambda t: _money(t.spend_cents),
    "impressions": lambda t: str(t.impressions),
    "reach": lambda t: str(t.reach),
    "frequency": lambda t: _ratio(t.impressions, t.reach),
    "clicks": lambda t: str(t.clicks),
    "unique_clicks": lambda t: str(t.unique_clicks),
    "ctr": lambda t: _ratio(t.clicks, t.impressions, 100),
    "unique_ctr": lambda t: _ratio(t.unique_clicks, t.reach, 100),
    "cpc": lambda t: _ratio(t.spend_cents / 100, t.clicks),
    "cpm": lambda t: _ratio(t.spend_cents / 100, t.impressions, 1000),
    "cpp": lambda t: _ratio(t.spend_cents / 100, t.reach, 1000),
    "inline_link_clicks": lambda t: str(t.link_clicks),
    "inline_link_click_ctr": lambda t: _ratio(t.link_clicks, t.impressions, 100),
    "cost_per_inline_link_click": lambda t: _ratio(t.spend_cents / 100, t.link_clicks),
    "actions": _actions,
    "action_values": _action_values,
    "cost_per_action_type": _cost_per_action,
    "purchase_roas": lambda t: _roas(t, "omni_purchase"),
    "website_purchase_roas": lambda t: _roas(t, "offsite_conversion.fb_pixel_purchase"),
}

METRIC_FIELDS = frozenset(_FIELDS)


def render_metrics(totals: Totals, fields: Iterable[str], *, offset: int = 100) -> dict[str, Any]:
    """The requested metric fields of ``totals``; fields without a value are left out.

    ``offset`` is the account currency's: 100 for cents, 1 for JPY and the other
    zero-decimal currencies, whose money the totals hold in whole units.
    """
    if offset != 100:
        # the fields compute money from hundredths: express whole units as hundredths
        totals = totals._replace(
            spend_cents=totals.spend_cents * 100 // offset,
            purchase_value_cents=totals.purchase_value_cents * 100 // offset,
        )
    row: dict[str, Any] = {}
    for name in fields:
        value = _FIELDS[name](totals)
        if value is not None:
            row[name] = value
    return row if offset == 100 else _whole_units(row)


def _whole_units(row: dict[str, Any]) -> dict[str, Any]:
    """Amounts of a zero-decimal currency without decimals, as Meta writes them."""
    if "spend" in row:
        row["spend"] = str(round(float(row["spend"])))
    if "action_values" in row:
        row["action_values"] = [
            item | {"value": str(round(float(item["value"])))} for item in row["action_values"]
        ]
    return row
