"""Delivery totals of ad sets over periods, computed lazily and cached per (ad set, day).

Full-day totals never change once computed (they depend only on the seed, the
ad set and the date), so they are cached; the part of a day that counts
(today so far, the day an ad set was created, the hours it was active around a
pause) is applied on every request, which is what makes today's numbers grow
as the clock moves and stop, but stay, when an ad set is paused.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from zoneinfo import ZoneInfo

from graph_sandbox.delivery import ZERO, Totals, add, day_totals, scale
from graph_sandbox.periods import Period
from graph_sandbox.timeline import (
    ALWAYS,
    Span,
    StatusChange,
    active_spans,
    day_window,
    hour_window,
    intersect,
    overlap,
)
from graph_sandbox.world import ACTIVE, AdObject, World


class InsightsEngine:
    """Computes what ad sets delivered, for one world.

    Args:
        world: The world whose ad sets are measured; its seed drives the noise.
    """

    def __init__(self, world: World) -> None:
        self._world = world
        self._days: dict[tuple[str, int], Totals] = {}

    def totals(
        self, adsets: Iterable[AdObject], period: Period, now: datetime, *, hour: int | None = None
    ) -> Totals:
        """What ``adsets`` delivered in ``period`` (dates in their account's timezone).

        With ``hour`` (0–23), only what they delivered within that local hour of each day.
        """
        total = ZERO
        for adset in adsets:
            total = add(total, self.adset_totals(adset, period, now, hour=hour))
        return total

    def adset_totals(
        self, adset: AdObject, period: Period, now: datetime, *, hour: int | None = None
    ) -> Totals:
        """What one ad set delivered in ``period``, up to ``now``.

        Days before the ad set was created deliver nothing; a day counts the part of
        it during which the ad set and its campaign were both active (before ``now``),
        so what was delivered before a pause stays and nothing accrues after it.
        """
        if adset.profile is None or adset.profile.spend_cents <= 0:
            return ZERO
        tz = self._world.account_of(adset).tz
        today = now.astimezone(tz).date().toordinal()
        created = adset.created_time.astimezone(tz).date().toordinal()
        spans = self._active_spans(adset, now, tz)
        total, days = ZERO, 0
        for ordinal in range(
            max(period[0].toordinal(), created), min(period[1].toordinal(), today) + 1
        ):
            full = self._day(adset, ordinal)
            if hour is not None or spans is not ALWAYS or ordinal in (today, created):
                full = scale(full, self._share(adset, ordinal, tz, now, spans, hour))
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

    def _active_spans(self, adset: AdObject, now: datetime, tz: ZoneInfo) -> list[Span]:
        """When the ad set and its campaign were both active; ``ALWAYS`` for the common case."""
        campaign = self._world.campaign_of(adset)
        if adset.held_as or campaign.held_as:
            return []
        spans = ALWAYS
        for obj in (adset, campaign):
            log = self._world.status_log(obj.id)
            if not log and obj.status == ACTIVE:
                continue
            own = active_spans(obj.status, log, settled_at=self._settled_at(obj, log, now, tz))
            spans = intersect(spans, own)
        return spans

    def _settled_at(
        self, obj: AdObject, log: list[StatusChange], now: datetime, tz: ZoneInfo
    ) -> datetime:
        """Since when the status an object had before its first logged change held.

        A copy has had it since its creation. The scenarios do not say since when a
        paused object has been paused: since the start of the day of its first change,
        or of today while it has none, so its past days are full and its today empty.
        """
        if obj.source_id is not None:
            return obj.created_time
        anchor = log[0].at if log else now
        return day_window(anchor.astimezone(tz).date(), tz)[0]

    def _share(
        self,
        adset: AdObject,
        ordinal: int,
        tz: ZoneInfo,
        now: datetime,
        spans: list[Span],
        hour: int | None,
    ) -> float:
        """The share of day ``ordinal``'s full totals delivered (within ``hour``, if given)."""
        day = date.fromordinal(ordinal)
        whole = day_window(day, tz)
        window = whole if hour is None else hour_window(day, hour, tz)
        window = (max(window[0], adset.created_time), min(window[1], now))
        if window[0] >= window[1]:
            return 0.0
        delivered = overlap(window, spans)
        return max(0.0, delivered / (whole[1] - whole[0]))


def _deduplicated(total: Totals, days: int) -> Totals:
    """Reach and unique clicks over several days: people seen on many days count once."""
    if days <= 1:
        return total
    overlap = 1 + 0.1 * (days - 1)
    return total._replace(
        reach=round(total.reach / overlap), unique_clicks=round(total.unique_clicks / overlap)
    )
