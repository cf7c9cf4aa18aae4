"""Approvals: a task's planned change that waits for a person before it is written.

One document per proposal, ``_id`` derived from (batch, task, entity), so a redelivered
job finds the proposal its first delivery made. While a proposal is open (``pending``, or
``approved`` and not yet written) its ``open_key`` is ``<rule>/<task>/<entity>`` under a
unique index: the same entity × task is not proposed again, whatever runs overlap. When it
is closed (rejected, expired, applied, changed by someone else, failed) the key becomes the
document's own id. Decisions are compare-and-set on the status, so approving twice (or at
once from two places) decides once.

An approved change is written under the batch :func:`write_batch` names: ``approval:<id>``,
and ``approval:<id>:<n>`` for its n-th write when an earlier one was settled as not landed
(``generation``). While it stays ``approved`` it carries ``attempts``, ``last_error`` and
``retry_at`` (when the reaper enqueues its write again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from ruleengine import constants as c
from ruleengine.errors import NotFoundError
from ruleengine.store.db import Database, Document, server_time

ApprovalStatus = Literal[
    "pending", "approved", "rejected", "expired", "applied", "changed_by_someone_else", "failed"
]
STATUSES: Final = (
    "pending",
    "approved",
    "rejected",
    "expired",
    "applied",
    "changed_by_someone_else",
    "failed",
)
#: Statuses that keep the entity × task's slot: no new proposal while one is open.
OPEN: Final = ("pending", "approved")


def approval_id(batch_id: str, task_id: str, entity_id: str) -> str:
    """The id of the proposal a batch makes for (task, entity): short, stable, URL-safe."""
    digest = hashlib.sha256(f"{batch_id}|{task_id}|{entity_id}".encode()).hexdigest()
    return digest[:24]


def write_batch(approval: str, generation: int = 1) -> str:
    """The batch the ``generation``-th write of an approved change goes under."""
    return f"approval:{approval}" if generation <= 1 else f"approval:{approval}:{generation}"


def approval_of_batch(batch_id: str) -> str | None:
    """The approval whose write ``batch_id`` is (see :func:`write_batch`), or None."""
    prefix, _, rest = batch_id.partition(":")
    if prefix != "approval" or not rest:
        return None
    approval, _, generation = rest.partition(":")
    if not approval or (generation and not generation.isdecimal()):
        return None
    return approval


def open_key(rule_id: str, task_id: str, entity_id: str) -> str:
    """The slot an open proposal of (rule, task, entity) holds."""
    return f"{rule_id}/{task_id}/{entity_id}"


#: How long an announcement begun by a delivery that then died blocks another from sending it.
ANNOUNCE_RETRY: Final = timedelta(minutes=5)


@dataclass(frozen=True)
class Proposal:
    """A proposal stored (or found): the document and whether this call created it."""

    doc: Document
    created: bool


@dataclass(frozen=True)
class PendingSummary:
    """What readiness and the metrics show: how many wait, and since when the oldest."""

    count: int
    oldest: datetime | None


class ApprovalStore:
    """The ``approvals`` collection."""

    def __init__(self, db: Database) -> None:
        self._approvals = db[c.APPROVALS]

    async def now(self) -> datetime:
        """MongoDB's clock now: what an approval's ``expires_at`` and ``retry_at`` were stamped
        by, so what deciding, listing and expiring compare them with (a web or CLI host's
        clock may be off)."""
        return await server_time(self._approvals.database)

    async def propose(self, doc: Document) -> Proposal:
        """Store a pending proposal, or find the open one of its (rule, task, entity)."""
        doc = doc | {
            "status": "pending",
            "open_key": open_key(doc["rule_id"], doc["task_id"], doc["entity_id"]),
        }
        try:
            await self._approvals.insert_one(doc)
        except DuplicateKeyError:
            found = await self._approvals.find_one({"_id": doc["_id"]})
            found = found or await self._approvals.find_one({"open_key": doc["open_key"]})
            if found is None:  # closed between the insert and the look: try once more
                return await self.propose(doc)
            return Proposal(found, created=False)
        return Proposal(doc, created=True)

    async def open_for(
        self, rule_id: str, pairs: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], Document]:
        """The open proposals of these (task, entity) pairs of a rule."""
        keys = [open_key(rule_id, task, entity) for task, entity in pairs]
        if not keys:
            return {}
        found: dict[tuple[str, str], Document] = {}
        async for doc in self._approvals.find({"open_key": {"$in": keys}}):
            found[(doc["task_id"], doc["entity_id"])] = doc
        return found

    async def statuses(self, approvals: Iterable[str]) -> dict[str, str]:
        """approval id → its status, for those of ``approvals`` that exist."""
        ids = sorted(set(approvals))
        if not ids:
            return {}
        found = self._approvals.find({"_id": {"$in": ids}}, {"status": 1})
        return {str(d["_id"]): str(d["status"]) async for d in found}

    async def get(self, approval: str) -> Document:
        """One approval; NotFoundError if there is none with that id."""
        doc = await self._approvals.find_one({"_id": approval})
        if doc is None:
            raise NotFoundError(f"no approval '{approval}'")
        return doc

    async def page(self, *, status: str | None, limit: int, skip: int) -> list[Document]:
        """Approvals (of one status, or all), newest first."""
        query = {"status": status} if status else {}
        cursor = self._approvals.find(query).sort([("created_at", DESCENDING), ("_id", ASCENDING)])
        return [d async for d in cursor.skip(skip).limit(limit)]

    async def count(self, *, status: str | None) -> int:
        """How many approvals (of one status, or all) there are."""
        return await self._approvals.count_documents({"status": status} if status else {})

    async def decide(
        self,
        approval: str,
        *,
        status: Literal["approved", "rejected"],
        by: str,
        now: datetime,
        retry_at: datetime | None = None,
    ) -> Document | None:
        """Approve or reject a pending, unexpired proposal; None when it is not that (any
        more): decided already, or past its expiry. ``retry_at``: when an approved change
        not yet closed by its write is enqueued again."""
        fields: dict[str, Any] = {"status": status, "decided_by": by, "decided_at": now}
        if status == "rejected":
            fields["open_key"] = approval
        if retry_at is not None:
            fields["retry_at"] = retry_at
        return await self._approvals.find_one_and_update(
            {"_id": approval, "status": "pending", "expires_at": {"$gt": now}},
            {"$set": fields},
            return_document=ReturnDocument.AFTER,
        )

    async def expire(self, approval: str, *, now: datetime) -> Document | None:
        """Mark a pending proposal past its expiry ``expired``; None if it is not one."""
        return await self._approvals.find_one_and_update(
            {"_id": approval, "status": "pending", "expires_at": {"$lte": now}},
            {
                "$set": {
                    "status": "expired",
                    "reason": "approval_expired",
                    "open_key": approval,
                    "expired_at": now,
                }
            },
            return_document=ReturnDocument.AFTER,
        )

    async def expire_due(self, *, now: datetime, limit: int = 1000) -> int:
        """Mark every pending proposal past its expiry ``expired``; how many were."""
        cursor = self._approvals.find(
            {"status": "pending", "expires_at": {"$lte": now}}, {"_id": 1}
        ).limit(limit)
        ids = [d["_id"] async for d in cursor]
        return sum([await self.expire(i, now=now) is not None for i in ids])

    async def close(
        self, approval: str, *, status: ApprovalStatus, now: datetime, **fields: Any
    ) -> Document | None:
        """Close an approved proposal with what its write did; None if it was closed already."""
        return await self._approvals.find_one_and_update(
            {"_id": approval, "status": "approved"},
            {"$set": {"status": status, "closed_at": now, "open_key": approval, **fields}},
            return_document=ReturnDocument.AFTER,
        )

    async def due(self, now: datetime, *, decided_before: datetime, limit: int = 100) -> list[str]:
        """Ids of approved changes whose write is due again: ``retry_at`` reached, or (approved
        before retries were kept) approved before ``decided_before``."""
        query = {
            "status": "approved",
            "$or": [
                {"retry_at": {"$lte": now}},
                {"retry_at": {"$exists": False}, "decided_at": {"$lt": decided_before}},
            ],
        }
        return [d["_id"] async for d in self._approvals.find(query, {"_id": 1}).limit(limit)]

    async def begin_attempt(
        self, approval: str, *, now: datetime, retry_at: datetime
    ) -> Document | None:
        """Count an attempt at writing an approved change and move ``retry_at`` past it (a
        worker that dies inside it leaves the change to be enqueued again then); None when
        it is not approved (any more)."""
        return await self._approvals.find_one_and_update(
            {"_id": approval, "status": "approved"},
            {"$inc": {"attempts": 1}, "$set": {"attempted_at": now, "retry_at": retry_at}},
            return_document=ReturnDocument.AFTER,
        )

    async def retry_later(
        self, approval: str, *, retry_at: datetime, error: Document
    ) -> Document | None:
        """Keep an approved change approved after an attempt that did not write it: why
        (``last_error``) and when it is tried again; None if it was closed meanwhile."""
        return await self._approvals.find_one_and_update(
            {"_id": approval, "status": "approved"},
            {"$set": {"retry_at": retry_at, "last_error": error}},
            return_document=ReturnDocument.AFTER,
        )

    async def retry_now(self, approval: str, *, now: datetime, **fields: Any) -> bool:
        """Make an approved change's next attempt due at ``now`` (with ``fields`` noted);
        False if it is not approved."""
        updated = await self._approvals.update_one(
            {"_id": approval, "status": "approved"}, {"$set": {"retry_at": now, **fields}}
        )
        return updated.modified_count > 0

    async def next_write(self, approval: str, *, generation: int) -> Document | None:
        """Move an approved change from its ``generation``-th write (settled as not landed)
        to the next; None if another attempt moved it first or it was closed."""
        current: Any = generation if generation > 1 else {"$in": [1, None]}
        return await self._approvals.find_one_and_update(
            {"_id": approval, "status": "approved", "generation": current},
            {"$set": {"generation": generation + 1}},
            return_document=ReturnDocument.AFTER,
        )

    async def claim_announcement(
        self, approval: str, *, now: datetime, retry_after: timedelta = ANNOUNCE_RETRY
    ) -> bool:
        """True for the one caller that should announce a pending proposal now: it was never
        announced, and no other delivery began announcing it within ``retry_after`` (a
        worker killed between storing the proposal and posting it leaves it unannounced;
        the next delivery of the job announces it)."""
        claimed = await self._approvals.find_one_and_update(
            {
                "_id": approval,
                "status": "pending",
                "notified": {"$exists": False},
                "$or": [
                    {"announcing_at": {"$exists": False}},
                    {"announcing_at": {"$lt": now - retry_after}},
                ],
            },
            {"$set": {"announcing_at": now}},
            projection={"_id": 1},
        )
        return claimed is not None

    async def note(self, approval: str, **fields: Any) -> None:
        """Add facts (the notification's delivery) to an approval."""
        await self._approvals.update_one({"_id": approval}, {"$set": fields})

    async def pending_summary(self) -> PendingSummary:
        """How many proposals wait for a decision, and when the oldest was made."""
        count = await self._approvals.count_documents({"status": "pending"})
        oldest = await self._approvals.find_one(
            {"status": "pending"}, {"created_at": 1}, sort=[("created_at", ASCENDING)]
        )
        return PendingSummary(count, oldest["created_at"] if oldest else None)
