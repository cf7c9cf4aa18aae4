"""Delivery totals of ad sets and their ads over periods, computed lazily and cached per day.

Full-day totals never change once computed (they depend only on the seed, the
ad set, the date and the budget ratio), so they are cached; the part of a day that counts
(today so far, the day an ad set was created, the hours it was active around a
pause) is applied on every request, which is what makes today's numbers grow
as the clock moves and stop, but stay, when an ad set is paused. So is the
attribution lag, when a curve is given: a recent day's conversions are its
matured ones times the curve's share at the day's age (:mod:`graph_sandbox.attribution_lag`),
taken before the day is cut into hours so hourly rows stay consistent with daily ones. The
24 hours of a day are computed in one pass (the hourly breakdown asks for all of them).

An ad set delivers while it, its campaign and at least one of its ads are active. Its ads
share out what it delivered (:mod:`graph_sandbox.split`) among those active at the time: a
day is cut at every instant an ad was paused, activated or made, and each piece is shared
among the ads active during it, so a paused ad stops growing at the instant of its pause
and the ads of a day, or of an hour, add up exactly to the ad set. The common day, with
no such instant, is shared once and cached like the ad set's.

A budget write cuts a day in parts delivered at different budget ratios: each part is its
share of the full day at its ratio (cached per ratio too). The ads share whatever the ad
set delivered, so after a budget write they add up to the new delivery too. An engine made
by :meth:`InsightsEngine.without_writes` reads the logs (the ad set's, its campaign's and
its ads') without the Graph API's writes: what the same world would have delivered without
them (the counterfactual).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo

from graph_sandbox.ads import weights as ad_weights
from graph_sandbox.attribution_lag import Curve, as_seen, day_age_h, seen_share
from graph_sandbox.breakdowns import cell_weights
from graph_sandbox.currencies import offset
from graph_sandbox.delivery import ZERO, Totals, add, day_totals, scale
from graph_sandbox.periods import Period
from graph_sandbox.schedules import schedule_ratios
from graph_sandbox.split import Weights, split
from graph_sandbox.timeline import (
    ALWAYS,
    BEGINNING,
    END,
    History,
    RatioSpan,
    Span,
    StatusChange,
    Unwritten,
    active_spans,
    at_ratios,
    budget_at,
    budget_ratios,
    covers,
    day_window,
    hour_window,
    intersect,
    multiply,
    overlap,
    union,
)
from graph_sandbox.world import ACTIVE, AdObject, World

#: Cached breakdown days (an ad's day in a breakdown's cells) kept at most: some 18
#: totals each, so a breakdown of a big world over months stays within memory.
CELL_CACHE_LIMIT = 100_000


class InsightsEngine:
    """Computes what ad sets delivered, for one world.

    Args:
        world: The world whose ad sets are measured; its seed drives the noise.
        history: The status and budget logs to read (default: the world's own).
    """

    def __init__(self, world: World, *, history: History | None = None) -> None:
        self._world = world
        self._history: History = world if history is None else history
        self._days: dict[tuple[str, int, float], Totals] = {}
        #: A whole day of an ad set shared among its ads: (what was shared, weights, parts).
        self._ad_days: dict[tuple[str, int], tuple[Totals, Weights, list[Totals]]] = {}
        #: An ad's day shared among a breakdown's cells: (what was shared, parts).
        self._cell_days: dict[tuple[str, int, str], tuple[Totals, list[Totals]]] = {}

    def without_writes(self, since: datetime | None = None) -> InsightsEngine:
        """An engine over the same world as it would have delivered had nothing been written
        through the Graph API at or after ``since`` (``None``: ever); it shares the cache of
        full days, which depend on no write."""
        engine = InsightsEngine(self._world, history=Unwritten(self._history, since))
        engine._days = self._days
        return engine

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
        it during which the ad set, its campaign and one of its ads were active (before
        ``now``),
        so what was delivered before a pause stays and nothing accrues after it. With
        ``lag``, each day's conversions are those seen at ``now`` (spend and clicks are not
        affected); days older than the curve's horizon are matured.
        """
        total, days = ZERO, 0
        for ordinal, parts, scope, partial in self._days_of(adset, period, now, lag):
            day = _delivered(scope, ordinal, parts, [None])[0] if partial else parts[0][0]
            if day.impressions:
                total, days = add(total, day), days + 1
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
            for ordinal, parts, scope, _ in self._days_of(adset, period, now, lag):
                day = date.fromordinal(ordinal)
                ends = [hour_window(day, hour, scope.tz)[1] for hour in range(23)]
                before = ZERO  # what the day had delivered by the start of the hour
                for hour, by_end in enumerate(_delivered(scope, ordinal, parts, [*ends, None])):
                    sums = zip(hours[hour], by_end, before, strict=True)
                    hours[hour] = Totals(*(total + end - start for total, end, start in sums))
                    before = by_end
        return hours

    def ad_totals(
        self, adset: AdObject, period: Period, now: datetime, *, lag: Curve | None = None
    ) -> list[Totals]:
        """What each ad of ``adset`` delivered in ``period`` (ads in creation order); they add
        up to :meth:`adset_totals` but for reach and unique clicks, deduplicated per ad."""
        ads = self._world.ads_of(adset.id)
        sums, days = [ZERO] * len(ads), [0] * len(ads)
        for _, parts in self.ad_days(adset, period, now, lag=lag):
            for index, part in enumerate(parts):
                sums[index] = add(sums[index], part)
                days[index] += part.impressions > 0
        return [_deduplicated(total, n) for total, n in zip(sums, days, strict=True)]

    def ad_days(
        self, adset: AdObject, period: Period, now: datetime, *, lag: Curve | None = None
    ) -> Iterator[tuple[int, list[Totals]]]:
        """Each day of ``period`` the ad set has delivered impressions on, with each ad's
        part of the day (ads in creation order); the days :meth:`adset_totals` counts."""
        for ordinal, parts, scope, partial in self._days_of(adset, period, now, lag):
            day = _delivered(scope, ordinal, parts, [None])[0] if partial else parts[0][0]
            if day.impressions:
                yield ordinal, self._by_ad(scope, ordinal, parts, [None])[0]

    def ad_hourly_totals(
        self, adset: AdObject, period: Period, now: datetime, *, lag: Curve | None = None
    ) -> list[list[Totals]]:
        """What each ad of ``adset`` delivered in each local hour (0–23), summed over
        ``period``'s days: ``[hour][ad]``; each hour's ads add up to the ad set's hour."""
        ads = self._world.ads_of(adset.id)
        hours = [[ZERO] * len(ads) for _ in range(24)]
        for ordinal, parts, scope, _ in self._days_of(adset, period, now, lag):
            day = date.fromordinal(ordinal)
            ends: list[datetime | None] = [hour_window(day, h, scope.tz)[1] for h in range(23)]
            before = [ZERO] * len(ads)
            for hour, by_end in enumerate(self._by_ad(scope, ordinal, parts, [*ends, None])):
                for index, (end, start) in enumerate(zip(by_end, before, strict=True)):
                    hours[hour][index] = add(hours[hour][index], _minus(end, start))
                before = by_end
        return hours

    def _by_ad(
        self, scope: _Scope, ordinal: int, parts: list[_Part], untils: Sequence[datetime | None]
    ) -> list[list[Totals]]:
        """What each ad had delivered of day ``ordinal`` by each of ``untils`` (increasing;
        None: the day's end).

        The day is cut at every instant an ad's status changed; each piece (what the ad set
        delivered during it, at whatever budget was in force) is shared among the ads active
        during it.
        """
        start, end = day_window(date.fromordinal(ordinal), scope.tz)
        cuts = sorted({e for spans in scope.ad_spans for span in spans for e in span})
        cuts = [cut for cut in cuts if start < cut < end]
        weights = ad_weights([self._world.factors(ad) for ad in self._ads(scope)])
        if not cuts and untils == [None]:
            return [self._whole_day(scope, ordinal, parts, weights)]
        out: list[list[Totals]] = []
        done = [ZERO] * len(weights)
        piece_start, piece_from = start, ZERO
        events = sorted([(cut, 1) for cut in cuts] + [(until or end, 0) for until in untils])
        for instant, is_cut in events:
            by_then = _delivered(scope, ordinal, parts, [instant])[0]
            shared = weights.only([covers(spans, piece_start) for spans in scope.ad_spans])
            shares = split(_minus(by_then, piece_from), shared)
            if is_cut:
                done = [add(a, b) for a, b in zip(done, shares, strict=True)]
                piece_start, piece_from = instant, by_then
            else:
                out.append([add(a, b) for a, b in zip(done, shares, strict=True)])
        return out

    def _whole_day(
        self, scope: _Scope, ordinal: int, parts: list[_Part], weights: Weights
    ) -> list[Totals]:
        """A day without status changes shared among its ads (those active all day)."""
        delivered = _delivered(scope, ordinal, parts, [None])[0]
        start = day_window(date.fromordinal(ordinal), scope.tz)[0]
        shared = weights.only([covers(spans, start) for spans in scope.ad_spans])
        key = (scope.adset.id, ordinal)
        cached = self._ad_days.get(key)
        if cached is not None and cached[0] == delivered and cached[1] == shared:
            return cached[2]
        by_ad = split(delivered, shared)
        self._ad_days[key] = (delivered, shared, by_ad)
        return by_ad

    def _ads(self, scope: _Scope) -> list[AdObject]:
        return self._world.ads_of(scope.adset.id)

    def ad_cells(
        self,
        adset: AdObject,
        period: Period,
        now: datetime,
        family: tuple[str, ...],
        *,
        lag: Curve | None = None,
    ) -> list[list[Totals]]:
        """What each ad of ``adset`` delivered in ``period`` in each finest cell of a breakdown
        ``family`` (:mod:`graph_sandbox.breakdowns`): ``[ad][cell]``. Each ad's days are
        shared among the cells, so the cells add up to the ad (reach and unique clicks
        deduplicated per ad and cell)."""
        weights = cell_weights(self._world.seed, adset.id, family)
        ads = self._world.ads_of(adset.id)
        sums = [[ZERO] * len(weights) for _ in ads]
        days = [[0] * len(weights) for _ in ads]
        for ordinal, parts in self.ad_days(adset, period, now, lag=lag):
            for index, (ad, part) in enumerate(zip(ads, parts, strict=True)):
                key = (ad.id, ordinal, family[0])
                cached = self._cell_days.get(key)
                if cached is None or cached[0] != part:
                    if len(self._cell_days) >= CELL_CACHE_LIMIT:
                        self._cell_days.clear()  # a breakdown of a big world over months
                    cached = self._cell_days[key] = (part, split(part, weights))
                for cell, value in enumerate(cached[1]):
                    sums[index][cell] = add(sums[index][cell], value)
                    days[index][cell] += value.impressions > 0
        return [
            [_deduplicated(total, n) for total, n in zip(row, counts, strict=True)]
            for row, counts in zip(sums, days, strict=True)
        ]

    def _days_of(
        self, adset: AdObject, period: Period, now: datetime, lag: Curve | None
    ) -> Iterator[tuple[int, list[_Part], _Scope, bool]]:
        """Each day of ``period`` the ad set existed by ``now``: its ordinal, its parts (the
        full totals at each budget ratio in force that day, conversions as seen at ``now``
        with ``lag``, and the spans it was active at that ratio), the ad set's scope, and
        whether only part of the day counts (today, its creation day, around a pause or a
        budget change)."""
        if adset.profile is None or adset.profile.spend_cents <= 0:
            return
        tz = self._world.account_of(adset).tz
        today = now.astimezone(tz).date().toordinal()
        created = adset.created_time.astimezone(tz).date().toordinal()
        active, ad_spans = self._active_spans(adset, now, tz)
        scope = _Scope(adset, tz, now, ad_spans)
        ratios = at_ratios(active, self.budget_ratios(adset))
        # a day ending more than the horizon ago is matured (the extra day: DST, UTC offsets)
        maturing = today - math.ceil(lag[-1][0] / 24) - 1 if lag is not None else today + 1
        for ordinal in range(
            max(period[0].toordinal(), created), min(period[1].toordinal(), today) + 1
        ):
            parts = []
            for ratio, spans in _touching(ratios, ordinal, tz):
                full = self._day(adset, ordinal, ratio)
                if lag is not None and ordinal >= maturing:
                    age_h = day_age_h(date.fromordinal(ordinal), tz, now)
                    full = as_seen(full, seen_share(age_h, lag))
                parts.append((full, spans))
            partial = len(parts) != 1 or parts[0][1] is not ALWAYS or ordinal in (today, created)
            yield ordinal, parts, scope, partial

    def _day(self, adset: AdObject, ordinal: int, ratio: float) -> Totals:
        key = (adset.id, ordinal, ratio)
        cached = self._days.get(key)
        if cached is None:
            assert adset.profile is not None
            tz = self._world.account_of(adset).tz
            first = adset.created_time.astimezone(tz).date().toordinal()
            cached = day_totals(
                adset.profile, self._world.seed, adset.id, ordinal, ratio, first_ordinal=first
            )
            self._days[key] = cached
        return cached

    def budget_ratios(self, adset: AdObject) -> list[RatioSpan]:
        """The ad set's budget over time as a ratio to its first budget: its own budget's
        times its campaign's (one of them is 1: a budget is the ad set's or the campaign's),
        times what a budget schedule of either raises it by inside its window (the scheduled
        daily budget is the one in force there)."""
        campaign = self._world.campaign_of(adset)
        ratios = multiply(
            budget_ratios(self._history.budget_log(adset.id)),
            budget_ratios(self._history.budget_log(campaign.id)),
        )
        for obj in (adset, campaign):
            ratios = multiply(ratios, self._scheduled(obj))
        return ratios

    def _scheduled(self, obj: AdObject) -> list[RatioSpan]:
        """What an object's budget schedules raise its budget by, over time."""
        periods = self._history.high_demand_periods(obj.id)
        if not periods:
            return [((BEGINNING, END), 1.0)]
        log = self._history.budget_log(obj.id)
        current = obj.daily_budget

        def budget(at: datetime) -> int | None:
            return budget_at(log, current, at)

        currency_offset = offset(self._world.account_of(obj).currency)
        return schedule_ratios(periods, budget, currency_offset)

    def _active_spans(
        self, adset: AdObject, now: datetime, tz: ZoneInfo
    ) -> tuple[list[Span], list[list[Span]]]:
        """When the ad set could deliver (it, its campaign and one of its ads active), and
        each ad's own active spans; ``ALWAYS`` for the common case."""
        campaign = self._world.campaign_of(adset)
        ads = [self._ad_spans(ad, now, tz) for ad in self._world.ads_of(adset.id)]
        if adset.held_as or campaign.held_as:
            return [], ads
        spans = ALWAYS
        for obj in (adset, campaign):
            log = self._history.status_log(obj.id)
            if not log and obj.status == ACTIVE:
                continue
            own = active_spans(obj.status, log, settled_at=self._settled_at(obj, log, now, tz))
            spans = intersect(spans, own)
        if not ads or not all(own is ALWAYS for own in ads):
            spans = intersect(spans, union(ads))
        return spans, ads

    def _ad_spans(self, ad: AdObject, now: datetime, tz: ZoneInfo) -> list[Span]:
        """When an ad was active: a scenario's ad since its ad set was made, a copy since its
        own creation, each as its status log says."""
        log = self._history.status_log(ad.id)
        if not log and ad.status == ACTIVE and ad.source_id is None:
            return ALWAYS
        own = active_spans(ad.status, log, settled_at=self._settled_at(ad, log, now, tz))
        if ad.source_id is not None:
            own = intersect(own, [(ad.created_time, END)])
        return own

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
    """One ad set being measured: its account's timezone, the instant, its active spans and
    its ads' (in creation order)."""

    adset: AdObject
    tz: ZoneInfo
    now: datetime
    ad_spans: list[list[Span]]


#: A day's full totals at one budget ratio, and the spans the ad set was active at it.
_Part = tuple[Totals, list[Span]]


def _touching(
    ratios: list[tuple[float, list[Span]]], ordinal: int, tz: ZoneInfo
) -> list[tuple[float, list[Span]]]:
    """The budget ratios in force on day ``ordinal`` (all of them when there is one: a day
    with no delivery counts nothing whatever its ratio)."""
    if len(ratios) == 1:
        return ratios
    window = day_window(date.fromordinal(ordinal), tz)
    return [(ratio, spans) for ratio, spans in ratios if overlap(window, spans)]


def _delivered(
    scope: _Scope, ordinal: int, parts: list[_Part], untils: Sequence[datetime | None]
) -> list[Totals]:
    """What day ``ordinal`` had delivered by each of ``untils`` (None: the end of the day):
    each part's share of its full totals, summed (each rounded down as a share is)."""
    if len(parts) == 1:  # the common case: no budget change that day
        full, spans = parts[0]
        return [scale(full, share) for share in _shares(scope, ordinal, untils, spans)]
    by_until = [ZERO] * len(untils)
    for full, spans in parts:
        for index, share in enumerate(_shares(scope, ordinal, untils, spans)):
            by_until[index] = add(by_until[index], scale(full, share))
    return by_until


def _shares(
    scope: _Scope, ordinal: int, untils: Sequence[datetime | None], spans: list[Span]
) -> list[float]:
    """The share of day ``ordinal``'s full totals delivered during ``spans`` before each of
    ``untils`` (None: the end of the day)."""
    whole = day_window(date.fromordinal(ordinal), scope.tz)
    length = whole[1] - whole[0]
    start = max(whole[0], scope.adset.created_time)
    shares = []
    for until in untils:
        end = min(whole[1] if until is None else until, whole[1], scope.now)
        delivered = overlap((start, end), spans) / length if start < end else 0.0
        shares.append(max(0.0, delivered))
    return shares


def _minus(left: Totals, right: Totals) -> Totals:
    """Field-by-field difference (what was delivered between two instants)."""
    return Totals(*(a - b for a, b in zip(left, right, strict=True)))


def _deduplicated(total: Totals, days: int) -> Totals:
    """Reach and unique clicks over several days: people seen on many days count once."""
    if days <= 1:
        return total
    overlap = 1 + 0.1 * (days - 1)
    return total._replace(
        reach=round(total.reach / overlap), unique_clicks=round(total.unique_clicks / overlap)
    )
