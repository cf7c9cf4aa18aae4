"""Listing snapshots: an entity listing too big for a job payload, stored once in MongoDB.

A job for an ad account with thousands of ad sets would carry megabytes into
Redis, once per (rule, account). Instead the dispatcher stores the listing here
once and the job carries a :class:`ListingRef`. Snapshots are content-addressed:
the id is the SHA-256 of (account, level, the entities' JSON), so every rule
sharing a listing in a tick — and a later tick listing the same entities —
shares one snapshot, and storing it again changes nothing but its expiry
(``$max``). A listing is split into parts of :data:`PART_ENTITIES` entities, far
below MongoDB's 16 MiB document limit. Snapshots hold entities as listed (ids,
names, statuses, budgets …), never a token.

A TTL index on ``expires_at`` deletes them; the expiry is :data:`MARGIN` past the
last moment a job may still be running (the dispatcher's ``keep_until``: the
job's queue expiry + the job timeout). A job whose snapshot is gone anyway (deleted by hand, a
part missing) gets :class:`~ruleengine.errors.ListingExpired`.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pymongo import UpdateOne

from ruleengine import constants as c
from ruleengine.errors import ListingExpired
from ruleengine.rules.entity import Entity
from ruleengine.store.db import Database

PART_ENTITIES: Final = 1000  # ~0.3 MB a part for ad sets as listed
# kept this much longer than the last job that may read it could still be running
MARGIN: Final = timedelta(hours=1)

ENTITY_LIST: Final = TypeAdapter(list[Entity])


class ListingRef(BaseModel):
    """What a job carries instead of its entities: which snapshot, and what to expect in it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    count: int = Field(ge=0)  # entities
    parts: int = Field(ge=1)
    bytes: int = Field(ge=0)  # the entity list's size as JSON (what would have been inline)


def entities_json(entities: list[Entity]) -> bytes:
    """The entity list as a job payload would carry it (JSON, unset fields left out)."""
    return ENTITY_LIST.dump_json(entities, exclude_none=True)


def snapshot_digest(account: str, level: str, listing_json: bytes) -> str:
    """The content address of a listing: SHA-256 of (account, level, its JSON)."""
    digest = hashlib.sha256()
    for piece in (account.encode(), level.encode()):
        digest.update(piece + b"\0")
    digest.update(listing_json)
    return digest.hexdigest()


class ListingSnapshots:
    """The ``listing_snapshots`` collection: one document per part of a stored listing."""

    def __init__(self, db: Database) -> None:
        self._parts = db[c.LISTING_SNAPSHOTS]

    async def store(
        self,
        account: str,
        level: str,
        entities: list[Entity],
        *,
        listing_json: bytes,
        now: datetime,
        keep_until: datetime,
    ) -> ListingRef:
        """Store ``entities`` (whose JSON is ``listing_json``) until ``keep_until`` + MARGIN.

        Idempotent by content: storing the same listing again only moves its expiry
        later, never earlier.
        """
        digest = snapshot_digest(account, level, listing_json)
        rows = [e.model_dump(mode="json", exclude_none=True) for e in entities]
        chunks = [rows[i : i + PART_ENTITIES] for i in range(0, len(rows), PART_ENTITIES)] or [[]]
        await self._parts.bulk_write(
            [
                UpdateOne(
                    {"_id": f"{digest}:{part}"},
                    {
                        "$setOnInsert": {
                            "snapshot": digest,
                            "account": account,
                            "level": level,
                            "part": part,
                            "entities": chunk,
                            "created_at": now,
                        },
                        "$max": {"expires_at": keep_until + MARGIN},
                    },
                    upsert=True,
                )
                for part, chunk in enumerate(chunks)
            ],
            ordered=False,
        )
        return ListingRef(
            sha256=digest, count=len(entities), parts=len(chunks), bytes=len(listing_json)
        )

    async def keep(self, ref: ListingRef, *, until: datetime) -> None:
        """Make a stored snapshot last at least ``until`` (another rule's job needs it longer)."""
        await self._parts.update_many(
            {"snapshot": ref.sha256}, {"$max": {"expires_at": until + MARGIN}}
        )

    async def load(self, ref: ListingRef, *, account: str, level: str) -> list[Entity]:
        """The entities of a snapshot of ``account``'s ``level`` listing.

        Raises:
            ListingExpired: the snapshot (or a part of it) is gone, or it is not what the
                reference says (another account's, another level's, another size).
        """
        cursor = self._parts.find(
            {"snapshot": ref.sha256, "account": account, "level": level}
        ).sort("part", 1)
        parts = [doc async for doc in cursor]
        rows = [row for doc in parts for row in doc["entities"]]
        if [doc["part"] for doc in parts] != list(range(ref.parts)) or len(rows) != ref.count:
            raise ListingExpired(
                f"the {level} listing of {account} this job refers to"
                f" (snapshot {ref.sha256[:12]}, {ref.count} entities) is gone"
                f" ({len(parts)} of {ref.parts} parts left); nothing was evaluated or written,"
                " the rule's next run lists the account again"
            )
        return ENTITY_LIST.validate_python(rows)
