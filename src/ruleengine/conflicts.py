"""Rules that fight, with I/O: the stored rules analysed, a rule being saved checked, live entities.

The analysis itself is pure (:mod:`ruleengine.rules.conflicts`); this module feeds it the
stored rules (those that read; a rule with issues is left out), checks a rule being saved
against the active ones, and — for a live check — lists up to 5 current entities that both
rules of a finding would act on, through the GET-only reader with each account's
registered token. Read-only: nothing here writes to Meta.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from ruleengine.errors import RuleEngineError
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.conflicts import Finding, RuleEntry, find_conflicts
from ruleengine.rules.filtering import LocalFilter, wire
from ruleengine.rules.model import Rule
from ruleengine.store.credentials import CredentialStore, token_ref
from ruleengine.store.ruledocs import StoredRuleError
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)

LIVE_ENTITIES = 5  # current entities named per finding by a live check
LIVE_RULE_PAIRS = 20  # pairs of rules a live check lists entities for (Graph calls per pair)
NEW_RULE_ID = "new"  # the id of a rule being created, in its findings before it is saved


async def stored_entries(store: RuleStore, *, active_only: bool = False) -> list[RuleEntry]:
    """Every stored rule that reads (ACTIVE and PAUSED, or ACTIVE only)."""
    entries: list[RuleEntry] = []
    for item in await store.page():
        if isinstance(item, StoredRuleError) or item.status not in ("ACTIVE", "PAUSED"):
            continue
        if active_only and item.status != "ACTIVE":
            continue
        try:
            rule = item.rule()
        except StoredRuleError:
            continue
        entries.append(RuleEntry(item.id, item.name, rule, item.status))
    return entries


def against_active(
    rule: Rule, active: Sequence[RuleEntry], *, rule_id: str = NEW_RULE_ID
) -> list[Finding]:
    """The conflicts of ``rule`` (being saved) with itself and with the ``active`` rules.

    The rule's own stored version, if ``active`` has it, is replaced by ``rule``.
    """
    others = [e for e in active if e.id != rule_id and e.status == "ACTIVE"]
    entry = RuleEntry(rule_id, rule.name, rule, rule.status)
    return find_conflicts([entry, *others], only_involving={rule_id})


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
                found.append(
                    {
                        "ad_account": account,
                        "id": str(item.get("id")),
                        "name": item.get("name"),
                        "effective_status": item.get("effective_status"),
                    }
                )
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
