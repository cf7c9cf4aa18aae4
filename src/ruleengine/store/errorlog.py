"""The error log: failures grouped by function + normalised message, never a flood.

Messages are normalised (timestamps, UUIDs, IP addresses, ad account ids,
numeric ids of 6+ digits and trace ids masked) so that "campaign 1202… failed"
for 50 campaigns is one group with a count of 50. Each group keeps the last 10
samples (each at most 16 KiB, see :mod:`ruleengine.store.samples`), first/last
seen, occurrences per UTC hour over the last 48 hours (``hourly``: older hours are
dropped as new ones are counted), and a status: active, resolved or ignored. A resolved
group that happens again becomes active again; an ignored one stays ignored.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from bson import ObjectId
from bson.errors import InvalidId
from pydantic import BaseModel, ConfigDict
from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from ruleengine import constants as c
from ruleengine.errors import ErrorReport, NotFoundError
from ruleengine.redact import REDACTOR
from ruleengine.store.db import Database, Document
from ruleengine.store.samples import bounded_sample, valid_utf8

log = logging.getLogger(__name__)

ErrorStatus = Literal["active", "resolved", "ignored"]
SAMPLES_KEPT: Final = 10
HOURS_KEPT: Final = 48
_HOUR: Final = timedelta(hours=1)
_MAX_TEXT: Final = 8000

_MASKS: Final = (
    (re.compile(r"fbtrace_id[=:]\s*\S+", re.I), "fbtrace_id=<trace>"),
    (
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?\b"),
        "<time>",
    ),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<date>"),
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\b(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}\b", re.I), "<ip>"),
    (re.compile(r"\bact_\d+\b"), "act_<id>"),
    (re.compile(r"\b[0-9a-f]{24}\b"), "<oid>"),
    (re.compile(r"\b\d{6,}\b"), "<id>"),
)


def normalise(message: str) -> str:
    """The message with everything that varies between occurrences masked."""
    for pattern, mask in _MASKS:
        message = pattern.sub(mask, message)
    return " ".join(message.split())[:_MAX_TEXT]


def hour_key(at: datetime) -> str:
    """The ``hourly`` key of the UTC hour ``at`` falls in, e.g. ``2026-11-30T16``."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H")


def hours_ending(now: datetime, hours: int = HOURS_KEPT) -> list[datetime]:
    """The starts of the ``hours`` UTC hours ending with the one ``now`` falls in, oldest first."""
    current = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return [current - _HOUR * n for n in range(hours - 1, -1, -1)]


def fingerprint(function: str, normalised: str) -> str:
    """The group key of an error."""
    return hashlib.sha1(f"{function}\n{normalised}".encode()).hexdigest()


class ErrorGroup(BaseModel):
    """One group of the error log."""

    model_config = ConfigDict(frozen=True)

    id: str
    function: str
    message: str
    count: int
    first_seen: datetime
    last_seen: datetime
    status: ErrorStatus
    samples: list[dict[str, Any]]
    hourly: dict[str, int] = {}
    #: who last set the status (a token name), when someone did
    status_changed_by: str | None = None

    def per_hour(self, now: datetime, hours: int = HOURS_KEPT) -> list[int]:
        """Occurrences in each of the ``hours`` UTC hours ending with now's, oldest first."""
        return [self.hourly.get(hour_key(h), 0) for h in hours_ending(now, hours)]

    @classmethod
    def from_mongo(cls, doc: Document) -> ErrorGroup:
        """Build from an ``error_log`` document."""
        return cls(
            id=str(doc["_id"]),
            function=doc["function"],
            message=doc["message"],
            count=doc["count"],
            first_seen=doc["first_seen"],
            last_seen=doc["last_seen"],
            status=doc["status"],
            samples=list(reversed(doc.get("samples", []))),  # newest first
            hourly={str(k): int(v) for k, v in (doc.get("hourly") or {}).items()},
            status_changed_by=doc.get("status_changed_by"),
        )


