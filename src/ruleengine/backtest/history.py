"""Insights history for backtests: numbers per entity per day (and hour), Graph only for the gaps.

:meth:`InsightsHistory.get` answers a :class:`HistoryRequest` — an ad account, a level,
entity ids, Insights fields, a range of the account's days, and the fields wanted per
hour too (for ``today``-style periods) — from the ``insights_history`` cache
(:mod:`ruleengine.store.insights_history`), and fetches from Graph
(:mod:`ruleengine.meta.by_day`) only the (entity, day, field) the cache lacks or holds
too old a value of (:class:`~ruleengine.rules.replay.history.Freshness`). What it fetches it
stores, each field with the instant it was fetched, which every answer carries: a
backtest needs to know how mature the numbers it replays were.

Counting: ``graph_calls`` are the calls Meta counts (each Batch API item), from the
session view of this one request; ``cache_hits`` the (entity, day, granularity) cells
answered wholly from the cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from ruleengine.meta.batch import BatchReader
from ruleengine.meta.by_day import PAGE_MAX_ROWS, ChunkAnswer, fetch_chunks
from ruleengine.meta.errors import GraphError
from ruleengine.meta.http import Cost, GraphSession
from ruleengine.meta.insights import IDS_PER_REQUEST
from ruleengine.meta.pacing import InsightsPacer
from ruleengine.meta.reader import RetryPolicy
from ruleengine.rules.basics import LEVELS
from ruleengine.rules.replay.history import (
    DayRange,
    Freshness,
    Granularity,
    check_fields,
    missing_chunks,
)
from ruleengine.store.insights_history import (
    Cached,
    CachedCells,
    HistoryQuery,
    InsightsHistoryStore,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HistoryRequest:
    """What a backtest needs of one ad account.

    Attributes:
        account_id: ``act_…``.
        level: ``campaign``, ``adset`` or ``ad``.
        entity_ids: the campaigns, ad sets or ads.
        fields: Insights fields wanted per day (``spend``, ``actions`` …; not dotted keys).
        days: the ad account's dates, at most 90 of them, none after its today.
        hourly_fields: Insights fields wanted per hour of each day too (none: no hours).
    """

    account_id: str
    level: str
    entity_ids: tuple[str, ...]
    fields: tuple[str, ...]
    days: DayRange
    hourly_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"level {self.level!r} is not one of {LEVELS}")
        object.__setattr__(self, "fields", check_fields(self.fields))
        object.__setattr__(self, "hourly_fields", check_fields(self.hourly_fields))


@dataclass(frozen=True)
class Numbers:
    """One entity's numbers for one day.

    Attributes:
        values: field → Graph's value, for the fields Meta returned (an entity without
            delivery that day has none); per hour: field → ``{hour: value}`` over the
            hours with delivery.
        fetched_at: field → when that value was fetched (present for every asked field,
            returned or not).
    """

    values: dict[str, Any]
    fetched_at: dict[str, datetime]

    @property
    def oldest_fetch(self) -> datetime | None:
        """The earliest instant among the fields' fetches (the least mature number)."""
        return min(self.fetched_at.values(), default=None)


@dataclass
class HistoryResult:
    """Per entity per day (and per hour, where asked) numbers, and what they cost.

    ``errors``: entity id → the Graph error that left some of its days unfetched (those
    days are absent).
    """

    daily: dict[str, dict[date, Numbers]] = field(default_factory=dict)
    hourly: dict[str, dict[date, Numbers]] = field(default_factory=dict)
    graph_calls: int = 0
    http_requests: int = 0
    cache_hits: int = 0
    cells_fetched: int = 0
    errors: dict[str, GraphError] = field(default_factory=dict)

    def hour_values(self, entity_id: str, day: date) -> dict[int, dict[str, Any]]:
        """hour → field → value for one entity and day (hours without delivery absent)."""
        numbers = self.hourly.get(entity_id, {}).get(day)
        hours: dict[int, dict[str, Any]] = {}
        for name, by_hour in (numbers.values if numbers else {}).items():
            for hour, value in by_hour.items():
                hours.setdefault(int(hour), {})[name] = value
        return dict(sorted(hours.items()))


