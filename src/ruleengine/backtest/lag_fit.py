"""An ad account's attribution-lag curve, learned from its own execution records.

Every execution record keeps what each condition saw (``conditions[].actual``) at the
evaluation instant (``created_at``). For a condition on a conversion metric over a
window of past days, the same days' numbers fetched once they have matured (from the
Insights history cache, :class:`~ruleengine.backtest.history.InsightsHistory`) say what the
condition would have seen had every conversion been in. :func:`learn_lag` pairs the two
and fits the curve (:func:`ruleengine.rules.replay.lag.fit_curve`) — the maths is pure and
lives in :mod:`ruleengine.rules.replay.lag`; this module reads the records and the history.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from pymongo import DESCENDING

from ruleengine import constants as c
from ruleengine.backtest.history import HistoryRequest, InsightsHistory, Numbers
from ruleengine.rules.evaluate import insight_value
from ruleengine.rules.language.catalog import resolve_metric
from ruleengine.rules.replay.history import MAX_DAYS, DayRange
from ruleengine.rules.replay.lag import (
    MATURED_AFTER_H,
    LagDay,
    LagFit,
    LagMetric,
    LagObservation,
    day_age_h,
    fit_curve,
    lag_metric,
    lag_window,
    matured,
    observation_of,
    size_weights,
)
from ruleengine.store.db import (
    Database,
    Document,
)
from ruleengine.store.evaluations import SLIM, acted, decode

log = logging.getLogger(__name__)

#: The most execution records one learning reads.
MAX_RECORDS: Final = 20_000
#: The most entities whose history one learning fetches (those with the most conditions).
MAX_ENTITIES: Final = 100
#: A busy account's records are read in slices of this many hours over the lookback, so
#: the conditions kept are spread over the times of day (and so over the ages of days).
SLICE_H: Final = 6
_PROJECTION: Final = {"_id": 0, "entity_id": 1, "created_at": 1, "conditions": 1}
#: Metric prefixes :func:`~ruleengine.rules.replay.lag.lag_metric` may take: the records read are
#: those with at least one such condition.
_CONVERSION_METRICS: Final = (
    r"^(actions|conversions|action_values|conversion_values|purchase_roas"
    r"|website_purchase_roas|mobile_app_purchase_roas|cost_per_action_type"
    r"|cost_per_conversion)\."
)
_ENTITY_ID: Final = re.compile(r"[A-Za-z0-9_]{1,64}")
_LEVEL_WORDS: Final = {"campaign": "campaigns", "adset": "ad sets", "ad": "ads"}


@dataclass(frozen=True)
class LagLearning:
    """A learned curve (or why none) and what learning it cost.

    Attributes:
        fit: the curve, or why there is none (``fit.why``).
        graph_calls: Graph calls Meta counts, spent fetching matured days.
        cache_hits: (entity, day) cells the history cache answered.
        records_read: execution records read.
    """

    fit: LagFit
    graph_calls: int
    cache_hits: int
    records_read: int


@dataclass(frozen=True)
class _Need:
    """One condition of a record that can become an observation."""

    entity_id: str
    at: datetime
    metric: LagMetric
    window: tuple[date, date]
    actual: float


async def learn_lag(
    db: Database,
    history: InsightsHistory,
    *,
    account_id: str,
    level: str,
    timezone: str,
    token: str,
    now: datetime,
    lookback_days: int = 60,
    max_records: int = MAX_RECORDS,
    max_entities: int = MAX_ENTITIES,
) -> LagLearning:
    """Learn ``account_id``'s lag curve from its records of the last ``lookback_days``.

    Keeps the conditions (of any rule at ``level``) on a conversion metric over a window
    that ended before the record's date in the account's calendar, evaluated at least
    :data:`~ruleengine.rules.replay.lag.MATURED_AFTER_H` hours before ``now`` (so their days
    can have matured); fetches those days through ``history`` (the cache first); keeps
    an observation only when each of its days' numbers was fetched
    :data:`~ruleengine.rules.replay.lag.MATURED_AFTER_H` hours or more after the day ended.

    Raises:
        GraphError: Graph refused the history requests as a whole (a bad token, say).
    """
    tz = ZoneInfo(timezone)
    records = await _read_records(
        db,
        account_id=account_id,
        level=level,
        since=now - timedelta(days=lookback_days),
        until=now - timedelta(hours=MATURED_AFTER_H),
        max_records=max_records,
        lookback_days=lookback_days,
    )
    needs = _bounded(_needs(records, tz), max_entities)
    if not needs:
        return LagLearning(fit_curve(()), 0, 0, len(records))
    days = _days(needs)
    needs = [n for n in needs if n.window[0] >= days.since]
    results = await asyncio.gather(
        *(
            history.get(request, token=token, timezone=timezone, now=now)
            for request in _requests(needs, account_id=account_id, level=level, days=days)
        )
    )
    daily: dict[str, dict[date, Numbers]] = {}
    for result in results:
        for entity, by_day in result.daily.items():
            daily.setdefault(entity, {}).update(by_day)
    observations: list[LagObservation] = []
    groups: list[str] = []
    entities: set[str] = set()
    for need in needs:
        obs = _observation(need, daily.get(need.entity_id, {}), tz)
        if obs is not None:
            observations.append(obs)
            groups.append(f"{need.metric.kind}:{need.metric.field}.{need.metric.action_type}")
            if any(matured > 0 for _, matured in obs.parts):  # says something about the lag
                entities.add(need.entity_id)
    word = _LEVEL_WORDS.get(level, "entities")
    fit = fit_curve(size_weights(observations, groups), sources=f"{len(entities)} {word}")
    log.info("lag curve of %s %s: %s", account_id, level, fit.why)
    return LagLearning(
        fit,
        graph_calls=sum(r.graph_calls for r in results),
        cache_hits=sum(r.cache_hits for r in results),
        records_read=len(records),
    )


async def _read_records(
    db: Database,
    *,
    account_id: str,
    level: str,
    since: datetime,
    until: datetime,
    max_records: int,
    lookback_days: int,
) -> list[Document]:
    """The account's records with a conversion condition, newest first, at most
    ``max_records``: one query, or — when that one is full — one per slice of
    :data:`SLICE_H` hours, each with its share of the limit."""
    if until <= since:
        return []
    records = await _read_range(db, account_id, level, since, until, max_records)
    if len(records) < max_records:
        return records
    slices = max(1, lookback_days * 24 // SLICE_H)
    per_slice = max(1, max_records // slices)
    spread: list[Document] = []
    end = until
    while end > since and len(spread) < max_records:
        start = max(since, end - timedelta(hours=SLICE_H))
        spread += await _read_range(db, account_id, level, start, end, per_slice)
        end = start
    return spread


async def _read_range(
    db: Database, account_id: str, level: str, since: datetime, until: datetime, limit: int
) -> list[Document]:
    """The newest ``limit`` evaluations of the range with a conversion condition: the
    records (pairs that acted) and the rows of the batches' chunks (the others)."""
    query = {
        "account": account_id,
        "created_at": {"$gte": since, "$lt": until},
        "level": level,
        "conditions.metric": {"$regex": _CONVERSION_METRICS},
    }
    cursor = db[c.EXECUTIONS].find(query, _PROJECTION).sort("created_at", DESCENDING).limit(limit)
    records = [d async for d in cursor]
    rows = await _chunk_rows(db, account_id, level, since, until, limit)
    newest = sorted(records + rows, key=lambda d: d["created_at"], reverse=True)
    return newest[:limit]


