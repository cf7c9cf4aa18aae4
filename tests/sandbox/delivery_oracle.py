"""The delivery model as it was before budget writes moved delivery (commit af19312), frozen.

An oracle for the property that, with no budget write, every number the sandbox computes is
the one it computed before: :func:`day_totals` and :class:`OracleEngine` are that commit's
``delivery.day_totals`` and ``insights.InsightsEngine``, verbatim — but for one re-baseline:
since the delivery model follows Meta's daily budget flexibility (75 % over on a day, a
calendar week at most 7 daily budgets), a day's spend is the profile's typical day times the
day's share of its week (``delivery.week_factor``, given as ``factor``) instead of the old
``0.85 + 0.3 × noise``; every other number follows spend as it did. Do not edit them otherwise:
they are the old numbers.
"""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo

from graph_sandbox.attribution_lag import Curve, as_seen, day_age_h, seen_share
from graph_sandbox.delivery import ZERO, Profile, Totals, add, noise, scale, week_factor
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


def day_totals(
    profile: Profile, seed: int, entity_id: str, day_ordinal: int, factor: float
) -> Totals:
    """What the ad set delivers over the whole day ``day_ordinal`` (``date.toordinal()``),
    spending ``factor`` typical days."""
    if profile.spend_cents <= 0:
        return ZERO
    n0, n1, n2, n3 = noise(seed, entity_id, day_ordinal)
    spend = round(profile.spend_cents * factor)
    impressions = max(1, round(spend * 1000 / (profile.cpm_cents * (0.9 + 0.2 * n1))))
    clicks = round(impressions * profile.ctr * (0.9 + 0.2 * n2))
    link_clicks = round(clicks * profile.link_share)
    purchases = 0
    if profile.roas > 0:
        purchases = round(spend * profile.roas * (0.9 + 0.2 * n3) / profile.aov_cents)
    order_value = round(profile.aov_cents * (0.95 + 0.1 * n0))
    add_to_cart = max(round(link_clicks * profile.cart_rate), purchases * 3)
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
        leads=round(link_clicks * profile.lead_rate * (0.9 + 0.2 * n3)),
    )


