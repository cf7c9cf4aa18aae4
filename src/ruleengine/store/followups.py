"""The ``followups`` collection: one document per (rule, task, entity), the source of truth.

The scheduler (:mod:`ruleengine.followups.scheduling`) stores, arms and re-arms
follow-ups; a worker claims one for its generation and closes it
(:mod:`ruleengine.followups.running`); the web app pages, counts and finds the
overdue ones. Every state change is a compare-and-set on the generation (and
status), so an old timer that still fires finds a newer generation and does nothing.

A follow-up is **overdue** when it still waits (``pending`` or ``scheduled``)
more than :data:`OVERDUE_AFTER` past its due time: its timer did not fire, so
either no worker is running or Redis lost it and the dispatcher has not re-armed
it (is Redis down?).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING, UpdateOne

from ruleengine import constants as c
from ruleengine.errors import NotFoundError
from ruleengine.store.db import Database, Document, Page, bump_counter
from ruleengine.store.intents import WRITE_UNCONFIRMED

FollowupStatus = Literal["pending", "scheduled", "running", "done", "skipped", "failed"]
FOLLOWUP_STATUSES: Final[tuple[str, ...]] = get_args(FollowupStatus)
FINISHED: Final = ("done", "skipped", "failed")
WAITING: Final[tuple[str, ...]] = ("pending", "scheduled")
OVERDUE_AFTER: Final = timedelta(minutes=5)


class FollowupDoc(BaseModel):
    """One follow-up, as stored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    rule_id: str
    rule_name: str
    rule_version: int
    task_id: str
    entity_id: str
    entity_name: str
    account: str
    level: str
    batch_id: str
    do: str
    webhook: str | None = None
    template: str | None = None
    timezone: str = "UTC"
    field: str | None = None  # what the original action changed
    set_value: Any = None  # … the value it left
    previous: Any = None  # … and the value before
    due_at: datetime  # by MongoDB's clock (its timer fires then, on the clock of the workers)
    generation: int
    status: FollowupStatus
    reason: str | None = None
    created_at: datetime
    updated_at: datetime
    late_s: float | None = None

    @classmethod
    def from_mongo(cls, doc: Document) -> FollowupDoc:
        """Build from a ``followups`` document."""
        return cls(id=doc["_id"], **{k: v for k, v in doc.items() if k != "_id"})

    @property
    def job_id(self) -> str:
        """The arq job id of this generation's timer."""
        return followup_job_id(self.id, self.generation)


@dataclass(frozen=True)
class ScheduledTimer:
    """What checking a scheduled follow-up's timer needs: its key, generation and due time."""

    key: str
    generation: int
    due_at: datetime  # by MongoDB's clock

    @property
    def job_id(self) -> str:
        """The arq job id of the timer."""
        return followup_job_id(self.key, self.generation)


@dataclass(frozen=True)
class Finished:
    """How a claimed follow-up ended: its status, the reason, how late it ran."""

    doc: FollowupDoc
    status: str
    reason: str | None
    late_s: float


def followup_key(rule_id: str, task_id: str, entity_id: str) -> str:
    """One follow-up per (rule, task, entity)."""
    return f"{rule_id}:{task_id}:{entity_id}"


def followup_job_id(key: str, generation: int) -> str:
    """The deterministic arq job id of a follow-up's timer."""
    return f"followup:{key}:{generation}"


def followup_batch(key: str, generation: int) -> str:
    """The batch a follow-up's write is recorded under in ``action_intents`` (its job id)."""
    return followup_job_id(key, generation)


def followup_of_batch(batch_id: str) -> tuple[str, int] | None:
    """(key, generation) of a follow-up's intent batch (:func:`followup_batch`); None for
    any other batch."""
    prefix, _, rest = batch_id.partition(":")
    key, _, generation = rest.rpartition(":")
    if prefix != "followup" or not key or not (generation.isascii() and generation.isdigit()):
        return None
    return key, int(generation)


def followup_record_key(key: str, generation: int) -> str:
    """The unique key of the execution record of one run of a follow-up."""
    return f"followup|{key}|{generation}"


def is_overdue(status: str, due_at: datetime, *, now: datetime) -> bool:
    """Whether a follow-up in ``status`` due at ``due_at`` is overdue at ``now``."""
    return status in WAITING and due_at < now - OVERDUE_AFTER


