"""A task's measured effect, pure: per entity, per currency, acted against held out.

**The unit is the entity.** Of each entity the task decided on in the period only its
*first* decision counts: the entity is acted on (the task changed it, or proposed the
change for approval) or held out, and keeps that group; later decisions on it (a cooldown
shorter than the window re-decides every run) neither add a window nor move it to the other
group. Its *change* is its totals over the window after that decision minus its totals
over as long a window just before it (its baseline), hours being the account's own local
hours (Kolkata's start at :30 UTC); the hour of the decision belongs to neither window.

**The effect** is the mean change of acted entities minus the mean change of held-out ones,
with Welch's 95 % t interval (:mod:`ruleengine.rules.impact.intervals`). Entities decided under
different holdout settings (a percent or salt changed in the period) are compared within
their setting and the differences weighted by acted entities. Money is never added across
currencies: every currency is measured apart. The total is the effect × the acted entities
it rests on — each entity's lift counted once, whatever the runs.

**Who counts as acted** is who the task *chose* to act on (intention to treat): a proposal
a person rejected or let expire, and a change undone later, stay acted — what the rule
earned as it was run — and are counted apart so the reader knows. Moving them out would
leave their held-out twins behind and compare unlike groups.

A window not over yet, or reaching outside the hours read, is not measured. Below
:data:`MIN_ENTITIES` entities with a measured window in either group (the size at which the
interval's coverage was shown, bench/impact_calibration.py), or when neither group
delivered anything in its windows, the answer is "not enough data yet" or "nothing to
measure", never an effect.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Literal
from zoneinfo import ZoneInfo

from ruleengine.rules.impact.intervals import Interval, Stratum, welch_interval

Window = Literal["24h", "72h", "7d"]
WINDOW_HOURS: Final[dict[str, int]] = {"24h": 24, "72h": 72, "7d": 168}
#: The outcomes compared; money in the account's currency units.
METRICS: Final = ("spend", "purchases", "revenue", "profit", "roas", "cpa")
#: Entities with a measured window needed in each group before an effect is stated. On the
#: sandbox Welch's interval held its 95 % from 2 a group up (bench/impact_calibration.py,
#: docs/impact.md); 5 keeps a margin for real accounts' heavier tails, where one entity of
#: three can carry a mean — and is where the percentile bootstrap used before reached 0.93.
MIN_ENTITIES: Final = 5
_HOUR: Final = timedelta(hours=1)


@dataclass(frozen=True)
class Hourly:
    """One entity's delivery in one hour (money in currency units)."""

    spend: float = 0.0
    purchases: float = 0.0
    revenue: float = 0.0


@dataclass(frozen=True)
class Series:
    """One entity's hourly delivery as its ad account reports it.

    Attributes:
        currency: the account's currency (money below is in its units).
        timezone: the account's IANA time zone: its hours are the grid.
        hours: UTC start of each local hour → delivery (an hour absent: nothing delivered).
        since, until: the instants the hours read cover (an hour outside is unknown).
    """

    currency: str
    timezone: str
    hours: Mapping[datetime, Hourly]
    since: datetime
    until: datetime


@dataclass(frozen=True)
class Decision:
    """A task's decision on an entity: acted on (changed, or proposed), or held out.

    Attributes:
        setting: the holdout setting in force (percent and salt): its draw's stratum.
        approval: a proposal's status (``pending``, ``applied``, ``rejected`` …), else None.
        undone: the change was put back by an undo.
    """

    entity_id: str
    at: datetime
    held_out: bool
    setting: str = ""
    approval: str | None = None
    undone: bool = False


@dataclass(frozen=True)
class Totals:
    """Sums over a window, and the ratios they make (None without spend or purchases)."""

    spend: float
    purchases: float
    revenue: float

    def value(self, metric: str) -> float | None:
        """One of :data:`METRICS`."""
        if metric == "profit":
            return self.revenue - self.spend
        if metric == "roas":
            return self.revenue / self.spend if self.spend > 0 else None
        if metric == "cpa":
            return self.spend / self.purchases if self.purchases > 0 else None
        return float(getattr(self, metric))


@dataclass(frozen=True)
class Change:
    """An entity's window after its first decision against its baseline."""

    decision: Decision
    before: Totals
    after: Totals
    profit_by_bucket: tuple[float, ...]  # profit above the baseline's mean, per bucket

    def delta(self, metric: str) -> float | None:
        """``after − before`` of ``metric`` (None when either side has no value)."""
        after, before = self.after.value(metric), self.before.value(metric)
        return None if after is None or before is None else after - before

    @property
    def delivered(self) -> bool:
        """Anything spent in either window."""
        return self.before.spend > 0 or self.after.spend > 0


