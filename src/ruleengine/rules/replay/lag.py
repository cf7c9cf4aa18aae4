"""Attribution lag, pure: the share of a day's conversions seen some hours after it ended.

Meta books spend at once, but attributes a conversion to the day of the click or
impression that led to it, and it arrives later: a day's conversions keep growing for
days after the day ended. An ad account's **lag curve** says what share of a day's
matured conversions is visible ``age_h`` hours after the end of that day (in the ad
account's timezone): piecewise linear through ``(age_h, share)`` points, the first
share before the first point (the day is not over yet), 1 after the last point.

The curve is learned from what the engine's own conditions saw: a condition on a
conversion metric over a window of past days saw ``seen`` at its instant; the same days'
numbers fetched once matured add up to the days' matured values. Each such condition is
a :class:`LagObservation`, and :func:`fit_curve` finds the curve that explains them
best (least squares, linear in the curve's shares at fixed knots), then makes it a valid
curve (shares between 0 and 1, never decreasing, 1 at the last knot).

This module also says which conditions can be observations (:func:`lag_metric`,
:func:`lag_window`) and how one is built from a record and matured numbers
(:func:`observation_of`). No I/O: :mod:`ruleengine.backtest.lag_fit` reads the records and
the history.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Final, Literal
from zoneinfo import ZoneInfo

from ruleengine.rules.language.periods import preset_range
from ruleengine.rules.replay.history import day_end_utc

#: ``(age in hours after the end of the day, share of the matured conversions seen)``.
Curve = tuple[tuple[float, float], ...]

#: The ages at which the fitted curve has a point; its last point is the horizon.
KNOTS_H: Final = (0.0, 24.0, 48.0, 72.0, 120.0, 168.0)
#: A day's numbers fetched this long after the day ended count as matured.
MATURED_AFTER_H: Final = 168.0
#: The fewest usable conditions an account needs for a curve of its own.
MIN_OBSERVATIONS: Final = 30
#: Parts of observations (days of their windows) a stretch between two knots needs to
#: count as covered; a curve needs at least :data:`MIN_STRETCHES` covered stretches.
MIN_PARTS_PER_STRETCH: Final = 3
MIN_STRETCHES: Final = 2
#: Weight of the smoothness penalty (changes of slope between stretches) against the data.
SMOOTHING: Final = 1e-5
#: The most an observation's weight counts (one huge window must not be the whole fit).
MAX_WEIGHT: Final = 1e3
#: A condition's seen / matured ratio is bounded to this: a seen number far above the
#: matured one is a refund or an error, and one such point must not bend the curve.
MAX_RATIO: Final = 2.0

Kind = Literal["count", "value", "roas", "cost"]


def share(curve: Curve, age_h: float) -> float:
    """The share of a day's matured conversions seen ``age_h`` hours after the day ended.

    Linear between the curve's points; the first point's share at or before the first
    age (age ≤ 0: the day is not over yet), 1 after the last point. An empty curve is 1.
    """
    if not curve:
        return 1.0
    if not age_h > curve[0][0]:  # also NaN: the youngest share
        return curve[0][1]
    for (age0, share0), (age1, share1) in itertools.pairwise(curve):
        if age_h < age1:
            return share0 + (share1 - share0) * (age_h - age0) / (age1 - age0)
    return 1.0


def day_age_h(day: date, tz: ZoneInfo, at: datetime) -> float:
    """Hours from the end of ``day`` in ``tz`` (the next local midnight) to ``at``;
    negative while the day lasts."""
    return (at - day_end_utc(day, tz)).total_seconds() / 3600


def matured(day: date, fetched_at: datetime, tz: ZoneInfo) -> bool:
    """True when ``day``'s numbers fetched at ``fetched_at`` count as matured."""
    return fetched_at >= day_end_utc(day, tz) + timedelta(hours=MATURED_AFTER_H)


# ---------------------------------------------------------------- which conditions


#: Action types Meta books at once (clicks, views, engagement): not conversions.
BOOKED_ACTION_TYPES: Final = frozenset(
    {
        "link_click",
        "landing_page_view",
        "post_engagement",
        "page_engagement",
        "post_reaction",
        "post",
        "comment",
        "like",
        "photo_view",
        "video_view",
        "onsite_conversion.post_save",
    }
)
_COUNT_FIELDS: Final = {"actions": "actions", "conversions": "conversions"}
_VALUE_FIELDS: Final = {"action_values": "action_values", "conversion_values": "conversion_values"}
_ROAS_FIELDS: Final = frozenset(
    {"purchase_roas", "website_purchase_roas", "mobile_app_purchase_roas"}
)
_COST_FIELDS: Final = {"cost_per_action_type": "actions", "cost_per_conversion": "conversions"}


