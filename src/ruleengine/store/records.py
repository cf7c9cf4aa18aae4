"""What the worker records: batch rows, execution records, cooldowns and action intents.

* A **batch** row per (rule, account, scheduled time), upserted on ``batch_id``:
  a redelivered job reuses it and shows ``execute_count`` 2.
* **Execution records**, one per (entity, task), written in bulk.
* **Cooldowns** per (rule, task, entity): the time before which the task must not act again.
* **Action intents**, unique per (batch, task, entity), written *before* a write
  to Meta and marked done with Meta's answer: a redelivered job finds them and
  writes nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pymongo import DESCENDING, ReturnDocument, UpdateOne
from pymongo.errors import DuplicateKeyError

from ruleengine import constants as c
from ruleengine.errors import NotFoundError
from ruleengine.store.batchstats import RuleDurations, rule_durations
from ruleengine.store.db import Database, Document

BatchStatus = Literal["RUNNING", "DONE", "FAILED", "ABANDONED"]
IntentStatus = Literal["pending", "done", "failed"]


@dataclass(frozen=True)
class BatchStart:
    """What is known when a job starts."""

    batch_id: str
    rule_id: str
    rule_name: str
    rule_version: int
    account: str
    level: str
    scheduled_at: datetime
    total: int
    job_id: str | None
    worker: str


@dataclass(frozen=True)
class BatchPage:
    """One page of batch rows and the total matching the filter."""

    items: list[Document]
    total: int


class BatchStore:
    """Batch rows (the "benchmark rows" of the Rule Logs and Benchmark screens)."""

    def __init__(self, db: Database) -> None:
        self._batches = db[c.BATCHES]

    async def start(self, start: BatchStart, *, now: datetime) -> Document:
        """Upsert the row as RUNNING and count this delivery."""
        doc = await self._batches.find_one_and_update(
            {"_id": start.batch_id},
            {
                "$set": {
                    "status": "RUNNING",
                    "last_started_at": now,
                    "progress": {"done": 0, "total": start.total},
                    "job_id": start.job_id,
                    "worker": start.worker,
                    "finished_at": None,
                    "error": None,
                },
                "$inc": {"execute_count": 1},
                "$setOnInsert": {
                    "rule_id": start.rule_id,
                    "rule_name": start.rule_name,
                    "rule_version": start.rule_version,
                    "account": start.account,
                    "level": start.level,
                    "scheduled_at": start.scheduled_at,
                    "started_at": now,
                },
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return doc

    async def progress(self, batch_id: str, *, done: int, total: int) -> None:
        """Report how far the job has walked its entity list."""
        await self._batches.update_one(
            {"_id": batch_id, "status": "RUNNING"},
            {"$set": {"progress": {"done": done, "total": total}}},
        )

    async def finish(
        self, batch_id: str, *, status: BatchStatus, now: datetime, **fields: Any
    ) -> None:
        """Close the row with its counts, Graph cost, trace and duration (or error)."""
        await self._batches.update_one(
            {"_id": batch_id}, {"$set": {"status": status, "finished_at": now, **fields}}
        )

    async def get(self, batch_id: str) -> Document:
        """One batch row; raises NotFoundError."""
        doc = await self._batches.find_one({"_id": batch_id})
        if doc is None:
            raise NotFoundError(f"batch '{batch_id}' does not exist")
        return doc

    async def page(self, *, filters: dict[str, Any], limit: int = 50, skip: int = 0) -> BatchPage:
        """Batch rows matching ``filters`` (equality on rule_id/account/status), newest first."""
        query = {k: v for k, v in filters.items() if v is not None}
        cursor = self._batches.find(query).sort("started_at", DESCENDING).skip(skip).limit(limit)
        items = [d async for d in cursor]
        return BatchPage(items=items, total=await self._batches.count_documents(query))

    async def stale_running(self, *, older_than: datetime) -> list[Document]:
        """RUNNING batches whose last delivery started before ``older_than``."""
        cursor = self._batches.find({"status": "RUNNING", "last_started_at": {"$lt": older_than}})
        return [d async for d in cursor]

    async def abandon(self, batch_id: str, *, started_before: datetime, now: datetime) -> bool:
        """Mark a stuck batch ABANDONED (compare-and-set: still RUNNING and still stale)."""
        result = await self._batches.update_one(
            {"_id": batch_id, "status": "RUNNING", "last_started_at": {"$lt": started_before}},
            {
                "$set": {
                    "status": "ABANDONED",
                    "finished_at": now,
                    "error": "worker lost (job timeout passed)",
                }
            },
        )
        return result.modified_count == 1

    async def durations(self, *, since: datetime) -> list[RuleDurations]:
        """Per rule: durations and cost of finished batches started since ``since`` (in MongoDB)."""
        return await rule_durations(self._batches, since=since)


class ExecutionStore:
    """Execution records, one per (entity, task) evaluation."""

    def __init__(self, db: Database) -> None:
        self._executions = db[c.EXECUTIONS]

    async def insert_many(self, records: Sequence[Document]) -> None:
        """Write records in bulk (one round trip, not one insert per entity)."""
        if records:
            await self._executions.insert_many(list(records), ordered=False)

    async def for_batch(self, batch_id: str, *, limit: int = 5000) -> list[Document]:
        """Every record of a batch, in evaluation order."""
        cursor = self._executions.find({"batch_id": batch_id}).sort("_id").limit(limit)
        return [d async for d in cursor]


class CooldownStore:
    """Per (rule, task, entity): not before ``next_execute_at``."""

    def __init__(self, db: Database) -> None:
        self._cooldowns = db[c.COOLDOWNS]

    @staticmethod
    def key(rule_id: str, task_id: str, entity_id: str) -> str:
        """The document id of a cooldown."""
        return f"{rule_id}:{task_id}:{entity_id}"

    async def active(
        self, rule_id: str, pairs: Iterable[tuple[str, str]], *, now: datetime
    ) -> dict[tuple[str, str], datetime]:
        """(task, entity) → until, for the pairs still cooling down at ``now``."""
        keys = [self.key(rule_id, task, entity) for task, entity in pairs]
        if not keys:
            return {}
        cursor = self._cooldowns.find({"_id": {"$in": keys}, "next_execute_at": {"$gt": now}})
        return {(d["task_id"], d["entity_id"]): d["next_execute_at"] async for d in cursor}

    async def set_many(self, rule_id: str, items: Iterable[tuple[str, str, datetime]]) -> None:
        """Start cooldowns: (task, entity, until) for each action that fired."""
        ops = [
            UpdateOne(
                {"_id": self.key(rule_id, task, entity)},
                {
                    "$set": {
                        "rule_id": rule_id,
                        "task_id": task,
                        "entity_id": entity,
                        "next_execute_at": until,
                    }
                },
                upsert=True,
            )
            for task, entity, until in items
        ]
        if ops:
            await self._cooldowns.bulk_write(ops, ordered=False)


@dataclass(frozen=True)
class Intent:
    """A write the engine is about to make (or made), keyed by batch + task + entity."""

    id: Any
    batch_id: str
    task_id: str
    entity_id: str
    field: str
    before: Any
    target: Any
    status: IntentStatus
    created: bool  # False: the intent existed already (a redelivered job)

    @classmethod
    def from_mongo(cls, doc: Document, *, created: bool) -> Intent:
        """Build from an ``action_intents`` document."""
        return cls(
            id=doc["_id"],
            batch_id=doc["batch_id"],
            task_id=doc["task_id"],
            entity_id=doc["entity_id"],
            field=doc["field"],
            before=doc.get("before"),
            target=doc.get("target"),
            status=doc["status"],
            created=created,
        )


class IntentStore:
    """Action intents: recorded before the write, resolved with Meta's answer."""

    def __init__(self, db: Database) -> None:
        self._intents = db[c.ACTION_INTENTS]

    async def begin(self, intent: Document, *, now: datetime) -> Intent:
        """Insert a pending intent; if one exists for the key, return it instead."""
        doc = {**intent, "status": "pending", "created_at": now, "applied_at": None}
        try:
            await self._intents.insert_one(doc)
            return Intent.from_mongo(doc, created=True)
        except DuplicateKeyError:
            key = {k: intent[k] for k in ("batch_id", "task_id", "entity_id")}
            existing = await self._intents.find_one(key)
            assert existing is not None
            return Intent.from_mongo(existing, created=False)

    async def get(self, batch_id: str, task_id: str, entity_id: str) -> Intent | None:
        """The intent of (batch, task, entity), if one was recorded."""
        doc = await self._intents.find_one(
            {"batch_id": batch_id, "task_id": task_id, "entity_id": entity_id}
        )
        return None if doc is None else Intent.from_mongo(doc, created=False)

    async def resolve(
        self, intent_id: Any, *, status: IntentStatus, now: datetime, **fields: Any
    ) -> None:
        """Mark done (with Meta's answer) or failed (with the error)."""
        extra = {"applied_at": now} if status == "done" else {}
        await self._intents.update_one(
            {"_id": intent_id}, {"$set": {"status": status, "resolved_at": now, **extra, **fields}}
        )

    async def pending(self, *, batch_ids: Sequence[str] | None = None) -> list[Document]:
        """Pending intents (of some batches)."""
        query: dict[str, Any] = {"status": "pending"}
        if batch_ids is not None:
            query["batch_id"] = {"$in": list(batch_ids)}
        return [d async for d in self._intents.find(query)]

    async def stale_for_entity(
        self, entity_id: str, field: str, *, other_than: str
    ) -> list[Document]:
        """Pending intents on the same entity and field left by *other* batches.

        Seen while holding the account's write lock, they can only be the
        leftovers of a worker that died between recording and confirming a write.
        """
        query = {
            "entity_id": entity_id,
            "field": field,
            "status": "pending",
            "batch_id": {"$ne": other_than},
        }
        return [d async for d in self._intents.find(query)]

    async def budget_changes_since(self, entity_id: str, *, since: datetime) -> int:
        """How many budget writes the engine made to an entity since ``since``."""
        return await self._intents.count_documents(
            {
                "entity_id": entity_id,
                "field": {"$in": ["daily_budget", "lifetime_budget"]},
                "status": "done",
                "changed": True,
                "applied_at": {"$gte": since},
            }
        )


def hour_ago(now: datetime) -> datetime:
    """``now`` minus one hour (the window of Meta's ad-set budget-change limit)."""
    return now - timedelta(hours=1)
