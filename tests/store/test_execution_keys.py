"""Execution records are found by their key through a plain unique index, old records too."""

from __future__ import annotations

from bson import ObjectId
from pymongo import ASCENDING, IndexModel

from ruleengine import constants as c
from ruleengine.store.db import Database, ensure_indexes
from ruleengine.store.records import ExecutionStore


async def test_records_from_before_keys_get_one_and_lookups_use_the_index(db: Database) -> None:
    executions = db[c.EXECUTIONS]
    await executions.drop_index("key_1")
    # the first layout: a partial index, and records written before records had keys
    await executions.create_indexes(
        [
            IndexModel(
                [("key", ASCENDING)],
                unique=True,
                partialFilterExpression={"key": {"$exists": True}},
            )
        ]
    )
    old = [ObjectId(), ObjectId()]
    await executions.insert_many([{"_id": i, "batch_id": "old"} for i in old])
    await ensure_indexes(db)
    index = (await executions.index_information())["key_1"]
    assert index.get("unique") and "partialFilterExpression" not in index
    keys = {d["_id"]: d["key"] async for d in executions.find({"batch_id": "old"})}
    assert keys == {i: f"legacy|{i}" for i in old}
    await ExecutionStore(db).upsert_many([{"key": "b|t|e", "batch_id": "b", "outcome": "applied"}])
    plan = await executions.find({"key": "b|t|e"}).explain()
    assert "IXSCAN" in str(plan["queryPlanner"]["winningPlan"])
    await ensure_indexes(db)  # a normal start changes nothing
    assert (await executions.index_information())["key_1"] == index