class ErrorLog:
    """The MongoDB error log; also the :class:`~ruleengine.errors.ErrorSink` of the writer."""

    def __init__(self, db: Database) -> None:
        self._groups = db[c.ERROR_LOG]

    async def report(self, report: ErrorReport) -> None:
        """Record one occurrence (never raises: a broken error log must not break a job)."""
        try:
            await self.record(report, now=datetime.now(UTC))
        except PyMongoError:
            log.exception("could not write to the error log: %s", report.function)

    async def record(self, report: ErrorReport, *, now: datetime, group: str | None = None) -> str:
        """Record one occurrence and return the group id.

        ``group`` names the group outright instead of the normalised message (the
        ``oscillation`` group of one entity's field): its message is then kept as it is.
        """
        message = valid_utf8(REDACTOR.text(report.message[: 4 * _MAX_TEXT]))
        normalised = normalise(message) if group is None else message[:_MAX_TEXT]
        key = {
            "function": report.function,
            "fingerprint": fingerprint(report.function, normalised if group is None else group),
        }
        sample = bounded_sample(
            {
                "at": now,
                "message": message,
                "params": report.params,
                "response": report.response,
                "stack": report.stack,
                "context": report.context,
            }
        )
        update = {
            "$inc": {"count": 1, f"hourly.{hour_key(now)}": 1},
            "$set": {"last_seen": now, "message": normalised},
            "$setOnInsert": {"first_seen": now, "status": "active"},
            "$push": {"samples": {"$each": [sample], "$slice": -SAMPLES_KEPT}},
        }
        # an upsert, then a read by the unique key: the embedded server answers a
        # findAndModify on more than _id by scanning the collection
        for attempt in range(2):
            try:
                await self._groups.update_one(key, update, upsert=True)
                break
            except DuplicateKeyError:  # two first occurrences at once: the second one updates
                if attempt:
                    raise
        doc = await self._groups.find_one(key)
        assert doc is not None, "the group was just upserted"
        oldest = hour_key(hours_ending(now)[0])  # the keys sort as the hours do
        stale = [k for k in doc.get("hourly") or {} if k < oldest]
        if stale:  # at most once an hour per group: the hours that fell out of the window
            await self._groups.update_one(
                {"_id": doc["_id"]}, {"$unset": {f"hourly.{k}": "" for k in stale}}
            )
        if doc["status"] == "resolved":
            await self._groups.update_one(
                {"_id": doc["_id"], "status": "resolved"},
                {"$set": {"status": "active", "reopened_at": now}},
            )
        return str(doc["_id"])

    async def groups(
        self, *, status: ErrorStatus | None = None, limit: int = 100, skip: int = 0
    ) -> list[ErrorGroup]:
        """Groups, most recently seen first."""
        query = {} if status is None else {"status": status}
        cursor = self._groups.find(query).sort("last_seen", DESCENDING).skip(skip).limit(limit)
        return [ErrorGroup.from_mongo(d) async for d in cursor]

    async def count(self, *, status: ErrorStatus | None = None) -> int:
        """How many groups (with ``status``)."""
        return await self._groups.count_documents({} if status is None else {"status": status})

    async def get(self, group_id: str) -> ErrorGroup:
        """One group; raises NotFoundError."""
        doc = await self._groups.find_one({"_id": _oid(group_id)})
        if doc is None:
            raise NotFoundError(f"error group '{group_id}' does not exist")
        return ErrorGroup.from_mongo(doc)

    async def set_status(
        self, group_id: str, status: ErrorStatus, *, now: datetime, by: str | None = None
    ) -> ErrorGroup:
        """Resolve, ignore or re-activate a group; ``by`` is who did (``status_changed_by``)."""
        doc = await self._groups.find_one_and_update(
            {"_id": _oid(group_id)},
            {"$set": {"status": status, "status_changed_at": now, "status_changed_by": by}},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            raise NotFoundError(f"error group '{group_id}' does not exist")
        return ErrorGroup.from_mongo(doc)


def _oid(group_id: str) -> ObjectId:
    try:
        return ObjectId(group_id)
    except (InvalidId, TypeError):
        raise NotFoundError(f"error group '{group_id}' does not exist") from None
