"""A rule's impact, with I/O: its decisions from the execution records, its entities' hourly
delivery from the Insights history cache, each task measured (:mod:`ruleengine.rules.impact`).

Decisions are the ``applied`` and ``held_out`` records of the last ``days`` days (both keep
a full execution record). Delivery comes from the history cache the backtest uses
(:class:`ruleengine.backtest.history.InsightsHistory`: Graph only for what it lacks), per
hour: spend, purchases (``omni_purchase``) and their value. A task without a holdout is
counted, never measured: a before/after of acted entities alone is not an effect.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

import orjson

from ruleengine.backtest.history import HistoryRequest, HistoryResult
from ruleengine.backtest.service import BacktestDeps
from ruleengine.errors import RuleEngineError
from ruleengine.rules.history import MAX_DAYS, DayRange
from ruleengine.rules.impact import WINDOW_HOURS, Decision, Hourly, TaskImpact, measure
from ruleengine.rules.model import Rule, parse_rule
from ruleengine.store.credentials import token_ref
from ruleengine.store.db import Document
from ruleengine.store.records import ExecutionStore
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)

#: Action types whose value is a purchase, the first present wins.
PURCHASE_TYPES: Final = ("omni_purchase", "purchase", "offsite_conversion.fb_pixel_purchase")
HOURLY_FIELDS: Final = ("spend", "actions", "action_values")


async def rule_impact(
    deps: BacktestDeps, rule_id: str, *, days: int, window: str, now: datetime
) -> dict[str, Any]:
    """The JSON-ready impact of each task of the rule over its last ``days`` days.

    Raises:
        NotFoundError: no such rule.
        ValueError: an unknown window, or ``days`` out of 1…90.
    """
    if window not in WINDOW_HOURS:
        raise ValueError(f"window must be one of {', '.join(WINDOW_HOURS)}, not {window!r}")
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be 1…{MAX_DAYS}, not {days}")
    doc = await RuleStore(deps.db).get(rule_id)
    rule = parse_rule(doc.definition)
    records = await ExecutionStore(deps.db).decisions(rule_id, since=now - timedelta(days=days))
    # delivery only for the tasks a holdout measures: the others are counted, nothing more
    measured = {task.id for task in rule.tasks if task.holdout is not None}
    wanted = [r for r in records if r.get("task_id") in measured]
    hours = await _delivery(deps, wanted, level=rule.level, window=window, now=now)
    # the bootstrap and the series are pure CPU: off the event loop (the web app answers
    # meanwhile)
    tasks = await asyncio.to_thread(_measure_all, rule, records, hours, window=window, now=now)
    return {
        "rule_id": rule_id,
        "rule_name": doc.name,
        "days": days,
        "window": window,
        "now": now.isoformat(),
        "tasks": tasks,
    }


def _measure_all(
    rule: Rule,
    records: Sequence[Document],
    hours: dict[str, dict[datetime, Hourly]],
    *,
    window: str,
    now: datetime,
) -> list[dict[str, Any]]:
    tasks = []
    for task in rule.tasks:
        decisions = [_decision(r) for r in records if r.get("task_id") == task.id]
        impact = measure(
            task.id, decisions, hours, window=window, now=now, measured=task.holdout is not None
        )
        tasks.append(_task_json(impact, task.holdout.percent if task.holdout else None))
    return tasks


def _decision(record: Document) -> Decision:
    at = record["created_at"]
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return Decision(record["entity_id"], at, record["outcome"] == "held_out")


def _task_json(impact: TaskImpact, percent: float | None) -> dict[str, Any]:
    return {
        "task_id": impact.task_id,
        "holdout_percent": percent,
        "measured": impact.measured,
        "enough_data": impact.enough,
        "note": impact.note,
        "counts": {
            "acted": impact.acted,
            "held_out": impact.held_out,
            "acted_complete": impact.acted_complete,
            "held_out_complete": impact.held_out_complete,
        },
        "effects": {name: asdict(effect) for name, effect in impact.effects.items()},
        "total_profit_effect": impact.total_profit_effect,
        "chart": {"bucket": "day" if impact.window == "7d" else "hour", **impact.chart},
    }


async def _delivery(
    deps: BacktestDeps, records: Sequence[Document], *, level: str, window: str, now: datetime
) -> dict[str, dict[datetime, Hourly]]:
    """entity → UTC hour → delivery, around every decision, from the history cache (an entity
    whose delivery could not be read is absent: its decisions are counted, not measured)."""
    by_account: dict[str, list[Document]] = defaultdict(list)
    for record in records:
        by_account[str(record["account"])].append(record)
    hours: dict[str, dict[datetime, Hourly]] = {}
    span = timedelta(hours=WINDOW_HOURS[window] + 1)
    for account_id, mine in by_account.items():
        try:
            account = await deps.credentials.get(account_id)
            token = await deps.credentials.usable_token(token_ref(account_id))
        except RuleEngineError as exc:  # removed, or its token refused: its decisions wait
            log.warning("impact: no delivery of %s: %s", account_id, exc)
            continue
        tz = ZoneInfo(account.timezone)
        first = min(_decision(r).at for r in mine) - span
        last = min(max(_decision(r).at for r in mine) + span, now)
        days = _days(first, last, tz)
        ids = tuple(sorted({str(r["entity_id"]) for r in mine}))
        request = HistoryRequest(
            account_id, level, ids, fields=("spend",), days=days, hourly_fields=HOURLY_FIELDS
        )
        result = await deps.history.get(request, token=token, timezone=account.timezone, now=now)
        # an entity Graph did not answer for has no hours: not "nothing delivered"
        hours.update(_hourly(result, [i for i in ids if i not in result.errors], days, tz))
    return hours


def _days(first: datetime, last: datetime, tz: ZoneInfo) -> DayRange:
    until = last.astimezone(tz).date()
    since = max(first.astimezone(tz).date(), until - timedelta(days=MAX_DAYS - 1))
    return DayRange(since, until)


def _hourly(
    result: HistoryResult, ids: Iterable[str], days: DayRange, tz: ZoneInfo
) -> dict[str, dict[datetime, Hourly]]:
    out: dict[str, dict[datetime, Hourly]] = {}
    for entity_id in ids:
        series: dict[datetime, Hourly] = {}
        day = days.since
        while day <= days.until:
            for hour, values in result.hour_values(entity_id, day).items():
                series[_instant(day, hour, tz)] = Hourly(
                    spend=_number(values.get("spend")),
                    purchases=_action(values.get("actions")),
                    revenue=_action(values.get("action_values")),
                )
            day += timedelta(days=1)
        out[entity_id] = series
    return out


def _instant(day: date, hour: int, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(hour), tz).astimezone(UTC)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _action(value: Any) -> float:
    """The purchase entry of an Insights ``actions``/``action_values`` list (JSON text or a
    list; 0 without one)."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return 0.0
    if not isinstance(value, list):
        return 0.0
    found: Mapping[str, Any] = {
        str(a.get("action_type")): a.get("value") for a in value if isinstance(a, dict)
    }
    for kind in PURCHASE_TYPES:
        if kind in found:
            return _number(found[kind])
    return 0.0
