"""Rules that fight, with I/O: the stored rules analysed, a rule being saved checked, live entities.

The analysis itself is pure (:mod:`ruleengine.rules.conflicts`); this module feeds it the
stored rules (those that read; a rule with issues is left out), checks a rule being saved
against the active ones, and — for a live check — lists up to 5 current entities that both
rules of a finding would act on, through the GET-only reader with each account's
registered token. Read-only: nothing here writes to Meta.

:class:`ConflictGate` is the one check of ``RULEENGINE_REFUSE_CONFLICTING_RULES``: the web
app's and the CLI's rule stores run it before every save, activation and rollback (API,
``rules apply``, ``rules rollback``, ``rules import-meta --apply``, ``POST /api/import/meta``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ruleengine.errors import ConflictError, RuleEngineError
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.advantage import advantage_fields, legacy_kind
from ruleengine.rules.conflicts import (
    Finding,
    RuleEntry,
    conflicting_rule_ids,
    find_conflicts,
)
from ruleengine.rules.filtering import LocalFilter, wire
from ruleengine.rules.language.model import Rule
from ruleengine.store.credentials import CredentialStore, token_ref
from ruleengine.store.ruledocs import Loaded, StoredRuleError
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)

LIVE_ENTITIES = 5  # current entities named per finding by a live check
LIVE_RULE_PAIRS = 20  # pairs of rules a live check lists entities for (Graph calls per pair)
NEW_RULE_ID = "new"  # the id of a rule being created, in its findings before it is saved


ANALYSED = ("ACTIVE", "PAUSED")  # the statuses of the stored rules the analysis reads


async def stored_entries(store: RuleStore, *, active_only: bool = False) -> list[RuleEntry]:
    """Every stored rule that reads (ACTIVE and PAUSED, or ACTIVE only); the definitions are
    parsed off the event loop (a thousand rules take about a second)."""
    statuses = ("ACTIVE",) if active_only else ANALYSED
    items = await store.page(statuses=statuses)
    return await asyncio.to_thread(_entries, items, statuses)


def _entries(items: Sequence[Loaded], statuses: Sequence[str]) -> list[RuleEntry]:
    entries: list[RuleEntry] = []
    for item in items:
        if isinstance(item, StoredRuleError) or item.status not in statuses:
            continue
        try:
            rule = item.rule()
        except StoredRuleError:
            continue
        entries.append(RuleEntry(item.id, item.name, rule, item.status))
    return entries


@dataclass(frozen=True)
class Analysis:
    """The findings over every stored rule (ACTIVE and PAUSED) at one state of the rules."""

    entries: list[RuleEntry]
    findings: list[Finding]

    @property
    def conflicting_rules(self) -> dict[str, int]:
        """The ``conflict`` findings per rule id (what the Rules screen badges)."""
        return conflicting_rule_ids(self.findings)


class StoredAnalysis:
    """:class:`Analysis` of the stored rules, computed once per state of the rules.

    The analysis is O(tasks²) over the whole rule set (seconds for a thousand rules); its
    result is kept, per process, until :meth:`RuleStore.fingerprint` says the rules
    changed, so answering it again — the Rules screen's counts on every load, a page of
    findings after another — costs one small query. One computation at a time: callers
    that arrive meanwhile wait for it instead of starting their own.
    """

    def __init__(self) -> None:
        self._key: str | None = None
        self._analysis: Analysis | None = None
        self._lock = asyncio.Lock()
        self._active_key: str | None = None
        self._active: list[RuleEntry] = []
        self._active_lock = asyncio.Lock()

    async def active(self, store: RuleStore) -> list[RuleEntry]:
        """The ACTIVE rules, parsed once per state of the active rules (what a draft's
        conflict check compares against)."""
        key = await store.fingerprint(statuses=("ACTIVE",))
        async with self._active_lock:
            if key != self._active_key:
                self._active = await stored_entries(store, active_only=True)
                self._active_key = key
            return self._active

    async def get(self, store: RuleStore) -> Analysis:
        """The analysis of the rules as stored now."""
        key = await store.fingerprint(statuses=ANALYSED)
        async with self._lock:
            if self._analysis is None or key != self._key:
                entries = await stored_entries(store)
                # pure CPU: off the event loop
                findings = await asyncio.to_thread(find_conflicts, entries)
                # The key read before loading: a change made meanwhile changes the key
                # again, so the next caller recomputes rather than keeping a stale result.
                self._key, self._analysis = key, Analysis(entries, findings)
            return self._analysis


def against_active(
    rule: Rule, active: Sequence[RuleEntry], *, rule_id: str = NEW_RULE_ID
) -> list[Finding]:
    """The conflicts of ``rule`` (being saved) with itself and with the ``active`` rules.

    The rule's own stored version, if ``active`` has it, is replaced by ``rule``.
    """
    others = [e for e in active if e.id != rule_id and e.status == "ACTIVE"]
    entry = RuleEntry(rule_id, rule.name, rule, rule.status)
    return find_conflicts([entry, *others], only_involving={rule_id})


class ConflictingRuleError(ConflictError):
    """A change refused: it would leave an ACTIVE rule that fights active rules (or itself).

    Attributes:
        findings: every finding of the rule, conflicts and notes.
    """

    def __init__(self, what: str, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        fights = sum(1 for f in findings if f.severity == "conflict")
        super().__init__(
            f"not {what}: the rule fights {fights} time(s) with active rules (or itself) and"
            " RULEENGINE_REFUSE_CONFLICTING_RULES is set; see 'conflicts', change the rules'"
            " scopes or conditions, save it PAUSED, or pause the other rule first"
        )


@dataclass(frozen=True)
class ConflictGate:
    """The admission of a rule store (:class:`~ruleengine.store.rules.Admission`).

    A rule being saved, activated or rolled back is checked against the active rules and
    itself; its findings are the change's warnings. With ``refuse``
    (``RULEENGINE_REFUSE_CONFLICTING_RULES``) a change that leaves the rule ``ACTIVE``
    with a conflict (not only notes) raises :class:`ConflictingRuleError` before anything
    is written; a PAUSED rule fights nothing until it is activated, which is checked then.
    """

    refuse: bool

    async def __call__(
        self, store: RuleStore, rule: Rule, *, rule_id: str | None, what: str
    ) -> list[Finding]:
        """The findings of ``rule``; raises :class:`ConflictingRuleError` to refuse it."""
        active = await stored_entries(store, active_only=True)
        findings = await asyncio.to_thread(
            against_active, rule, active, rule_id=rule_id or NEW_RULE_ID
        )
        fights = any(f.severity == "conflict" for f in findings)
        if fights and self.refuse and rule.status == "ACTIVE":
            raise ConflictingRuleError(what, findings)
        return findings


def findings_json(
    findings: Iterable[Finding], *, rename: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Findings as JSON, with rule ids renamed (``new`` → the id a save gave it)."""
    out = []
    for finding in findings:
        data = finding.as_dict()
        for side in data["rules"]:
            side["rule_id"] = (rename or {}).get(side["rule_id"], side["rule_id"])
        out.append(data)
    return out


