"""Insights per day and per hour of the day, for a history: account-level Batch API reads.

Each :class:`~ruleengine.rules.replay.history.Chunk` (entities × a range of days × fields) is
one account-level Insights request — ``level=campaign|adset|ad``, a ``filtering`` on the
ids, a ``time_range``, ``time_increment=1`` (a row per entity per day) and, for the
hourly granularity, ``breakdowns=hourly_stats_aggregated_by_advertiser_time_zone`` (a
row per entity per day per hour of the ad account's day) — with the live engine's
:data:`~ruleengine.meta.insights.BASE_PARAMS`, so attribution is the same. The requests
go together through the Batch API (≤ 50 per call); pages are followed cursor by cursor;
a request Meta times out on (:class:`DataTooLargeError`) is cut in two
(:func:`~ruleengine.rules.replay.history.split_chunk`: fewer ids, then fewer days) until it
fits or is one entity on one day. A row per day means no summing: the pieces' rows are
simply the whole's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Final

from ruleengine.meta.batch import BatchReader, SubRequest, SubResult
from ruleengine.meta.errors import DataTooLargeError, GraphError, MalformedResponseError
from ruleengine.meta.insights import BASE_PARAMS, id_field, ids_filter
from ruleengine.meta.reader import next_cursor
from ruleengine.rules.language.periods import time_range
from ruleengine.rules.replay.history import Chunk, hour_key, hour_of, split_chunk

log = logging.getLogger(__name__)

HOURLY_BREAKDOWN: Final = "hourly_stats_aggregated_by_advertiser_time_zone"
#: The most rows one page may carry (Graph caps ``limit`` there).
PAGE_MAX_ROWS: Final = 5000

#: (entity id, day) → field → value: Graph's value for a day; for an hourly chunk,
#: ``{"07": value, …}`` over the hours with delivery.
Cells = dict[tuple[str, date], dict[str, Any]]


@dataclass
class ChunkAnswer:
    """What Meta answered for one chunk: its rows as cells, or the error that stopped it.

    An entity without delivery on a day has no row, so no cell: that too is an answer.
    """

    chunk: Chunk
    cells: Cells = field(default_factory=dict)
    error: GraphError | None = None


def request_for(account_id: str, level: str, chunk: Chunk, after: str | None = None) -> SubRequest:
    """The account-level Insights request of ``chunk`` (a page after cursor ``after``)."""
    params: dict[str, Any] = {
        **BASE_PARAMS,
        "level": level,
        "time_range": time_range((chunk.days.since, chunk.days.until)),
        "time_increment": 1,
        "fields": ",".join(sorted({*chunk.fields, id_field(level)})),
        "filtering": ids_filter(level, chunk.entity_ids),
        "limit": min(PAGE_MAX_ROWS, chunk.rows),
    }
    if chunk.granularity == "hour":
        params["breakdowns"] = HOURLY_BREAKDOWN
    if after is not None:
        params["after"] = after
    return SubRequest(f"{account_id}/insights", params)


async def fetch_chunks(
    batch: BatchReader, *, account_id: str, level: str, chunks: Sequence[Chunk], token: str
) -> list[ChunkAnswer]:
    """An answer per chunk fetched — a chunk Meta timed out on is answered by its pieces."""
    answers: dict[Chunk, ChunkAnswer] = {}
    pending: list[tuple[Chunk, str | None]] = [(chunk, None) for chunk in chunks]
    while pending:
        results = await batch.get_many(
            [request_for(account_id, level, chunk, after) for chunk, after in pending],
            token=token,
            account_id=account_id,
        )
        follow: list[tuple[Chunk, str | None]] = []
        for (chunk, _), result in zip(pending, results, strict=True):
            if isinstance(result.error, DataTooLargeError) and (pieces := split_chunk(chunk)):
                log.info(
                    "insights history %s × %d ids timed out: split",
                    chunk.days,
                    len(chunk.entity_ids),
                )
                answers.pop(chunk, None)  # pages already read are read again by the pieces
                follow += [(piece, None) for piece in pieces]
                continue
            answer = answers.setdefault(chunk, ChunkAnswer(chunk))
            cursor = _absorb(answer, result, level)
            if cursor is not None:
                follow.append((chunk, cursor))
        pending = follow
    return list(answers.values())


def _absorb(answer: ChunkAnswer, result: SubResult, level: str) -> str | None:
    """Add a page's rows to ``answer``; the next page's cursor, if any."""
    if answer.error is not None:
        return None
    data = result.body.get("data") if isinstance(result.body, dict) else None
    if result.error is not None or not isinstance(data, list):
        answer.error = result.error or MalformedResponseError(
            "insights answer without data", response=result.body
        )
        log.warning("insights history %s failed: %s", answer.chunk.days, answer.error)
        return None
    try:
        for row in data:
            _add_row(answer, row, level)
    except (TypeError, ValueError) as exc:
        answer.error = MalformedResponseError(f"insights history row: {exc}", response=result.body)
        return None
    return next_cursor(result.body)


def _add_row(answer: ChunkAnswer, row: Any, level: str) -> None:
    chunk = answer.chunk
    if not isinstance(row, dict):
        raise TypeError("a row is not an object")
    entity, day = str(row.get(id_field(level), "")), date.fromisoformat(str(row.get("date_start")))
    if entity not in chunk.entity_ids or not chunk.days.since <= day <= chunk.days.until:
        return  # not asked for (Meta filters; a stray row is left out, not trusted)
    values = {name: row[name] for name in chunk.fields if name in row}
    cell = answer.cells.setdefault((entity, day), {})
    if chunk.granularity == "day":
        cell.update(values)
        return
    hour = hour_key(hour_of(str(row.get(HOURLY_BREAKDOWN, ""))))
    for name, value in values.items():
        cell.setdefault(name, {})[hour] = value
