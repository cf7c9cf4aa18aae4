"""Stored rules as the engine reads them: the rule document, its versions, and what is wrong.

A rule document holds the active definition plus its operational state. A stored
definition that no longer validates (a timezone the tz database lacks, a hand edit in
MongoDB) does not raise out of a read: it comes back as a :class:`StoredRuleError`
saying what is wrong, so one bad rule never stops the dispatcher or the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ruleengine.errors import RuleEngineError
from ruleengine.rules.basics import Status
from ruleengine.rules.language.model import Rule, rule_errors
from ruleengine.store.db import Document

# A rule's status: what users set (ACTIVE, PAUSED), or HAS_ISSUES, set by the dispatcher
# when the stored rule no longer validates; a valid save or an activation clears it.
RuleStatus = Literal["ACTIVE", "PAUSED", "HAS_ISSUES"]


class StoredRuleError(RuleEngineError):
    """A stored rule that no longer validates: a hand edit, or a timezone the tz database lost.

    Attributes:
        rule_id: the rule's id.
        problem: what is wrong, field by field (JSON paths).
        name: the rule's name, when the document has one.
        updated_at: the document's ``updated_at`` as read (for compare-and-set).
    """

    def __init__(
        self,
        rule_id: str,
        problem: str,
        *,
        name: str | None = None,
        updated_at: datetime | None = None,
    ) -> None:
        self.rule_id = rule_id
        self.problem = problem
        self.name = name
        self.updated_at = updated_at
        super().__init__(
            f"rule '{rule_id}' no longer validates: {problem}; save a corrected definition"
            f" (PUT /api/rules/{rule_id}) or roll back to a good version"
        )


def _problems(exc: ValidationError) -> str:
    return "; ".join(str(e) for e in rule_errors(exc))


class RuleIssue(BaseModel):
    """Why a rule cannot run; ``at`` is when the dispatcher set it aside (None: found on read)."""

    model_config = ConfigDict(frozen=True)

    message: str
    at: datetime | None = None


class MigrationNote(BaseModel):
    """Why a stored rule was left at its old format by the startup migration (store/formats)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["not_migrated"] = "not_migrated"
    format: int = 1
    message: str
    at: datetime


class RuleDoc(BaseModel):
    """A stored rule: the active definition plus its operational state."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    status: RuleStatus
    version: int
    latest_version: int
    checksum: str
    definition: dict[str, Any]
    next_execute_at: datetime | None = None
    last_execute_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    #: who made the last change (a token name, a CLI user); None before it was recorded
    updated_by: str | None = None
    issue: RuleIssue | None = None
    migration: MigrationNote | None = None

    @classmethod
    def from_mongo(cls, doc: Document) -> RuleDoc:
        """Build from a ``rules`` document; raises StoredRuleError when it is damaged."""
        try:
            return cls(id=doc["_id"], **{k: v for k, v in doc.items() if k != "_id"})
        except ValidationError as exc:
            name, updated_at = doc.get("name"), doc.get("updated_at")
            raise StoredRuleError(
                str(doc["_id"]),
                f"the rule document is damaged: {_problems(exc)}",
                name=name if isinstance(name, str) else None,
                updated_at=updated_at if isinstance(updated_at, datetime) else None,
            ) from None

    @property
    def edit_status(self) -> Status:
        """The status an edit keeps when it names none: a rule with issues comes back paused."""
        return "PAUSED" if self.status == "HAS_ISSUES" else self.status

    def rule(self) -> Rule:
        """The active definition as a validated :class:`Rule`; raises StoredRuleError."""
        return parse_stored(self, self.definition, self.edit_status)


def parse_stored(doc: RuleDoc, definition: dict[str, Any], status: Status) -> Rule:
    """``definition`` (of rule ``doc``) as a :class:`Rule`; raises :class:`StoredRuleError`."""
    try:
        return Rule.model_validate({**definition, "status": status})
    except ValidationError as exc:
        raise StoredRuleError(
            doc.id, _problems(exc), name=doc.name, updated_at=doc.updated_at
        ) from None


# A rule as read from MongoDB: loaded, or what is wrong with it.
Loaded = RuleDoc | StoredRuleError


def load(doc: Document) -> Loaded:
    """The rule in ``doc``, or what is wrong with it."""
    try:
        return RuleDoc.from_mongo(doc)
    except StoredRuleError as exc:
        return exc


@dataclass(frozen=True)
class DueRules:
    """The due query's answer: rules ready to dispatch, and due ones that no longer validate."""

    ready: list[tuple[RuleDoc, Rule]] = field(default_factory=list)
    broken: list[StoredRuleError] = field(default_factory=list)


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
