"""Daily per-rule rollups of batch rows: what the Benchmark screen keeps after batches expire.

One ``rollups`` document per (rule, UTC day): how many batches ran and how they
ended, what they evaluated, affected and applied, how many actions failed, the
duration sum/max/p50/p95 of the batches that ran to their end, and the Graph
cost. A day is rolled up once it has *settled* (every batch it started has
finished or been reaped), from that day's batch rows, computed in MongoDB and
written by replacing the day's documents — so rolling a day up again gives the
same documents. A ``rollup_days`` marker per day records that it is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from pymongo import ASCENDING, DESCENDING, ReplaceOne

from ruleengine import constants as c
from ruleengine.store.batchstats import FINISHED_TIMED, duration_pipeline, number
from ruleengine.store.db import Database, Document

DAY: Final = timedelta(days=1)
_STATUS_COUNTS: Final = {"done": "DONE", "failed": "FAILED", "abandoned": "ABANDONED"}
_SUMS: Final = {
    "evaluated": "evaluated_count",
    "affected": "affected_count",
    "applied": "applied_count",
    "action_failures": "failed_count",
    "graph_calls": "graph.counted_calls",
    "http_requests": "graph.http_requests",
}


def day_start(day: date) -> datetime:
    """Midnight UTC at the start of ``day``."""
    return datetime.combine(day, time(), UTC)


def days_to_roll_up(
    *, now: datetime, settle: timedelta, keep: timedelta, done: set[date]
) -> list[date]:
    """The settled days, oldest first, whose batches are all still kept and not rolled up.

    A day has settled once ``settle`` (the job timeout and a margin) has passed
    after its end; it is still whole while its start is within ``keep`` (the
    batch retention) of ``now``.
    """
    first = (now - keep).date() + DAY  # the first day whose start is still kept
    last = (now - settle).date() - DAY
    days = [first + DAY * n for n in range((last - first).days + 1)]
    return [d for d in days if d not in done]


@dataclass(frozen=True)
class RollupPage:
    """One page of rollups and the total matching the filter."""

    items: list[Document]
    total: int


def _counts_pipeline(start: datetime) -> list[dict[str, Any]]:
    """Every batch of the day, one document per rule: statuses, sums, the latest name."""
    group: dict[str, Any] = {
        "_id": "$rule_id",
        "batches": {"$sum": 1},
        "latest": {"$max": {"at": "$started_at", "name": "$rule_name"}},
    }
    for name, status in _STATUS_COUNTS.items():
        group[name] = {"$sum": {"$cond": [{"$eq": ["$status", status]}, 1, 0]}}
    group["running"] = {"$sum": {"$cond": [{"$eq": ["$status", "RUNNING"]}, 1, 0]}}
    for name, path in _SUMS.items():
        group[name] = {"$sum": number(path)}
    return [{"$match": {"started_at": {"$gte": start, "$lt": start + DAY}}}, {"$group": group}]


def _rollup(day: date, counts: Document, timed: Document | None, *, now: datetime) -> Document:
    rule_id = str(counts["_id"])
    timed = timed or {}
    return {
        "_id": f"{rule_id}:{day.isoformat()}",
        "rule_id": rule_id,
        "rule_name": str((counts.get("latest") or {}).get("name") or rule_id),
        "day": day.isoformat(),
        "date": day_start(day),
        **{k: counts[k] for k in ("batches", *_STATUS_COUNTS, "running")},
        **{k: round(counts[k]) for k in _SUMS},  # counts and calls: whole numbers
        "timed": timed.get("count", 0),
        "duration_sum_s": round(timed.get("duration_sum_s", 0.0), 6),
        **{
            f"duration_{k}_s": None if k + "_s" not in timed else round(timed[k + "_s"], 6)
            for k in ("max", "p50", "p95")
        },
        "computed_at": now,
    }


class RollupStore:
    """The ``rollups`` collection and its per-day markers."""

    def __init__(self, db: Database) -> None:
        self._batches = db[c.BATCHES]
        self._rollups = db[c.ROLLUPS]
        self._days = db[c.ROLLUP_DAYS]

    async def rolled_up(self, *, since: date) -> set[date]:
        """The days from ``since`` on that are rolled up already."""
        cursor = self._days.find({"_id": {"$gte": since.isoformat()}}, {"_id": 1})
        return {date.fromisoformat(d["_id"]) async for d in cursor}

    async def roll_up(self, day: date, *, now: datetime) -> int:
        """(Re)compute the rollups of ``day`` from its batches; returns how many rules ran."""
        start = day_start(day)
        counts = [d async for d in await self._batches.aggregate(_counts_pipeline(start))]
        window = {"$gte": start, "$lt": start + DAY}
        timed_pipeline = duration_pipeline(
            {"status": {"$in": list(FINISHED_TIMED)}, "started_at": window},
            fields={},
            accumulators={"duration_sum_s": {"$sum": "$d"}},
        )
        cursor = await self._batches.aggregate(timed_pipeline, allowDiskUse=True)
        timed = {d["_id"]: d async for d in cursor}
        docs = [_rollup(day, d, timed.get(d["_id"]), now=now) for d in counts]
        if docs:
            await self._rollups.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in docs], ordered=False
            )
        # a rule whose batches of that day are gone has no rollup of that day any more
        await self._rollups.delete_many(
            {"day": day.isoformat(), "_id": {"$nin": [d["_id"] for d in docs]}}
        )
        marker = {"date": start, "rules": len(docs), "batches": sum(d["batches"] for d in docs)}
        await self._days.replace_one(
            {"_id": day.isoformat()}, marker | {"computed_at": now}, upsert=True
        )
        return len(docs)

    async def page(
        self, *, since: date, rule_id: str | None = None, limit: int = 100, skip: int = 0
    ) -> RollupPage:
        """Rollups of the days from ``since`` on (of one rule), newest day first."""
        query: dict[str, Any] = {"date": {"$gte": day_start(since)}}
        if rule_id is not None:
            query["rule_id"] = rule_id
        order: Sequence[tuple[str, int]] = [("date", DESCENDING), ("rule_name", ASCENDING)]
        cursor = self._rollups.find(query).sort(list(order)).skip(skip).limit(limit)
        items = [d async for d in cursor]
        return RollupPage(items=items, total=await self._rollups.count_documents(query))
