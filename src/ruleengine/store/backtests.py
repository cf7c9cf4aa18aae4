"""The ``backtests`` collection: one document per backtest asked of the web app, kept a week.

A backtest runs as a background task of the web process (:mod:`ruleengine.web.api.backtests`);
its document is how a client follows it: ``queued`` → ``running`` (with progress) → ``done``
with the result, or ``failed`` with a message. The stored request holds the rule document
that was replayed (a draft is not saved anywhere else), never a token.

A TTL index on ``expires_at`` (created + :data:`KEEP`) deletes old ones; :meth:`get` also
refuses an expired document the TTL monitor has not reached yet. A result whose JSON is
larger than :data:`PLAIN_MAX_BYTES` is kept zlib-compressed (``result_z``): fires of a long
backtest on a big account compress about tenfold, and MongoDB refuses documents over 16 MiB.
"""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta
from typing import Any, Final, Literal, Protocol

import orjson
from bson import Binary, ObjectId

from ruleengine import constants as c
from ruleengine.errors import RuleEngineError
from ruleengine.redact import REDACTOR
from ruleengine.store.db import Database, Document

BacktestStatus = Literal["queued", "running", "done", "failed"]
UNFINISHED: Final = ("queued", "running")
KEEP: Final = timedelta(days=7)
RESTARTED: Final = "interrupted: the web process restarted"
PLAIN_MAX_BYTES: Final = 4 << 20
# what MongoDB's 16 MiB document limit leaves for a compressed result and the rest
COMPRESSED_MAX_BYTES: Final = 14 << 20


class ProgressLike(Protocol):
    """What :meth:`BacktestStore.progress` reads of the service's ``Progress``."""

    @property
    def days_done(self) -> int: ...

    @property
    def days_total(self) -> int: ...

    @property
    def stage(self) -> str: ...


class ResultTooLarge(RuleEngineError):
    """A backtest result too big to keep even compressed."""


def new_backtest_id() -> str:
    """A fresh backtest id (24 hex characters)."""
    return str(ObjectId())


def progress_dict(days_done: int, days_total: int, stage: str) -> dict[str, Any]:
    """The stored (and answered) progress."""
    return {"days_done": days_done, "days_total": days_total, "stage": stage}


def _encode_result(result: dict[str, Any]) -> dict[str, Any]:
    """The fields that hold ``result``: plain, or compressed when large."""
    raw = orjson.dumps(result)
    if len(raw) <= PLAIN_MAX_BYTES:
        return {"result": orjson.loads(raw), "result_z": None}
    packed = zlib.compress(raw, 6)
    if len(packed) > COMPRESSED_MAX_BYTES:
        raise ResultTooLarge(
            f"the result is too large to keep ({len(raw) >> 20} MiB of JSON); backtest fewer"
            " days or ad accounts, or narrow the rule's filters"
        )
    return {"result": None, "result_z": Binary(packed)}


def decode_result(doc: Document) -> dict[str, Any] | None:
    """The result of a stored backtest (None until it is done)."""
    packed = doc.get("result_z")
    if packed is not None:
        decoded: dict[str, Any] = orjson.loads(zlib.decompress(bytes(packed)))
        return decoded
    result: dict[str, Any] | None = doc.get("result")
    return result


class BacktestStore:
    """Create, move on and read backtest documents.

    Every write is a single-document update keyed by ``_id``; those that close a backtest
    match only an unfinished one, so a late progress or a second close never reopens or
    overwrites a finished backtest.
    """

    def __init__(self, db: Database) -> None:
        self._docs = db[c.BACKTESTS]

    async def create(
        self,
        *,
        request: dict[str, Any],
        days_total: int,
        now: datetime,
        backtest_id: str | None = None,
    ) -> Document:
        """Store a new ``queued`` backtest of ``request`` and return its document.

        Args:
            request: ``rule_id``, ``version``, ``days``, ``accounts``, ``as_seen``,
                ``rule_name`` and ``rule`` (the rule document replayed; never a token).
            days_total: the days the replay will cover.
            now: the creation time; the document expires :data:`KEEP` later.
            backtest_id: a fixed id (default: a new one).
        """
        doc: Document = {
            "_id": backtest_id or new_backtest_id(),
            "status": "queued",
            "progress": progress_dict(0, days_total, "queued"),
            "request": REDACTOR.data(request),
            "result": None,
            "result_z": None,
            "error": None,
            "created_at": now,
            "updated_at": now,
            "started_at": None,
            "finished_at": None,
            "expires_at": now + KEEP,
        }
        await self._docs.insert_one(doc)
        return doc

    async def start(self, backtest_id: str, *, now: datetime) -> bool:
        """Mark a queued backtest ``running``; False when it is no longer queued."""
        result = await self._docs.update_one(
            {"_id": backtest_id, "status": "queued"},
            {"$set": {"status": "running", "started_at": now, "updated_at": now}},
        )
        return result.modified_count == 1

    async def progress(self, backtest_id: str, progress: ProgressLike, *, now: datetime) -> None:
        """Record the progress of a running backtest (one small update, no read)."""
        await self._docs.update_one(
            {"_id": backtest_id, "status": "running"},
            {
                "$set": {
                    "progress": progress_dict(
                        progress.days_done, progress.days_total, progress.stage
                    ),
                    "updated_at": now,
                }
            },
        )

    async def finish(self, backtest_id: str, result: dict[str, Any], *, now: datetime) -> bool:
        """Close a backtest ``done`` with its result (tokens masked); False if already closed.

        Raises:
            ResultTooLarge: the result cannot be kept; the caller fails the backtest.
        """
        fields = _encode_result(REDACTOR.data(result))
        total = result.get("days") if isinstance(result.get("days"), int) else None
        update: dict[str, Any] = {
            "status": "done",
            "error": None,
            "updated_at": now,
            "finished_at": now,
            "progress.stage": "done",
            **fields,
        }
        if total is not None:
            update |= {"progress.days_done": total, "progress.days_total": total}
        done = await self._docs.update_one(
            {"_id": backtest_id, "status": {"$in": list(UNFINISHED)}}, {"$set": update}
        )
        return done.modified_count == 1

    async def fail(self, backtest_id: str, message: str, *, now: datetime) -> bool:
        """Close a backtest ``failed`` with ``message`` (tokens masked); False if already closed."""
        failed = await self._docs.update_one(
            {"_id": backtest_id, "status": {"$in": list(UNFINISHED)}},
            {
                "$set": {
                    "status": "failed",
                    "error": REDACTOR.text(message),
                    "updated_at": now,
                    "finished_at": now,
                }
            },
        )
        return failed.modified_count == 1

    async def get(self, backtest_id: str, *, now: datetime) -> Document | None:
        """The backtest's document; None when it is unknown or has expired."""
        doc = await self._docs.find_one({"_id": backtest_id})
        if doc is None or doc["expires_at"] <= now:
            return None
        return doc

    async def interrupt_unfinished(self, *, now: datetime, message: str = RESTARTED) -> int:
        """Fail every ``queued``/``running`` backtest (an earlier process's); returns how many."""
        result = await self._docs.update_many(
            {"status": {"$in": list(UNFINISHED)}},
            {"$set": {"status": "failed", "error": message, "updated_at": now, "finished_at": now}},
        )
        return result.modified_count