class FollowupStore:
    """Reads and compare-and-set writes of ``followups``."""

    def __init__(self, db: Database) -> None:
        self._followups = db[c.FOLLOWUPS]

    # ---------------------------------------------------------------- the scheduler's writes

    async def get(self, key: str) -> FollowupDoc | None:
        """The follow-up of a key, if any."""
        doc = await self._followups.find_one({"_id": key})
        return None if doc is None else FollowupDoc.from_mongo(doc)

    async def replace(self, key: str, fields: Document, *, now: datetime) -> FollowupDoc:
        """Store the follow-up of ``key`` as a new generation (pending until armed)."""
        doc = await bump_counter(
            self._followups, key, "generation", fields, on_insert={"created_at": now}
        )
        return FollowupDoc.from_mongo(doc)

    async def mark(
        self, doc: FollowupDoc, status: str, *, reason: str | None, now: datetime
    ) -> None:
        """Set the status of this generation unless it has finished meanwhile."""
        await self._followups.update_one(
            {"_id": doc.id, "generation": doc.generation, "status": {"$nin": list(FINISHED)}},
            {"$set": {"status": status, "reason": reason, "updated_at": now}},
        )

    async def pending(self) -> AsyncIterator[FollowupDoc]:
        """Follow-ups waiting for their timer to be armed."""
        async for raw in self._followups.find({"status": "pending"}):
            yield FollowupDoc.from_mongo(raw)

    async def scheduled_timers(self, *, batch_size: int) -> AsyncIterator[ScheduledTimer]:
        """The timer of every scheduled follow-up — only keys and due times cross the wire."""
        cursor = self._followups.find(
            {"status": "scheduled"}, {"generation": 1, "due_at": 1}, batch_size=batch_size
        )
        async for raw in cursor:
            yield ScheduledTimer(raw["_id"], raw["generation"], raw["due_at"])

    async def release_stale(self, *, older_than: datetime, now: datetime) -> int:
        """Follow-ups left ``running`` by a dead worker go back to pending (to be re-armed).

        Running them again is safe: their writes go through intents keyed by generation.
        """
        result = await self._followups.update_many(
            {"status": "running", "updated_at": {"$lt": older_than}},
            {"$set": {"status": "pending", "reason": "worker_lost", "updated_at": now}},
        )
        return result.modified_count

    # ---------------------------------------------------------------- running one

    async def claim(self, key: str, generation: int, *, now: datetime) -> FollowupDoc | None:
        """Take a due follow-up for running: only its own generation, only once.

        A compare-and-set, then a read of what it took (the embedded server answers a
        findAndModify on more than ``_id`` by scanning the collection; an update finds the
        document by ``_id``). Replaced by a newer generation between the two: not run."""
        claimed = await self._followups.update_one(
            {"_id": key, "generation": generation, "status": {"$in": list(WAITING)}},
            {"$set": {"status": "running", "updated_at": now}},
        )
        if claimed.modified_count != 1:
            return None
        doc = await self._followups.find_one({"_id": key, "generation": generation})
        return None if doc is None else FollowupDoc.from_mongo(doc)

    async def claim_siblings(
        self, lead: FollowupDoc, *, due_by: datetime, now: datetime, limit: int
    ) -> list[FollowupDoc]:
        """Take, for running with ``lead``, up to ``limit`` other follow-ups of its batch that
        wait and are due by ``due_by`` (a batch's follow-ups are due at one time): each in the
        generation it holds, once — the same compare-and-set as :meth:`claim`, marked with
        the lead's timer (``claimed_with``). Three commands for the lot: a read of candidates,
        the update, a read of what it took."""
        waiting = {
            "batch_id": lead.batch_id,
            "status": {"$in": list(WAITING)},
            "due_at": {"$lte": due_by},
        }
        cursor = self._followups.find({**waiting, "_id": {"$ne": lead.id}}, {"_id": 1}).limit(limit)
        ids = [d["_id"] async for d in cursor]
        if not ids:
            return []
        mark = lead.job_id
        await self._followups.update_many(
            {**waiting, "_id": {"$in": ids}},
            {"$set": {"status": "running", "updated_at": now, "claimed_with": mark}},
        )
        taken = self._followups.find(
            {"_id": {"$in": ids}, "status": "running", "claimed_with": mark}
        )
        return sorted(
            [FollowupDoc.from_mongo(d) async for d in taken], key=lambda d: ids.index(d.id)
        )

    async def finish_many(self, finished: Sequence[Finished], *, now: datetime) -> None:
        """Close follow-ups (done, skipped or failed) run together, in one command."""
        ops = [
            UpdateOne(
                {"_id": f.doc.id, "generation": f.doc.generation},
                {
                    "$set": {
                        "status": f.status,
                        "reason": f.reason,
                        "updated_at": now,
                        "done_at": now,
                        "late_s": f.late_s,
                    }
                },
            )
            for f in finished
        ]
        if ops:
            await self._followups.bulk_write(ops, ordered=False)

    async def settle_unconfirmed(
        self, key: str, generation: int, *, status: str, reason: str | None, now: datetime
    ) -> bool:
        """A follow-up closed ``failed`` (``write_unconfirmed``: Meta's answer to its write was
        lost) takes what the write turned out to do — unless a newer generation replaced it."""
        result = await self._followups.update_one(
            {"_id": key, "generation": generation, "status": "failed", "reason": WRITE_UNCONFIRMED},
            {"$set": {"status": status, "reason": reason, "updated_at": now}},
        )
        return result.modified_count == 1

    # ---------------------------------------------------------------- the web app's reads

    async def find(self, key: str) -> Document:
        """One follow-up by key, as stored; raises NotFoundError."""
        doc = await self._followups.find_one({"_id": key})
        if doc is None:
            raise NotFoundError(f"follow-up '{key}' does not exist")
        return doc

    async def page(self, *, filters: dict[str, Any], limit: int = 50, skip: int = 0) -> Page:
        """Follow-ups matching ``filters`` (equality; None is no filter), soonest due first."""
        query = {k: v for k, v in filters.items() if v is not None}
        cursor = (
            self._followups.find(query)
            .sort([("due_at", ASCENDING), ("_id", ASCENDING)])
            .skip(skip)
            .limit(limit)
        )
        items = [doc async for doc in cursor]
        return Page(items=items, total=await self._followups.count_documents(query))

    async def count(self, *, status: str) -> int:
        """How many follow-ups have ``status``."""
        return await self._followups.count_documents({"status": status})

    async def counts(self) -> dict[str, int]:
        """How many follow-ups have each status (every status present, 0 included)."""
        counts = await asyncio.gather(*(self.count(status=s) for s in FOLLOWUP_STATUSES))
        return dict(zip(FOLLOWUP_STATUSES, counts, strict=True))

    async def overdue(self, *, now: datetime) -> int:
        """How many follow-ups still wait more than :data:`OVERDUE_AFTER` past their due time."""
        return await self._followups.count_documents(
            {"status": {"$in": list(WAITING)}, "due_at": {"$lt": now - OVERDUE_AFTER}}
        )
