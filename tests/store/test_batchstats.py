"""The slow-rule figures computed by MongoDB equal those of the former pure-Python report.

``reference_report`` below is the report as it was computed before, from every
batch row of the window loaded into Python; it stays here as the oracle.
Durations in the generated rows are multiples of 1/1024 (or values that are not
numbers), so every sum is exact in any order and the server's means must equal
Python's to the last bit, not only approximately.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ruleengine import constants as c
from ruleengine.store.db import Database
from ruleengine.store.records import BatchStore
from ruleengine.web.slowrules import slow_rules

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STAGES = ("cooldown", "fetch", "evaluate", "act")


# --- the oracle: the report as computed in Python before ---------------------------------


def percentile(ordered: Sequence[float], q: float) -> float:
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


def reference_report(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    by_rule: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_rule[str(row.get("rule_id"))].append(row)
    entries = [_rule_entry(rule_id, items) for rule_id, items in by_rule.items()]
    entries.sort(key=lambda e: (-e["p95_s"], -e["max_s"], str(e["rule_name"])))
    return entries


# --- generated batch rows, as stored ---------------------------------------------------

SECONDS = st.integers(0, 2**20).map(lambda k: k / 1024)
BROKEN = st.sampled_from([None, "slow", {"s": 1}])  # NaN, infinities, booleans: never written
VALUE = st.one_of(SECONDS, SECONDS, st.integers(0, 10**6), BROKEN)


@st.composite
def batch_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows = []
    for n in range(draw(st.integers(1, 30))):
        row: dict[str, Any] = {
            "_id": f"b{n}",
            "rule_id": draw(st.sampled_from(["r1", "r2", "r3"])),
            "rule_name": draw(st.sampled_from(["Scale", "Pause", "Rename", ""])),
            "status": draw(st.sampled_from(["DONE", "DONE", "FAILED", "RUNNING", "ABANDONED"])),
            # in insertion order, so the oracle's "last row" is the latest batch
            "started_at": NOW - timedelta(hours=30) + timedelta(minutes=n * 90),
        }
        if draw(st.booleans()):
            row["duration_s"] = draw(VALUE)
        trace = draw(st.one_of(st.none(), st.dictionaries(st.sampled_from(STAGES), VALUE)))
        if trace is not None or draw(st.booleans()):
            row["trace"] = trace
        if draw(st.booleans()):
            row["graph"] = draw(
                st.dictionaries(st.sampled_from(["counted_calls", "http_requests"]), VALUE)
            )
        if draw(st.booleans()):
            row["evaluated_count"] = draw(VALUE)
        rows.append(row)
    return rows


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=batch_rows())
@example(
    rows=[
        {"_id": "b0", "rule_id": "r2", "rule_name": "Same", "status": "DONE", "started_at": NOW},
        {"_id": "b1", "rule_id": "r1", "rule_name": "Same", "status": "DONE", "started_at": NOW},
    ]
)
async def test_mongodb_computes_the_same_report_as_the_python_reference(
    db: Database, rows: list[dict[str, Any]]
) -> None:
    await db[c.BATCHES].delete_many({})
    await db[c.BATCHES].insert_many(rows)
    since = NOW - timedelta(hours=24)
    window = [r for r in rows if r["status"] in ("DONE", "FAILED") and r["started_at"] >= since]
    report = slow_rules(await BatchStore(db).durations(since=since))
    # rules tied on every figure and the name came out in input order; now the id decides
    expected = sorted(reference_report(window), key=lambda e: e["rule_id"])
    expected.sort(key=lambda e: (-e["p95_s"], -e["max_s"], str(e["rule_name"])))
    assert report == expected


async def test_percentiles_interpolate_between_closest_ranks(db: Database) -> None:
    durations = {"five": [3.0, 1.0, 5.0, 2.0, 4.0], "two": [0.0, 10.0], "one": [7.5]}
    await db[c.BATCHES].insert_many(
        {
            "rule_id": rule_id,
            "rule_name": rule_id,
            "status": "DONE",
            "started_at": NOW,
            "duration_s": seconds,
        }
        for rule_id, values in durations.items()
        for seconds in values
    )
    stats = {s.rule_id: s for s in await BatchStore(db).durations(since=NOW)}
    # MongoDB's own $percentile would answer 5.0 (a nearest rank) for p95 of 1…5
    assert (stats["five"].p50_s, stats["five"].p95_s, stats["five"].max_s) == (3.0, 4.8, 5.0)
    assert (stats["two"].p50_s, stats["two"].p95_s) == (5.0, 9.5)
    assert (stats["one"].p50_s, stats["one"].p95_s, stats["one"].count) == (7.5, 7.5, 1)


async def test_the_server_answers_one_document_per_rule_not_one_per_batch(db: Database) -> None:
    await db[c.BATCHES].insert_many(
        {
            "rule_id": f"rule-{n % 2}",
            "rule_name": f"Rule {n % 2}",
            "status": "DONE",
            "started_at": NOW - timedelta(seconds=n),
            "duration_s": n / 100,
            "trace": {"fetch": n / 200},
        }
        for n in range(600)
    )
    stats = await BatchStore(db).durations(since=NOW - timedelta(hours=1))
    assert sorted((s.rule_id, s.count) for s in stats) == [("rule-0", 300), ("rule-1", 300)]
    slowest = max(stats, key=lambda s: s.max_s)
    assert (slowest.rule_id, slowest.max_s) == ("rule-1", 5.99)