class OracleEngine:
    """Computes what ad sets delivered, for one world.

    Args:
        world: The world whose ad sets are measured; its seed drives the noise.
    """

    def __init__(self, world: World) -> None:
        self._world = world
        self._days: dict[tuple[str, int], Totals] = {}

    def totals(
        self,
        adsets: Iterable[AdObject],
        period: Period,
        now: datetime,
        *,
        lag: Curve | None = None,
    ) -> Totals:
        """What ``adsets`` delivered in ``period`` (dates in their account's timezone).

        With ``lag``, conversions as seen at ``now`` on that attribution-lag curve.
        """
        total = ZERO
        for adset in adsets:
            total = add(total, self.adset_totals(adset, period, now, lag=lag))
        return total

    def adset_totals(
        self, adset: AdObject, period: Period, now: datetime, *, lag: Curve | None = None
    ) -> Totals:
        """What one ad set delivered in ``period``, up to ``now``.

        Days before the ad set was created deliver nothing; a day counts the part of
        it during which the ad set and its campaign were both active (before ``now``),
        so what was delivered before a pause stays and nothing accrues after it. With
        ``lag``, each day's conversions are those seen at ``now`` (spend and clicks are not
        affected); days older than the curve's horizon are matured.
        """
        total, days = ZERO, 0
        for ordinal, full, scope, partial in self._days_of(adset, period, now, lag):
            if partial:
                full = scale(full, _shares(scope, ordinal, [None])[0])
            if full.impressions:
                total, days = add(total, full), days + 1
        return _deduplicated(total, days)

    def hourly_totals(
        self,
        adsets: Iterable[AdObject],
        period: Period,
        now: datetime,
        *,
        lag: Curve | None = None,
    ) -> list[Totals]:
        """What ``adsets`` delivered in each local hour (0–23), summed over ``period``'s days.

        An hour is what was delivered by its end less what was delivered by its start,
        each rounded down as a day's share is, so the hours of a day add up to exactly what
        the day shows. Reach and unique clicks are summed as they are (hourly rows show
        none).
        """
        hours = [ZERO] * 24
        for adset in adsets:
            for ordinal, full, scope, _ in self._days_of(adset, period, now, lag):
                day = date.fromordinal(ordinal)
                ends = [hour_window(day, hour, scope.tz)[1] for hour in range(23)]
                before = ZERO  # what the day had delivered by the start of the hour
                for hour, share in enumerate(_shares(scope, ordinal, [*ends, None])):
                    by_end = scale(full, share)
                    sums = zip(hours[hour], by_end, before, strict=True)
                    hours[hour] = Totals(*(total + end - start for total, end, start in sums))
                    before = by_end
        return hours

    def _days_of(
        self, adset: AdObject, period: Period, now: datetime, lag: Curve | None
    ) -> Iterator[tuple[int, Totals, _Scope, bool]]:
        """Each day of ``period`` the ad set existed by ``now``: its ordinal, its full totals
        (conversions as seen at ``now`` with ``lag``), the ad set's scope, and whether only
        part of the day counts (today, its creation day, or around a pause)."""
        if adset.profile is None or adset.profile.spend_cents <= 0:
            return
        tz = self._world.account_of(adset).tz
        today = now.astimezone(tz).date().toordinal()
        created = adset.created_time.astimezone(tz).date().toordinal()
        scope = _Scope(adset, tz, now, self._active_spans(adset, now, tz))
        # a day ending more than the horizon ago is matured (the extra day: DST, UTC offsets)
        maturing = today - math.ceil(lag[-1][0] / 24) - 1 if lag is not None else today + 1
        for ordinal in range(
            max(period[0].toordinal(), created), min(period[1].toordinal(), today) + 1
        ):
            full = self._day(adset, ordinal)
            if lag is not None and ordinal >= maturing:
                age_h = day_age_h(date.fromordinal(ordinal), tz, now)
                full = as_seen(full, seen_share(age_h, lag))
            partial = scope.spans is not ALWAYS or ordinal in (today, created)
            yield ordinal, full, scope, partial

    def _day(self, adset: AdObject, ordinal: int) -> Totals:
        key = (adset.id, ordinal)
        cached = self._days.get(key)
        if cached is None:
            assert adset.profile is not None
            tz = self._world.account_of(adset).tz
            first = adset.created_time.astimezone(tz).date().toordinal()
            factor = week_factor(self._world.seed, adset.id, ordinal, first)
            cached = day_totals(adset.profile, self._world.seed, adset.id, ordinal, factor)
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


class _Scope(NamedTuple):
    """One ad set being measured: its account's timezone, the instant, its active spans."""

    adset: AdObject
    tz: ZoneInfo
    now: datetime
    spans: list[Span]


def _shares(scope: _Scope, ordinal: int, untils: Sequence[datetime | None]) -> list[float]:
    """The share of day ``ordinal``'s full totals delivered before each of ``untils``
    (None: the end of the day)."""
    whole = day_window(date.fromordinal(ordinal), scope.tz)
    length = whole[1] - whole[0]
    start = max(whole[0], scope.adset.created_time)
    shares = []
    for until in untils:
        end = min(whole[1] if until is None else until, whole[1], scope.now)
        delivered = overlap((start, end), scope.spans) / length if start < end else 0.0
        shares.append(max(0.0, delivered))
    return shares


def _deduplicated(total: Totals, days: int) -> Totals:
    """Reach and unique clicks over several days: people seen on many days count once."""
    if days <= 1:
        return total
    overlap = 1 + 0.1 * (days - 1)
    return total._replace(
        reach=round(total.reach / overlap), unique_clicks=round(total.unique_clicks / overlap)
    )
