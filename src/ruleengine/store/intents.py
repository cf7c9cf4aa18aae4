"""Action intents, and the cooldowns that follow from them.

An **intent** is recorded before every write to Meta, unique per (batch, task,
entity), and resolved with Meta's answer: ``pending`` → ``done`` or
``failed``. Every status change is a compare-and-set on the status expected,
so a late resolver can never overwrite what another one decided.

**Cooldowns** are derived from intents, not written separately: a (rule, task,
entity) cools down for the task's ``cooldown_minutes`` from the start of the job
whose intent is ``done`` — or still ``pending``, because a pending write may
have landed. Since the intent exists before the write is sent, a cooldown is in
force from the moment the write lands, whatever happens to the worker after.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pymongo.errors import DuplicateKeyError

from ruleengine import constants as c
from ruleengine.store.db import Database, Document

IntentStatus = Literal["pending", "done", "failed"]
# Intents whose effect is (or may be) in place: they start a cooldown.
FIRED: tuple[IntentStatus, ...] = ("pending", "done")
BUDGET_FIELDS = ["daily_budget", "lifetime_budget"]
# Why a failed budget intent failed, when Meta said so (the engine reads them back).
BUDGET_LIMITED = "meta_budget_change_limit"
BUDGET_TOO_LOW = "at_min_budget"  # Meta answered "Your Budget Is Too Low"


@dataclass(frozen=True)
class AppliedChange:
    """A budget change the engine made: when (its job's time) and the value it wrote."""

    at: datetime
    target: Any


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
    created_at: datetime | None = None
    response: Any = None  # Meta's answer to the write, once done

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
            created_at=doc.get("created_at"),
            response=doc.get("response"),
        )


class IntentStore:
    """Action intents: recorded before the write, resolved (compare-and-set) with Meta's answer."""

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
        self,
        intent_id: Any,
        *,
        status: IntentStatus,
        now: datetime,
        expected: IntentStatus = "pending",
        **fields: Any,
    ) -> bool:
        """Move an intent from ``expected`` to ``status``; False when it was not ``expected``.

        ``done`` records when it was applied (Meta's answer goes in ``fields``),
        ``failed`` the error or reason.
        """
        extra = {"applied_at": now} if status == "done" else {}
        result = await self._intents.update_one(
            {"_id": intent_id, "status": expected},
            {"$set": {"status": status, "resolved_at": now, **extra, **fields}},
        )
        return result.modified_count == 1

    async def note(self, intent_id: Any, **fields: Any) -> None:
        """Add ``fields`` to a pending intent without settling it (e.g. an unanswered write)."""
        await self._intents.update_one({"_id": intent_id, "status": "pending"}, {"$set": fields})

    async def pending(self, *, batch_ids: Sequence[str]) -> list[Document]:
        """Pending intents of some batches."""
        query = {"status": "pending", "batch_id": {"$in": list(batch_ids)}}
        return [d async for d in self._intents.find(query)]

    async def orphaned(self, *, started_before: datetime, limit: int = 1000) -> list[Document]:
        """Pending intents whose job started before ``started_before`` (their owner is gone)."""
        query = {"status": "pending", "created_at": {"$lt": started_before}}
        cursor = self._intents.find(query).sort("created_at").limit(limit)
        return [d async for d in cursor]

    async def for_batch(self, batch_id: str) -> list[Document]:
        """Every intent of a batch."""
        return [d async for d in self._intents.find({"batch_id": batch_id}).sort("_id")]

    async def pending_elsewhere(
        self, entity_id: str, field: str, *, other_than: str
    ) -> list[Document]:
        """Pending intents on the same entity and field left by *other* batches."""
        query = {
            "entity_id": entity_id,
            "field": field,
            "status": "pending",
            "batch_id": {"$ne": other_than},
        }
        return [d async for d in self._intents.find(query)]

    async def budget_changes(self, entity_id: str, *, since: datetime) -> list[AppliedChange]:
        """The budget changes the engine made to an entity since ``since``, oldest first."""
        query = {
            "entity_id": entity_id,
            "field": {"$in": BUDGET_FIELDS},
            "status": "done",
            "changed": True,
            "applied_at": {"$gte": since},
        }
        projection = {"applied_at": 1, "target": 1}
        cursor = self._intents.find(query, projection).sort("applied_at")
        return [AppliedChange(d["applied_at"], d.get("target")) async for d in cursor]

    async def budget_blocked_until(self, entity_id: str, *, now: datetime) -> datetime | None:
        """Until when Meta blocks the entity's budget (it answered code 17), if it still does."""
        doc = await self._intents.find_one(
            {
                "entity_id": entity_id,
                "field": {"$in": BUDGET_FIELDS},
                "status": "failed",
                "reason": BUDGET_LIMITED,
                "allowed_at": {"$gt": now},
            },
            {"allowed_at": 1},
            sort=[("allowed_at", -1)],
        )
        return None if doc is None else doc["allowed_at"]

    async def refused_as_too_low(self, entity_id: str, field: str, *, since: datetime) -> Any:
        """The highest budget Meta refused as too low for this entity since ``since``, if any."""
        doc = await self._intents.find_one(
            {
                "entity_id": entity_id,
                "field": field,
                "status": "failed",
                "reason": BUDGET_TOO_LOW,
                "resolved_at": {"$gte": since},
            },
            {"target": 1},
            sort=[("target", -1)],
        )
        return None if doc is None else doc.get("target")

    async def cooling(
        self,
        rule_id: str,
        pairs: Iterable[tuple[str, str]],
        *,
        now: datetime,
        longest_minutes: int,
        other_than: str,
    ) -> dict[tuple[str, str], datetime]:
        """(task, entity) → until, for the pairs whose fired intents still cool them down.

        Intents of the batch ``other_than`` are ignored: a redelivered batch meets its
        own intents on the write path (``already_applied``), not as a cooldown.
        """
        wanted = set(pairs)
        if not wanted or longest_minutes <= 0:
            return {}
        query = {
            "rule_id": rule_id,
            "task_id": {"$in": sorted({task for task, _ in wanted})},
            "entity_id": {"$in": sorted({entity for _, entity in wanted})},
            "status": {"$in": list(FIRED)},
            "batch_id": {"$ne": other_than},
            "created_at": {"$gt": now - timedelta(minutes=longest_minutes)},
        }
        projection = {"task_id": 1, "entity_id": 1, "created_at": 1, "cooldown_minutes": 1}
        active: dict[tuple[str, str], datetime] = {}
        async for doc in self._intents.find(query, projection):
            key = (doc["task_id"], doc["entity_id"])
            until = doc["created_at"] + timedelta(minutes=doc.get("cooldown_minutes") or 0)
            if key in wanted and until > now and (key not in active or until > active[key]):
                active[key] = until
        return active


def hour_ago(now: datetime) -> datetime:
    """``now`` minus one hour (the window of Meta's ad-set budget-change limit)."""
    return now - timedelta(hours=1)