@dataclass(frozen=True)
class LagMetric:
    """How a conversion metric of a condition becomes an observation.

    Attributes:
        kind: ``count`` and ``value`` are seen as they are; ``roas`` is a value per unit
            of spend (seen value = ROAS × the window's spend); ``cost`` is spend per
            conversion (seen count = the window's spend / cost).
        field: the Insights list field holding the matured numbers per day.
        action_type: the action type picked from it.
    """

    kind: Kind
    field: str
    action_type: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The Insights fields the matured days are read from (spend is final at once)."""
        return (self.field, "spend") if self.kind in ("roas", "cost") else (self.field,)


def lag_metric(metric: str) -> LagMetric | None:
    """How ``metric`` (a condition's dotted key) is observed; None for a metric that is
    not a conversion metric (spend, clicks, link clicks …)."""
    field, dot, action_type = metric.partition(".")
    if not dot or not action_type or action_type in BOOKED_ACTION_TYPES:
        return None
    if field in _COUNT_FIELDS:
        return LagMetric("count", _COUNT_FIELDS[field], action_type)
    if field in _VALUE_FIELDS:
        return LagMetric("value", _VALUE_FIELDS[field], action_type)
    if field in _ROAS_FIELDS:
        return LagMetric("roas", "action_values", action_type)
    if field in _COST_FIELDS:
        return LagMetric("cost", _COST_FIELDS[field], action_type)
    return None


def lag_window(period: str, today: date) -> tuple[date, date] | None:
    """The dates a period covered on the ad account's date ``today``, when they all
    ended before it (a window holding today mixes a day still running); else None."""
    span = preset_range(period, today)
    if span is None or span[1] >= today or span[0] > span[1]:
        return None
    return span


@dataclass(frozen=True)
class LagDay:
    """One day of a condition's window: its age at the condition's instant, and its
    matured numbers (the metric's conversions, and spend)."""

    age_h: float
    matured: float
    spend: float = 0.0


def observation_of(
    metric: LagMetric, actual: float | None, days: Sequence[LagDay]
) -> LagObservation | None:
    """What a condition on ``metric`` saw (``actual``) over ``days``, as an observation;
    None when it says nothing about the lag (no data, a cost of 0, no spend)."""
    if actual is None or not math.isfinite(actual) or not days:
        return None
    spend = sum(d.spend for d in days)
    if metric.kind in ("count", "value"):
        seen = actual
    elif metric.kind == "roas":
        seen = actual * spend
    else:  # cost per conversion: spend / conversions
        if actual <= 0 or spend <= 0:
            return None
        seen = spend / actual
    return LagObservation(seen, tuple((d.age_h, d.matured) for d in days))


def size_weights(
    observations: Sequence[LagObservation], groups: Sequence[str]
) -> list[LagObservation]:
    """``observations`` weighted by their matured totals over the median total of their
    group (one group per metric: counts and money do not compare).

    Arriving conversions are counted events: the share seen of a window of 200
    conversions wavers far less than that of 2, so a window counts in proportion to its
    size, and a group's typical window counts 1.
    """
    totals = [sum(m for _, m in o.parts if math.isfinite(m) and m > 0) for o in observations]
    by_group: dict[str, list[float]] = {}
    for group, total in zip(groups, totals, strict=True):
        if math.isfinite(total) and total > 0:
            by_group.setdefault(group, []).append(total)
    medians = {g: statistics.median(t) for g, t in by_group.items()}
    return [
        replace(o, weight=total / medians[g] if g in medians and total > 0 else 1.0)
        for o, g, total in zip(observations, groups, totals, strict=True)
    ]


# ---------------------------------------------------------------- the fit


@dataclass(frozen=True)
class LagObservation:
    """One condition value as it was seen at an instant.

    Attributes:
        seen: the conversion count or value the condition saw (over its whole window).
        parts: per day of its window, ``(age_h at the instant, matured value of that day)``.
        weight: how much it counts against the others (> 0): the seen share of a window
            of many conversions is surer than that of a few, so a caller knowing the sizes
            passes the matured total over a typical one (:func:`size_weights`).
    """

    seen: float
    parts: tuple[tuple[float, float], ...]
    weight: float = 1.0


@dataclass(frozen=True)
class LagFit:
    """A learned curve, or why there is none.

    Attributes:
        curve: the curve (a point per knot, the last at share 1); None when not ``enough``.
        observations: the usable observations (finite, with matured conversions, and
            at least one day younger than the horizon).
        enough: True when ``curve`` may be used instead of matured numbers.
        why: a sentence for people: what it was learned from, or why it was not.
        residual: root mean square of (seen − predicted) / matured over the usable
            observations, weighted as they are in the fit (None without a curve).
        stretches: the stretches between knots the observations cover, ``(from_h, to_h)``.
    """

    curve: Curve | None
    observations: int
    enough: bool
    why: str
    residual: float | None = None
    stretches: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class _Row:
    """One usable observation in ratio form: ``y = x · s`` with ``s`` the free shares."""

    x: tuple[float, ...]
    y: float
    stretches: tuple[int, ...]
    weight: float


def fit_curve(
    observations: Iterable[LagObservation],
    *,
    knots_h: Sequence[float] = KNOTS_H,
    min_observations: int = MIN_OBSERVATIONS,
    sources: str | None = None,
) -> LagFit:
    """The curve through ``knots_h`` (share 1 at the last) that best explains what was seen.

    Each observation says ``seen = Σ_d matured_d × s(age_d)``, divided by its matured
    total (so its unit does not matter) and weighted by its ``weight``. The shares at the knots
    but the last are found by least squares with a light penalty on changes of slope
    (which decides the stretches no observation covers: a straight line to their
    neighbours), then bounded to a valid curve: between 0 and 1, never decreasing.

    Args:
        knots_h: increasing ages, the first ≥ 0; the last is the horizon (share 1).
        min_observations: the fewest usable observations for ``enough``.
        sources: what the observations are about, for ``why`` (``"38 campaigns"``).

    Raises:
        ValueError: knots that do not increase, start below 0 or are fewer than two.
    """
    knots = _check_knots(knots_h)
    rows = [row for obs in observations if (row := _row(obs, knots)) is not None]
    stretches = _covered(rows, knots)
    covered = tuple((knots[i], knots[i + 1]) for i in stretches)
    if len(rows) < min_observations:
        why = (
            f"only {len(rows)} usable conditions of its own (at least {min_observations}"
            " needed): matured numbers used"
        )
        return LagFit(None, len(rows), False, why, stretches=covered)
    if len(stretches) < MIN_STRETCHES:
        why = (
            f"{len(rows)} usable conditions, but the ages they saw cover "
            f"{_describe(covered)} of the curve (at least {MIN_STRETCHES} stretches"
            " between knots needed): matured numbers used"
        )
        return LagFit(None, len(rows), False, why, stretches=covered)
    shares = _solve(rows, knots)
    curve = tuple(zip(knots, (*shares, 1.0), strict=True))
    weights = math.fsum(row.weight for row in rows)
    residual = math.sqrt(
        math.fsum(row.weight * (row.y - _dot(row.x, shares)) ** 2 for row in rows) / weights
    )
    why = f"learned from {len(rows)} conditions" + (f" on {sources}" if sources else "")
    return LagFit(curve, len(rows), True, why, residual, covered)


def _check_knots(knots_h: Sequence[float]) -> tuple[float, ...]:
    knots = tuple(float(k) for k in knots_h)
    if len(knots) < 2 or not all(math.isfinite(k) for k in knots) or knots[0] < 0:
        raise ValueError(f"knots {knots_h!r}: at least two finite ages, the first ≥ 0")
    if any(b <= a for a, b in itertools.pairwise(knots)):
        raise ValueError(f"knots {knots_h!r}: ages must increase")
    return knots


def _describe(covered: Sequence[tuple[float, float]]) -> str:
    if not covered:
        return "no stretch"
    return "only " + ", ".join(f"{a:g}–{b:g} h" for a, b in covered)


def _hats(age_h: float, knots: Sequence[float]) -> tuple[int, float] | None:
    """The stretch holding ``age_h`` and the weight of its right knot (None: past the last)."""
    if age_h <= knots[0]:
        return 0, 0.0
    if age_h >= knots[-1]:
        return None
    i = bisect.bisect_right(knots, age_h) - 1
    return i, (age_h - knots[i]) / (knots[i + 1] - knots[i])


def _row(obs: LagObservation, knots: Sequence[float]) -> _Row | None:
    """``obs`` as ratios of its matured total; None when it cannot say anything."""
    try:
        seen, weight = float(obs.seen), float(obs.weight)
        parts = [(float(a), float(m)) for a, m in obs.parts]
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(weight) and weight > 0):
        return None
    parts = [(a, m) for a, m in parts if not math.isnan(a) and math.isfinite(m) and m > 0]
    total = sum(m for _, m in parts)  # not fsum: it raises where sum overflows to inf
    if not (math.isfinite(seen) and seen >= 0 and math.isfinite(total) and total > 0):
        return None
    free = len(knots) - 1
    x, known, stretches = [0.0] * free, 0.0, []
    for age, value in parts:
        part = value / total
        where = _hats(age, knots)
        if where is None:  # matured: seen whole
            known += part
            continue
        i, right = where
        stretches.append(i)
        x[i] += part * (1 - right)
        if i + 1 < free:
            x[i + 1] += part * right
        else:
            known += part * right
    if not stretches:
        return None
    ratio = min(seen / total, MAX_RATIO)
    return _Row(tuple(x), ratio - known, tuple(stretches), min(weight, MAX_WEIGHT))


def _covered(rows: Sequence[_Row], knots: Sequence[float]) -> list[int]:
    """The stretches between knots with at least :data:`MIN_PARTS_PER_STRETCH` days in them."""
    counts = [0] * (len(knots) - 1)
    for row in rows:
        for i in row.stretches:
            counts[i] += 1
    return [i for i, n in enumerate(counts) if n >= MIN_PARTS_PER_STRETCH]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def _system(rows: Sequence[_Row], knots: Sequence[float]) -> tuple[list[list[float]], list[float]]:
    """The normal equations ``A s = b`` of the data plus the smoothness penalty."""
    free, n = len(knots) - 1, math.fsum(r.weight for r in rows)
    a = [
        [math.fsum(r.weight * r.x[i] * r.x[j] for r in rows) / n for j in range(free)]
        for i in range(free)
    ]
    b = [math.fsum(r.weight * r.x[i] * r.y for r in rows) / n for i in range(free)]
    # change of slope at each inner knot, in share per day: (s[k+1]-s[k])/h1 - (s[k]-s[k-1])/h0
    for k in range(1, len(knots) - 1):
        h0, h1 = (knots[k] - knots[k - 1]) / 24, (knots[k + 1] - knots[k]) / 24
        g = {k - 1: 1 / h0, k: -1 / h0 - 1 / h1, k + 1: 1 / h1}
        fixed = g.pop(free, 0.0)  # the last knot's share is 1
        for i, gi in g.items():
            b[i] -= SMOOTHING * gi * fixed
            for j, gj in g.items():
                a[i][j] += SMOOTHING * gi * gj
    return a, b


def _solve(rows: Sequence[_Row], knots: Sequence[float]) -> tuple[float, ...]:
    """Least-squares shares, bounded to a valid curve (a small quadratic programme)."""
    a, b = _system(rows, knots)
    shares = _gauss(a, b)
    if shares is not None and _valid(shares):
        return tuple(shares)
    return tuple(_bounded(a, b, _project(shares or [1.0] * len(b))))


def _gauss(a: Sequence[Sequence[float]], b: Sequence[float]) -> list[float] | None:
    """Solve ``a x = b`` (partial pivoting); None when it is (nearly) singular."""
    n = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (m[r][n] - math.fsum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x if all(math.isfinite(v) for v in x) else None


def _valid(shares: Sequence[float]) -> bool:
    return all(0 <= s <= 1 for s in shares) and all(b >= a for a, b in itertools.pairwise(shares))


def _project(shares: Sequence[float]) -> list[float]:
    """The nearest non-decreasing shares between 0 and 1 (pool adjacent violators, clip)."""
    blocks: list[list[float]] = []  # [mean, size]
    for value in shares:
        blocks.append([value if math.isfinite(value) else 1.0, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, size = blocks.pop()
            blocks[-1] = [
                (blocks[-1][0] * blocks[-1][1] + mean * size) / (blocks[-1][1] + size),
                blocks[-1][1] + size,
            ]
    out = [mean for mean, size in blocks for _ in range(int(size))]
    return [min(1.0, max(0.0, v)) for v in out]


def _bounded(
    a: Sequence[Sequence[float]], b: Sequence[float], start: list[float], *, steps: int = 3000
) -> list[float]:
    """Minimise ½ sᵀA s − bᵀs over valid shares: accelerated projected gradient (FISTA)."""
    n = len(b)
    step = 1 / max(1e-12, max(math.fsum(abs(v) for v in row) for row in a))  # 1 / a bound of λmax
    x, y, t = start, start, 1.0
    for _ in range(steps):
        grad = [math.fsum(a[i][j] * y[j] for j in range(n)) - b[i] for i in range(n)]
        nxt = _project([y[i] - step * grad[i] for i in range(n)])
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        y = [nxt[i] + (t - 1) / t_next * (nxt[i] - x[i]) for i in range(n)]
        if max(abs(nxt[i] - x[i]) for i in range(n)) < 1e-10:
            return nxt
        x, t = nxt, t_next
    return x
