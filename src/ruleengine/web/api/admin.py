"""REST API for the error log (``/api/errors``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, get_args

from aiohttp import web

from ruleengine.errors import FieldError
from ruleengine.store.errorlog import ErrorGroup, ErrorStatus, hours_ending
from ruleengine.web.auth import actor
from ruleengine.web.jsonio import (
    choice_param,
    int_param,
    invalid,
    json_response,
    read_object,
)
from ruleengine.web.state import services

ERROR_STATUSES: Final[tuple[str, ...]] = get_args(ErrorStatus)


def error_group(group: ErrorGroup) -> dict[str, Any]:
    """An error group for the API (samples newest first, occurrences of the last 48 hours)."""
    now = datetime.now(UTC)
    per_hour = {"since": hours_ending(now)[0], "counts": group.per_hour(now)}
    return group.model_dump(exclude={"hourly"}) | {"per_hour": per_hour}


async def list_errors(request: web.Request) -> web.Response:
    """``GET /api/errors?status=&limit=&offset=``: groups, most recently seen first."""
    status: Any = choice_param(request, "status", ERROR_STATUSES)
    limit = int_param(request, "limit", default=50, low=1, high=500)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    log = services(request).errors
    groups = await log.groups(status=status, limit=limit, skip=offset)
    return json_response(
        {
            "items": [error_group(g) for g in groups],
            "total": await log.count(status=status),
            "limit": limit,
            "offset": offset,
        }
    )


async def patch_error(request: web.Request) -> web.Response:
    """``PATCH /api/errors/{id}`` with ``{"status": "active"|"resolved"|"ignored"}``."""
    body = await read_object(request)
    status = body.get("status")
    if status not in ERROR_STATUSES:
        message = f"{status!r} is not one of {', '.join(ERROR_STATUSES)}"
        raise invalid("invalid request", [FieldError("status", message)])
    group = await services(request).errors.set_status(
        request.match_info["id"], status, now=datetime.now(UTC), by=actor(request)
    )
    return json_response(error_group(group))


def add_routes(app: web.Application) -> None:
    """Register the error-log routes."""
    r = app.router
    r.add_get("/api/errors", list_errors, name="api.errors")
    r.add_patch("/api/errors/{id}", patch_error)
