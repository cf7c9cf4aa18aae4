"""Liveness of the background processes, readable by the web app's readiness check."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ruleengine import constants as c
from ruleengine.store.db import Database, Document


class Heartbeats:
    """``heartbeats`` documents: one per dispatcher role and one per worker process."""

    def __init__(self, db: Database) -> None:
        self._beats = db[c.HEARTBEATS]

    async def beat(self, name: str, *, now: datetime, **info: Any) -> None:
        """Record that ``name`` is alive (with whatever it wants to show)."""
        await self._beats.update_one({"_id": name}, {"$set": {"at": now, **info}}, upsert=True)

    async def all(self) -> list[Document]:
        """Every heartbeat."""
        return [d async for d in self._beats.find({})]

    async def remove(self, name: str) -> None:
        """Forget a process that stopped cleanly."""
        await self._beats.delete_one({"_id": name})
