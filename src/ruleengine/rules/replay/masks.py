"""Where a condition may pass, at every instant of a backtest at once (numpy).

Evaluating every condition of every entity at every instant one by one costs minutes
for a month of 15-minute runs over hundreds of campaigns (a million entity-instants).
But a condition on Insights (or the clock) compared with a number or another Insights
metric does not depend on what the replay changes: its numbers are history. So its
outcome at every instant can be computed up front, for all entities and instants at
once, as arrays: the sums over each period's days come from prefix sums (or, as seen,
from a product with the lag curve's shares), today's part from the hours before the
current one plus the running hour pro rata — the arithmetic of
:mod:`ruleengine.rules.replay.rows`, vectorised.

These masks are **candidates**, never verdicts: the comparisons are lenient by a hair
(a value within a millionth of its threshold counts as a candidate), so every instant a
condition passes at is a candidate. The replay evaluates the task with the engine's
own :func:`~ruleengine.rules.evaluate.evaluate_task` before anything it records, and a
candidate whose plan changes nothing is skipped without a verdict — it would record
nothing either way.

Conditions on entity fields (budgets, budget spent, age) depend on the replay's state:
:func:`condition_mask` answers None for them and the replay evaluates them per instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import EvalContext, resolve
from ruleengine.rules.language.catalog import MetricSpec, Missing, Source
from ruleengine.rules.language.model import Condition, Task
from ruleengine.rules.language.periods import preset_range
from ruleengine.rules.replay.rows import (
    COST_PER_RESULT,
    LIST_ADDITIVE,
    LIST_RATIOS,
    PLAIN_ADDITIVE,
    PLAIN_RATIOS,
    RESULTS,
    RawHistory,
    Share,
    day_end,
    is_conversion,
)

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
#: How close to its threshold a value counts as a candidate (relative, at least absolute).
LENIENCY = 1e-6
_CLOCK_ENTITY = Entity(id="clock")


@dataclass(frozen=True)
class _Instants:
    """The instants in the ad account's calendar."""

    today: npt.NDArray[np.int64]  # index of the account's day in the day axis
    hour: npt.NDArray[np.int64]
    fraction: Floats  # of the running hour
    local_days: list[date]
    at: list[datetime]