async def _chunk_rows(
    db: Database, account_id: str, level: str, since: datetime, until: datetime, limit: int
) -> list[Document]:
    """The rows of the range's chunks with a conversion condition, newest chunk first, until
    ``limit`` are read: every row of a chunk whose records are slim (they leave their
    conditions to it), the rows that did not act of an older chunk (its acting pairs' records
    hold theirs)."""
    query = {
        "account": account_id,
        "created_at": {"$gte": since, "$lt": until},
        "level": level,
        "metrics": {"$regex": _CONVERSION_METRICS},
    }
    chunks = db[c.EVALUATIONS].find(query).sort("created_at", DESCENDING)
    rows: list[Document] = []
    async for chunk in chunks:
        every = chunk.get("records") == SLIM
        for row in decode(chunk):
            if (every or not acted(row)) and _conversion_condition(row):
                rows.append({k: row.get(k) for k in ("entity_id", "created_at", "conditions")})
        if len(rows) >= limit:
            break
    return rows


def _conversion_condition(row: Document) -> bool:
    conditions = row.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(x, dict) and re.search(_CONVERSION_METRICS, str(x.get("metric"))) is not None
        for x in conditions
    )


def _needs(records: Sequence[Document], tz: ZoneInfo) -> list[_Need]:
    """The conditions that can become observations, once each (a condition repeated by
    two tasks or rules at the same instant counts once)."""
    found: dict[tuple[str, datetime, str, str], _Need] = {}
    for record in records:
        at, entity = record.get("created_at"), record.get("entity_id")
        if not isinstance(at, datetime) or not isinstance(entity, str):
            continue
        if not _ENTITY_ID.fullmatch(entity):  # it becomes part of a history cache key
            continue
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        try:  # an instant at the calendar's edge has no day or window before it
            today = at.astimezone(tz).date()
            conditions = record.get("conditions")
            for condition in conditions if isinstance(conditions, list) else ():
                need = _need(condition, entity, at, today)
                if need is not None:
                    key = (entity, at, condition["metric"], condition["period"])
                    found.setdefault(key, need)
        except OverflowError:
            continue
    return list(found.values())


