"""A task's measured effect, pure: difference in differences between acted and held-out
entities, with a bootstrap interval over entities.

For each decision (an entity the task changed, or would have changed but held out) the
entity's totals over a window after the decision are compared with the same entity's
totals over as long a window before it (its baseline): the change. The effect is the mean
change of acted entities minus the mean change of held-out ones — what the actions did,
beyond what happened anyway to entities the task picked at the same moments. Its 95 %
interval is the 2.5th and 97.5th percentiles of that difference over bootstrap resamples
of the entities (each group resampled apart; an entity's decisions stay together). Below
:data:`MIN_ENTITIES` entities with a complete window in either group the answer is "not
enough data yet". Hours are whole: the hour a decision falls in belongs to neither window.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal

Window = Literal["24h", "72h", "7d"]
WINDOW_HOURS: Final[dict[str, int]] = {"24h": 24, "72h": 72, "7d": 168}
#: The outcomes compared; money in the account's currency units.
METRICS: Final = ("spend", "purchases", "revenue", "profit", "roas", "cpa")
#: Entities with a complete window needed in each group before an effect is stated.
MIN_ENTITIES: Final = 5
BOOTSTRAP_RESAMPLES: Final = 2000
_HOUR: Final = timedelta(hours=1)


@dataclass(frozen=True)
class Hourly:
    """One entity's delivery in one hour (money in currency units)."""

    spend: float = 0.0
    purchases: float = 0.0
    revenue: float = 0.0


@dataclass(frozen=True)
class Decision:
    """A task's decision on an entity: acted on, or held out."""

    entity_id: str
    at: datetime
    held_out: bool


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
    """One decision's window after it against its baseline, and the hours after it."""

    decision: Decision
    before: Totals
    after: Totals
    profit_by_bucket: tuple[float, ...]  # profit above the baseline's mean, per bucket

    def delta(self, metric: str) -> float | None:
        """``after − before`` of ``metric`` (None when either side has no value)."""
        after, before = self.after.value(metric), self.before.value(metric)
        return None if after is None or before is None else after - before


@dataclass(frozen=True)
class Effect:
    """The effect on one metric: acted minus held out, its 95 % interval."""

    metric: str
    effect: float
    low: float
    high: float
    acted_mean: float
    held_out_mean: float


@dataclass
class TaskImpact:
    """What a task's decisions earned over a window (see the module)."""

    task_id: str
    window: str
    acted: int = 0  # decisions acted on in the period
    held_out: int = 0  # decisions held out in the period
    acted_complete: int = 0  # entities whose window has ended, per group
    held_out_complete: int = 0
    measured: bool = False  # the task has a holdout (else: counts only)
    enough: bool = False
    effects: dict[str, Effect] = field(default_factory=dict)
    total_profit_effect: float | None = None  # per-decision profit effect × decisions acted on
    chart: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def note(self) -> str:
        """What the numbers mean, in one sentence."""
        if not self.measured:
            return "not measured: the task has no holdout, so its effect is not estimated"
        if not self.enough:
            return (
                f"not enough data yet: {self.acted_complete} acted and {self.held_out_complete}"
                f" held-out entities with a complete {self.window} window; at least"
                f" {MIN_ENTITIES} of each are needed"
            )
        return "effect measured: acted minus held-out change, 95 % bootstrap interval"


def totals(hours: Mapping[datetime, Hourly], start: datetime, count: int) -> Totals:
    """Sums over ``count`` hours from ``start`` (hours absent: nothing delivered)."""
    picked = [hours.get(start + i * _HOUR) for i in range(count)]
    present = [h for h in picked if h is not None]
    return Totals(
        spend=sum(h.spend for h in present),
        purchases=sum(h.purchases for h in present),
        revenue=sum(h.revenue for h in present),
    )


