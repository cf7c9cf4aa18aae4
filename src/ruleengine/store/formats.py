"""Stored rules of an old format moved to the current one, once, at every process start.

The web app, the dispatcher and every CLI command that opens the database run
:func:`migrate_rules` after the orphan repair. A format-1 rule (action budgets in minor
units) gets a new version in format 2 (currency units, the same meaning on its
accounts), authored ``migration`` with source ``format-2`` and its checksum like every
version. The save is a compare-and-set on the version read, so two processes starting
together migrate each rule once: the loser sees a conflict and leaves it. A rule that
cannot be converted (accounts of different currency decimals, an account of unknown
currency) keeps its version and runs as before; it carries a ``migration`` note, shown
by ``GET /api/rules/{id}``, and the error log gets one entry per new reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ruleengine import constants as c
from ruleengine.errors import ConflictError, ErrorReport
from ruleengine.rules.language.model import Rule
from ruleengine.rules.language.money import CURRENT_FORMAT, migrate_stored
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.ruledocs import RuleDoc, StoredRuleError
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)

AUTHOR = "migration"
SOURCE = f"format-{CURRENT_FORMAT}"
FUNCTION = "store.formats.migrate_rules"


@dataclass
class MigrationReport:
    """What one pass did: rule ids migrated, kept at their format (with why), left to others."""

    migrated: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    raced: list[str] = field(default_factory=list)


async def migrate_rules(db: Database, *, now: datetime) -> MigrationReport:
    """Move every stored rule of an old format to the current one; idempotent, race-safe."""
    report = MigrationReport()
    currencies = {
        d["_id"]: d.get("currency") async for d in db[c.ACCOUNTS].find({}, {"currency": 1})
    }
    store = RuleStore(db)
    query = {"definition.format": {"$ne": CURRENT_FORMAT}, "status": {"$ne": "HAS_ISSUES"}}
    async for raw in db[c.RULES].find(query):
        try:
            doc = RuleDoc.from_mongo(raw)
        except StoredRuleError:
            continue  # damaged: the dispatcher sets it aside; a fix is saved in format 2
        await _migrate_one(db, store, doc, currencies, now=now, report=report)
    if report.migrated or report.kept:
        log.info(
            "rule formats: %d rule(s) migrated to format %d, %d kept at their format",
            len(report.migrated),
            CURRENT_FORMAT,
            len(report.kept),
        )
    return report


async def _migrate_one(
    db: Database,
    store: RuleStore,
    doc: RuleDoc,
    currencies: dict[str, Any],
    *,
    now: datetime,
    report: MigrationReport,
) -> None:
    migration = migrate_stored(doc.definition, currencies)
    problem = migration.problem
    if migration.definition is not None:
        try:
            rule = Rule.model_validate({**migration.definition, "status": doc.edit_status})
        except ValidationError:
            return  # the stored definition does not validate: its own issue says so
        try:
            await store.save(
                rule,
                now=now,
                author=AUTHOR,
                source=SOURCE,
                rule_id=doc.id,
                expected_version=doc.version,
            )
        except ConflictError:
            report.raced.append(doc.id)  # another process (or an edit) got there first
            return
        log.info("rule %s (%s): migrated to format %d", doc.id, doc.name, CURRENT_FORMAT)
        report.migrated.append(doc.id)
        return
    assert problem is not None
    report.kept[doc.id] = problem
    await _note(db, doc, problem, now=now)


async def _note(db: Database, doc: RuleDoc, problem: str, *, now: datetime) -> None:
    """Mark the rule (once per version and reason) and log the reason to the error log."""
    message = f"rule {doc.id} ({doc.name}) was kept at format 1: {problem}"
    note = {"status": "not_migrated", "format": 1, "message": message, "at": now}
    result = await db[c.RULES].update_one(
        {"_id": doc.id, "version": doc.version, "migration.message": {"$ne": message}},
        {"$set": {"migration": note}},
    )
    if result.modified_count != 1:
        return  # already noted (by this process at an earlier start, or another one now)
    log.warning("%s", message)
    await ErrorLog(db).record(
        ErrorReport(
            function=FUNCTION,
            message=message,
            context={"rule_id": doc.id, "rule_name": doc.name, "rule_version": doc.version},
        ),
        now=now,
    )
