"""Bearer-token access to ``/api``: who a request is, and whether its role may do it.

A request is made with the configured ``RULEENGINE_API_TOKEN`` (an admin token
named ``api``: set-ups from before named tokens keep working) or with a named token
from ``ruleengine tokens add`` (:mod:`ruleengine.store.api_tokens`, found by its hash).
Every write needs a token; reads only when ``api_reads_require_token`` is set (then
any role may read) — except the reads that spend Meta's rate limit or real CPU, which
:data:`ROUTE_ROLES` lists and which need a token whatever that setting says. The least
role each write (and costly read) route needs is in :data:`ROUTE_ROLES`, one table,
applied here by route pattern; a write route missing from it needs admin (and a test
fails). Handlers record :func:`actor` as ``by`` and may ask :func:`require_role` for
more than their route's least role (a live conflict check: editor); a request no token
identified has no role at all, and is answered 401.

The token travels in the ``Authorization`` header (the UI keeps it in
``localStorage``), never in a cookie, so a foreign page cannot make the browser
send it: there is no CSRF surface to defend. The configured token is compared in
constant time; a named token is looked up by its SHA-256.
"""

from __future__ import annotations

import hmac
from datetime import UTC, datetime
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ROLES, ApiTokenStore, Role
from ruleengine.web.jsonio import ApiError, error_response
from ruleengine.web.state import services

__all__ = [
    "ROLES",
    "ROUTE_ROLES",
    "Role",
    "actor",
    "auth_middleware",
    "require_role",
    "role_of",
]

WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Writes by method that change nothing: validation answers about a body, nothing more.
# (Preview does not write either, but it spends Meta rate limit, so it needs the token.)
NON_WRITING_POSTS: Final = frozenset({"/api/rules/validate"})
_CHALLENGE: Final = {"WWW-Authenticate": 'Bearer realm="ruleengine"'}
_INVALID: Final = {"WWW-Authenticate": 'Bearer realm="ruleengine", error="invalid_token"'}

#: Who made a request with the configured RULEENGINE_API_TOKEN (it is an admin token).
CONFIGURED_TOKEN_NAME: Final = "api"
_ACTOR_KEY: Final = web.RequestKey("ruleengine.actor", str)
_ROLE_KEY: Final = web.RequestKey("ruleengine.role", str)

#: The least role of every write route, by (method, route pattern), and of the reads that
#: cost enough to need a token always. Other reads need none (or viewer, when reads require
#: a token).
ROUTE_ROLES: Final[dict[tuple[str, str], Role]] = {
    # who the token is (name and role): there is no anonymous answer to it
    ("GET", "/api/whoami"): "viewer",
    # the O(n²) analysis of every stored rule, its findings (?live=1: editor, in the handler)
    ("GET", "/api/rules/conflicts"): "viewer",
    # a rule's impact: the history cache, and Graph for the hours it lacks
    ("GET", "/api/rules/{id}/impact"): "viewer",
    ("GET", "/api/benchmark/impact"): "viewer",
    # an entity's spend per day for its timeline: the same cache, and Graph for what it lacks
    ("GET", "/api/entities/{id}/insights"): "viewer",
    # an aggregation over a week of batches, in the MongoDB the workers share
    ("GET", "/api/benchmark/slow-rules"): "viewer",
    # analysis that changes nothing
    ("POST", "/api/rules/validate"): "viewer",
    ("POST", "/api/rules/conflicts"): "viewer",
    # rules: save, pause, activate, roll back, preview (spends Meta's rate limit)
    ("POST", "/api/rules"): "editor",
    ("PUT", "/api/rules/{id}"): "editor",
    ("POST", "/api/rules/{id}/pause"): "editor",
    ("POST", "/api/rules/{id}/activate"): "editor",
    ("POST", "/api/rules/{id}/rollback"): "editor",
    ("POST", "/api/rules/preview"): "editor",
    ("POST", "/api/rules/{id}/preview"): "editor",
    ("POST", "/api/backtests"): "editor",
    ("POST", "/api/import/meta"): "editor",
    ("DELETE", "/api/holds/{id}"): "editor",
    ("PATCH", "/api/errors/{id}"): "editor",
    # undo and approval decisions (their handlers also ask require_role(request, "approver"))
    ("POST", "/api/batches/{batch_id}/undo"): "approver",
    ("POST", "/api/approvals/{id}/approve"): "approver",
    ("POST", "/api/approvals/{id}/reject"): "approver",
    # ad accounts and their Meta tokens
    ("POST", "/api/accounts"): "admin",
    ("PUT", "/api/accounts/{id}/token"): "admin",
    ("POST", "/api/accounts/{id}/refresh"): "admin",
    ("DELETE", "/api/accounts/{id}"): "admin",
}


def as_read(method: str) -> str:
    """The method a role or token is decided for: ``HEAD`` runs its route's ``GET`` handler
    (aiohttp serves it for every ``add_get``), so it is decided exactly as that ``GET``."""
    return "GET" if method == "HEAD" else method