def _combined_filtering(a: Rule, b: Rule) -> list[dict[str, Any]]:
    """Both rules' filters at once: Meta's ``filtering`` ANDs its entries."""
    return [*a.filtering(), *b.filtering()]


async def live_entities(
    finding: Finding,
    rules: dict[str, Rule],
    *,
    reader: GraphReader,
    credentials: CredentialStore,
    limit: int = LIVE_ENTITIES,
) -> list[dict[str, Any]]:
    """Up to ``limit`` current entities both rules of ``finding`` would act on.

    Each shared ad account is listed with both rules' filters (Meta ANDs them), and what
    it answers is checked against each rule's filters as the dispatcher applies them
    (archived objects only for a rule that names a status). An account whose listing
    fails is named with its error instead.
    """
    a, b = rules[finding.a.rule_id], rules[finding.b.rule_id]
    local = [LocalFilter(r.level, wire(r.filtering())) for r in (a, b)]
    fields = sorted({"id", "name", "effective_status"} | local[0].fields | local[1].fields)
    fields += advantage_fields(a.level)  # a legacy Advantage+ campaign refuses most changes
    found: list[dict[str, Any]] = []
    for account in finding.accounts:
        if len(found) >= limit:
            break
        try:
            token = await credentials.usable_token(token_ref(account))
            items = await reader.list_entities(
                account, a.level, token=token, fields=fields, filtering=_combined_filtering(a, b)
            )
        except RuleEngineError as exc:  # Graph errors, a token Meta refused
            found.append({"ad_account": account, "error": str(exc)})
            continue
        for item in items:
            # ad set filters on the campaign's name were applied by Meta already
            mine = all(f.parent_fields or f.keep(item) for f in local)
            if mine and len(found) < limit:
                entity = {
                    "ad_account": account,
                    "id": str(item.get("id")),
                    "name": item.get("name"),
                    "effective_status": item.get("effective_status"),
                }
                if (kind := legacy_kind(item)) is not None:
                    entity["advantage"] = kind
                found.append(entity)
    return found


async def add_live_entities(
    findings: Sequence[Finding],
    rules: dict[str, Rule],
    *,
    reader: GraphReader,
    credentials: CredentialStore,
) -> list[Finding]:
    """The findings, each with its live entities (listed once per pair of rules).

    Only the first :data:`LIVE_RULE_PAIRS` pairs of rules are listed, conflicts before
    notes; the findings of the others keep ``entities`` unset.
    """
    cache: dict[tuple[str, str], list[dict[str, Any]]] = {}
    ranked = sorted(findings, key=lambda f: f.severity != "conflict")
    for finding in ranked:
        key = (finding.a.rule_id, finding.b.rule_id)
        if key not in cache and len(cache) < LIVE_RULE_PAIRS:
            cache[key] = await live_entities(finding, rules, reader=reader, credentials=credentials)
    out: list[Finding] = []
    for finding in findings:
        key = (finding.a.rule_id, finding.b.rule_id)
        out.append(replace(finding, entities=cache[key]) if key in cache else finding)
    return out
