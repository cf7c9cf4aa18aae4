"""The slow-rule report: rules ranked by p95 batch duration, with the 4-stage breakdown.

The figures are computed in MongoDB (:mod:`ruleengine.store.batchstats`), one
document per rule; this module only rounds them for the API and ranks them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ruleengine.store.batchstats import RuleDurations


def report_entry(stats: RuleDurations) -> dict[str, Any]:
    """One rule of the report: seconds rounded to the microsecond, means to 3 decimals."""
    return {
        "rule_id": stats.rule_id,
        "rule_name": stats.rule_name,
        "count": stats.count,
        "p50_s": round(stats.p50_s, 6),
        "p95_s": round(stats.p95_s, 6),
        "max_s": round(stats.max_s, 6),
        "stages_mean_s": {stage: round(s, 6) for stage, s in stats.stages_mean_s.items()},
        "graph_calls_mean": round(stats.graph_calls_mean, 3),
        "http_requests_mean": round(stats.http_requests_mean, 3),
        "evaluated_mean": round(stats.evaluated_mean, 3),
    }


def slow_rules(stats: Iterable[RuleDurations]) -> list[dict[str, Any]]:
    """One entry per rule, slowest p95 first (ties: higher max, then name, then id)."""
    entries = [report_entry(s) for s in stats]
    entries.sort(key=_rank)
    return entries


def _rank(entry: dict[str, Any]) -> tuple[float, float, str, str]:
    return (-entry["p95_s"], -entry["max_s"], str(entry["rule_name"]), entry["rule_id"])
