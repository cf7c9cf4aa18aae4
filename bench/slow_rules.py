"""The slow-rule report and a daily rollup over many batch rows, computed by the server.

10,000 finished batches of 50 rules in one day, in the embedded MongoDB-compatible
server. Prints how long the report's aggregation takes and how many documents it
answers (one per rule), next to what loading every row of the window into Python
(the report's former way) transfers, and how long rolling up that day takes.
Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta

from _common import figures, open_database, say, stack, stack_settings
from ruleengine import constants as c
from ruleengine.store.records import BatchStore
from ruleengine.store.rollups import RollupStore

BATCHES = 10_000
RULES = 50


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
            say(f"loading every row: {len(loaded)} documents in {load_s:.2f}s")

            started = time.perf_counter()
            stats = await BatchStore(db).durations(since=since)
            report_s = time.perf_counter() - started
            say(f"slow-rule aggregation: {len(stats)} documents in {report_s:.2f}s")

            started = time.perf_counter()
            rules = await RollupStore(db).roll_up(since.date(), now=datetime.now(UTC))
            rollup_s = time.perf_counter() - started
            say(f"rollup of the day: {rules} rules in {rollup_s:.2f}s")
        finally:
            await client.close()
    figures(
        {
            "batches": BATCHES,
            "report_documents": len(stats),
            "report_s": round(report_s, 2),
            "load_all_documents": len(loaded),
            "load_all_s": round(load_s, 2),
            "rollup_rules": rules,
            "rollup_s": round(rollup_s, 2),
        }
    )


if __name__ == "__main__":
    asyncio.run(main())
