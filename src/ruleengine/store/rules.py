"""Rules and their immutable versions; every change of state is a compare-and-set.

A save that changes a rule's definition writes a new ``rule_versions`` document
(version n+1, checksum of the canonical JSON) and then moves the rule's
``active_version`` pointer, conditional on the pointer still being where it was
read. Saving an identical definition writes nothing. Rollback and activation
move the same pointer the same way, so two concurrent rollbacks cannot both win.

A store made with an ``admit`` check (the web app's and the CLI's:
:class:`ruleengine.analysis.conflicts.ConflictGate`) runs it before every save, activation and
rollback, whatever path asked for it: it answers the conflicts the rule would have as
the change's ``warnings``, or refuses the change before anything is written.

(Over 400 lines: every change of a rule's state is a compare-and-set on the same two
documents, and the saves, rollback, status changes, orphan repair and the due query
are kept side by side so their conditions can be read against each other.)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo

from bson import ObjectId
from pydantic import TypeAdapter
from pymongo import DESCENDING, DeleteMany, ReturnDocument, UpdateOne
from pymongo.errors import DuplicateKeyError, PyMongoError

from ruleengine import constants as c
from ruleengine.errors import ConflictError, NotFoundError
from ruleengine.rules.basics import Status
from ruleengine.rules.conflicts import Finding
from ruleengine.rules.language.model import Rule, definition_checksum
from ruleengine.rules.language.schedule import Schedule, active_window, first_run, reanchor
from ruleengine.store.db import Database, Document
from ruleengine.store.ruledocs import (
    DueRules,
    Loaded,
    RuleDoc,
    StoredRuleError,
    VersionDoc,
    load,
    parse_stored,
)

log = logging.getLogger(__name__)

# A save inserts its version and then moves the pointer, a few milliseconds apart. A version
# the pointer does not account for is an orphan only once it is older than this: younger, it
# may belong to a save still in flight in another process.
ORPHAN_GRACE = timedelta(minutes=1)
# No schedule is due less than a minute after its last run: only rules further ahead of the
# clock than that may have been left ahead by a step back.
SHORTEST_RUN_GAP = timedelta(minutes=1)
_SCHEDULE: TypeAdapter[Schedule] = TypeAdapter(Schedule)
T = TypeVar("T")


@dataclass(frozen=True)
class SaveResult:
    """The outcome of :meth:`RuleStore.save`, with the conflicts its admission found."""

    rule: RuleDoc
    created: bool
    new_version: bool
    warnings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class Changed:
    """A rule after an activation or a rollback, with the conflicts its admission found."""

    rule: RuleDoc
    warnings: tuple[Finding, ...] = ()


class Admission(Protocol):
    """What a store runs before a save, an activation or a rollback writes anything.

    It answers the findings to report as the change's warnings, or raises to refuse the
    change (a :class:`~ruleengine.errors.ConflictError`). ``rule`` is the rule as the
    change would leave it (its ``status`` included); ``rule_id`` is None for a rule not
    created yet.
    """

    async def __call__(
        self, store: RuleStore, rule: Rule, *, rule_id: str | None, what: str
    ) -> Sequence[Finding]:
        """The findings of ``rule`` becoming what the change makes it; raise to refuse."""
        ...


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

    def __init__(self, db: Database, *, admit: Admission | None = None) -> None:
        self._rules = db[c.RULES]
        self._versions = db[c.RULE_VERSIONS]
        self._admit = admit

    async def _admitted(self, rule: Rule, rule_id: str | None, what: str) -> tuple[Finding, ...]:
        """The admission's findings for ``rule`` (none without one); it may refuse."""
        if self._admit is None:
            return ()
        return tuple(await self._admit(self, rule, rule_id=rule_id, what=what))

    async def get(self, rule_id: str) -> RuleDoc:
        """The rule with ``rule_id``; raises NotFoundError, or StoredRuleError when damaged."""
        doc = await self._rules.find_one({"_id": rule_id})
        if doc is None:
            raise NotFoundError(f"rule '{rule_id}' does not exist")
        return RuleDoc.from_mongo(doc)

    async def load(self, rule_id: str) -> Loaded:
        """Like :meth:`get`, but a damaged document comes back as its StoredRuleError."""
        try:
            return await self.get(rule_id)
        except StoredRuleError as exc:
            return exc

    async def find_by_name(self, name: str) -> RuleDoc | None:
        """The rule called ``name``, if any."""
        doc = await self._rules.find_one({"name": name})
        return None if doc is None else RuleDoc.from_mongo(doc)

    async def page(
        self, *, limit: int = 0, skip: int = 0, statuses: Sequence[str] | None = None
    ) -> list[Loaded]:
        """Rules by name, ``limit`` (0: all) from ``skip``, of ``statuses`` (None: every one);
        damaged ones as their error."""
        query = {} if statuses is None else {"status": {"$in": list(statuses)}}
        cursor = self._rules.find(query).sort([("name", 1), ("_id", 1)]).skip(skip).limit(limit)
        return [load(d) async for d in cursor]

    async def fingerprint(self, *, statuses: Sequence[str]) -> str:
        """A digest of the rules of ``statuses``: which exist, at which version, status and
        time of change. Every save, activation, pause, rollback or setting aside changes it;
        reading it costs one projected query (no definition is read or parsed)."""
        fields = ("status", "version", "checksum", "updated_at")
        query = {"status": {"$in": list(statuses)}}
        cursor = self._rules.find(query, dict.fromkeys(fields, 1)).sort("_id", 1)
        digest = hashlib.sha256()
        async for doc in cursor:
            digest.update(repr([doc["_id"], *(doc.get(f) for f in fields)]).encode())
        return digest.hexdigest()

    async def count(self) -> int:
        """How many rules there are."""
        return await self._rules.count_documents({})

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
        A save is all or nothing: when it is refused, no version is left behind.

        Raises:
            ConflictError: the rule changed meanwhile, the name is taken, or the
                store's admission refused it (nothing written).
        """
        existing = await (self.get(rule_id) if rule_id else self.find_by_name(rule.name))
        if existing is not None and expected_version not in (None, existing.version):
            raise ConflictError(
                f"rule '{existing.id}' is at version {existing.version}, not {expected_version};"
                " reload it and apply your change again"
            )
        found = await self._admitted(rule, existing.id if existing else None, "saved")
        if existing is None:
            return SaveResult(await self._create(rule, now, author, source), True, True, found)
        # Compare definitions, not only checksums: a hand edit changes one but not the other.
        if rule.definition() == existing.definition:
            if rule.status != existing.status:
                doc = await self._write_status(existing, rule.status, now=now, by=None)
                return SaveResult(doc, False, False, found)
            return SaveResult(existing, False, False, found)
        doc = await self._update(existing, rule, now, author, source)
        return SaveResult(doc, False, True, found)

    async def _create(self, rule: Rule, now: datetime, author: str, source: str) -> RuleDoc:
        rule_id = str(ObjectId())
        definition = rule.definition()
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
            "updated_by": author,
            **_schedule_fields(rule, now),  # before any write: what can fail, fails here
        }

        async def insert() -> RuleDoc:
            try:
                await self._rules.insert_one(doc)
            except DuplicateKeyError:
                raise ConflictError(f"a rule named '{rule.name}' already exists") from None
            return RuleDoc.from_mongo(doc)

        version = self._version_doc(rule_id, 1, definition, now, author, source)
        return await self._with_version(version, now, insert)

    @staticmethod
    def _version_doc(
        rule_id: str,
        version: int,
        definition: dict[str, Any],
        now: datetime,
        author: str,
        source: str,
    ) -> Document:
        return {
            "rule_id": rule_id,
            "version": version,
            "checksum": definition_checksum(definition),
            "definition": definition,
            "created_at": now,
            "author": author,
            "source": source,
        }

    async def _with_version(
        self, version: Document, now: datetime, write: Callable[[], Awaitable[T]]
    ) -> T:
        """Insert ``version``, then ``write``; when the write is refused, the version goes too.

        Any other failure (MongoDB gone mid-write) leaves the outcome unknown: the
        version stays, and :meth:`repair_orphans` removes it only if the pointer never
        reached it.
        """
        version_id = await self._insert_version(version, now)
        try:
            return await write()
        except ConflictError:
            await self._discard_version(version_id)
            raise

    async def _insert_version(self, version: Document, now: datetime) -> Any:
        for attempt in range(2):
            try:
                return (await self._versions.insert_one(dict(version))).inserted_id
            except DuplicateKeyError:
                # An orphan of a save that died between its two writes blocks the number
                # for good; clear it once, then the number is someone else's: retry later.
                if attempt or not await self._repair_rule(version["rule_id"], now=now):
                    raise ConflictError(
                        f"version {version['version']} of rule '{version['rule_id']}' was just"
                        " written by someone else; reload the rule and retry"
                    ) from None
        raise AssertionError("unreachable")

    async def _discard_version(self, version_id: Any) -> None:
        try:
            await self._versions.delete_one({"_id": version_id})
        except PyMongoError as exc:  # repair_orphans removes it at the next start
            log.warning("could not remove the version of a refused save: %s", exc)

    async def _update(
        self, existing: RuleDoc, rule: Rule, now: datetime, author: str, source: str
    ) -> RuleDoc:
        version = existing.latest_version + 1
        definition = rule.definition()
        update = self._pointer_update(existing, version, rule, definition, now)
        update["updated_by"] = author
        doc = self._version_doc(existing.id, version, definition, now, author, source)
        return await self._with_version(doc, now, lambda: self._move_pointer(existing, update))

    @staticmethod
    def _pointer_update(
        existing: RuleDoc, version: int, rule: Rule, definition: dict[str, Any], now: datetime
    ) -> dict[str, Any]:
        """The ``$set`` that makes ``version`` (``definition``, parsed as ``rule``) active.

        Computed before anything is written: whatever can fail, fails here.
        """
        start, end = active_window(rule.date_range, rule.zone())
        update: dict[str, Any] = {
            "name": rule.name,
            "status": rule.status,
            "version": version,
            "latest_version": max(version, existing.latest_version),
            "checksum": definition_checksum(definition),
            "definition": definition,
            "updated_at": now,
            "active_from": start,
            "active_until": end,
        }
        if _schedule_changed(existing.definition, definition):
            update["next_execute_at"] = first_run(rule.schedule, now=now, tz=rule.zone())
        return update

    async def _move_pointer(self, existing: RuleDoc, update: dict[str, Any]) -> RuleDoc:
        try:
            doc = await self._rules.find_one_and_update(
                {"_id": existing.id, "version": existing.version},
                # a new active version answers both an issue and a migration note
                {"$set": update, "$unset": {"issue": "", "migration": ""}},
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            raise ConflictError(f"a rule named '{update['name']}' already exists") from None
        if doc is None:
            raise ConflictError(
                f"rule '{existing.id}' moved off version {existing.version} while this change"
                " was being saved; reload it and try again"
            )
        return RuleDoc.from_mongo(doc)

    async def repair_orphans(self, *, now: datetime) -> int:
        """Remove versions a failed save left behind; returns how many. Idempotent.

        An orphan is a version above its rule's ``latest_version`` (older than
        :data:`ORPHAN_GRACE`). Versions of a rule id without a rule document are
        kept: they block nothing, and may be the only copy of a rule deleted by hand.
        """
        cursor = self._rules.find({"latest_version": {"$type": "number"}}, {"latest_version": 1})
        ops = [
            DeleteMany(self._orphans_of(d["_id"], d["latest_version"], now)) async for d in cursor
        ]
        if not ops:
            return 0
        removed = (await self._versions.bulk_write(ops, ordered=False)).deleted_count
        if removed:
            log.warning("removed %d orphan rule version(s) left by failed saves", removed)
        return removed

    async def _repair_rule(self, rule_id: str, *, now: datetime) -> int:
        doc = await self._rules.find_one({"_id": rule_id}, {"latest_version": 1})
        if doc is None or not isinstance(doc.get("latest_version"), int):
            return 0
        result = await self._versions.delete_many(
            self._orphans_of(rule_id, doc["latest_version"], now)
        )
        if result.deleted_count:
            log.warning("rule %s: removed %d orphan version(s)", rule_id, result.deleted_count)
        return result.deleted_count

    @staticmethod
    def _orphans_of(rule_id: str, latest_version: int, now: datetime) -> dict[str, Any]:
        return {
            "rule_id": rule_id,
            "version": {"$gt": latest_version},
            "created_at": {"$lt": now - ORPHAN_GRACE},
        }

    async def versions(self, rule_id: str) -> list[VersionDoc]:
        """Every version of a rule, newest first."""
        await self.load(rule_id)
        cursor = self._versions.find({"rule_id": rule_id}).sort("version", DESCENDING)
        return [VersionDoc.model_validate(d) async for d in cursor]

    async def version(self, rule_id: str, version: int) -> VersionDoc:
        """One version of a rule; raises NotFoundError."""
        doc = await self._versions.find_one({"rule_id": rule_id, "version": version})
        if doc is None:
            raise NotFoundError(f"rule '{rule_id}' has no version {version}")
        return VersionDoc.model_validate(doc)

    async def rollback(
        self,
        rule_id: str,
        version: int,
        *,
        now: datetime,
        expected_version: int | None = None,
        by: str | None = None,
    ) -> Changed:
        """Make ``version`` the active one again (compare-and-set on the current version).

        A rule with issues comes back paused; activate it once it looks right. ``by``
        (who asked) is recorded as the rule's ``updated_by``. The store's admission sees
        the rule as the rollback leaves it, before anything is written.

        Raises:
            NotFoundError: no such rule or version.
            ConflictError: the active version is not ``expected_version`` (or moved
                meanwhile), or the store's admission refused the rollback.
            StoredRuleError: that version does not validate any more either.
        """
        existing = await self.get(rule_id)
        if expected_version is not None and existing.version != expected_version:
            raise ConflictError(
                f"rule '{rule_id}' is at version {existing.version}, not {expected_version}"
            )
        target = await self.version(rule_id, version)
        if existing.version == version and existing.status != "HAS_ISSUES":
            return Changed(existing)
        rule = parse_stored(existing, target.definition, existing.edit_status)
        found = await self._admitted(rule, rule_id, "rolled back")
        update = self._pointer_update(existing, version, rule, target.definition, now)
        if by is not None:
            update["updated_by"] = by
        return Changed(await self._move_pointer(existing, update), found)

    async def set_status(
        self, rule_id: str, status: Status, *, now: datetime, by: str | None = None
    ) -> Changed:
        """Pause or activate; activation re-arms the schedule from now and clears an issue.

        ``by`` (who asked) is recorded as the rule's ``updated_by``. An activation passes
        the store's admission first.

        Raises:
            StoredRuleError: activating a rule whose definition does not validate.
            ConflictError: the store's admission refused the activation (nothing written).
        """
        existing = await self.get(rule_id)
        found: tuple[Finding, ...] = ()
        if status == "ACTIVE":
            try:
                rule = existing.rule().model_copy(update={"status": "ACTIVE"})
            except StoredRuleError:
                if existing.status != "ACTIVE":
                    raise
            else:  # an ACTIVE rule that no longer reads is the dispatcher's to set aside
                found = await self._admitted(rule, existing.id, "activated")
        return Changed(await self._write_status(existing, status, now=now, by=by), found)

    async def _write_status(
        self, existing: RuleDoc, status: Status, *, now: datetime, by: str | None
    ) -> RuleDoc:
        update: dict[str, Any] = {"status": status, "updated_at": now}
        if by is not None:
            update["updated_by"] = by
        if status == "ACTIVE" and existing.status != "ACTIVE":
            rule = existing.rule()
            update["next_execute_at"] = first_run(rule.schedule, now=now, tz=rule.zone())
        rule_id = existing.id
        doc = await self._rules.find_one_and_update(
            {"_id": rule_id},
            {"$set": update, "$unset": {"issue": ""}},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            raise NotFoundError(f"rule '{rule_id}' does not exist")
        return RuleDoc.from_mongo(doc)

    async def set_aside(self, error: StoredRuleError, *, now: datetime) -> bool:
        """Mark an ACTIVE rule that no longer validates HAS_ISSUES, with the problem.

        Compare-and-set on the ``updated_at`` read, so a fix saved meanwhile is never
        marked. Returns False when the rule changed (or was not ACTIVE).
        """
        query: dict[str, Any] = {"_id": error.rule_id, "status": "ACTIVE"}
        if error.updated_at is not None:
            query["updated_at"] = error.updated_at
        issue = {"message": error.problem, "at": now}
        result = await self._rules.update_one(
            query, {"$set": {"status": "HAS_ISSUES", "issue": issue, "updated_at": now}}
        )
        return result.modified_count == 1

    async def due(self, now: datetime, *, limit: int = 10_000) -> DueRules:
        """ACTIVE rules whose ``next_execute_at`` has come, inside their date range.

        Each is parsed here; one that no longer validates lands in ``broken``
        instead of failing the query for every other rule.
        """
        query = {
            "status": "ACTIVE",
            "next_execute_at": {"$lte": now},
            "active_from": {"$not": {"$gt": now}},
            "active_until": {"$not": {"$lte": now}},
        }
        due = DueRules()
        async for raw in self._rules.find(query).sort("next_execute_at").limit(limit):
            try:
                doc = RuleDoc.from_mongo(raw)
                due.ready.append((doc, doc.rule()))
            except StoredRuleError as exc:
                due.broken.append(exc)
        return due

    async def advance(
        self, rule_id: str, *, expected_next: datetime, next_execute_at: datetime, now: datetime
    ) -> bool:
        """Move the schedule on; only ``next_execute_at``, ``last_execute_at`` and
        ``last_scheduled_at`` (the instant dispatched, ``expected_next``) are written.

        Returns False (and writes nothing) when ``next_execute_at`` is no longer the
        value read, e.g. the rule was re-armed by an edit meanwhile.
        """
        result = await self._rules.update_one(
            {"_id": rule_id, "next_execute_at": expected_next},
            {"$set": _advanced(expected_next, next_execute_at, now)},
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
                {"$set": _advanced(expected, nxt, now)},
            )
            for rule_id, expected, nxt in advances
        ]
        result = await self._rules.bulk_write(ops, ordered=False)
        return result.modified_count

    async def reanchor(self, now: datetime) -> int:
        """Bring back the schedules a clock stepped back left more than one run ahead of ``now``
        (:func:`~ruleengine.rules.language.schedule.reanchor`); returns how many moved.

        Only ``next_execute_at`` is written, compare-and-set on the value read: an edit or a
        dispatch meanwhile wins. Interval rules no further ahead than their interval are left
        out by the query itself; a rule whose schedule does not parse is left to the due query.
        """
        every_ms = {"$multiply": ["$definition.schedule.every_minutes", 60_000]}
        query = {
            "status": "ACTIVE",
            "next_execute_at": {"$gt": now + SHORTEST_RUN_GAP},
            "$or": [
                {"definition.schedule.mode": {"$ne": "interval"}},
                {"$expr": {"$gt": ["$next_execute_at", {"$add": [now, every_ms]}]}},
            ],
        }
        fields = ["next_execute_at", "last_scheduled_at", "definition.schedule"]
        fields.append("definition.timezone")
        ops = [
            UpdateOne(
                {"_id": doc["_id"], "next_execute_at": doc["next_execute_at"]},
                {"$set": {"next_execute_at": moved}},
            )
            async for doc in self._rules.find(query, dict.fromkeys(fields, 1))
            if (moved := _reanchored(doc, now)) is not None
        ]
        if not ops:
            return 0
        return (await self._rules.bulk_write(ops, ordered=False)).modified_count


def _advanced(scheduled: datetime, next_execute_at: datetime, now: datetime) -> dict[str, Any]:
    """What a dispatch writes: the next run, when it ran, and the instant it ran for."""
    return {
        "next_execute_at": next_execute_at,
        "last_execute_at": now,
        "last_scheduled_at": scheduled,
    }


def _reanchored(doc: Document, now: datetime) -> datetime | None:
    """Where a stored rule's schedule goes (see :meth:`RuleStore.reanchor`), if anywhere."""
    definition = doc.get("definition") or {}
    try:
        schedule = _SCHEDULE.validate_python(definition.get("schedule"))
        tz = ZoneInfo(definition.get("timezone", "UTC"))
    except (KeyError, TypeError, ValueError):  # ValidationError and unknown zones are too
        return None
    last = doc.get("last_scheduled_at")
    return reanchor(
        schedule,
        next_at=doc["next_execute_at"],
        now=now,
        tz=tz,
        last_scheduled=last if isinstance(last, datetime) else None,
    )
