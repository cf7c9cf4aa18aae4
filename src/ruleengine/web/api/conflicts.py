"""``/api/rules/conflicts``: rules that fight, found before they run.

``GET`` pages through the findings over every stored rule (ACTIVE and PAUSED;
``both_active`` says which pairs fight now) and needs a token of any role: the analysis is
O(tasks²) over the whole rule set (:class:`~ruleengine.analysis.conflicts.StoredAnalysis` keeps it
until the rules change). ``GET …/counts`` answers only the ``conflict`` findings per rule —
what the Rules screen badges — from the same kept analysis, and is a read like any other.
``POST`` checks a draft against the active rules. ``?live=1`` adds up to 5 current entities
per finding, listed through the GET-only reader with the accounts' tokens: it spends Meta's
rate limit, so it needs the editor role, like a preview. A save's conflicts are its
``warnings`` (the rule store's admission, :class:`~ruleengine.analysis.conflicts.ConflictGate`).
See docs/api.md.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any, Final

from aiohttp import web

from ruleengine.analysis.conflicts import (
    ANALYSED,
    NEW_RULE_ID,
    add_live_entities,
    against_active,
    findings_json,
)
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.conflicts import Finding, RuleEntry, conflicting_rule_ids
from ruleengine.web.api.rule_input import validated_rule
from ruleengine.web.auth import require_role
from ruleengine.web.jsonio import int_param, json_response, read_json
from ruleengine.web.state import services

_TRUE: Final = ("1", "true", "yes")
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 500


def _live(request: web.Request) -> bool:
    """Whether the request asks for live entities; only an editor (or higher) may."""
    live = request.query.get("live", "").lower() in _TRUE
    if live:
        require_role(request, "editor")  # it lists entities at Meta: rate limit spent
    return live


async def _with_live(
    request: web.Request, findings: list[Finding], entries: Sequence[RuleEntry]
) -> list[Finding]:
    if not findings:
        return findings
    svc = services(request)
    reader = GraphReader.from_settings(svc.preview.session.view())
    rules = {e.id: e.rule for e in entries}
    return await add_live_entities(findings, rules, reader=reader, credentials=svc.credentials)


def _severities(findings: Sequence[Finding]) -> dict[str, int]:
    conflicts = sum(1 for f in findings if f.severity == "conflict")
    return {"conflicts": conflicts, "notes": len(findings) - conflicts}


async def list_conflicts(request: web.Request) -> web.Response:
    """``GET /api/rules/conflicts?live=&rule_id=&limit=&offset=``: a page of the findings
    (a costly read, :mod:`ruleengine.web.costly`, keyed on the state of the rules too)."""
    live = _live(request)
    limit = int_param(request, "limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    rule_id = request.query.get("rule_id")
    svc = services(request)
    state = await svc.rules.fingerprint(statuses=ANALYSED)

    async def compute() -> dict[str, Any]:
        return await _page(request, live=live, limit=limit, offset=offset, rule_id=rule_id)

    inputs = (state, live, limit, offset, rule_id)
    return json_response(await svc.costly.answer("conflicts", inputs, compute))


async def _page(
    request: web.Request, *, live: bool, limit: int, offset: int, rule_id: str | None
) -> dict[str, Any]:
    analysis = await services(request).conflicts.get(services(request).rules)
    findings = analysis.findings
    if rule_id is not None:
        findings = [f for f in findings if rule_id in (f.a.rule_id, f.b.rule_id)]
    page = findings[offset : offset + limit]
    if live:
        page = await _with_live(request, page, analysis.entries)
    return {
        "findings": findings_json(page),
        "total": len(findings),
        "limit": limit,
        "offset": offset,
        "conflicting_rules": conflicting_rule_ids(findings),
        **_severities(findings),
        "checked_rules": len(analysis.entries),
        "live": live,
    }


async def conflict_counts(request: web.Request) -> web.Response:
    """``GET /api/rules/conflicts/counts``: the ``conflict`` findings per rule id, no findings."""
    analysis = await services(request).conflicts.get(services(request).rules)
    return json_response(
        {
            "conflicting_rules": analysis.conflicting_rules,
            **_severities(analysis.findings),
            "checked_rules": len(analysis.entries),
        }
    )


async def check_draft(request: web.Request) -> web.Response:
    """``POST /api/rules/conflicts``: a draft (an edit of ``?rule_id=``) vs the active rules
    (a costly read, :mod:`ruleengine.web.costly`: keyed on the body and the active rules)."""
    live = _live(request)
    rule_id = request.query.get("rule_id") or NEW_RULE_ID
    body = hashlib.sha256(await request.read()).hexdigest()
    svc = services(request)
    state = await svc.rules.fingerprint(statuses=("ACTIVE",))

    async def compute() -> dict[str, Any]:
        return await _check(request, live=live, rule_id=rule_id)

    return json_response(
        await svc.costly.answer("conflict_check", (state, body, rule_id, live), compute)
    )


async def _check(request: web.Request, *, live: bool, rule_id: str) -> dict[str, Any]:
    rule = await validated_rule(request, await read_json(request, what="rule"))
    active = await services(request).conflicts.active(services(request).rules)
    findings = await asyncio.to_thread(against_active, rule, active, rule_id=rule_id)
    if live:
        entries = [*active, RuleEntry(rule_id, rule.name, rule, rule.status)]
        findings = await _with_live(request, findings, entries)
    return {
        "findings": findings_json(findings),
        "conflicting_rules": conflicting_rule_ids(findings),
        **_severities(findings),
        "checked_rules": len(active) + 1,
        "live": live,
    }


def add_routes(app: web.Application) -> None:
    """Register the routes (before ``/api/rules/{id}``, which would take ``conflicts``)."""
    app.router.add_get("/api/rules/conflicts", list_conflicts, name="api.conflicts")
    app.router.add_get("/api/rules/conflicts/counts", conflict_counts, name="api.conflict_counts")
    app.router.add_post("/api/rules/conflicts", check_draft)
