"""Oscillation holds: an entity's field that stops changing until someone clears the hold.

One document per (entity, field), ``_id`` = ``<entity id>:<field>``: placed (``active``)
by the write path when the field oscillates and a task involved says
``"on_oscillation": "hold"`` (:mod:`ruleengine.guards.oscillation`), cleared (``cleared``,
``cleared_at``) through ``DELETE /api/holds/{id}``. Changes before ``cleared_at`` no longer
count towards an oscillation, so a cleared field is not held again by its old swings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pymongo import DESCENDING, ReturnDocument

from ruleengine import constants as c
from ruleengine.errors import NotFoundError
from ruleengine.store.db import Database, Document

HoldStatus = Literal["active", "cleared"]


def hold_id(entity_id: str, field_name: str) -> str:
    """The id of the hold on one entity's field."""
    return f"{entity_id}:{field_name}"


@dataclass(frozen=True)
class HoldView:
    """The holds of some entities, as the write path reads them (one query).

    Attributes:
        active: (entity, field) pairs held now.
        cleared_at: (entity, field) → when its last hold was cleared.
    """

    active: set[tuple[str, str]] = field(default_factory=set)
    cleared_at: dict[tuple[str, str], datetime] = field(default_factory=dict)


class HoldStore:
    """The ``holds`` collection."""

    def __init__(self, db: Database) -> None:
        self._holds = db[c.HOLDS]

    async def view(self, entity_ids: Sequence[str]) -> HoldView:
        """The holds (active, or when last cleared) of these entities."""
        view = HoldView()
        if not entity_ids:
            return view
        async for doc in self._holds.find({"entity_id": {"$in": list(entity_ids)}}):
            key = (doc["entity_id"], doc["field"])
            if doc["status"] == "active":
                view.active.add(key)
            elif doc.get("cleared_at") is not None:
                view.cleared_at[key] = doc["cleared_at"]
        return view

    async def place(
        self, entity_id: str, field_name: str, *, now: datetime, details: dict[str, Any]
    ) -> None:
        """Hold the field (again); ``details`` say why (entity name, account, rules, changes)."""
        await self._holds.update_one(
            {"_id": hold_id(entity_id, field_name)},
            {
                "$set": {
                    "entity_id": entity_id,
                    "field": field_name,
                    "status": "active",
                    "placed_at": now,
                    "cleared_at": None,
                    "cleared_by": None,
                    **details,
                }
            },
            upsert=True,
        )

    async def page(self, *, status: str | None, limit: int, skip: int) -> list[Document]:
        """Holds, most recently placed first."""
        query = {} if status is None else {"status": status}
        cursor = self._holds.find(query).sort("placed_at", DESCENDING).skip(skip).limit(limit)
        return [d async for d in cursor]

    async def count(self, *, status: str | None) -> int:
        """How many holds (with ``status``)."""
        return await self._holds.count_documents({} if status is None else {"status": status})

    async def clear(self, hold: str, *, now: datetime, by: str | None = None) -> Document:
        """Clear a hold: the field may change again; ``by`` is who did. Raises NotFoundError."""
        doc = await self._holds.find_one_and_update(
            {"_id": hold},
            {"$set": {"status": "cleared", "cleared_at": now, "cleared_by": by}},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            raise NotFoundError(f"hold '{hold}' does not exist")
        return dict(doc)
