"""Conversions that mature: the attribution-lag curve, and a past day as it was seen then.

Meta books spend, impressions and clicks at once, but a conversion is attributed to the
day of the click or impression that led to it and arrives later, so a day's conversions
keep growing for days after the day ended. The sandbox models this with one curve,
``share(age)``: the part of a day's matured conversions that is visible ``age`` hours
after the end of that day in the ad account's timezone. The curve is piecewise linear
through ``(age_h, share)`` points, the first at age 0, the last at share 1 (the horizon:
from then on the day is matured). Before the end of a day (today) the age counts as 0.

Pure maths, no I/O: tests predict what the sandbox shows with :func:`seen_share` and
:func:`as_seen`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import date, datetime
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, field_validator

from graph_sandbox.delivery import Totals
from graph_sandbox.timeline import day_window

#: ``(age in hours after the end of the day, share of the matured conversions seen)``.
Curve = tuple[tuple[float, float], ...]

#: Half of a day's conversions are in when the day ends, 80 % a day later, 95 % after
#: three days, all of them after seven.
DEFAULT_CURVE: Curve = ((0.0, 0.5), (24.0, 0.8), (72.0, 0.95), (168.0, 1.0))


class AttributionLag(BaseModel):
    """The ``attribution_lag`` setting of ``POST /_sandbox/insights``.

    Off by default: a past day then shows its matured numbers at any clock time.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    curve: Curve = DEFAULT_CURVE

    @field_validator("curve")
    @classmethod
    def _valid_curve(cls, curve: Curve) -> Curve:
        check_curve(curve)
        return curve

    @property
    def horizon_h(self) -> float:
        """Hours after the end of a day from which its numbers no longer change."""
        return self.curve[-1][0]


def check_curve(curve: Sequence[tuple[float, float]]) -> None:
    """Refuse a curve that is not a share growing from age 0 to 1.

    Raises:
        ValueError: a point is not finite, the first age is not 0, ages do not increase,
            a share is outside [0, 1], shares decrease, or the last share is not 1.
    """
    if not curve:
        raise ValueError("the curve needs at least one point [age_h, share]")
    if not all(math.isfinite(age) and math.isfinite(share) for age, share in curve):
        raise ValueError("ages and shares must be finite numbers")
    if curve[0][0] != 0:
        raise ValueError("the first point must be at age 0")
    ages, shares = [age for age, _ in curve], [share for _, share in curve]
    if any(later <= earlier for earlier, later in itertools.pairwise(ages)):
        raise ValueError("ages must increase from point to point")
    if any(not 0 <= share <= 1 for share in shares):
        raise ValueError("shares must be between 0 and 1")
    if any(later < earlier for earlier, later in itertools.pairwise(shares)):
        raise ValueError("shares must not decrease with age")
    if shares[-1] != 1:
        raise ValueError("the last point's share must be 1: a day matures at the horizon")


def seen_share(age_h: float, curve: Curve = DEFAULT_CURVE) -> float:
    """The share of a day's matured conversions seen ``age_h`` hours after the day ended.

    Linear between the curve's points; the first point's share before it (age ≤ 0: the
    day is not over yet), 1 from the last point on.
    """
    if age_h <= curve[0][0]:
        return curve[0][1]
    for (age0, share0), (age1, share1) in itertools.pairwise(curve):
        if age_h < age1:
            return share0 + (share1 - share0) * (age_h - age0) / (age1 - age0)
    return curve[-1][1]


def day_age_h(day: date, tz: ZoneInfo, now: datetime) -> float:
    """Hours from the end of ``day`` (in ``tz``) to ``now``; negative while the day lasts."""
    return (now - day_window(day, tz)[1]).total_seconds() / 3600


def as_seen(totals: Totals, share: float) -> Totals:
    """A day's matured totals as seen when ``share`` of its conversions are in.

    Conversion counts (add-to-cart, checkouts, purchases, leads) are rounded to the
    nearest (never above the matured count): rounding down would bias a sum over many ad
    sets half a conversion per ad set below the curve. Purchase value follows the purchase
    count, so value per purchase stays the same. Spend, impressions, clicks and views are
    booked at once and stay as they are.
    """
    if share >= 1.0:
        return totals
    purchases = round(totals.purchases * share)
    per_purchase = totals.purchase_value_cents // totals.purchases if totals.purchases else 0
    return totals._replace(
        add_to_cart=round(totals.add_to_cart * share),
        initiate_checkout=round(totals.initiate_checkout * share),
        purchases=purchases,
        purchase_value_cents=purchases * per_purchase,
        leads=round(totals.leads * share),
    )