class InsightsHistory:
    """The history cache in front of Graph.

    Args:
        store: the ``insights_history`` collection.
        session: a session allowing the Batch API of GETs (a backtest writes nothing).
        freshness: when a cached value is used as it is.
        ids_per_request: most entity ids in one Insights request.
        rows_per_request: most rows one Insights request may answer with (ids × days,
            × 24 by hour); more are fetched as further requests in the same Batch API calls.
        sleep: how Graph waits are taken (tests pass a recorder).
    """

    def __init__(
        self,
        store: InsightsHistoryStore,
        session: GraphSession,
        *,
        freshness: Freshness | None = None,
        ids_per_request: int = IDS_PER_REQUEST,
        rows_per_request: int = PAGE_MAX_ROWS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.session = session
        self.freshness = freshness or Freshness()
        self.ids_per_request = ids_per_request
        self.rows_per_request = rows_per_request
        self.sleep = sleep

    def _batch(self, cost: Cost) -> BatchReader:
        """A Batch API reader counting into ``cost``, with the worker's retries and pacing."""
        s = self.session.settings
        policy = RetryPolicy(
            s.read_retry_waits_s, rate_limit_cap_s=s.rate_limit_max_wait_s, sleep=self.sleep
        )
        view = self.session.view(cost=cost)
        pacer = InsightsPacer(
            view,
            slowdown_pct=s.insights_throttle_slowdown_pct,
            max_wait_s=min(s.insights_throttle_wait_s, s.rate_limit_max_wait_s),
            sleep=self.sleep,
        )
        return BatchReader(view, policy=policy, concurrency=s.graph_concurrency, pacer=pacer)

    async def get(
        self, request: HistoryRequest, *, token: str, timezone: str, now: datetime
    ) -> HistoryResult:
        """The numbers ``request`` asks for, fetching only what the cache lacks.

        Args:
            token: the ad account's access token.
            timezone: the ad account's timezone (its days are Meta's reporting days).
            now: the current instant (aware), for freshness and as the fetch instant.

        Raises:
            ValueError: a day after the ad account's today, or ``now`` without a timezone.
        """
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware (UTC inside the engine)")
        tz = ZoneInfo(timezone)
        today = now.astimezone(tz).date()
        if request.days.until > today:
            raise ValueError(f"day range {request.days} ends after {today}, the account's today")
        cost, result = Cost(), HistoryResult()
        batch = self._batch(cost)

        async def one(granularity: Granularity, fields: tuple[str, ...]) -> None:
            cells = await self._cells(
                batch, request, granularity, fields, token=token, now=now, tz=tz, result=result
            )
            _fill(result.daily if granularity == "day" else result.hourly, cells, fields)

        # the daily and the hourly cells are read and fetched concurrently
        wanted: dict[Granularity, tuple[str, ...]] = {
            "day": request.fields,
            "hour": request.hourly_fields,
        }
        await asyncio.gather(
            *(one(g, fields) for g, fields in wanted.items() if fields and request.entity_ids)
        )
        result.graph_calls, result.http_requests = cost.counted_calls, cost.http_requests
        return result

    async def _cells(
        self,
        batch: BatchReader,
        request: HistoryRequest,
        granularity: Granularity,
        fields: tuple[str, ...],
        *,
        token: str,
        now: datetime,
        tz: ZoneInfo,
        result: HistoryResult,
    ) -> CachedCells:
        """The cache's cells for one granularity, completed from Graph where stale or absent."""
        query = HistoryQuery(
            request.account_id, request.level, granularity, request.entity_ids, request.days, fields
        )
        cells = await self.store.read(query)
        verdicts: dict[tuple[date, datetime], bool] = {}  # few fetch instants per day

        def fresh_at(day: date, fetched_at: datetime) -> bool:
            verdict = verdicts.get((day, fetched_at))
            if verdict is None:
                verdict = self.freshness.fresh(day, fetched_at, now, tz)
                verdicts[(day, fetched_at)] = verdict
            return verdict

        fresh = {
            key: {name for name, cached in held.items() if fresh_at(key[1], cached.fetched_at)}
            for key, held in cells.items()
        }
        chunks = missing_chunks(
            granularity,
            request.entity_ids,
            request.days,
            fields,
            fresh,
            ids_per_chunk=self.ids_per_request,
            rows_per_chunk=self.rows_per_request,
        )
        total = len(set(request.entity_ids)) * len(request.days)
        if not chunks:
            result.cache_hits += total
            return cells
        log.info(
            "insights history %s %s %s: %d request(s) for what the cache lacks",
            request.account_id,
            granularity,
            request.days,
            len(chunks),
        )
        answers = await fetch_chunks(
            batch,
            account_id=request.account_id,
            level=request.level,
            chunks=chunks,
            token=token,
        )
        fetched = await self._store(request, granularity, answers, now, cells, result)
        result.cache_hits += total - fetched
        return cells

    async def _store(
        self,
        request: HistoryRequest,
        granularity: Granularity,
        answers: list[ChunkAnswer],
        now: datetime,
        cells: CachedCells,
        result: HistoryResult,
    ) -> int:
        """Store what Graph answered — a field without a row or a value as ``null`` — and
        merge it into ``cells``; the number of cells asked of Graph.

        A chunk Graph failed on stores nothing: its cells keep what the cache held (with
        the instant it was fetched), and its entities are named in ``result.errors``.
        """
        empty: Any = None if granularity == "day" else {}
        written: dict[tuple[str, date], dict[str, Any]] = {}
        asked: set[tuple[str, date]] = set()
        for answer in answers:
            chunk = answer.chunk
            for key in ((e, d) for e in chunk.entity_ids for d in chunk.days.days()):
                asked.add(key)
                if answer.error is not None:
                    result.errors.setdefault(key[0], answer.error)
                    continue
                got = answer.cells.get(key, {})
                values = {name: got.get(name, empty) for name in chunk.fields}
                written.setdefault(key, {}).update(values)
                cells.setdefault(key, {}).update({n: Cached(v, now) for n, v in values.items()})
        await self.store.write(
            account_id=request.account_id,
            level=request.level,
            granularity=granularity,
            cells=written,
            fetched_at=now,
        )
        result.cells_fetched += len(asked)
        return len(asked)


def _fill(
    numbers: dict[str, dict[date, Numbers]], cells: CachedCells, fields: tuple[str, ...]
) -> None:
    """Cells holding every asked field, as :class:`Numbers`: entities in order, each one's
    days in order (sorted per entity: sorting all cells at once cost a warm read 0.2 s)."""
    wanted = frozenset(fields)
    by_entity: dict[str, list[tuple[date, Numbers]]] = {}
    for (entity, day), held in cells.items():
        if not wanted <= held.keys():
            continue
        values = {n: held[n].value for n in fields if held[n].value not in (None, {})}
        fetched = {n: held[n].fetched_at for n in fields}
        by_entity.setdefault(entity, []).append((day, Numbers(values, fetched)))
    for entity in sorted(by_entity):
        numbers.setdefault(entity, {}).update(sorted(by_entity[entity], key=_first))


def _first(item: tuple[date, Numbers]) -> date:
    return item[0]
