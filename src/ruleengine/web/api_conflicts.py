"""``/api/rules/conflicts``: rules that fight, and a rule's conflicts as its save's ``warnings``.

``GET`` analyses every stored rule (ACTIVE and PAUSED; ``both_active`` says which pairs
fight now) and ``POST`` a draft against the active rules; ``?live=1`` adds up to 5 current
entities per finding, listed through the GET-only reader. :func:`save_warnings` is what
the rule saves of :mod:`ruleengine.web.api` answer, or refuse with when
``RULEENGINE_REFUSE_CONFLICTING_RULES`` is set. See docs/api.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from ruleengine.conflicts import (
    NEW_RULE_ID,
    add_live_entities,
    against_active,
    findings_json,
    stored_entries,
)
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.conflicts import Finding, RuleEntry, conflicting_rule_ids, find_conflicts
from ruleengine.rules.model import Rule
from ruleengine.web.jsonio import ApiError, json_response, read_json
from ruleengine.web.state import services, settings_of

_TRUE = ("1", "true", "yes")


def _live(request: web.Request) -> bool:
    return request.query.get("live", "").lower() in _TRUE


async def _with_live(
    request: web.Request, findings: list[Finding], entries: Sequence[RuleEntry]
) -> list[Finding]:
    if not _live(request) or not findings:
        return findings
    svc = services(request)
    reader = GraphReader.from_settings(svc.preview.session.view())
    rules = {e.id: e.rule for e in entries}
    return await add_live_entities(findings, rules, reader=reader, credentials=svc.credentials)


def _answer(findings: list[Finding], *, checked: int, live: bool) -> dict[str, Any]:
    counts = conflicting_rule_ids(findings)
    return {
        "findings": findings_json(findings),
        "conflicting_rules": counts,
        "conflicts": sum(1 for f in findings if f.severity == "conflict"),
        "notes": sum(1 for f in findings if f.severity == "note"),
        "checked_rules": checked,
        "live": live,
    }


async def list_conflicts(request: web.Request) -> web.Response:
    """``GET /api/rules/conflicts?live=&rule_id=``: the findings over every stored rule."""
    entries = await stored_entries(services(request).rules)
    rule_id = request.query.get("rule_id")
    wanted = None if rule_id is None else {rule_id}
    # pure CPU, O(tasks²) over the whole rule set: off the event loop
    findings = await asyncio.to_thread(find_conflicts, entries, only_involving=wanted)
    findings = await _with_live(request, findings, entries)
    return json_response(_answer(findings, checked=len(entries), live=_live(request)))


async def check_draft(request: web.Request) -> web.Response:
    """``POST /api/rules/conflicts``: a draft (an edit of ``?rule_id=``) vs the active rules."""
    from ruleengine.web.api import validated_rule  # the route table lives there

    rule = await validated_rule(request, await read_json(request, what="rule"))
    rule_id = request.query.get("rule_id") or NEW_RULE_ID
    active = await stored_entries(services(request).rules, active_only=True)
    findings = against_active(rule, active, rule_id=rule_id)
    entries = [*active, RuleEntry(rule_id, rule.name, rule, rule.status)]
    findings = await _with_live(request, findings, entries)
    return json_response(_answer(findings, checked=len(active) + 1, live=_live(request)))


async def save_warnings(
    request: web.Request, rule: Rule, *, rule_id: str | None, what: str = "saved"
) -> list[Finding]:
    """The conflicts of a rule being saved (or activated) with the active rules and itself.

    Raises:
        ApiError: 409 with the findings, when ``RULEENGINE_REFUSE_CONFLICTING_RULES`` is
            set, the rule is ``ACTIVE`` (a paused rule fights nothing until activated,
            which is checked then) and some finding is a conflict (not only a note).
    """
    active = await stored_entries(services(request).rules, active_only=True)
    findings = against_active(rule, active, rule_id=rule_id or NEW_RULE_ID)
    refused = [f for f in findings if f.severity == "conflict"]
    if refused and rule.status == "ACTIVE" and settings_of(request).refuse_conflicting_rules:
        raise ApiError(
            409,
            f"not {what}: the rule fights {len(refused)} time(s) with active rules (or itself)"
            " and RULEENGINE_REFUSE_CONFLICTING_RULES is set; see 'conflicts', change the"
            " rules' scopes or conditions, save it PAUSED, or pause the other rule first",
            conflicts=findings_json(findings),
        )
    return findings


def add_routes(app: web.Application) -> None:
    """Register the routes (before ``/api/rules/{id}``, which would take ``conflicts``)."""
    app.router.add_get("/api/rules/conflicts", list_conflicts, name="api.conflicts")
    app.router.add_post("/api/rules/conflicts", check_draft)
