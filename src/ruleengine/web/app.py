"""The web app: ``create_app(settings)`` composes the API, the screens, health and metrics.

Middlewares, outermost first: request metrics → errors as JSON → the request's ``Host``
(:mod:`ruleengine.web.hosts`) → bearer-token auth. Clients are opened in a cleanup context
(see :mod:`ruleengine.web.state`).
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler
from pymongo.errors import ConnectionFailure
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ruleengine.analysis.conflicts import ConflictingRuleError, findings_json
from ruleengine.errors import (
    ConflictError,
    CredentialsError,
    NotFoundError,
    RuleEngineError,
    RuleValidationError,
)
from ruleengine.settings import Settings
from ruleengine.store.ruledocs import StoredRuleError
from ruleengine.web import api, health, views
from ruleengine.web.api import backtests as api_backtests
from ruleengine.web.auth import auth_middleware
from ruleengine.web.hosts import host_middleware
from ruleengine.web.jsonio import ApiError, error_response
from ruleengine.web.prometheus import setup_metrics
from ruleengine.web.state import SETTINGS, services_context

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 1 << 20
CLIENT_CLOSED: Final = 499  # nginx's status for a request whose client went away
CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def _as_api_error(exc: Exception) -> ApiError | None:
    """The API answer for an expected exception, None for a bug."""
    match exc:
        case ApiError():
            return exc
        case RuleValidationError():
            return ApiError(422, "invalid rule", errors=exc.errors, valid=False)
        case NotFoundError():
            return ApiError(404, str(exc))
        case ConflictingRuleError():  # RULEENGINE_REFUSE_CONFLICTING_RULES, with the findings
            return ApiError(409, str(exc), conflicts=findings_json(exc.findings))
        case ConflictError():
            return ApiError(409, str(exc))
        case StoredRuleError():
            return ApiError(409, str(exc), issue={"message": exc.problem})
        case CredentialsError():
            return ApiError(422, str(exc))
        case RuleEngineError():
            return ApiError(400, str(exc))
        case ConnectionFailure():  # server selection timeouts and lost connections
            return ApiError(
                503, f"MongoDB is unavailable ({type(exc).__name__}); see /health/ready"
            )
        case RedisConnectionError() | RedisTimeoutError():
            return ApiError(503, f"Redis is unavailable ({type(exc).__name__}); see /health/ready")
    return None


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    message = exc.reason
    if exc.status == 404:
        message = f"no such route: {request.method} {request.path}; see docs/api.md"
    elif exc.status == 405:
        allowed = exc.headers.get("Allow", "")
        message = f"{request.method} is not allowed on {request.path} (allowed: {allowed})"
    elif exc.status == 413:
        message = f"the body is larger than {MAX_BODY_BYTES} bytes"
    headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
    return error_response(ApiError(exc.status, message, headers=headers))


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer API failures as JSON ``{"error": …}`` with the right status."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or not request.path.startswith("/api/"):
            raise
        return _http_error(request, exc)
    except Exception as exc:
        if isinstance(exc, ConnectionError) and _client_gone(request):
            # The client hung up while its body was read or the answer written: nothing
            # is wrong here, and there is no one left to answer.
            log.info("client closed the connection: %s %s (%s)", request.method, request.path, exc)
            return web.Response(status=CLIENT_CLOSED, reason="Client Closed Request")
        error = _as_api_error(exc)
        if error is None:
            log.exception("unhandled error on %s %s", request.method, request.path)
            error = ApiError(500, "internal error; the web app's log has the details")
        return error_response(error)


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    response.headers.setdefault("X-Frame-Options", "DENY")
    if request.path.startswith("/api/"):
        response.headers.setdefault("Cache-Control", "no-store")


async def _csp(request: web.Request, response: web.StreamResponse) -> None:
    if "text/html" in response.headers.get("Content-Type", ""):
        response.headers.setdefault("Content-Security-Policy", CSP)


def create_app(settings: Settings, *, dev: bool = False) -> web.Application:
    """The web app for ``settings``.

    Args:
        settings: the process's settings.
        dev: development mode (aiohttp-devtools): no Content-Security-Policy, so
            its live-reload script, served from another port, may run.
    """
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[SETTINGS] = settings
    setup_metrics(app)  # first: its middleware sees every final status
    app.middlewares.append(errors_middleware)
    app.middlewares.append(host_middleware(settings))
    app.middlewares.append(auth_middleware(settings))
    app.cleanup_ctx.append(services_context)
    app.on_response_prepare.append(_secure)
    if not dev:
        app.on_response_prepare.append(_csp)
    views.setup(app)
    health.add_routes(app)
    api.add_routes(app)
    api_backtests.setup(app)  # its routes, and its tasks' lifetime inside the services'
    return app
