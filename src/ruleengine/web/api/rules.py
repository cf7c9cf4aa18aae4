"""REST API for rules under ``/api/rules``.

Rule bodies are validated exactly as the CLI validates files, against the
registered ad accounts and the configured webhooks; every save is recorded with
the request's token name as author (:func:`~ruleengine.web.auth.actor`) and source
``web``, and answers the rule's conflicts with the active
rules as ``warnings``: the rule store's admission
(:class:`ruleengine.analysis.conflicts.ConflictGate`) finds them, or refuses the change with a 409.
See ``docs/api.md`` for the reference.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from ruleengine.analysis.conflicts import NEW_RULE_ID, findings_json
from ruleengine.errors import FieldError
from ruleengine.rules.language.model import Rule
from ruleengine.rules.language.schedule import describe
from ruleengine.store.ruledocs import Loaded, RuleDoc, RuleIssue, StoredRuleError, VersionDoc
from ruleengine.web.api.labels import with_accounts
from ruleengine.web.api.rule_input import validated_rule
from ruleengine.web.auth import actor
from ruleengine.web.jsonio import (
    ApiError,
    int_param,
    invalid,
    json_response,
    read_json,
    read_object,
)
from ruleengine.web.state import services
from ruleengine.worker.preview import PreviewTooBig, preview_rule

MAX_VERSION = 2**63 - 1  # what MongoDB's int64 holds
SOURCE = "web"
# A rule version in If-Match / ?expected_version=: ASCII digits (no other scripts' digits, no
# trailing newline), and few enough of them to fit MongoDB's int64.
_ETAG = re.compile(r'(?:W/)?"?([0-9]{1,18})"?')


def _now() -> datetime:
    return datetime.now(UTC)


_UNKNOWN: dict[str, Any] = {
    "format": None,
    "level": None,
    "ad_accounts": [],
    "schedule": None,
    "timezone": None,
    "tasks": 0,
}


def rule_summary(item: Loaded) -> dict[str, Any]:
    """A rule as listed: state, version, schedule in words, next/last run, any issue.

    A rule whose definition no longer validates is listed with its ``issue``
    (the recorded one, else what reading it finds now) instead of failing the list.
    """
    if isinstance(item, StoredRuleError):
        return _damaged(item)
    doc = item
    summary = {
        "id": doc.id,
        "name": doc.name,
        "status": doc.status,
        "issue": None if doc.issue is None else doc.issue.model_dump(),
        "migration": None if doc.migration is None else doc.migration.model_dump(),
        "version": doc.version,
        "latest_version": doc.latest_version,
        "next_execute_at": doc.next_execute_at,
        "last_execute_at": doc.last_execute_at,
        "created_at": doc.created_at,
        "updated_at": doc.updated_at,
        "updated_by": doc.updated_by,
    }
    try:
        rule = doc.rule()
    except StoredRuleError as exc:
        return (
            summary
            | _UNKNOWN
            | {"issue": (doc.issue or RuleIssue(message=exc.problem)).model_dump()}
        )
    return summary | {
        "format": rule.format,
        "level": rule.level,
        "ad_accounts": rule.ad_accounts,
        "schedule": describe(rule.schedule),
        "timezone": rule.timezone,
        "tasks": len(rule.tasks),
    }


def _damaged(error: StoredRuleError) -> dict[str, Any]:
    """A rule document too damaged to read: what is known, and the problem."""
    return _UNKNOWN | {
        "id": error.rule_id,
        "name": error.name or "",
        "status": "HAS_ISSUES",
        "issue": RuleIssue(message=error.problem).model_dump(),
        "migration": None,
        "version": None,
        "latest_version": None,
        "next_execute_at": None,
        "last_execute_at": None,
        "created_at": None,
        "updated_at": error.updated_at,
        "updated_by": None,
    }


def rule_detail(item: Loaded) -> dict[str, Any]:
    """A rule with its active definition and checksum."""
    if isinstance(item, StoredRuleError):
        return rule_summary(item) | {"checksum": None, "definition": None}
    return rule_summary(item) | {"checksum": item.checksum, "definition": item.definition}


def version_entry(version: VersionDoc, active: int) -> dict[str, Any]:
    """One version of a rule, marked when it is the active one."""
    return version.model_dump() | {"active": version.version == active}


def _int_field(body: dict[str, Any], name: str, *, required: bool) -> int | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
        shown = "missing" if value is None else repr(value)[:40]
        raise invalid(
            "invalid request",
            [FieldError(name, f"needs a version number from 1 to {MAX_VERSION}, not {shown}")],
        )
    return value


def expected_version(request: web.Request) -> int | None:
    """The version a write is conditional on: ``If-Match`` header or ``?expected_version=``."""
    for where, raw in (
        ("If-Match", request.headers.get("If-Match")),
        ("expected_version", request.query.get("expected_version")),
    ):
        if raw:
            match = _ETAG.fullmatch(raw.strip())
            if match is None or int(match.group(1)) < 1:
                message = f"'{raw[:40]}' is not a rule version; send the version number, e.g. 3"
                raise invalid("invalid request", [FieldError(where, message)])
            return int(match.group(1))
    return None


def _rule_response(doc: RuleDoc, *, status: int = 200, **extra: Any) -> web.Response:
    return json_response(
        rule_detail(doc) | extra, status=status, headers={"ETag": f'"{doc.version}"'}
    )


# ---------------------------------------------------------------- handlers


async def list_rules(request: web.Request) -> web.Response:
    """``GET /api/rules?limit=&skip=``: a page of rules by name, and how many there are."""
    limit = int_param(request, "limit", default=100, low=1, high=500)
    skip = int_param(request, "skip", default=0, low=0, high=10_000_000)
    store = services(request).rules
    items = await store.page(limit=limit, skip=skip)
    return json_response(
        {
            "items": [rule_summary(item) for item in items],
            "total": await store.count(),
            "limit": limit,
            "skip": skip,
        }
    )


async def create_rule(request: web.Request) -> web.Response:
    """``POST /api/rules``: 201 with the stored rule; 409 when the name is taken."""
    rule = await validated_rule(request, await read_json(request, what="rule"))
    store = services(request).rules
    existing = await store.find_by_name(rule.name)
    if existing is not None:
        raise ApiError(
            409,
            f"a rule named '{rule.name}' already exists (id {existing.id}); change it with"
            f" PUT /api/rules/{existing.id} or pick another name",
        )
    result = await store.save(rule, now=_now(), author=actor(request), source=SOURCE)
    if not result.created:  # another request created it between the check and the save
        raise ApiError(409, f"a rule named '{rule.name}' already exists")
    warnings = findings_json(result.warnings, rename={NEW_RULE_ID: result.rule.id})
    response = _rule_response(result.rule, status=201, new_version=True, warnings=warnings)
    response.headers["Location"] = f"/api/rules/{result.rule.id}"
    return response


async def get_rule(request: web.Request) -> web.Response:
    """``GET /api/rules/{id}``; a damaged rule document answers what is known of it."""
    item = await services(request).rules.load(request.match_info["id"])
    if isinstance(item, StoredRuleError):
        return json_response(rule_detail(item))
    return _rule_response(item)


async def update_rule(request: web.Request) -> web.Response:
    """``PUT /api/rules/{id}``: a new version only when the definition changed."""
    store = services(request).rules
    existing = await store.get(request.match_info["id"])
    expected = expected_version(request)
    body = await read_json(request, what="rule")
    if isinstance(body, dict) and "status" not in body:
        # an edit never (re)activates by omission; a rule with issues comes back paused
        body = {**body, "status": existing.edit_status}
    rule = await validated_rule(request, body)
    result = await store.save(
        rule,
        now=_now(),
        author=actor(request),
        source=SOURCE,
        rule_id=existing.id,
        expected_version=expected,
    )
    return _rule_response(
        result.rule, new_version=result.new_version, warnings=findings_json(result.warnings)
    )


async def pause_rule(request: web.Request) -> web.Response:
    """``POST /api/rules/{id}/pause``."""
    changed = await services(request).rules.set_status(
        request.match_info["id"], "PAUSED", now=_now(), by=actor(request)
    )
    return _rule_response(changed.rule)


async def activate_rule(request: web.Request) -> web.Response:
    """``POST /api/rules/{id}/activate`` (re-arms the schedule from now), with its conflicts."""
    changed = await services(request).rules.set_status(
        request.match_info["id"], "ACTIVE", now=_now(), by=actor(request)
    )
    return _rule_response(changed.rule, warnings=findings_json(changed.warnings))


async def list_versions(request: web.Request) -> web.Response:
    """``GET /api/rules/{id}/versions``, newest first."""
    store = services(request).rules
    rule_id = request.match_info["id"]
    doc = await store.get(rule_id)
    versions = await store.versions(rule_id)
    return json_response(
        {
            "rule_id": rule_id,
            "active": doc.version,
            "items": [version_entry(v, doc.version) for v in versions],
        }
    )


async def rollback_rule(request: web.Request) -> web.Response:
    """``POST /api/rules/{id}/rollback`` with ``{"version": n, "expected_version": m?}``."""
    body = await read_object(request)
    version = _int_field(body, "version", required=True)
    expected = _int_field(body, "expected_version", required=False) or expected_version(request)
    assert version is not None
    changed = await services(request).rules.rollback(
        request.match_info["id"], version, now=_now(), expected_version=expected, by=actor(request)
    )
    return _rule_response(changed.rule, warnings=findings_json(changed.warnings))


async def preview_stored(request: web.Request) -> web.Response:
    """``POST /api/rules/{id}/preview``: the stored rule, or the draft in the body."""
    existing = await services(request).rules.get(request.match_info["id"])
    body = await read_json(request, what="rule", optional=True)
    if body is None:
        return await _preview(
            request, existing.rule(), rule_id=existing.id, version=existing.version
        )
    rule = await validated_rule(request, body)
    return await _preview(request, rule, rule_id=existing.id, version=0)


async def preview_draft(request: web.Request) -> web.Response:
    """``POST /api/rules/preview``: a rule that is not saved yet."""
    rule = await validated_rule(request, await read_json(request, what="rule"))
    return await _preview(request, rule, rule_id="draft", version=0)


async def _preview(request: web.Request, rule: Rule, *, rule_id: str, version: int) -> web.Response:
    """A preview is a costly read (:mod:`ruleengine.web.costly`): accounts listed, Insights
    fetched, every entity evaluated in the web process, at most
    ``RULEENGINE_PREVIEW_MAX_ENTITIES`` of them (422 past that)."""
    svc = services(request)

    async def compute() -> dict[str, Any]:
        now = _now()
        try:
            preview = await preview_rule(
                svc.preview, rule, rule_id=rule_id, version=version, now=now
            )
        except PreviewTooBig as exc:
            error = FieldError("ad_accounts", str(exc))
            raise invalid("too many entities to preview", [error]) from None
        answer = preview.as_dict()
        await with_accounts(request, answer["records"])
        return answer | {
            "rule_id": rule_id,
            "rule_version": version,
            "draft": version == 0,
            "previewed_at": now,
        }

    digest = hashlib.sha256(rule.model_dump_json().encode()).hexdigest()
    return json_response(await svc.costly.answer("preview", (rule_id, version, digest), compute))


async def validate_rule(request: web.Request) -> web.Response:
    """``POST /api/rules/validate``: 200 ``{"valid": true}`` or 422 with every error."""
    await validated_rule(request, await read_json(request, what="rule"))
    return json_response({"valid": True})


# ---------------------------------------------------------------- routes


def add_routes(app: web.Application) -> None:
    """Register the ``/api/rules`` routes (after the fixed paths under ``/api/rules/``)."""
    r = app.router
    r.add_get("/api/rules", list_rules, name="api.rules")
    r.add_post("/api/rules", create_rule)
    r.add_post("/api/rules/validate", validate_rule, name="api.validate")
    r.add_post("/api/rules/preview", preview_draft, name="api.preview_draft")
    r.add_get("/api/rules/{id}", get_rule, name="api.rule")
    r.add_put("/api/rules/{id}", update_rule)
    r.add_post("/api/rules/{id}/pause", pause_rule)
    r.add_post("/api/rules/{id}/activate", activate_rule)
    r.add_get("/api/rules/{id}/versions", list_versions)
    r.add_post("/api/rules/{id}/rollback", rollback_rule)
    r.add_post("/api/rules/{id}/preview", preview_stored)
