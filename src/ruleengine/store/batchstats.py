"""Duration statistics of batch rows, computed inside MongoDB so the work stays bounded.

The slow-rule report and the daily rollups need, per rule, counts, means, the
maximum and the p50/p95 batch duration. Loading every batch row of a window
into Python would grow with the window; here the server does it and answers one
document per rule, however many batches there are.

Percentiles interpolate linearly between the closest ranks (numpy's default),
as the report always has. ``$percentile`` is not used: MongoDB before 7.0 lacks
it, and where it exists it picks a nearest rank instead of interpolating (so
p95 of 1…5 is 5, not 4.8). Instead ``$setWindowFields`` numbers each rule's
rows by duration (the server sorts, spilling to disk when it must) and the
``$group`` keeps only the two durations either side of each percentile's rank.

A duration, stage time or count that is not a number (missing, null, text)
counts as 0, as it always has. The engine never writes NaN, infinities or
booleans; the server would take the first two as numbers and skip booleans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pymongo.asynchronous.collection import AsyncCollection

from ruleengine.constants import STAGES
from ruleengine.store.db import Document

QUANTILES: Final = (50, 95)
FINISHED_TIMED: Final = ("DONE", "FAILED")  # batches that ran to their end and know their duration


def number(path: str) -> dict[str, Any]:
    """An expression: the field at ``path`` if it is a number, else 0 (missing, null, text)."""
    value = f"${path}"
    return {"$cond": [{"$isNumber": value}, value, 0]}


def _rank(count: Any, q: int) -> dict[str, Any]:
    """The fractional 0-based rank of the ``q``-th percentile among ``count`` sorted values."""
    return {"$divide": [{"$multiply": [{"$subtract": [count, 1]}, q]}, 100]}


def _at_rank(q: int, side: str) -> dict[str, Any]:
    """Accumulator: the duration of the row whose 1-based number is floor/ceil(rank) + 1."""
    index = {"$add": [{side: _rank("$n", q)}, 1]}
    return {"$max": {"$cond": [{"$eq": ["$rank", index]}, "$d", None]}}


def _interpolated(q: int) -> dict[str, Any]:
    """``low + (high - low) * (rank - floor(rank))``: the same operations as Python's."""
    return {
        "$let": {
            "vars": {"low": f"$q{q}_low", "high": f"$q{q}_high", "rank": _rank("$count", q)},
            "in": {
                "$add": [
                    "$$low",
                    {
                        "$multiply": [
                            {"$subtract": ["$$high", "$$low"]},
                            {"$subtract": ["$$rank", {"$floor": "$$rank"}]},
                        ]
                    },
                ]
            },
        }
    }


def duration_pipeline(
    match: Mapping[str, Any],
    *,
    fields: Sequence[str],
    accumulators: Mapping[str, Any],
    quantiles: Sequence[int] = QUANTILES,
) -> list[dict[str, Any]]:
    """Finished batches (:data:`FINISHED_TIMED`) matching ``match`` → one document per
    ``rule_id``. The status clause goes last: the embedded server plans on the first clause
    an index leads with, and ``status`` first walks every finished batch kept, not those of
    ``match``'s rules or window.

    Each answer has ``_id`` (the rule id), ``count``, ``max_s``, ``p<q>_s`` per
    quantile and the given ``accumulators``, which may use ``$d`` (the duration,
    0 when it is not a number) and the kept ``fields``. Sums are best taken of
    the raw fields (``$sum`` skips what is not a number): a per-row expression
    costs far more than the accumulator on the embedded server.
    """
    group: dict[str, Any] = {"_id": "$rule_id", "count": {"$sum": 1}, "max_s": {"$max": "$d"}}
    for q in quantiles:
        group[f"q{q}_low"] = _at_rank(q, "$floor")
        group[f"q{q}_high"] = _at_rank(q, "$ceil")
    return [
        {"$match": {**match, "status": {"$in": list(FINISHED_TIMED)}}},
        {
            "$project": {
                "_id": 0,
                "rule_id": 1,
                "d": number("duration_s"),
                **dict.fromkeys(fields, 1),
            }
        },
        {
            "$setWindowFields": {
                "partitionBy": "$rule_id",
                "sortBy": {"d": 1},
                "output": {
                    "rank": {"$documentNumber": {}},
                    "n": {"$count": {}, "window": {"documents": ["unbounded", "unbounded"]}},
                },
            }
        },
        {"$group": group | dict(accumulators)},
        {"$set": {f"p{q}_s": _interpolated(q) for q in quantiles}},
        {"$project": {f"q{q}_{side}": 0 for q in quantiles for side in ("low", "high")}},
    ]


@dataclass(frozen=True)
class RuleDurations:
    """How long one rule's finished batches took, and what they cost (means are per batch)."""

    rule_id: str
    rule_name: str
    count: int
    p50_s: float
    p95_s: float
    max_s: float
    stages_mean_s: dict[str, float]
    graph_calls_mean: float
    http_requests_mean: float
    evaluated_mean: float


_SLOW_RULE_FIELDS: Final = ("rule_name", "started_at", "trace", "graph", "evaluated_count")
_SLOW_RULE_SUMS: Final = {
    **{f"stage_{s}": f"trace.{s}" for s in STAGES},
    "calls": "graph.counted_calls",
    "requests": "graph.http_requests",
    "evaluated": "evaluated_count",
}
_SLOW_RULE_ACCUMULATORS: Final = {
    # the name on the rule's latest batch (objects compare field by field): a renamed
    # rule shows its current name
    "latest": {"$max": {"at": "$started_at", "name": "$rule_name"}},
    **{name: {"$sum": f"${path}"} for name, path in _SLOW_RULE_SUMS.items()},
}


def _rule_durations(doc: Document) -> RuleDurations:
    rule_id = str(doc["_id"])
    count: int = doc["count"]

    def mean(name: str) -> float:
        return float(doc[name]) / count

    return RuleDurations(
        rule_id=rule_id,
        rule_name=str((doc.get("latest") or {}).get("name") or rule_id),
        count=count,
        p50_s=float(doc["p50_s"]),
        p95_s=float(doc["p95_s"]),
        max_s=float(doc["max_s"]),
        stages_mean_s={s: mean(f"stage_{s}") for s in STAGES},
        graph_calls_mean=mean("calls"),
        http_requests_mean=mean("requests"),
        evaluated_mean=mean("evaluated"),
    )


async def rule_durations(
    batches: AsyncCollection[Document], *, since: datetime
) -> list[RuleDurations]:
    """Per rule, its DONE and FAILED batches started since ``since`` (unordered)."""
    pipeline = duration_pipeline(
        {"started_at": {"$gte": since}},
        fields=_SLOW_RULE_FIELDS,
        accumulators=_SLOW_RULE_ACCUMULATORS,
    )
    cursor = await batches.aggregate(pipeline, allowDiskUse=True)
    return [_rule_durations(doc) async for doc in cursor]
