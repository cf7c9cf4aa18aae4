"""Read-only queries over ``followups`` for the web app: pages, counts and overdue timers.

:class:`ruleengine.followups.FollowupScheduler` owns the writes (and the timers);
the API, readiness and metrics only need filtered pages with a total, counts by
status and how many follow-ups are overdue, which live here so the scheduler
stays the workers' and the dispatcher's.

A follow-up is **overdue** when it still waits (``pending`` or ``scheduled``)
more than :data:`OVERDUE_AFTER` past its due time: its timer did not fire, so
either no worker is running or Redis lost it and the dispatcher has not re-armed
it (is Redis down?).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, get_args

from pymongo import ASCENDING

from ruleengine import constants as c
from ruleengine.errors import NotFoundError
from ruleengine.followups import FollowupStatus
from ruleengine.store.db import Database, Document

FOLLOWUP_STATUSES: Final[tuple[str, ...]] = get_args(FollowupStatus)
WAITING: Final[tuple[str, ...]] = ("pending", "scheduled")
OVERDUE_AFTER: Final = timedelta(minutes=5)


def is_overdue(status: str, due_at: datetime, *, now: datetime) -> bool:
    """Whether a follow-up in ``status`` due at ``due_at`` is overdue at ``now``."""
    return status in WAITING and due_at < now - OVERDUE_AFTER


@dataclass(frozen=True)
class FollowupPage:
    """One page of follow-ups and how many match in all."""

    items: list[Document]
    total: int


class FollowupReads:
    """What the web app reads from ``followups`` (never writes)."""

    def __init__(self, db: Database) -> None:
        self._followups = db[c.FOLLOWUPS]

    async def get(self, key: str) -> Document:
        """One follow-up by key; raises NotFoundError."""
        doc = await self._followups.find_one({"_id": key})
        if doc is None:
            raise NotFoundError(f"follow-up '{key}' does not exist")
        return doc

    async def page(
        self, *, filters: dict[str, Any], limit: int = 50, skip: int = 0
    ) -> FollowupPage:
        """Follow-ups matching ``filters`` (equality; None is no filter), soonest due first."""
        query = {k: v for k, v in filters.items() if v is not None}
        cursor = (
            self._followups.find(query)
            .sort([("due_at", ASCENDING), ("_id", ASCENDING)])
            .skip(skip)
            .limit(limit)
        )
        items = [doc async for doc in cursor]
        return FollowupPage(items=items, total=await self._followups.count_documents(query))

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