class MaskBuilder:
    """Candidate masks ``[entity, instant]`` for one ad account's replay.

    Args:
        entity_ids: the entities, in the order of the masks' rows.
        history: the account's history.
        instants: the instants (aware UTC), in order.
        tz: the ad account's timezone.
        share: the lag curve for as-seen numbers (None: matured).
    """

    def __init__(
        self,
        entity_ids: Sequence[str],
        history: RawHistory,
        instants: Sequence[datetime],
        tz: ZoneInfo,
        share: Share | None = None,
    ) -> None:
        self.ids = list(entity_ids)
        self.history = history
        self.tz = tz
        self.share = share
        local = [at.astimezone(tz) for at in instants]
        known = history.days()
        first = min([*known, *(t.date() for t in local)], default=date.today())
        last = max([*known, *(t.date() for t in local)], default=first)
        self.days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        self.day_index = {d: n for n, d in enumerate(self.days)}
        self.instants = _Instants(
            today=np.array([self.day_index[t.date()] for t in local], dtype=np.int64),
            hour=np.array([t.hour for t in local], dtype=np.int64),
            fraction=np.array([(t.minute * 60 + t.second) / 3600 for t in local]),
            local_days=[t.date() for t in local],
            at=list(instants),
        )
        self._days: dict[str, Floats] = {}
        self._hours: dict[str, Floats] = {}
        self._totals: dict[tuple[str, str], Floats] = {}
        self._cached_share: Floats | None = None
        self._indicators: tuple[bool, list[str]] | None = None  # (mixed, every indicator)

    # ---------------------------------------------------------------- history as arrays

    def _day_matrix(self, key: str) -> Floats:
        """``[entity, day]`` of one flattened key."""
        if key not in self._days:
            matrix = np.zeros((len(self.ids), len(self.days)))
            index = self.day_index
            for row, entity_id in enumerate(self.ids):
                for day, value in self.history.day_values(entity_id, key).items():
                    matrix[row, index[day]] = value
            self._days[key] = matrix
        return self._days[key]

    def _hour_cube(self, key: str) -> Floats:
        """``[entity, day, hour]`` of one flattened key (days without hours: zeros)."""
        if key not in self._hours:
            cube = np.zeros((len(self.ids), len(self.days), 24))
            index = self.day_index
            for row, entity_id in enumerate(self.ids):
                for day, hours in self.history.hour_values(entity_id, key).items():
                    column = cube[row, index[day]]
                    for hour, value in hours.items():
                        column[hour] = value
            self._hours[key] = cube
        return self._hours[key]

    def _cached(self) -> Floats:
        """``[entity, day]``: the share of conversions the cached numbers hold."""
        if self._cached_share is None:
            assert self.share is not None
            cached = np.ones((len(self.ids), len(self.days)))
            for row, entity_id in enumerate(self.ids):
                for day, fetched in self.history.fetched_at(entity_id).items():
                    if fetched is not None:
                        age = (fetched - day_end(day, self.tz)).total_seconds() / 3600
                        cached[row, self.day_index[day]] = self.share(age)
            self._cached_share = np.where(cached > 0, cached, 1.0)
        return self._cached_share

    # ---------------------------------------------------------------- sums over periods

    def _spans(self, period: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], Bools]:
        """Per instant: the first and one-past-last whole day of the period (day indexes),
        and whether it includes the account's current day."""
        first, stop, today = [], [], []
        cache: dict[date, tuple[int, int, bool]] = {}
        for local_day in self.instants.local_days:
            if local_day not in cache:
                span = preset_range(period, local_day)
                if span is None:
                    cache[local_day] = (0, 0, False)
                else:
                    whole_last = min(span[1], local_day - timedelta(days=1))
                    start = self._clip(span[0])
                    end = self._clip(whole_last + timedelta(days=1))
                    cache[local_day] = (start, max(start, end), span[1] >= local_day)
            a, b, c = cache[local_day]
            first.append(a)
            stop.append(b)
            today.append(c)
        return np.array(first), np.array(stop), np.array(today)

    def _clip(self, day: date) -> int:
        if day <= self.days[0]:
            return 0
        if day > self.days[-1]:
            return len(self.days)
        return self.day_index[day]

    def totals(self, key: str, period: str) -> Floats:
        """``[entity, instant]``: the sum of one flattened key over ``period`` at each instant."""
        cache_key = (key, period)
        if cache_key in self._totals:
            return self._totals[cache_key]
        first, stop, with_today = self._spans(period)
        days = self._day_matrix(key)
        scaled = self.share is not None and is_conversion(key)
        if scaled:
            weights = self._weights(first, stop)  # [day, instant]
            whole = (days / self._cached()) @ weights
        else:
            prefix = np.concatenate([np.zeros((len(self.ids), 1)), np.cumsum(days, axis=1)], axis=1)
            whole = prefix[:, stop] - prefix[:, first]
        if with_today.any():
            whole = whole + self._today(key, scaled) * with_today
        self._totals[cache_key] = whole
        return whole

    def _weights(self, first: npt.NDArray[np.int64], stop: npt.NDArray[np.int64]) -> Floats:
        """``[day, instant]``: the share of a day's conversions seen at each instant's hour
        (0 outside the instant's whole days)."""
        assert self.share is not None
        weights = np.zeros((len(self.days), len(first)))
        ends = [day_end(d, self.tz) for d in self.days]
        hour_starts: dict[datetime, dict[int, float]] = {}
        for column, at in enumerate(self.instants.at):
            start = at.astimezone(self.tz).replace(minute=0, second=0, microsecond=0)
            shares = hour_starts.setdefault(start, {})
            for row in range(int(first[column]), int(stop[column])):
                if row not in shares:
                    shares[row] = self.share((start - ends[row]).total_seconds() / 3600)
                weights[row, column] = shares[row]
        return weights

    def _today(self, key: str, scaled: bool) -> Floats:
        """``[entity, instant]``: the account's current day so far (running hour pro rata)."""
        cube = self._hour_cube(key)
        before = np.concatenate([np.zeros((*cube.shape[:2], 1)), np.cumsum(cube, axis=2)], axis=2)
        today, hour = self.instants.today, self.instants.hour
        part = before[:, today, hour] + cube[:, today, hour] * self.instants.fraction
        if scaled:
            assert self.share is not None
            seen = np.array(
                [
                    self.share((at - day_end(day, self.tz)).total_seconds() / 3600)
                    for at, day in zip(self.instants.at, self.instants.local_days, strict=True)
                ]
            )
            part = part * seen / self._cached()[:, today]
        return part

    # ---------------------------------------------------------------- metric values

    def values(self, spec: MetricSpec, period: str | None) -> Floats | None:
        """``[entity, instant]`` of a metric (NaN: no data); None when it depends on the
        replay's state (entity fields)."""
        shape = (len(self.ids), len(self.instants.at))
        if spec.source is Source.CUSTOM:
            return np.full(shape, np.nan)  # no sheet in a backtest: no data
        if spec.source is Source.CLOCK:
            row = [self._clock(spec, at) for at in self.instants.at]
            return np.broadcast_to(np.array(row, dtype=np.float64), shape)
        if spec.source is not Source.INSIGHTS or not period:
            return None
        if preset_range(period, self.instants.local_days[0]) is None:
            return self._absent(spec, shape)
        name, action_type = spec.field or "", spec.action_type
        if action_type is None and name in PLAIN_ADDITIVE:
            return self.totals(name, period)
        if action_type is None and name in PLAIN_RATIOS:
            numerator, denominator, factor = PLAIN_RATIOS[name]
            return _ratio(self.totals(numerator, period), self.totals(denominator, period)) * factor
        if action_type is not None and name in LIST_RATIOS:
            source, spend_first = LIST_RATIOS[name]
            amount = self.totals(f"{source}:{action_type}", period)
            spend = self.totals("spend", period)
            return _ratio(spend, amount) if spend_first else _ratio(amount, spend)
        if action_type is not None and name in LIST_ADDITIVE:
            return self.totals(f"{name}:{action_type}", period)
        if name in (RESULTS, COST_PER_RESULT):
            return self._results(name, period, shape)
        return self._absent(spec, shape)

    def _results(self, name: str, period: str, shape: tuple[int, int]) -> Floats | None:
        """``results`` (or spend ÷ them) over each entity's own indicator; None (evaluate
        at each instant) where an entity's indicator changed within the history."""
        if self._indicators is None:
            found = self.history.result_indicators()
            mixed = any(len(found.get(entity_id, ())) > 1 for entity_id in self.ids)
            self._indicators = (mixed, sorted(set().union(*found.values())))
        mixed, indicators = self._indicators
        if mixed:
            return None
        results = np.zeros(shape)
        for indicator in indicators:
            results = results + self.totals(f"{RESULTS}:{indicator}", period)
        return results if name == RESULTS else _ratio(self.totals("spend", period), results)

    @staticmethod
    def _absent(spec: MetricSpec, shape: tuple[int, int]) -> Floats:
        """What the engine reads for a field the history does not hold."""
        return np.zeros(shape) if spec.missing is Missing.ZERO else np.full(shape, np.nan)

    def _clock(self, spec: MetricSpec, at: datetime) -> float:
        ctx = EvalContext(entity=_CLOCK_ENTITY, insights={}, now=at, tz=self.tz)
        value = resolve(spec, None, ctx)
        return float("nan") if value is None else value

    # ---------------------------------------------------------------- conditions

    def condition(self, condition: Condition) -> Bools | None:
        """``[entity, instant]``: where ``condition`` may pass; None when it reads the
        replay's state (evaluate it at each instant)."""
        actual = self.values(condition.spec, condition.period)
        if actual is None:
            return None
        if condition.bounds is not None:
            low, high = condition.bounds
            return _lenient_range(actual, low, high, inside=condition.operator == "IN_RANGE")
        if condition.compare_to is not None:
            other = self.values(condition.compare_to.spec, condition.compare_period)
            if other is None:
                return None
            expected: Floats | float = other * condition.compare_to.multiplier
        else:
            assert isinstance(condition.value, int | float)
            expected = float(condition.value)
        return _lenient(condition.operator, actual, expected)

    def task(self, task: Task) -> tuple[Bools, bool]:
        """``[entity, instant]`` candidates of ``task``, and whether every condition was
        masked (a candidate then needs no verdict unless its plan changes something)."""
        masks = [self.condition(c) for c in task.conditions]
        shape = (len(self.ids), len(self.instants.at))
        known = [m for m in masks if m is not None]
        complete = len(known) == len(masks)
        if task.match == "all":
            result = np.ones(shape, dtype=bool)
            for mask in known:
                result &= mask
        elif complete:
            result = np.zeros(shape, dtype=bool)
            for mask in known:
                result |= mask
        else:  # an unknown condition of an "any" task may pass anywhere
            result = np.ones(shape, dtype=bool)
        return result, complete