def change_of(
    decision: Decision,
    hours: Mapping[datetime, Hourly],
    *,
    window: str,
    now: datetime,
    bucket_hours: int = 1,
) -> Change | None:
    """The decision's change over ``window``, or None while its window has not ended."""
    count = WINDOW_HOURS[window]
    hour = decision.at.replace(minute=0, second=0, microsecond=0)
    after_start = hour + _HOUR
    if after_start + count * _HOUR > now:
        return None
    before = totals(hours, hour - count * _HOUR, count)
    after = totals(hours, after_start, count)
    base = (before.revenue - before.spend) / count * bucket_hours
    buckets = tuple(
        totals(hours, after_start + b * bucket_hours * _HOUR, bucket_hours).value("profit") or 0.0
        for b in range(count // bucket_hours)
    )
    return Change(decision, before, after, tuple(round(p - base, 6) for p in buckets))


def measure(
    task_id: str,
    decisions: Sequence[Decision],
    hours: Mapping[str, Mapping[datetime, Hourly]],
    *,
    window: str,
    now: datetime,
    measured: bool,
    seed: int = 0,
) -> TaskImpact:
    """The task's impact from its decisions and its entities' hourly delivery (``hours``:
    entity → hour → delivery; an entity without a key could not be read and is not measured,
    one with an empty mapping delivered nothing)."""
    impact = TaskImpact(task_id, window, measured=measured)
    impact.acted = sum(not d.held_out for d in decisions)
    impact.held_out = sum(d.held_out for d in decisions)
    if not measured:
        return impact
    bucket = 24 if window == "7d" else 1
    # an entity absent from ``hours`` could not be read: counted, never measured as zero
    changes = [
        c
        for d in decisions
        if d.entity_id in hours
        and (c := change_of(d, hours[d.entity_id], window=window, now=now, bucket_hours=bucket))
        is not None
    ]
    acted = _by_entity([c for c in changes if not c.decision.held_out])
    held = _by_entity([c for c in changes if c.decision.held_out])
    impact.acted_complete, impact.held_out_complete = len(acted), len(held)
    impact.chart = _chart(acted, held)
    impact.enough = len(acted) >= MIN_ENTITIES and len(held) >= MIN_ENTITIES
    if not impact.enough:
        return impact
    rng = random.Random(seed)
    for metric in METRICS:
        effect = _effect(metric, acted, held, rng)
        if effect is not None:
            impact.effects[metric] = effect
    profit = impact.effects.get("profit")
    if profit is not None:
        impact.total_profit_effect = round(profit.effect * impact.acted, 2)
    return impact


def _by_entity(changes: Sequence[Change]) -> list[list[Change]]:
    grouped: dict[str, list[Change]] = {}
    for change in changes:
        grouped.setdefault(change.decision.entity_id, []).append(change)
    return list(grouped.values())


def _values(metric: str, entities: Sequence[Sequence[Change]]) -> list[list[float]]:
    out = [[d for c in group if (d := c.delta(metric)) is not None] for group in entities]
    return [v for v in out if v]


def _mean_of(groups: Sequence[Sequence[float]]) -> float:
    flat = [v for g in groups for v in g]
    return sum(flat) / len(flat)


def _effect(
    metric: str,
    acted: Sequence[Sequence[Change]],
    held: Sequence[Sequence[Change]],
    rng: random.Random,
) -> Effect | None:
    a, h = _values(metric, acted), _values(metric, held)
    if len(a) < MIN_ENTITIES or len(h) < MIN_ENTITIES:
        return None
    acted_mean, held_mean = _mean_of(a), _mean_of(h)
    draws = sorted(
        _mean_of(rng.choices(a, k=len(a))) - _mean_of(rng.choices(h, k=len(h)))
        for _ in range(BOOTSTRAP_RESAMPLES)
    )
    low = draws[math.floor(0.025 * (len(draws) - 1))]
    high = draws[math.ceil(0.975 * (len(draws) - 1))]
    return Effect(
        metric,
        effect=round(acted_mean - held_mean, 6),
        low=round(low, 6),
        high=round(high, 6),
        acted_mean=round(acted_mean, 6),
        held_out_mean=round(held_mean, 6),
    )


def _chart(
    acted: Sequence[Sequence[Change]], held: Sequence[Sequence[Change]]
) -> dict[str, list[float | None]]:
    """Mean profit above baseline per bucket since the decision, each group with a ±1.96
    standard-error band (None where a group has fewer than two decisions)."""
    chart: dict[str, list[float | None]] = {}
    for name, groups in (("acted", acted), ("held_out", held)):
        rows = [c.profit_by_bucket for g in groups for c in g]
        width = max((len(r) for r in rows), default=0)
        means: list[float | None] = []
        lows: list[float | None] = []
        highs: list[float | None] = []
        for b in range(width):
            column = [r[b] for r in rows]
            mean, half = _band(column)
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
