"""Raising a counter kept in MongoDB as a collection grows: ``findAndModify`` against a read
and a compare-and-set (:func:`ruleengine.store.db.bump_counter`).

An account's lock fence, a follow-up's generation and a batch's delivery count are each
a counter on one document found by ``_id``. The embedded MongoDB-compatible server answers a
``findAndModify`` whose document exists by scanning the whole collection; a find and an
update by ``_id`` use the index. For each size, the script fills a collection with that many
documents and raises the counters of 50 of them both ways (milliseconds per raise, median),
plus the engine's own follow-up store. Last line: one JSON object.

    python bench/counters.py [--sizes 1000,10000,30000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pymongo import ReturnDocument

from _common import figures, open_database, say, stack, stack_settings
from ruleengine import constants as c
from ruleengine.store.db import Database, bump_counter
from ruleengine.store.followups import FollowupStore

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
RAISES = 50


def followup(n: int) -> dict[str, Any]:
    """A stored follow-up, as the scheduler leaves one."""
    return {
        "_id": f"rule:pause:{n}",
        "rule_id": "rule",
        "rule_name": "pause losers",
        "rule_version": 1,
        "task_id": "pause",
        "entity_id": str(n),
        "entity_name": f"Campaign {n}",
        "account": "act_1",
        "level": "campaign",
        "batch_id": "b",
        "do": "activate",
        "due_at": NOW,
        "generation": 1,
        "status": "done",
        "created_at": NOW,
        "updated_at": NOW,
    }


async def per_raise(raise_one: Callable[[str], Awaitable[Any]], keys: list[str]) -> float:
    """Median milliseconds of one raise over ``keys``."""
    times = []
    for key in keys:
        started = time.perf_counter()
        await raise_one(key)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


async def measure(db: Database, size: int) -> dict[str, float]:
    coll = db[c.FOLLOWUPS]
    await coll.delete_many({})
    await coll.insert_many([followup(n) for n in range(size)])
    step = max(1, size // RAISES)
    keys = [f"rule:pause:{n}" for n in range(0, size, step)][:RAISES]
    fields = {"status": "pending", "updated_at": NOW}

    async def find_and_modify(key: str) -> None:
        await coll.find_one_and_update(
            {"_id": key},
            {"$set": fields, "$inc": {"generation": 1}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )

    async def compare_and_set(key: str) -> None:
        await bump_counter(coll, key, "generation", fields, on_insert={})

    store = FollowupStore(db)
    return {
        "find_and_modify_ms": await per_raise(find_and_modify, keys),
        "compare_and_set_ms": await per_raise(compare_and_set, keys),
        "followup_replace_ms": await per_raise(
            lambda key: store.replace(key, fields, now=NOW), keys
        ),
    }


async def main(sizes: list[int]) -> dict[str, Any]:
    with stack(databases=True) as servers:
        settings = stack_settings(servers)
        client, db = await open_database(settings)
        try:
            by_size = {}
            for size in sizes:
                by_size[str(size)] = await measure(db, size)
                say(f"{size:>7,} documents: {by_size[str(size)]}")
        finally:
            await client.close()
    return {"raises_per_size": RAISES, "by_collection_size": by_size}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="1000,10000,30000",
        help="collection sizes to measure at, comma-separated (default 1000,10000,30000)",
    )
    args = parser.parse_args()
    figures(asyncio.run(main([int(s) for s in args.sizes.split(",")])))