def _ratio(numerator: Floats, denominator: Floats) -> Floats:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(
            denominator != 0, numerator / np.where(denominator != 0, denominator, 1), np.nan
        )


def _slack(expected: Floats | float) -> Floats | float:
    return np.maximum(1e-9, np.abs(expected) * LENIENCY)


def _lenient(operator: str, actual: Floats, expected: Floats | float) -> Bools:
    """``actual <operator> expected``, counting values within a hair of it (NaN: never)."""
    slack = _slack(expected)
    with np.errstate(invalid="ignore"):
        if operator in (">", ">="):
            result = actual >= np.subtract(expected, slack)
        elif operator in ("<", "<="):
            result = actual <= np.add(expected, slack)
        elif operator == "==":
            result = np.abs(actual - expected) <= slack
        else:  # "!=": only values far from equal are sure; near ones are candidates too
            result = np.ones(actual.shape, dtype=bool)
    ready: Bools = result & ~np.isnan(actual) & ~np.isnan(np.broadcast_to(expected, actual.shape))
    return ready


def _lenient_range(actual: Floats, low: float, high: float, *, inside: bool) -> Bools:
    low_slack, high_slack = _slack(low), _slack(high)
    with np.errstate(invalid="ignore"):
        if inside:
            result = (actual >= low - low_slack) & (actual <= high + high_slack)
        else:
            result = (actual <= low + low_slack) | (actual >= high - high_slack)
    ready: Bools = result & ~np.isnan(actual)
    return ready
