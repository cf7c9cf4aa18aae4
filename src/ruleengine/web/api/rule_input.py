"""A rule from a request body: parsed and validated as the CLI validates files.

Against the registered ad accounts and the configured webhooks; what is wrong comes back
as a 422 naming each field (:func:`ruleengine.web.jsonio.invalid`). Used by every route
that takes a rule (save, validate, preview, conflicts of a draft, backtests).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ruleengine.errors import RuleValidationError
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.web.jsonio import invalid
from ruleengine.web.state import services, settings_of


async def validated_rule(request: web.Request, body: Any) -> Rule:
    """``body`` parsed into a Rule, against the registered accounts (and their currencies:
    an amount must say what it means on each) and the configured webhooks."""
    svc = services(request)
    try:
        return parse_rule(
            body,
            accounts=await svc.credentials.currencies(),
            webhooks=set(settings_of(request).webhooks),
            new=True,
        )
    except RuleValidationError as exc:
        raise invalid("invalid rule", exc.errors, valid=False) from None
