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
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from pymongo import ASCENDING, DESCENDING, ReplaceOne

from ruleengine import constants as c
from ruleengine.store.batchstats import duration_pipeline
from ruleengine.store.db import Database, Document, Page

DAY: Final = timedelta(days=1)
_STATUSES: Final = {
    "DONE": "done",
    "FAILED": "failed",
    "ABANDONED": "abandoned",
    "RUNNING": "running",
}
_SUMS: Final = {
    "evaluated": "evaluated_count",
    "affected": "affected_count",
    "applied": "applied_count",
    "action_failures": "failed_count",
    "change_budget": "change_budget_count",  # changes the change budget clamped or skipped
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


def _counts_pipeline(start: datetime) -> list[dict[str, Any]]:
    """Every batch of the day, one document per (rule, status): count, sums, latest name."""
    group: dict[str, Any] = {
        "_id": {"rule_id": "$rule_id", "status": "$status"},
        "batches": {"$sum": 1},
        "latest": {"$max": {"at": "$started_at", "name": "$rule_name"}},
        # $sum skips what is not a number; cheaper than an expression per row
        **{name: {"$sum": f"${path}"} for name, path in _SUMS.items()},
    }
    return [{"$match": {"started_at": {"$gte": start, "$lt": start + DAY}}}, {"$group": group}]


def _fold(by_status: list[Document]) -> dict[str, Document]:
    """rule id → its counts over every status, and the name on its latest batch."""
    rules: dict[str, Document] = {}
    for part in by_status:
        rule_id = str(part["_id"].get("rule_id"))
        rule = rules.setdefault(
            rule_id,
            {"batches": 0, "latest": None, **dict.fromkeys((*_STATUSES.values(), *_SUMS), 0)},
        )
        rule["batches"] += part["batches"]
        status = _STATUSES.get(str(part["_id"].get("status")))
        if status is not None:
            rule[status] += part["batches"]
        for name in _SUMS:
            rule[name] += part[name]
        latest = part.get("latest") or {}
        if rule["latest"] is None or _later(latest, rule["latest"]):
            rule["latest"] = latest
    return rules


def _later(a: Document, b: Document) -> bool:
    return (a.get("at"), str(a.get("name"))) > (b.get("at"), str(b.get("name")))


def _rollup(
    day: date, rule_id: str, counts: Document, timed: Document | None, *, now: datetime
) -> Document:
    timed = timed or {}
    return {
        "_id": f"{rule_id}:{day.isoformat()}",
        "rule_id": rule_id,
        "rule_name": str((counts.get("latest") or {}).get("name") or rule_id),
        "day": day.isoformat(),
        "date": day_start(day),
        **{k: counts[k] for k in ("batches", *_STATUSES.values())},
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
        cursor = await self._batches.aggregate(_counts_pipeline(start))
        counts = _fold([d async for d in cursor])
        window = {"$gte": start, "$lt": start + DAY}
        timed_pipeline = duration_pipeline(
            {"started_at": window},
            fields=(),
            accumulators={"duration_sum_s": {"$sum": "$d"}},
        )
        cursor = await self._batches.aggregate(timed_pipeline, allowDiskUse=True)
        timed = {str(d["_id"]): d async for d in cursor}
        docs = [
            _rollup(day, rule_id, c, timed.get(rule_id), now=now) for rule_id, c in counts.items()
        ]
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
    ) -> Page:
        """Rollups of the days from ``since`` on (of one rule), newest day first."""
        query: dict[str, Any] = {"date": {"$gte": day_start(since)}}
        if rule_id is not None:
            query["rule_id"] = rule_id
        order: Sequence[tuple[str, int]] = [("date", DESCENDING), ("rule_name", ASCENDING)]
        cursor = self._rollups.find(query).sort(list(order)).skip(skip).limit(limit)
        items = [d async for d in cursor]
        return Page(items=items, total=await self._rollups.count_documents(query))
