"""Bearer-token access to ``/api``: every write needs the token, reads only when configured.

The token travels in the ``Authorization`` header (the UI keeps it in
``localStorage``), never in a cookie, so a foreign page cannot make the browser
send it: there is no CSRF surface to defend. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from typing import Final, Literal

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ruleengine.settings import Settings
from ruleengine.web.jsonio import ApiError, error_response

WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Writes by method that change nothing: validation answers about a body, nothing more.
# (Preview does not write either, but it spends Meta rate limit, so it needs the token.)
NON_WRITING_POSTS: Final = frozenset({"/api/rules/validate"})
_CHALLENGE: Final = {"WWW-Authenticate": 'Bearer realm="ruleengine"'}

Role = Literal["viewer", "editor", "approver", "admin"]
#: What each role may do includes what the roles before it may.
ROLES: Final[tuple[Role, ...]] = ("viewer", "editor", "approver", "admin")
#: Who made a request with the configured RULEENGINE_API_TOKEN (it is an admin token).
CONFIGURED_TOKEN_NAME: Final = "api"
_ACTOR_KEY: Final = "ruleengine.actor"
_ROLE_KEY: Final = "ruleengine.role"


def needs_token(method: str, path: str, settings: Settings) -> bool:
    """Whether a request to ``path`` must carry the API token."""
    if not path.startswith("/api/"):
        return False  # UI shells, health, metrics, static files
    if method in WRITE_METHODS and path not in NON_WRITING_POSTS:
        return True
    return settings.api_reads_require_token


def _presented(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def check_token(request: web.Request, settings: Settings) -> None:
    """Raise a 401 :class:`ApiError` unless the request carries the configured token."""
    if settings.api_token is None:
        raise ApiError(
            401,
            "this needs an API token, but the web app has none configured: set"
            " RULEENGINE_API_TOKEN and restart it",
            headers=_CHALLENGE,
        )
    presented = _presented(request)
    if presented is None:
        raise ApiError(
            401,
            "missing API token: send the value of RULEENGINE_API_TOKEN as a bearer token"
            " in the Authorization header",
            headers=_CHALLENGE,
        )
    expected = settings.api_token.get_secret_value().encode()
    # aiohttp hands over header bytes that are not UTF-8 as surrogate escapes: put the
    # client's bytes back as they were; they cannot equal a configured (str) token.
    if not hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), expected):
        raise ApiError(
            401,
            "wrong API token: use the value of RULEENGINE_API_TOKEN",
            headers={"WWW-Authenticate": 'Bearer realm="ruleengine", error="invalid_token"'},
        )


def actor(request: web.Request) -> str:
    """The name of the token a request was made with (recorded as ``by`` on every write)."""
    return str(request.get(_ACTOR_KEY, CONFIGURED_TOKEN_NAME))


def require_role(request: web.Request, role: Role) -> None:
    """Raise a 403 :class:`ApiError` unless the request's token has ``role`` or a higher one."""
    held: Role = request.get(_ROLE_KEY, "admin")
    if ROLES.index(held) < ROLES.index(role):
        raise ApiError(
            403,
            f"the token '{actor(request)}' is a {held} token; this needs the {role} role"
            " or higher (ruleengine tokens add NAME --role ROLE)",
        )


def auth_middleware(settings: Settings) -> Middleware:
    """A middleware enforcing :func:`needs_token` for ``settings``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if needs_token(request.method, request.path, settings):
            try:
                check_token(request, settings)
            except ApiError as exc:
                return error_response(exc)
        return await handler(request)

    return middleware
