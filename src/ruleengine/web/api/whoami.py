"""``GET /api/whoami``: who the request's token is — its name and role — and what each route
needs, so a screen names the token in its header and disables (saying why) what the role
cannot do, instead of letting a click end in a 403.

A token is always needed (:data:`~ruleengine.web.auth.ROUTE_ROLES`): without one the
answer is the ``401`` of any request that needs a token.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ruleengine.web.auth import ROLES, ROUTE_ROLES, actor, role_of
from ruleengine.web.jsonio import json_response


def route_table() -> dict[str, str]:
    """The least role of each write route and costly read, as ``"METHOD /path"`` → role; a
    write route not listed needs ``admin``, a read not listed ``viewer``."""
    return {f"{method} {path}": role for (method, path), role in ROUTE_ROLES.items()}


async def whoami(request: web.Request) -> web.Response:
    """``GET /api/whoami``: ``{"name", "role", "roles", "routes"}``."""
    answer: dict[str, Any] = {
        "name": actor(request),
        "role": role_of(request),
        "roles": list(ROLES),  # from the least to the most
        "routes": route_table(),
    }
    return json_response(answer)


def add_routes(app: web.Application) -> None:
    """Register the ``whoami`` route."""
    app.router.add_get("/api/whoami", whoami, name="api.whoami")