@dataclass(frozen=True)
class Effect:
    """The effect on one metric: acted minus held out per entity, its 95 % interval, and the
    entities it rests on."""

    metric: str
    effect: float
    low: float
    high: float
    acted_mean: float
    held_out_mean: float
    acted_entities: int
    held_out_entities: int


@dataclass(frozen=True)
class Counts:
    """What a task decided in the period, counted across currencies (counts, never money)."""

    acted: int = 0  # decisions to act (changes made and proposals)
    held_out: int = 0  # decisions held out
    acted_entities: int = 0  # entities whose first decision was to act
    held_out_entities: int = 0
    switched_groups: int = 0  # entities decided in both groups (the holdout setting changed)
    undone: int = 0  # acted entities whose change an undo put back
    approvals: dict[str, int] = field(default_factory=dict)  # acted proposals by status
    unread: int = 0  # entities whose delivery could not be read


@dataclass
class CurrencyImpact:
    """The effect among the entities of one currency's ad accounts."""

    currency: str
    window: str
    acted_entities: int = 0
    held_out_entities: int = 0
    acted_complete: int = 0  # entities whose window is over and read, per group
    held_out_complete: int = 0
    outside_history: int = 0  # windows reaching before or after the hours read
    delivered: bool = False
    min_entities: int = MIN_ENTITIES
    effects: dict[str, Effect] = field(default_factory=dict)
    chart: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def enough(self) -> bool:
        """The profit effect is stated."""
        return "profit" in self.effects

    @property
    def total_profit_effect(self) -> tuple[float, float, float] | None:
        """The profit effect × the acted entities it rests on, with its interval's ends."""
        profit = self.effects.get("profit")
        if profit is None:
            return None
        n = profit.acted_entities
        return round(profit.effect * n, 2), round(profit.low * n, 2), round(profit.high * n, 2)

    @property
    def note(self) -> str:
        """What the numbers mean, in one sentence."""
        if self.enough:
            return (
                "effect measured: acted minus held-out change per entity, 95 % interval (Welch's t)"
            )
        counted = (
            f"{self.acted_complete} acted and {self.held_out_complete} held-out entities with"
            f" a complete {self.window} window"
        )
        if min(self.acted_complete, self.held_out_complete) < self.min_entities:
            return (
                f"not enough data yet: {counted}; at least {self.min_entities} of each are needed"
            )
        if not self.delivered:
            return (
                f"nothing to measure: neither group delivered anything in its {self.window} windows"
            )
        return (
            f"not enough data yet: {counted}, but fewer than {self.min_entities} of each"
            " decided under one holdout setting (its percent or salt changed)"
        )


@dataclass
class TaskImpact:
    """What a task's decisions earned over a window (see the module)."""

    task_id: str
    window: str
    measured: bool = False  # the task has a holdout (else: counts only)
    counts: Counts = field(default_factory=Counts)
    currencies: list[CurrencyImpact] = field(default_factory=list)

    @property
    def enough(self) -> bool:
        """An effect is stated in some currency."""
        return any(c.enough for c in self.currencies)

    @property
    def note(self) -> str:
        """What the numbers mean, in one sentence (each currency has its own)."""
        if not self.measured:
            return "not measured: the task has no holdout, so its effect is not estimated"
        if not self.currencies:
            return "not enough data yet: no entity decided on in the period has its delivery read"
        if len(self.currencies) == 1:
            return self.currencies[0].note
        stated = [c.currency for c in self.currencies if c.enough]
        if not stated:
            return "not enough data yet in any currency: see each currency's counts"
        return f"effect measured in {', '.join(stated)}: each currency apart, never added up"


def hour_start(at: datetime, timezone: str) -> datetime:
    """The start (UTC) of the account-local hour ``at`` falls in: a half-hour or 45-minute
    zone's hours start at :30 or :15 UTC, where its hourly numbers are keyed."""
    local = at.astimezone(ZoneInfo(timezone))
    return local.replace(minute=0, second=0, microsecond=0).astimezone(UTC)


def totals(hours: Mapping[datetime, Hourly], start: datetime, count: int) -> Totals:
    """Sums over ``count`` hours from ``start`` (hours absent: nothing delivered)."""
    picked = [hours.get(start + i * _HOUR) for i in range(count)]
    present = [h for h in picked if h is not None]
    return Totals(
        spend=math.fsum(h.spend for h in present),
        purchases=math.fsum(h.purchases for h in present),
        revenue=math.fsum(h.revenue for h in present),
    )


