"""Daily delivery maths: what one ad set delivers on one day, as a pure function.

Each ad set has a :class:`Profile` (its typical day); :func:`day_totals` turns
the profile, the seed, the ad set id and a date into full-day totals with a
little deterministic noise, so the same seed always gives the same numbers and
no two days are quite alike. Everything is in integers (money in cents).

A day's spend follows Meta's daily budget flexibility (:func:`week_factor`): on days with
better opportunities a daily budget may spend up to 75 % more (1.75 times), and less on
others, while a calendar week (Sunday to Saturday in the ad account's timezone) spends no more
than 7 times the daily budget — Meta's v23.0 announcement (2025-05-29,
https://developers.facebook.com/blog/post/2025/05/29/introducing-graph-api-v23-and-marketing-api-v23/:
"we may spend up to 75% over your daily budget on some days and less on others. On a weekly
basis, we won't spend more than 7 times your daily budget"), the Business SDK 24.0.0 release
notes ("The daily budget flexibility is increased from 25% to 75% … while maintaining weekly
spend limits", https://github.com/facebook/facebook-php-business-sdk/releases/tag/24.0.0) and
Meta's Ad Set Budget page for the week and its proration ("A calendar week is Saturday, at
midnight, which is also known as the start of Sunday, to the next Saturday at 11:59 in the ad
account's time zone … If the ad set does not start on Saturday, the first week's spending
limit is prorated", https://developers.facebook.com/docs/marketing-api/adset/budget-limits).

A budget change answers with diminishing returns: at ``budget_ratio`` times the
budget the profile was built for, spend, impressions and clicks are ``ratio`` times
the typical day's and conversions ``ratio ** ELASTICITY`` times (the profile's ROAS
is the ad set's quality at its typical budget). The noise of a day is the same at
every ratio, so a change moves a day's numbers by the model's factors and nothing else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from functools import lru_cache
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


#: Meta's daily budget flexibility: a day may spend up to this many times the daily budget.
DAILY_FLEX = 1.75
#: A calendar week spends at most this many daily budgets (prorated in an ad set's first week).
WEEK_DAYS = 7


def _day_base(seed: int, entity_id: str, day_ordinal: int) -> float:
    """A day's spend before the week is shaped, in typical days: 0.85 to 1.15."""
    return 0.85 + 0.3 * noise(seed, entity_id, day_ordinal)[0]


def week_factor(seed: int, entity_id: str, day_ordinal: int, first_ordinal: int | None) -> float:
    """The day's spend in typical days, its calendar week shaped as Meta's flexibility does.

    The week (Sunday to Saturday; from ``first_ordinal``, the ad set's first day, in its
    first week) has one day of better opportunities, chosen by the seed, that spends 0.4 to
    0.6 typical days more — at most 1.15 + 0.6 = :data:`DAILY_FLEX` — taken evenly from the
    week's other days; then the whole week is scaled down, if need be, to at most one typical
    day per day of it (7, or fewer in a first week: Meta's proration). A profile's typical day
    is at most its daily budget (:mod:`graph_sandbox.scenarios`), so a day never spends more
    than 1.75 times the budget nor a calendar week more than 7 times.
    """
    sunday = day_ordinal - date.fromordinal(day_ordinal).isoweekday() % 7
    first = max(sunday, first_ordinal or sunday)
    if day_ordinal < first:
        return 0.0
    return _week_shape(seed, entity_id, sunday, first)[day_ordinal - first]


@lru_cache(maxsize=1 << 16)
def _week_shape(seed: int, entity_id: str, sunday: int, first: int) -> tuple[float, ...]:
    """:func:`week_factor` of each day of the week from ``first`` to Saturday (a week is read
    day by day: its nine hashes once, not per day)."""
    shaped = {day: _day_base(seed, entity_id, day) for day in range(first, sunday + WEEK_DAYS)}
    pick, size = noise(seed, f"{entity_id}|week", sunday)[:2]
    surge_day = sunday + int(pick * WEEK_DAYS)
    if surge_day in shaped and len(shaped) > 1:
        surge = 0.4 + 0.2 * size
        for day in shaped:
            shaped[day] += surge if day == surge_day else -surge / (len(shaped) - 1)
    scale = min(1.0, len(shaped) / sum(shaped.values()))
    return tuple(factor * scale for factor in shaped.values())


def day_totals(
    profile: Profile,
    seed: int,
    entity_id: str,
    day_ordinal: int,
    budget_ratio: float = 1.0,
    *,
    first_ordinal: int | None = None,
) -> Totals:
    """What the ad set delivers over the whole day ``day_ordinal`` (``date.toordinal()``)
    at ``budget_ratio`` times the budget its profile was built for (``first_ordinal``: the ad
    set's first day, whose week is prorated).

    Spend (and with it impressions, reach and clicks) is the profile's typical day times the
    day's share of its week (:func:`week_factor`) times the ratio; conversions per unit of
    spend (and per click) are ``ratio ** (ELASTICITY - 1)`` times the profile's, so conversions
    and purchase value grow as ``ratio ** ELASTICITY``. At a ratio of 1 every factor is exactly
    1.0.
    """
    if profile.spend_cents <= 0:
        return ZERO
    n0, n1, n2, n3 = noise(seed, entity_id, day_ordinal)
    per_spend = budget_ratio ** (ELASTICITY - 1)  # conversions per unit of spend, relative
    factor = week_factor(seed, entity_id, day_ordinal, first_ordinal)
    spend = round(profile.spend_cents * factor * budget_ratio)
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
