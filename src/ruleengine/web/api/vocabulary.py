"""``/api/rules/vocabulary``: the rule builder's vocabulary, the same document on every call.

Metrics with labels, descriptions, units and target directions; periods, operators, filter
fields, statuses, action kinds, follow-ups and timezones; and the rule's JSON Schema
(:func:`ruleengine.rules.language.vocabulary.vocabulary`). Computed and serialised once per process.
"""

from __future__ import annotations

from functools import cache
from typing import Final

from aiohttp import web

from ruleengine.rules.language.vocabulary import vocabulary
from ruleengine.web.jsonio import JSON_TYPE, dumps

CACHE_CONTROL: Final = "private, max-age=3600"


@cache
def _body() -> bytes:
    return dumps(vocabulary())


async def get_vocabulary(request: web.Request) -> web.Response:
    """``GET /api/rules/vocabulary``."""
    return web.Response(
        body=_body(), content_type=JSON_TYPE, headers={"Cache-Control": CACHE_CONTROL}
    )


def add_routes(app: web.Application) -> None:
    """Register the vocabulary route (before ``/api/rules/{id}``, which would take it)."""
    app.router.add_get("/api/rules/vocabulary", get_vocabulary, name="api.vocabulary")
