"""Evaluation, pure: resolve each condition to a number (or no data), test it, fold the task.

No I/O here. The worker hands in what it fetched (Insights rows per period,
the entity, the clock, a custom-metric lookup) and gets back verdicts that say
exactly which numbers were seen and why each condition passed or failed.
"""

from __future__ import annotations

import math
import operator as op
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from ruleengine.rules.entity import Entity
from ruleengine.rules.language.action_types import RebalanceBudgetAction, ScaleToTargetAction
from ruleengine.rules.language.catalog import (
    PERIOD_SPEND_KEYS,
    RANKING_SCALE,
    RESULT_FIELDS,
    MetricSpec,
    Missing,
    Source,
    resolve_metric,
)
from ruleengine.rules.language.model import Condition, Task
from ruleengine.rules.language.per_currency import bare
from ruleengine.rules.language.periods import preset_range

NO_DATA = "no_data"
# An end-of-day estimate from the first minutes of a day is noise: none before an hour.
ESTIMATE_AFTER: Final = timedelta(hours=1)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">": op.gt,
    ">=": op.ge,
    "<": op.lt,
    "<=": op.le,
    "==": _close,
    "!=": lambda a, b: not _close(a, b),
}


def in_range(actual: float, low: float, high: float) -> bool:
    """``low ≤ actual ≤ high``, ends included (with ``==``'s tolerance)."""
    return low <= actual <= high or _close(actual, low) or _close(actual, high)


InsightsRow = Mapping[str, Any]
CustomLookup = Callable[[str], float | None]


@dataclass(frozen=True)
class EvalContext:
    """Everything evaluation may look at for one entity.

    Attributes:
        entity: the campaign or ad set.
        insights: period → the Insights row Meta returned (absent: Meta returned no row).
        now: the evaluation time (aware UTC).
        tz: the ad account's timezone, for the clock keys (``current_hour``,
            ``hours_left_today``): Meta's day and daily budgets reset at its midnight.
        custom: looks up ``custom:<name>`` values for this entity (None: no sheet loaded).
        currency_offset: budget units per currency unit (100 for cents).
    """

    entity: Entity
    insights: Mapping[str, InsightsRow]
    now: datetime
    tz: ZoneInfo
    custom: CustomLookup | None = None
    currency_offset: int = 100


@dataclass(frozen=True)
class ConditionResult:
    """One condition as evaluated: the numbers seen and the outcome."""

    metric: str
    period: str | None
    operator: str
    # [low, high] for IN_RANGE / NOT_IN_RANGE; a label for a ranking (and its actual too)
    expected: float | list[float] | str | None
    actual: float | str | None
    passed: bool
    reason: str | None = None
    compare_to: str | None = None
    #: What ``results`` / ``cost_per_result`` counted for this entity (its ad sets' goal).
    indicator: str | None = None

    def as_record(self) -> dict[str, Any]:
        """JSON-ready form for execution records."""
        record = {
            "metric": self.metric,
            "period": self.period,
            "operator": self.operator,
            "expected": self.expected,
            "actual": self.actual,
            "passed": self.passed,
            "reason": self.reason,
            "compare_to": self.compare_to,
        }
        if self.indicator is not None:
            record["indicator"] = self.indicator
        return record


@dataclass(frozen=True)
class ActionMetric:
    """The metric an action reads (``scale_to_target``), as evaluation resolved it."""

    metric: str
    period: str
    actual: float | None  # None: no data

    def as_record(self) -> dict[str, Any]:
        """JSON-ready form for execution records."""
        return {"metric": self.metric, "period": self.period, "actual": self.actual}


@dataclass(frozen=True)
class TaskVerdict:
    """A task's outcome for one entity."""

    task_id: str
    match: str
    passed: bool
    conditions: list[ConditionResult] = field(default_factory=list)
    action_metric: ActionMetric | None = None


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def insight_value(row: InsightsRow | None, spec: MetricSpec) -> float | None:
    """The value of ``spec`` in an Insights row; absent → 0 or None as the catalogue says.

    A ranking is its place on :data:`RANKING_SCALE` (0 the worst), None when ``UNKNOWN``.
    """
    raw: Any = None
    if row is not None and spec.field is not None:
        raw = row.get(spec.field)
        if spec.action_type is not None:
            raw = _pick_action(raw, spec.action_type)
        elif spec.field in RESULT_FIELDS:
            entry = result_entry(raw)
            if not entry.single:
                return None
            raw = entry.value
        elif spec.ranking:
            return float(RANKING_SCALE.index(raw)) if raw in RANKING_SCALE else None
    if spec.ranking:
        return None
    value = _number(raw)
    if value is None and spec.missing is Missing.ZERO:
        return 0.0
    return value


