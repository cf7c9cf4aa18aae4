"""``POST /api/import/meta``: Meta's Automated Rules converted into rules, and saved on request.

The body names the ad account and gives the Meta rules (one, a list, or ``{"data": [...]}``)
or, without ``rules``, has them read from the account's ``adrules_library`` with its
registered token (read-only). The answer holds each converted rule and its report; tokens
are never in it. Saving goes through the same store path as ``POST /api/rules``, conflict
check included: ``warnings``, or a 409 naming the rules refused (the others are saved).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from aiohttp import web

from ruleengine.errors import FieldError
from ruleengine.interop import meta_rules as interop
from ruleengine.meta.http import Cost
from ruleengine.rules.basics import LEVELS, is_account_id
from ruleengine.rules.meta.importing import ImportOptions, import_document
from ruleengine.web.auth import actor
from ruleengine.web.jsonio import ApiError, invalid, json_response, read_object
from ruleengine.web.state import services, settings_of

SOURCE: Final = "import-meta"
_FIELDS: Final = frozenset(
    {"account", "rules", "currency", "timezone", "level", "webhook", "apply", "activate"}
)


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise invalid("invalid request", [FieldError(name, "must be a non-empty string")])
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise invalid("invalid request", [FieldError(name, "must be true or false")])
    return value


def _options(body: dict[str, Any]) -> ImportOptions:
    level = _text(body, "level")
    if level is not None and level not in LEVELS:
        raise invalid("invalid request", [FieldError("level", "must be campaign, adset or ad")])
    return ImportOptions(
        webhook=_text(body, "webhook") or "meta-rules",
        activate=_flag(body, "activate"),
        level=level,
    )


async def import_meta(request: web.Request) -> web.Response:
    """``POST /api/import/meta``: the converted rules and reports; saved with ``"apply"``."""
    body = await read_object(request)
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        known = ", ".join(sorted(_FIELDS))
        raise invalid(
            "invalid request", [FieldError(unknown[0], f"unknown field (known: {known})")]
        )
    account_id = _text(body, "account")
    if account_id is None or not is_account_id(account_id):
        raise invalid("invalid request", [FieldError("account", "an ad account id like act_123")])
    options, apply = _options(body), _flag(body, "apply")
    svc = services(request)
    reader = svc.preview.readers(Cost()).reader
    document = body.get("rules")
    if document is None:
        document = await interop.read_library(reader, svc.credentials, account_id)
    account = await interop.meta_account(
        account_id,
        credentials=svc.credentials,
        reader=reader if "rules" not in body else None,
        currency=_text(body, "currency"),
        timezone=_text(body, "timezone"),
    )
    results = import_document(document, account=account, options=options)
    stored: list[interop.Saved] = []
    if apply:
        stored = await interop.save_imported(
            svc.rules,
            results,
            accounts=await svc.credentials.currencies(),
            webhooks=set(settings_of(request).webhooks),
            now=datetime.now(UTC),
            author=actor(request),
            source=SOURCE,
        )
    saved = {s.index: s.as_dict() for s in stored}
    items = [r.as_dict() | ({"saved": saved.get(r.index)} if apply else {}) for r in results]
    converted = sum(1 for r in results if r.rule is not None)
    applied = sum(1 for s in stored if s.rule_id is not None)
    answer: dict[str, Any] = {
        "account": account_id,
        "currency": account.currency,
        "timezone": account.timezone,
        "items": items,
        "summary": {"rules": len(results), "converted": converted, "applied": applied},
    }
    if apply:
        answer["warnings"] = [w for s in stored if not s.refused for w in s.findings_json()]
    refused = [s for s in stored if s.refused]
    if refused:
        raise ApiError(
            409,
            f"{len(refused)} imported rule(s) not saved: they fight active rules and"
            " RULEENGINE_REFUSE_CONFLICTING_RULES is set (the others were saved; see each"
            " item's 'saved'); import them without 'activate', or pause the other rules first",
            conflicts=[c for s in refused for c in s.findings_json()],
            **answer,
        )
    return json_response(answer)


def add_routes(app: web.Application) -> None:
    """Register the import route."""
    app.router.add_post("/api/import/meta", import_meta)