def needs_token(method: str, path: str, settings: Settings, *, route: str | None = None) -> bool:
    """Whether a request to ``path`` (matched to the ``route`` pattern) must carry a token."""
    method = as_read(method)
    if not path.startswith("/api/"):
        return False  # UI shells, health, metrics, static files
    if method in WRITE_METHODS:
        return path not in NON_WRITING_POSTS or settings.api_reads_require_token
    if (method, route) in ROUTE_ROLES:  # a read that costs: never anonymous
        return True
    return settings.api_reads_require_token


def _route(request: web.Request) -> str | None:
    """The request's route pattern (``/api/rules/{id}``), None when no route matched."""
    resource = request.match_info.route.resource
    return None if resource is None else resource.canonical


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, None for any other."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def route_role(request: web.Request) -> Role:
    """The least role the request's route needs: the table's, else viewer for reads and
    admin for writes."""
    route = _route(request)
    if route is None:  # no such route: the router answers 404/405
        return "viewer"
    method = as_read(request.method)
    default: Role = "admin" if method in WRITE_METHODS else "viewer"
    return ROUTE_ROLES.get((method, route), default)


def _identified(request: web.Request, name: str, role: Role) -> None:
    request[_ACTOR_KEY] = name
    request[_ROLE_KEY] = role


def _unconfigured() -> ApiError:
    return ApiError(
        401,
        "this needs an API token, but the web app has none configured: set"
        " RULEENGINE_API_TOKEN and restart it",
        headers=_CHALLENGE,
    )


async def check_token(request: web.Request, settings: Settings) -> None:
    """Identify the request's token (name and role) or raise a 401 :class:`ApiError`."""
    store = ApiTokenStore(services(request).db)
    presented = bearer_token(request.headers.get("Authorization", ""))
    configured = settings.api_token
    if presented is None:
        if configured is None and not await store.any_active():
            raise _unconfigured()
        raise ApiError(
            401,
            "missing API token: send the value of RULEENGINE_API_TOKEN, or a token from"
            " `ruleengine tokens add`, as a bearer token in the Authorization header",
            headers=_CHALLENGE,
        )
    # aiohttp hands over header bytes that are not UTF-8 as surrogate escapes: put the
    # client's bytes back as they were; they cannot equal a configured (str) token.
    raw = presented.encode("utf-8", "surrogateescape")
    if configured is not None and hmac.compare_digest(raw, configured.get_secret_value().encode()):
        _identified(request, CONFIGURED_TOKEN_NAME, "admin")
        return
    found = await store.identify(presented, now=datetime.now(UTC))
    if found is None:
        if configured is None and not await store.any_active():
            raise _unconfigured()
        raise ApiError(
            401,
            "wrong API token: use the value of RULEENGINE_API_TOKEN or a token from"
            " `ruleengine tokens add` (`ruleengine tokens list` names them)",
            headers=_INVALID,
        )
    if found.revoked_at is not None:
        raise ApiError(
            401,
            f"the API token '{found.name}' was revoked at"
            f" {found.revoked_at.isoformat(timespec='seconds')}; ask an admin for a new one"
            " (`ruleengine tokens add`)",
            headers=_INVALID,
        )
    _identified(request, found.name, found.role)


def role_of(request: web.Request) -> Role | None:
    """The role of the token a request was made with (``None``: no token identified it)."""
    held = request.get(_ROLE_KEY)
    return next((r for r in ROLES if r == held), None)


def actor(request: web.Request) -> str:
    """The name of the token a request was made with (recorded as ``by`` on every write)."""
    return str(request.get(_ACTOR_KEY, CONFIGURED_TOKEN_NAME))


def require_role(request: web.Request, role: Role) -> None:
    """Raise a 403 :class:`ApiError` unless the request's token has ``role`` or a higher one.

    A request no token identified (an open read) has no role: a 401 asking for a token.
    """
    held = request.get(_ROLE_KEY)
    if held is None:
        raise ApiError(
            401,
            f"this needs an API token with the {role} role or higher: send it as a bearer"
            " token in the Authorization header (ruleengine tokens add NAME --role ROLE)",
            headers=_CHALLENGE,
        )
    if ROLES.index(held) < ROLES.index(role):
        raise ApiError(
            403,
            f"the token '{actor(request)}' is a {held} token; this needs the {role} role"
            " or higher (ruleengine tokens add NAME --role ROLE)",
        )


def auth_middleware(settings: Settings) -> Middleware:
    """A middleware enforcing :func:`needs_token` and :data:`ROUTE_ROLES` for ``settings``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if needs_token(request.method, request.path, settings, route=_route(request)):
            try:
                await check_token(request, settings)
                require_role(request, route_role(request))
            except ApiError as exc:
                return error_response(exc)
        return await handler(request)

    return middleware
