"""Daily delivery maths: what one ad set delivers on one day, as a pure function.

Each ad set has a :class:`Profile` (its typical day); :func:`day_totals` turns
the profile, the seed, the ad set id and a date into full-day totals with a
little deterministic noise, so the same seed always gives the same numbers and
no two days are quite alike. Everything is in integers (money in cents).

A budget change answers with diminishing returns: at ``budget_ratio`` times the
budget the profile was built for, spend, impressions and clicks are ``ratio`` times
the typical day's and conversions ``ratio ** ELASTICITY`` times (the profile's ROAS
is the ad set's quality at its typical budget). The noise of a day is the same at
every ratio, so a change moves a day's numbers by the model's factors and nothing else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class Archetype(StrEnum):
    """The kinds of performance the scenarios mix to make rules interesting."""

    WINNER = "winner"
    MIDDLING = "middling"
    LOSER = "loser"
    NO_PURCHASE = "no_purchase"
    LEADGEN = "leadgen"
    AWARENESS = "awareness"
    NO_DELIVERY = "no_delivery"


@dataclass(frozen=True)
class Profile:
    """The typical full day of one ad set.

    Attributes:
        archetype: Which kind of performer this is (for people reading the world).
        spend_cents: Typical full-day spend, in the account currency's minor unit.
        cpm_cents: Cost per thousand impressions, minor units.
        ctr: Clicks per impression.
        link_share: Inline link clicks per click.
        roas: Purchase value per unit of spend (0: never purchases).
        aov_cents: Average order value, minor units.
        cart_rate: Add-to-carts per link click.
        lead_rate: Leads per link click.
        frequency: Impressions per person reached, within one day.
    """

    archetype: Archetype
    spend_cents: int
    cpm_cents: int = 1000
    ctr: float = 0.015
    link_share: float = 0.75
    roas: float = 0.0
    aov_cents: int = 5000
    cart_rate: float = 0.0
    lead_rate: float = 0.0
    frequency: float = 1.4


class Totals(NamedTuple):
    """Delivery counts over some period; money in minor units."""

    spend_cents: int = 0
    impressions: int = 0
    reach: int = 0
    clicks: int = 0
    unique_clicks: int = 0
    link_clicks: int = 0
    landing_page_views: int = 0
    add_to_cart: int = 0
    initiate_checkout: int = 0
    purchases: int = 0
    purchase_value_cents: int = 0
    leads: int = 0


ZERO = Totals()

#: Conversions grow as ``spend ** ELASTICITY`` when a budget moves spend: below 1, each
#: extra unit of spend buys fewer conversions than the one before (diminishing returns).
ELASTICITY = 0.7


def noise(seed: int, entity_id: str, day_ordinal: int) -> tuple[float, float, float, float]:
    """Four deterministic numbers in [0, 1) for one entity on one day."""
    digest = hashlib.blake2b(f"{seed}|{entity_id}|{day_ordinal}".encode(), digest_size=16).digest()
    scale = 2.0**32
    return (
        int.from_bytes(digest[0:4], "little") / scale,
        int.from_bytes(digest[4:8], "little") / scale,
        int.from_bytes(digest[8:12], "little") / scale,
        int.from_bytes(digest[12:16], "little") / scale,
    )


def day_totals(
    profile: Profile, seed: int, entity_id: str, day_ordinal: int, budget_ratio: float = 1.0
) -> Totals:
    """What the ad set delivers over the whole day ``day_ordinal`` (``date.toordinal()``)
    at ``budget_ratio`` times the budget its profile was built for.

    Spend (and with it impressions, reach and clicks) is proportional to the ratio;
    conversions per unit of spend (and per click) are ``ratio ** (ELASTICITY - 1)`` times
    the profile's, so conversions and purchase value grow as ``ratio ** ELASTICITY``. At a
    ratio of 1 every factor is exactly 1.0: the numbers are the profile's own.
    """
    if profile.spend_cents <= 0:
        return ZERO
    n0, n1, n2, n3 = noise(seed, entity_id, day_ordinal)
    per_spend = budget_ratio ** (ELASTICITY - 1)  # conversions per unit of spend, relative
    spend = round(profile.spend_cents * (0.85 + 0.3 * n0) * budget_ratio)
    impressions = max(1, round(spend * 1000 / (profile.cpm_cents * (0.9 + 0.2 * n1))))
    clicks = round(impressions * profile.ctr * (0.9 + 0.2 * n2))
    link_clicks = round(clicks * profile.link_share)
    purchases = 0
    if profile.roas > 0:
        purchases = round(spend * profile.roas * (0.9 + 0.2 * n3) / profile.aov_cents * per_spend)
    order_value = round(profile.aov_cents * (0.95 + 0.1 * n0))
    add_to_cart = max(round(link_clicks * profile.cart_rate * per_spend), purchases * 3)
    return Totals(
        spend_cents=spend,
        impressions=impressions,
        reach=max(1, round(impressions / profile.frequency)),
        clicks=clicks,
        unique_clicks=round(clicks * 0.88),
        link_clicks=link_clicks,
        landing_page_views=round(link_clicks * 0.82),
        add_to_cart=add_to_cart,
        initiate_checkout=purchases + round((add_to_cart - purchases) * 0.4),
        purchases=purchases,
        purchase_value_cents=purchases * order_value,
        leads=round(link_clicks * profile.lead_rate * (0.9 + 0.2 * n3) * per_spend),
    )


def scale(totals: Totals, fraction: float) -> Totals:
    """The part of a day's totals delivered in ``fraction`` of it (counts rounded down).

    Purchase value follows the purchase count, so a partial day never shows
    value without purchases.
    """
    if fraction >= 1.0:
        return totals
    if fraction <= 0.0:
        return ZERO
    scaled = Totals(*(int(value * fraction) for value in totals))
    per_purchase = totals.purchase_value_cents // totals.purchases if totals.purchases else 0
    return scaled._replace(purchase_value_cents=scaled.purchases * per_purchase)


def add(left: Totals, right: Totals) -> Totals:
    """Field-by-field sum."""
    return Totals(*(a + b for a, b in zip(left, right, strict=True)))
