"""The slow-rule report, pure: rank rules by p95 batch duration, with the 4-stage breakdown.

Percentiles are computed here from the stored batch rows (linear interpolation
between closest ranks, as numpy's default does) rather than in MongoDB: the
embedded server and older MongoDB versions lack ``$percentile``, and a day of
batch rows is small.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ruleengine.constants import STAGES


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ascending ``ordered`` values, interpolated.

    Raises:
        ValueError: ``ordered`` is empty.
    """
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def _rule_entry(rule_id: str, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    durations = sorted(_number(r.get("duration_s")) for r in rows)
    traces = [r.get("trace") or {} for r in rows]
    graphs = [r.get("graph") or {} for r in rows]
    return {
        "rule_id": rule_id,
        "rule_name": rows[-1].get("rule_name") or rule_id,
        "count": len(rows),
        "p50_s": round(percentile(durations, 50), 6),
        "p95_s": round(percentile(durations, 95), 6),
        "max_s": round(durations[-1], 6),
        "stages_mean_s": {
            stage: round(_mean(_number(t.get(stage)) for t in traces), 6) for stage in STAGES
        },
        "graph_calls_mean": round(_mean(_number(g.get("counted_calls")) for g in graphs), 3),
        "http_requests_mean": round(_mean(_number(g.get("http_requests")) for g in graphs), 3),
        "evaluated_mean": round(_mean(_number(r.get("evaluated_count")) for r in rows), 3),
    }


def slow_rules(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per rule, slowest p95 first (ties: higher max, then name).

    Args:
        rows: finished batch rows with ``rule_id``, ``rule_name``, ``duration_s``,
            ``trace`` (stage → seconds), ``graph`` and ``evaluated_count``.
    """
    by_rule: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_rule[str(row.get("rule_id"))].append(row)
    entries = [_rule_entry(rule_id, items) for rule_id, items in by_rule.items()]
    entries.sort(key=lambda e: (-e["p95_s"], -e["max_s"], str(e["rule_name"])))
    return entries