@dataclass(frozen=True)
class ResultEntry:
    """A row's ``results`` or ``cost_per_result``: its indicator and value (None: none)."""

    indicator: str | None
    value: str | None
    single: bool = True  # False: several indicators, no one result


def result_entry(items: Any) -> ResultEntry:
    """The one entry of a ``results``/``cost_per_result`` list: ``[{indicator, values}]``.

    Each row is measured by its own ad sets' optimisation goal. A row without the field has
    no indicator; an entry without ``values`` has no result yet (0 results, no cost); a row
    whose ad sets optimise for different things (a campaign's, an account's) has no single
    result: its indicators are joined with ``" + "`` and its value is None.
    """
    entries = [e for e in items if isinstance(e, Mapping)] if isinstance(items, list) else []
    indicators = [str(e.get("indicator")) for e in entries if e.get("indicator")]
    if len(entries) > 1:
        return ResultEntry(" + ".join(indicators), None, single=False)
    if not entries:
        return ResultEntry(None, None)
    values = entries[0].get("values")
    first = values[0] if isinstance(values, list) and values else None
    value = first.get("value") if isinstance(first, Mapping) else None
    return ResultEntry(indicators[0] if indicators else None, value)


def _pick_action(items: Any, action_type: str) -> Any:
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, Mapping) and item.get("action_type") == action_type:
            return item.get("value")
    return None