def _need(condition: Any, entity: str, at: datetime, today: date) -> _Need | None:
    if not isinstance(condition, dict):
        return None
    metric, period, actual = (condition.get(k) for k in ("metric", "period", "actual"))
    if not isinstance(metric, str) or not isinstance(period, str):
        return None
    if not isinstance(actual, int | float) or isinstance(actual, bool):
        return None
    kind = lag_metric(metric)
    window = lag_window(period, today)
    if kind is None or window is None:
        return None
    return _Need(entity, at, kind, window, float(actual))


def _bounded(needs: list[_Need], max_entities: int) -> list[_Need]:
    """The needs of the ``max_entities`` entities with the most of them."""
    counts: dict[str, int] = {}
    for need in needs:
        counts[need.entity_id] = counts.get(need.entity_id, 0) + 1
    if len(counts) <= max_entities:
        return needs
    kept = set(sorted(counts, key=lambda e: (-counts[e], e))[:max_entities])
    return [n for n in needs if n.entity_id in kept]


def _days(needs: Sequence[_Need]) -> DayRange:
    """The days the windows cover, at most the last :data:`MAX_DAYS` of them."""
    until = max(n.window[1] for n in needs)
    since = max(min(n.window[0] for n in needs), until - timedelta(days=MAX_DAYS - 1))
    return DayRange(since, until)


def _requests(
    needs: Sequence[_Need], *, account_id: str, level: str, days: DayRange
) -> list[HistoryRequest]:
    """One history request per set of fields, for the entities needing that set."""
    fields: dict[str, set[str]] = {}
    for need in needs:
        fields.setdefault(need.entity_id, set()).update(need.metric.fields)
    groups: dict[tuple[str, ...], list[str]] = {}
    for entity, names in sorted(fields.items()):
        groups.setdefault(tuple(sorted(names)), []).append(entity)
    return [
        HistoryRequest(account_id, level, tuple(ids), names, days) for names, ids in groups.items()
    ]


def _observation(need: _Need, days: dict[date, Numbers], tz: ZoneInfo) -> LagObservation | None:
    """What ``need`` saw against its window's matured days; None when a day is missing
    or was not fetched late enough to be matured."""
    spec = resolve_metric(f"{need.metric.field}.{need.metric.action_type}")
    spend = resolve_metric("spend")
    parts: list[LagDay] = []
    day = need.window[0]
    while day <= need.window[1]:
        numbers = days.get(day)
        if numbers is None or not all(
            name in numbers.fetched_at and matured(day, numbers.fetched_at[name], tz)
            for name in need.metric.fields
        ):
            return None
        parts.append(
            LagDay(
                day_age_h(day, tz, need.at),
                insight_value(numbers.values, spec) or 0.0,
                insight_value(numbers.values, spend) or 0.0,
            )
        )
        day += timedelta(days=1)
    return observation_of(need.metric, need.actual, parts)
