"""Rules and their immutable versions; every change of state is a compare-and-set.

A save that changes a rule's definition writes a new ``rule_versions`` document
(version n+1, checksum of the canonical JSON) and then moves the rule's
``active_version`` pointer, conditional on the pointer still being where it was
read. Saving an identical definition writes nothing. Rollback and activation
move the same pointer the same way, so two concurrent rollbacks cannot both win.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson import ObjectId
from pydantic import BaseModel, ConfigDict
from pymongo import DESCENDING, ReturnDocument, UpdateOne
from pymongo.errors import DuplicateKeyError

from ruleengine import constants as c
from ruleengine.errors import ConflictError, NotFoundError
from ruleengine.rules.model import Rule, Status, definition_checksum
from ruleengine.rules.schedule import active_window, first_run
from ruleengine.store.db import Database, Document


class RuleDoc(BaseModel):
    """A stored rule: the active definition plus its operational state."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    status: Status
    version: int
    latest_version: int
    checksum: str
    definition: dict[str, Any]
    next_execute_at: datetime | None = None
    last_execute_at: datetime | None = None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_mongo(cls, doc: Document) -> RuleDoc:
        """Build from a ``rules`` document."""
        return cls(id=doc["_id"], **{k: v for k, v in doc.items() if k != "_id"})

    def rule(self) -> Rule:
        """The active definition as a validated :class:`Rule`."""
        return Rule.model_validate({**self.definition, "status": self.status})


class VersionDoc(BaseModel):
    """One immutable version of a rule's definition."""

    model_config = ConfigDict(frozen=True)

    rule_id: str
    version: int
    checksum: str
    definition: dict[str, Any]
    created_at: datetime
    author: str
    source: str


@dataclass(frozen=True)
class SaveResult:
    """The outcome of :meth:`RuleStore.save`."""

    rule: RuleDoc
    created: bool
    new_version: bool


def _schedule_fields(rule: Rule, now: datetime) -> dict[str, Any]:
    start, end = active_window(rule.date_range, rule.zone())
    return {
        "next_execute_at": first_run(rule.schedule, now=now, tz=rule.zone()),
        "active_from": start,
        "active_until": end,
    }


def _schedule_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return bool(
        old.get("schedule") != new.get("schedule") or old.get("timezone") != new.get("timezone")
    )


