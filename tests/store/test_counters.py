"""Counters raised by a read and a compare-and-set (fences, follow-up generations).

Many writers raising one counter at once each get a value of their own, and together every
value from 1 up, none twice — across clients, as the workers of a fleet are.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database, bump_counter, create_client, database
from ruleengine.store.fences import FenceStore
from ruleengine.store.followups import FollowupStore
from ruleengine.store.records import BatchStart, BatchStore

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


async def test_writers_raising_one_counter_at_once_each_get_their_own_value(
    db: Database, settings: Settings
) -> None:
    clients = [create_client(settings) for _ in range(3)]
    try:
        stores = [FenceStore(database(client, settings)) for client in clients]
        taken = await asyncio.gather(*(stores[n % 3].take("act_7") for n in range(30)))
    finally:
        for client in clients:
            await client.close()
    assert sorted(f.value for f in taken) == list(range(1, 31))
    assert await FenceStore(db).current("act_7") == 30
    doc = await db[c.LOCK_FENCES].find_one({"_id": "act_7"})
    assert doc is not None and doc["taken_at"].tzinfo is not None


async def test_a_counter_starts_at_one_with_its_insert_fields_and_keeps_them(
    db: Database,
) -> None:
    coll = db["counters_under_test"]
    first = await bump_counter(coll, "k", "n", {"a": 1}, on_insert={"created": "first"})
    again = await bump_counter(coll, "k", "n", {"a": 2}, on_insert={"created": "second"})
    assert first == {"_id": "k", "created": "first", "a": 1, "n": 1}
    assert again == {"_id": "k", "created": "first", "a": 2, "n": 2}
    assert await coll.find_one({"_id": "k"}) == again


async def test_a_follow_up_replaced_while_another_replaces_it_gets_a_generation_of_its_own(
    db: Database,
) -> None:
    store = FollowupStore(db)
    fields = {
        "rule_id": "r",
        "rule_name": "pause losers",
        "rule_version": 1,
        "task_id": "t",
        "entity_id": "e",
        "entity_name": "E",
        "account": "act_7",
        "level": "campaign",
        "batch_id": "b",
        "do": "activate",
        "due_at": NOW,
        "status": "pending",
        "updated_at": NOW,
    }
    docs = await asyncio.gather(*(store.replace("r:t:e", fields, now=NOW) for _ in range(8)))
    assert sorted(d.generation for d in docs) == list(range(1, 9))
    stored = await store.get("r:t:e")
    assert stored is not None and stored.generation == 8 and stored.created_at == NOW


async def test_deliveries_starting_one_batch_at_once_each_count_one(
    db: Database, settings: Settings
) -> None:
    def start(n: int) -> BatchStart:
        return BatchStart(
            batch_id="r-act_7-20261201T120000Z",
            rule_id="r",
            rule_name=f"name seen by delivery {n}",
            rule_version=1,
            account="act_7",
            level="campaign",
            scheduled_at=NOW,
            total=50,
            job_id=f"job-{n}",
            worker=f"worker-{n}",
        )

    clients = [create_client(settings) for _ in range(3)]
    try:
        stores = [BatchStore(database(client, settings)) for client in clients]
        rows = await asyncio.gather(*(stores[n % 3].start(start(n), now=NOW) for n in range(6)))
    finally:
        for client in clients:
            await client.close()
    assert sorted(row["execute_count"] for row in rows) == list(range(1, 7))
    stored = await BatchStore(db).get("r-act_7-20261201T120000Z")
    assert stored["execute_count"] == 6 and stored["status"] == "RUNNING"
    first = next(row for row in rows if row["execute_count"] == 1)
    assert stored["rule_name"] == first["rule_name"]  # set when the row was created, kept