def _clock(name: str, ctx: EvalContext) -> float:
    local = ctx.now.astimezone(ctx.tz)
    if name == "current_hour":
        return float(local.hour)
    midnight = (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (midnight - local).total_seconds() / 3600


def _budget(raw: int | None, ctx: EvalContext) -> float | None:
    return None if raw is None else raw / ctx.currency_offset


def _entity_value(spec: MetricSpec, ctx: EvalContext) -> float | None:
    entity = ctx.entity
    if spec.field == "created_time":
        if entity.created_time is None:
            return None
        return max(0.0, (ctx.now - entity.created_time).total_seconds() / 3600)
    raw = {
        "daily_budget": entity.daily_budget,
        "lifetime_budget": entity.lifetime_budget,
        "remaining_budget": entity.budget_remaining,
    }[spec.name]
    return _budget(raw, ctx)


def _spent_pct(spec: MetricSpec, ctx: EvalContext) -> float | None:
    """``budget_spent_pct`` (so far today) or ``estimated_budget_spending_percentage``."""
    budget = _budget(ctx.entity.daily_budget, ctx)
    if not budget:
        return None
    spend = _number((ctx.insights.get("today") or {}).get("spend")) or 0.0
    if spec.name == "budget_spent_pct":
        return spend / budget * 100
    elapsed, length = _day_so_far(ctx)
    if elapsed < ESTIMATE_AFTER:
        return None
    return spend * (length / elapsed) / budget * 100


def _utilization(period: str, ctx: EvalContext) -> float | None:
    """``budget_utilization``: spend over ``period`` against the daily budget times its days,
    in %. Meta may spend up to 75 % over a daily budget on a day but not over 7 × it in a
    week (Meta's v23.0 announcement, 2025-05-29; SDK 24.0.0 notes: flexibility "increased
    from 25% to 75%"), so today may read up to 175 and a calendar week (Sunday to Saturday)
    at most 100 — a day over 100 is not overspend; a rolling 7 days spans two weeks and may
    read a little over 100. None without a daily budget or for a period whose
    days are not fixed (``maximum``)."""
    budget = _budget(ctx.entity.daily_budget, ctx)
    span = preset_range(period, ctx.now.astimezone(ctx.tz).date())
    if not budget or span is None:
        return None
    days = (span[1] - span[0]).days + 1
    spend = _number((ctx.insights.get(period) or {}).get("spend")) or 0.0
    return spend / (budget * days) * 100


def _day_so_far(ctx: EvalContext) -> tuple[timedelta, timedelta]:
    """How much of the ad account's day has passed, and the day's length (23-25 h)."""
    local = ctx.now.astimezone(ctx.tz)
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    end = start + timedelta(days=1)  # wall-clock arithmetic: the next midnight
    # aware datetimes of one tzinfo subtract as wall clocks: compare them in UTC
    start_utc, end_utc = start.astimezone(UTC), end.astimezone(UTC)
    return ctx.now - start_utc, end_utc - start_utc


def resolve(spec: MetricSpec, period: str | None, ctx: EvalContext) -> float | None:
    """The number a metric stands for, or None for no data."""
    if spec.source is Source.INSIGHTS:
        return insight_value(ctx.insights.get(period or ""), spec)
    if spec.source is Source.CLOCK:
        return _clock(spec.name, ctx)
    if spec.source is Source.ENTITY:
        return _entity_value(spec, ctx)
    if spec.source is Source.DERIVED:
        if spec.name in PERIOD_SPEND_KEYS:
            return _utilization(period or "today", ctx)
        return _spent_pct(spec, ctx)
    return ctx.custom(spec.field or "") if ctx.custom else None


def evaluate_condition(condition: Condition, ctx: EvalContext) -> ConditionResult:
    """Resolve both sides of ``condition`` and apply its operator."""
    if condition.spec.ranking:
        return _ranking_condition(condition, ctx)
    actual = resolve(condition.spec, condition.period, ctx)
    expected, described = _right_side(condition, ctx)
    if actual is None or expected is None:  # no data is never inside, nor outside, a range
        passed, reason = False, NO_DATA
    elif isinstance(expected, list):
        passed, reason = in_range(actual, *expected) == (condition.operator == "IN_RANGE"), None
    else:
        passed, reason = _OPERATORS[condition.operator](actual, expected), None
    return ConditionResult(
        metric=condition.metric,
        period=condition.period,
        operator=condition.operator,
        expected=expected if isinstance(expected, list) else _rounded(expected),
        actual=_rounded(actual),
        passed=passed,
        reason=reason,
        compare_to=described,
        indicator=_indicator(condition, ctx),
    )


def ranking_passes(operator: str, actual: str | None, expected: str) -> bool:
    """``actual <operator> expected`` on :data:`RANKING_SCALE`; off the scale (``UNKNOWN``,
    no row) never passes, whatever the operator."""
    if actual not in RANKING_SCALE or expected not in RANKING_SCALE:
        return False
    return _OPERATORS[operator](RANKING_SCALE.index(actual), RANKING_SCALE.index(expected))


def _ranking_condition(condition: Condition, ctx: EvalContext) -> ConditionResult:
    row = ctx.insights.get(condition.period or "")
    raw = row.get(condition.spec.field or "") if row is not None else None
    actual = raw if isinstance(raw, str) else None
    expected = str(condition.value)
    passed = ranking_passes(condition.operator, actual, expected)
    return ConditionResult(
        metric=condition.metric,
        period=condition.period,
        operator=condition.operator,
        expected=expected,
        actual=actual,
        passed=passed,
        reason=None if actual in RANKING_SCALE else NO_DATA,
    )


def _indicator(condition: Condition, ctx: EvalContext) -> str | None:
    """The result indicator of the row a ``results``/``cost_per_result`` condition read."""
    specs = [condition.spec] + ([condition.compare_to.spec] if condition.compare_to else [])
    for spec, period in zip(specs, [condition.period, condition.compare_period], strict=False):
        if spec.field in RESULT_FIELDS:
            row = ctx.insights.get(period or "")
            if row is not None:
                return result_entry(row.get(spec.field)).indicator
    return None


def _right_side(
    condition: Condition, ctx: EvalContext
) -> tuple[float | list[float] | None, str | None]:
    """The value, ``[low, high]`` or ``multiplier × comparator`` (None: no data), described."""
    if condition.bounds is not None:
        return list(condition.bounds), None
    if condition.compare_to is None:
        value = bare(condition.value)  # the account's own, when given per currency
        return value if isinstance(value, float | int) else None, None
    other = resolve(condition.compare_to.spec, condition.compare_period, ctx)
    expected = None if other is None else other * condition.compare_to.multiplier
    return expected, _describe_compare(condition)


def _describe_compare(condition: Condition) -> str:
    assert condition.compare_to is not None
    target = condition.compare_to
    text = target.metric
    if condition.compare_period and target.spec.needs_period:
        text += f" ({condition.compare_period})"
    if target.multiplier != 1:
        text = f"{target.multiplier:g} × {text}"
    return text


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def evaluate_task(task: Task, ctx: EvalContext) -> TaskVerdict:
    """Evaluate every condition of ``task`` and fold them with its ``match``."""
    results = [evaluate_condition(c, ctx) for c in task.conditions]
    fold = all if task.match == "all" else any
    return TaskVerdict(
        task_id=task.id,
        match=task.match,
        passed=fold(r.passed for r in results),
        conditions=results,
        action_metric=_action_metric(task, ctx),
    )


def _action_metric(task: Task, ctx: EvalContext) -> ActionMetric | None:
    """The metric a ``scale_to_target`` action scales by (or a ``rebalance_budget`` ranks by),
    read from the same Insights rows."""
    action = task.action
    if not isinstance(action, ScaleToTargetAction | RebalanceBudgetAction):
        return None
    actual = resolve(resolve_metric(action.metric), action.period, ctx)
    return ActionMetric(action.metric, action.period, _rounded(actual))