class RuleStore:
    """Rules, versions, status changes, the due query and schedule advances."""

    def __init__(self, db: Database) -> None:
        self._rules = db[c.RULES]
        self._versions = db[c.RULE_VERSIONS]

    async def get(self, rule_id: str) -> RuleDoc:
        """The rule with ``rule_id``; raises NotFoundError."""
        doc = await self._rules.find_one({"_id": rule_id})
        if doc is None:
            raise NotFoundError(f"rule '{rule_id}' does not exist")
        return RuleDoc.from_mongo(doc)

    async def find_by_name(self, name: str) -> RuleDoc | None:
        """The rule called ``name``, if any."""
        doc = await self._rules.find_one({"name": name})
        return None if doc is None else RuleDoc.from_mongo(doc)

    async def all(self, *, status: Status | None = None) -> list[RuleDoc]:
        """Every rule (optionally only those with ``status``), by name."""
        query = {} if status is None else {"status": status}
        return [RuleDoc.from_mongo(d) async for d in self._rules.find(query).sort("name")]

    async def save(
        self,
        rule: Rule,
        *,
        now: datetime,
        author: str,
        source: str,
        rule_id: str | None = None,
        expected_version: int | None = None,
    ) -> SaveResult:
        """Create or update a rule; a new version only when the definition changed.

        Without ``rule_id`` the rule is matched by name. ``expected_version``
        makes the save conditional on the active version (HTTP If-Match style).

        Raises:
            ConflictError: the rule changed meanwhile, or the name is taken.
        """
        existing = await (self.get(rule_id) if rule_id else self.find_by_name(rule.name))
        if existing is None:
            return SaveResult(await self._create(rule, now, author, source), True, True)
        if expected_version is not None and existing.version != expected_version:
            raise ConflictError(
                f"rule '{existing.id}' is at version {existing.version}, not {expected_version};"
                " reload it and apply your change again"
            )
        if rule.checksum() == existing.checksum:
            if rule.status != existing.status:
                return SaveResult(
                    await self.set_status(existing.id, rule.status, now=now), False, False
                )
            return SaveResult(existing, False, False)
        return SaveResult(await self._update(existing, rule, now, author, source), False, True)

    async def _create(self, rule: Rule, now: datetime, author: str, source: str) -> RuleDoc:
        rule_id = str(ObjectId())
        definition = rule.definition()
        await self._insert_version(rule_id, 1, definition, now, author, source)
        doc = {
            "_id": rule_id,
            "name": rule.name,
            "status": rule.status,
            "version": 1,
            "latest_version": 1,
            "checksum": definition_checksum(definition),
            "definition": definition,
            "last_execute_at": None,
            "created_at": now,
            "updated_at": now,
            **_schedule_fields(rule, now),
        }
        try:
            await self._rules.insert_one(doc)
        except DuplicateKeyError:
            raise ConflictError(f"a rule named '{rule.name}' already exists") from None
        return RuleDoc.from_mongo(doc)

    async def _insert_version(
        self,
        rule_id: str,
        version: int,
        definition: dict[str, Any],
        now: datetime,
        author: str,
        source: str,
    ) -> None:
        try:
            await self._versions.insert_one(
                {
                    "rule_id": rule_id,
                    "version": version,
                    "checksum": definition_checksum(definition),
                    "definition": definition,
                    "created_at": now,
                    "author": author,
                    "source": source,
                }
            )
        except DuplicateKeyError:
            raise ConflictError(
                f"version {version} of rule '{rule_id}' was just written by someone else; retry"
            ) from None

    async def _update(
        self, existing: RuleDoc, rule: Rule, now: datetime, author: str, source: str
    ) -> RuleDoc:
        version = existing.latest_version + 1
        definition = rule.definition()
        await self._insert_version(existing.id, version, definition, now, author, source)
        return await self._move_pointer(existing, version, definition, rule.status, now)

    async def _move_pointer(
        self,
        existing: RuleDoc,
        version: int,
        definition: dict[str, Any],
        status: Status,
        now: datetime,
    ) -> RuleDoc:
        update: dict[str, Any] = {
            "name": definition["name"],
            "status": status,
            "version": version,
            "latest_version": max(version, existing.latest_version),
            "checksum": definition_checksum(definition),
            "definition": definition,
            "updated_at": now,
        }
        rule = Rule.model_validate({**definition, "status": status})
        start, end = active_window(rule.date_range, rule.zone())
        update |= {"active_from": start, "active_until": end}
        if _schedule_changed(existing.definition, definition):
            update["next_execute_at"] = first_run(rule.schedule, now=now, tz=rule.zone())
        try:
            doc = await self._rules.find_one_and_update(
                {"_id": existing.id, "version": existing.version},
                {"$set": update},
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            raise ConflictError(f"a rule named '{definition['name']}' already exists") from None
        if doc is None:
            raise ConflictError(
                f"rule '{existing.id}' moved off version {existing.version} while this change"
                " was being saved; reload it and try again"
            )
        return RuleDoc.from_mongo(doc)

    async def versions(self, rule_id: str) -> list[VersionDoc]:
        """Every version of a rule, newest first."""
        await self.get(rule_id)
        cursor = self._versions.find({"rule_id": rule_id}).sort("version", DESCENDING)
        return [VersionDoc.model_validate(d) async for d in cursor]

    async def version(self, rule_id: str, version: int) -> VersionDoc:
        """One version of a rule; raises NotFoundError."""
        doc = await self._versions.find_one({"rule_id": rule_id, "version": version})
        if doc is None:
            raise NotFoundError(f"rule '{rule_id}' has no version {version}")
        return VersionDoc.model_validate(doc)

    async def rollback(
        self, rule_id: str, version: int, *, now: datetime, expected_version: int | None = None
    ) -> RuleDoc:
        """Make ``version`` the active one again (compare-and-set on the current version).

        Raises:
            NotFoundError: no such rule or version.
            ConflictError: the active version is not ``expected_version`` (or moved meanwhile).
        """
        existing = await self.get(rule_id)
        if expected_version is not None and existing.version != expected_version:
            raise ConflictError(
                f"rule '{rule_id}' is at version {existing.version}, not {expected_version}"
            )
        target = await self.version(rule_id, version)
        if existing.version == version:
            return existing
        return await self._move_pointer(existing, version, target.definition, existing.status, now)

    async def set_status(self, rule_id: str, status: Status, *, now: datetime) -> RuleDoc:
        """Pause or activate; activation re-arms the schedule from now."""
        existing = await self.get(rule_id)
        update: dict[str, Any] = {"status": status, "updated_at": now}
        if status == "ACTIVE" and existing.status != "ACTIVE":
            rule = existing.rule()
            update["next_execute_at"] = first_run(rule.schedule, now=now, tz=rule.zone())
        doc = await self._rules.find_one_and_update(
            {"_id": rule_id}, {"$set": update}, return_document=ReturnDocument.AFTER
        )
        if doc is None:
            raise NotFoundError(f"rule '{rule_id}' does not exist")
        return RuleDoc.from_mongo(doc)

    async def due(self, now: datetime, *, limit: int = 10_000) -> list[RuleDoc]:
        """ACTIVE rules whose ``next_execute_at`` has come, inside their date range."""
        query = {
            "status": "ACTIVE",
            "next_execute_at": {"$lte": now},
            "active_from": {"$not": {"$gt": now}},
            "active_until": {"$not": {"$lte": now}},
        }
        cursor = self._rules.find(query).sort("next_execute_at").limit(limit)
        return [RuleDoc.from_mongo(d) async for d in cursor]

    async def advance(
        self, rule_id: str, *, expected_next: datetime, next_execute_at: datetime, now: datetime
    ) -> bool:
        """Move the schedule on; only ``next_execute_at`` and ``last_execute_at`` are written.

        Returns False (and writes nothing) when ``next_execute_at`` is no longer the
        value read, e.g. the rule was re-armed by an edit meanwhile.
        """
        result = await self._rules.update_one(
            {"_id": rule_id, "next_execute_at": expected_next},
            {"$set": {"next_execute_at": next_execute_at, "last_execute_at": now}},
        )
        return result.modified_count == 1

    async def advance_many(
        self, advances: Sequence[tuple[str, datetime, datetime]], *, now: datetime
    ) -> int:
        """:meth:`advance` for many rules in one round trip: (rule id, expected, next) each.

        Returns how many rules moved on (the others changed meanwhile and keep their value).
        """
        if not advances:
            return 0
        ops = [
            UpdateOne(
                {"_id": rule_id, "next_execute_at": expected},
                {"$set": {"next_execute_at": nxt, "last_execute_at": now}},
            )
            for rule_id, expected, nxt in advances
        ]
        result = await self._rules.bulk_write(ops, ordered=False)
        return result.modified_count
