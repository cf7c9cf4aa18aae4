"""The slow-rule report and a daily rollup over many batch rows, computed by the server.

10,000 finished batches of 50 rules in one day, in the embedded MongoDB-compatible
server. Prints how long the report's aggregation takes and how many documents it
answers (one per rule), next to the report's former way timed whole: loading every row
of the window into Python *and* computing the same figures there (percentiles by
interpolation, stage and Graph means per rule, ranked) — the code as it was before the
report moved into MongoDB, kept here only to be measured. Then how long rolling up that
day takes, and — the same batches kept — how long rolling up a day without batches and the
report of an hour without batches take (finding a window's batches, not summing them). Last
line: one JSON object.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import figures, open_database, say, stack, stack_settings
from ruleengine import constants as c
from ruleengine.constants import STAGES
from ruleengine.store.records import BatchStore
from ruleengine.store.rollups import RollupStore

BATCHES = 10_000
RULES = 50


# ---------------------------------------------------------------- the former way, in Python


def _percentile(ordered: Sequence[float], q: float) -> float:
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _former_entry(rule_id: str, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    durations = sorted(_number(r.get("duration_s")) for r in rows)
    traces = [r.get("trace") or {} for r in rows]
    graphs = [r.get("graph") or {} for r in rows]
    return {
        "rule_id": rule_id,
        "rule_name": rows[-1].get("rule_name") or rule_id,
        "count": len(rows),
        "p50_s": round(_percentile(durations, 50), 6),
        "p95_s": round(_percentile(durations, 95), 6),
        "max_s": round(durations[-1], 6),
        "stages_mean_s": {
            stage: round(_mean([_number(t.get(stage)) for t in traces]), 6) for stage in STAGES
        },
        "graph_calls_mean": round(_mean([_number(g.get("counted_calls")) for g in graphs]), 3),
        "http_requests_mean": round(_mean([_number(g.get("http_requests")) for g in graphs]), 3),
        "evaluated_mean": round(_mean([_number(r.get("evaluated_count")) for r in rows]), 3),
    }


def former_report(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The slow-rule report as computed in Python before it moved into MongoDB."""
    by_rule: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_rule[str(row.get("rule_id"))].append(row)
    entries = [_former_entry(rule_id, items) for rule_id, items in by_rule.items()]
    entries.sort(key=lambda e: (-e["p95_s"], -e["max_s"], str(e["rule_name"])))
    return entries


# ---------------------------------------------------------------- the benchmark


def _rows(now: datetime) -> list[dict[str, object]]:
    rng = random.Random(1)
    rows = []
    for n in range(BATCHES):
        fetch, act = rng.uniform(0.05, 2.0), rng.uniform(0.0, 0.5)
        rows.append(
            {
                "_id": f"batch-{n}",
                "rule_id": f"rule-{n % RULES}",
                "rule_name": f"Rule {n % RULES}",
                "status": "DONE" if n % 50 else "FAILED",
                "started_at": now - timedelta(seconds=n * 8),
                "finished_at": now - timedelta(seconds=n * 8) + timedelta(seconds=fetch + act),
                "duration_s": round(fetch + act + 0.01, 6),
                "trace": {"cooldown": 0.004, "fetch": fetch, "evaluate": 0.006, "act": act},
                "graph": {"http_requests": 2, "counted_calls": 4},
                "evaluated_count": 40,
                "applied_count": rng.randint(0, 3),
            }
        )
    return rows


async def main() -> None:
    with stack(databases=True) as servers:
        settings = stack_settings(servers)
        client, db = await open_database(settings)
        try:
            day_end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            rows = _rows(day_end - timedelta(seconds=1))
            for start in range(0, BATCHES, 2000):
                await db[c.BATCHES].insert_many(rows[start : start + 2000])
            say(f"{BATCHES} batches of {RULES} rules inserted")
            since = day_end - timedelta(days=1)

            started = time.perf_counter()
            fields = ["rule_id", "rule_name", "duration_s", "trace", "graph", "evaluated_count"]
            cursor = db[c.BATCHES].find({"started_at": {"$gte": since}}, fields)
            loaded = await cursor.to_list()
            load_s = time.perf_counter() - started
            former = former_report(loaded)
            former_s = time.perf_counter() - started
            say(
                f"the former way: {len(loaded)} documents loaded in {load_s:.2f}s, the report"
                f" ({len(former)} rules) computed in Python by {former_s:.2f}s"
            )

            started = time.perf_counter()
            stats = await BatchStore(db).durations(since=since)
            report_s = time.perf_counter() - started
            say(f"slow-rule aggregation: {len(stats)} documents in {report_s:.2f}s")

            started = time.perf_counter()
            rules = await RollupStore(db).roll_up(since.date(), now=datetime.now(UTC))
            rollup_s = time.perf_counter() - started
            say(f"rollup of the day: {rules} rules in {rollup_s:.2f}s")

            # the same kept batches, questions about a day and an hour that have none: what
            # they cost is what finding their batches costs, not what summing them does
            started = time.perf_counter()
            await RollupStore(db).roll_up(since.date() - timedelta(days=1), now=datetime.now(UTC))
            empty_rollup_s = time.perf_counter() - started
            started = time.perf_counter()
            await BatchStore(db).durations(since=day_end + timedelta(hours=1))
            empty_report_s = time.perf_counter() - started
            say(
                f"with {BATCHES} batches kept: an empty day rolled up in {empty_rollup_s:.3f}s,"
                f" the report of an empty hour in {empty_report_s:.3f}s"
            )
        finally:
            await client.close()
    figures(
        {
            "batches": BATCHES,
            "report_documents": len(stats),
            "report_s": round(report_s, 2),
            "former_documents": len(loaded),
            "former_load_s": round(load_s, 2),
            "former_report_s": round(former_s, 2),
            "rollup_rules": rules,
            "rollup_s": round(rollup_s, 2),
            "empty_day_rollup_s": round(empty_rollup_s, 3),
            "empty_hour_report_s": round(empty_report_s, 3),
        }
    )


if __name__ == "__main__":
    asyncio.run(main())
