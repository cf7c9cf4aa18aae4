"""Delivery totals of ad sets over periods, computed lazily and cached per (ad set, day).

Full-day totals never change once computed (they depend only on the seed, the
ad set and the date), so they are cached; the part of a day that counts
(today so far, or the day an ad set was created) is applied on every request,
which is what makes today's numbers grow as the clock moves.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from graph_sandbox.delivery import ZERO, Totals, add, day_totals, scale
from graph_sandbox.periods import Period
from graph_sandbox.world import AdObject, World


class InsightsEngine:
    """Computes what ad sets delivered, for one world.

    Args:
        world: The world whose ad sets are measured; its seed drives the noise.
    """

    def __init__(self, world: World) -> None:
        self._world = world
        self._days: dict[tuple[str, int], Totals] = {}

    def totals(self, adsets: Iterable[AdObject], period: Period, now: datetime) -> Totals:
        """What ``adsets`` delivered in ``period`` (dates in their account's timezone)."""
        total = ZERO
        for adset in adsets:
            total = add(total, self.adset_totals(adset, period, now))
        return total

    def adset_totals(self, adset: AdObject, period: Period, now: datetime) -> Totals:
        """What one ad set delivered in ``period``, up to ``now``.

        Days before the ad set was created deliver nothing; today counts the
        elapsed part of the account-local day, and nothing at all while the ad
        set (or its campaign) is paused.
        """
        if adset.profile is None or adset.profile.spend_cents <= 0:
            return ZERO
        tz = self._world.account_of(adset).tz
        today = now.astimezone(tz).date().toordinal()
        created = adset.created_time.astimezone(tz).date().toordinal()
        total, days = ZERO, 0
        for ordinal in range(
            max(period[0].toordinal(), created), min(period[1].toordinal(), today) + 1
        ):
            full = self._day(adset, ordinal)
            if ordinal in (today, created):
                full = scale(full, self._fraction(adset, ordinal, tz, now))
            if full.impressions:
                total, days = add(total, full), days + 1
        return _deduplicated(total, days)

    def _day(self, adset: AdObject, ordinal: int) -> Totals:
        key = (adset.id, ordinal)
        cached = self._days.get(key)
        if cached is None:
            assert adset.profile is not None
            cached = day_totals(adset.profile, self._world.seed, adset.id, ordinal)
            self._days[key] = cached
        return cached

    def _fraction(self, adset: AdObject, ordinal: int, tz: ZoneInfo, now: datetime) -> float:
        """The share of day ``ordinal`` during which the ad set delivered."""
        day = date.fromordinal(ordinal)
        start = datetime.combine(day, time(), tz).astimezone(UTC)
        end = datetime.combine(day + timedelta(days=1), time(), tz).astimezone(UTC)
        # Simplification: a paused ad set accrues nothing today, even for the
        # hours before it was paused.
        if now < end and not self._world.delivering_now(adset):
            return 0.0
        delivered = min(end, now) - max(start, adset.created_time)
        return max(0.0, delivered / (end - start))


def _deduplicated(total: Totals, days: int) -> Totals:
    """Reach and unique clicks over several days: people seen on many days count once."""
    if days <= 1:
        return total
    overlap = 1 + 0.1 * (days - 1)
    return total._replace(
        reach=round(total.reach / overlap), unique_clicks=round(total.unique_clicks / overlap)
    )