def windows(decision: Decision, timezone: str, window: str) -> tuple[datetime, datetime, datetime]:
    """``(baseline start, after start, after end)`` of a decision, on the account's hours."""
    count = WINDOW_HOURS[window]
    hour = hour_start(decision.at, timezone)
    return hour - count * _HOUR, hour + _HOUR, hour + (count + 1) * _HOUR


def change_of(decision: Decision, series: Series, *, window: str, bucket_hours: int = 1) -> Change:
    """The decision's change over ``window`` (whether the window is over is the caller's)."""
    count = WINDOW_HOURS[window]
    before_start, after_start, _ = windows(decision, series.timezone, window)
    before = totals(series.hours, before_start, count)
    after = totals(series.hours, after_start, count)
    base = (before.revenue - before.spend) / count * bucket_hours
    buckets = tuple(
        totals(series.hours, after_start + b * bucket_hours * _HOUR, bucket_hours).value("profit")
        or 0.0
        for b in range(count // bucket_hours)
    )
    return Change(decision, before, after, tuple(round(p - base, 6) for p in buckets))


def first_decisions(decisions: Sequence[Decision]) -> tuple[list[Decision], int]:
    """Each entity's first decision (oldest first), and how many entities were decided in
    both groups (a holdout setting changed between their decisions)."""
    first: dict[str, Decision] = {}
    groups: dict[str, set[bool]] = {}
    for decision in sorted(decisions, key=lambda d: d.at):
        first.setdefault(decision.entity_id, decision)
        groups.setdefault(decision.entity_id, set()).add(decision.held_out)
    return list(first.values()), sum(len(g) > 1 for g in groups.values())


def count(
    decisions: Sequence[Decision], series: Mapping[str, Series], *, unread: bool = True
) -> Counts:
    """The task's counts (see :class:`Counts`; ``unread``: count the entities without a
    series, for a task whose delivery was asked for)."""
    firsts, switched = first_decisions(decisions)
    acted = [d for d in firsts if not d.held_out]
    undone = {d.entity_id for d in decisions if d.undone and not d.held_out}
    return Counts(
        acted=sum(not d.held_out for d in decisions),
        held_out=sum(d.held_out for d in decisions),
        acted_entities=len(acted),
        held_out_entities=len(firsts) - len(acted),
        switched_groups=switched,
        undone=len(undone & {d.entity_id for d in acted}),
        approvals=dict(sorted(Counter(d.approval for d in acted if d.approval).items())),
        unread=sum(d.entity_id not in series for d in firsts) if unread else 0,
    )


def measure(
    task_id: str,
    decisions: Sequence[Decision],
    series: Mapping[str, Series],
    *,
    window: str,
    now: datetime,
    measured: bool,
    min_entities: int = MIN_ENTITIES,
) -> TaskImpact:
    """The task's impact from its decisions and its entities' hourly delivery (``series``:
    entity → its hours; an entity without one could not be read and is counted, never
    measured as zero)."""
    if not measured:  # counted only: its delivery is not read, so none is "unread"
        return TaskImpact(task_id, window, counts=count(decisions, {}, unread=False))
    impact = TaskImpact(task_id, window, measured=True, counts=count(decisions, series))
    firsts, _ = first_decisions(decisions)
    by_currency: dict[str, list[Decision]] = {}
    for decision in firsts:
        if decision.entity_id in series:
            by_currency.setdefault(series[decision.entity_id].currency, []).append(decision)
    for currency, mine in sorted(by_currency.items()):
        impact.currencies.append(
            measure_currency(
                currency, mine, series, window=window, now=now, min_entities=min_entities
            )
        )
    return impact


def measure_currency(
    currency: str,
    firsts: Sequence[Decision],
    series: Mapping[str, Series],
    *,
    window: str,
    now: datetime,
    min_entities: int = MIN_ENTITIES,
) -> CurrencyImpact:
    """The effect among entities of one currency, from their first decisions."""
    result = CurrencyImpact(currency, window, min_entities=min_entities)
    result.acted_entities = sum(not d.held_out for d in firsts)
    result.held_out_entities = len(firsts) - result.acted_entities
    changes, result.outside_history = measured_changes(firsts, series, window=window, now=now)
    acted = [c for c in changes if not c.decision.held_out]
    held = [c for c in changes if c.decision.held_out]
    result.acted_complete, result.held_out_complete = len(acted), len(held)
    result.delivered = any(c.delivered for c in changes)
    result.chart = _chart(acted, held)
    if result.acted_complete < min_entities or result.held_out_complete < min_entities:
        return result
    if not result.delivered:
        return result  # both groups empty: an effect of 0 would be a claim about nothing
    for metric in METRICS:
        effect = effect_of(metric, acted, held, min_entities=min_entities)
        if effect is not None:
            result.effects[metric] = effect
    return result


def measured_changes(
    firsts: Sequence[Decision], series: Mapping[str, Series], *, window: str, now: datetime
) -> tuple[list[Change], int]:
    """The changes of the first decisions whose window is over and read (those of entities
    with a series), and how many windows reach outside the hours read."""
    bucket = 24 if window == "7d" else 1
    changes: list[Change] = []
    outside = 0
    for decision in firsts:
        mine = series.get(decision.entity_id)
        if mine is None:
            continue
        start, _, end = windows(decision, mine.timezone, window)
        if end > now:
            continue  # the window is not over yet
        if start < mine.since or end > mine.until:
            outside += 1  # unknown hours are not "nothing delivered"
            continue
        changes.append(change_of(decision, mine, window=window, bucket_hours=bucket))
    return changes, outside


def comparable(
    metric: str, acted: Sequence[Change], held: Sequence[Change]
) -> list[tuple[list[Change], list[Change]]]:
    """Per holdout setting, its acted and held-out changes with a value of ``metric`` —
    the settings with at least two of each, which an interval can compare."""
    strata: dict[str, tuple[list[Change], list[Change]]] = {}
    for group, changes in ((0, acted), (1, held)):
        for change in changes:
            if change.delta(metric) is not None:
                strata.setdefault(change.decision.setting, ([], []))[group].append(change)
    return [(a, h) for a, h in strata.values() if len(a) >= 2 and len(h) >= 2]


def effect_of(
    metric: str, acted: Sequence[Change], held: Sequence[Change], *, min_entities: int
) -> Effect | None:
    """Acted minus held out on ``metric`` within each holdout setting, weighted by acted
    entities, with Welch's interval; None below ``min_entities`` in a group."""
    usable = comparable(metric, acted, held)
    n_acted, n_held = sum(len(a) for a, _ in usable), sum(len(h) for _, h in usable)
    if n_acted < min_entities or n_held < min_entities:
        return None
    interval = welch_interval([Stratum(_deltas(metric, a), _deltas(metric, h)) for a, h in usable])
    assert interval is not None  # usable strata give one
    return _effect(metric, interval, n_acted, n_held)


def _deltas(metric: str, changes: Sequence[Change]) -> list[float]:
    return [d for c in changes if (d := c.delta(metric)) is not None]


def _effect(metric: str, interval: Interval, n_acted: int, n_held: int) -> Effect:
    return Effect(
        metric,
        effect=round(interval.estimate, 6),
        low=round(interval.low, 6),
        high=round(interval.high, 6),
        acted_mean=round(interval.first_mean, 6),
        held_out_mean=round(interval.second_mean, 6),
        acted_entities=n_acted,
        held_out_entities=n_held,
    )


def _chart(acted: Sequence[Change], held: Sequence[Change]) -> dict[str, list[float | None]]:
    """Mean profit above baseline per bucket since the decision, each group with a ±1.96
    standard-error band (None where a group has fewer than two entities)."""
    chart: dict[str, list[float | None]] = {}
    for name, changes in (("acted", acted), ("held_out", held)):
        rows = [c.profit_by_bucket for c in changes]
        width = max((len(r) for r in rows), default=0)
        means: list[float | None] = []
        lows: list[float | None] = []
        highs: list[float | None] = []
        for b in range(width):
            mean, half = _band([r[b] for r in rows])
            means.append(mean)
            lows.append(None if half is None or mean is None else round(mean - half, 4))
            highs.append(None if half is None or mean is None else round(mean + half, 4))
        chart[name], chart[f"{name}_low"], chart[f"{name}_high"] = means, lows, highs
    return chart


def _band(column: Sequence[float]) -> tuple[float | None, float | None]:
    if not column:
        return None, None
    mean = sum(column) / len(column)
    if len(column) < 2:
        return round(mean, 4), None
    var = sum((v - mean) ** 2 for v in column) / (len(column) - 1)
    return round(mean, 4), 1.96 * math.sqrt(var / len(column))
