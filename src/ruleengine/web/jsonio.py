"""JSON in and out of the web API: orjson responses, uniform errors, request parsing.

Every response body goes through the process-wide redactor first, so a token
that slipped into stored data (an error sample, a Meta answer) is masked on its
way out rather than trusted to every writer upstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from typing import Any

import orjson
from aiohttp import web
from bson import ObjectId

from ruleengine.errors import FieldError
from ruleengine.redact import REDACTOR

JSON_TYPE = "application/json"
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC | orjson.OPT_NON_STR_KEYS


class ApiError(Exception):
    """An HTTP error answered as ``{"error": message, **extra}``.

    Args:
        status: the HTTP status.
        message: what was wrong and what to do, for a person.
        errors: field errors (path + message), answered as ``errors``.
        headers: extra response headers (e.g. ``WWW-Authenticate``).
        extra: more top-level fields of the body.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[FieldError] | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The JSON body of the error."""
        body: dict[str, Any] = {"error": self.message, **self.extra}
        if self.errors is not None:
            body["errors"] = [{"path": e.path, "message": e.message} for e in self.errors]
        return body


def invalid(message: str, errors: list[FieldError], **extra: Any) -> ApiError:
    """A 422 listing every problem with its JSON path."""
    return ApiError(422, message, errors=errors, **extra)


def _default(value: Any) -> Any:
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        return "<binary>"  # never echo raw bytes (ciphertext, pickles) to a client
    raise TypeError(f"cannot serialise {type(value).__name__} as JSON")


def dumps(data: Any) -> bytes:
    """``data`` as JSON bytes, tokens masked; datetimes as ISO 8601 UTC (``…Z``)."""
    return orjson.dumps(REDACTOR.data(data), default=_default, option=_OPTIONS)


def json_response(
    data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An ``application/json`` response of ``data``."""
    return web.Response(
        body=dumps(data), status=status, content_type=JSON_TYPE, headers=dict(headers or {})
    )


def error_response(error: ApiError) -> web.Response:
    """The response of an :class:`ApiError`."""
    return json_response(error.body(), status=error.status, headers=error.headers)


async def read_json(request: web.Request, *, what: str = "request", optional: bool = False) -> Any:
    """The parsed JSON body; a 422 naming the problem when it is not JSON.

    Args:
        request: the request.
        what: how the error calls the body ("rule", "request").
        optional: an empty body is ``None`` instead of an error.
    """
    raw = await request.read()
    if not raw.strip():
        if optional:
            return None
        raise invalid(f"invalid {what}", [FieldError("", "the body is empty; send a JSON object")])
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        error = FieldError("", f"the body is not valid JSON: {exc}")
        raise invalid(f"invalid {what}", [error]) from None


async def read_object(request: web.Request, *, what: str = "request") -> dict[str, Any]:
    """The JSON body, which must be an object."""
    body = await read_json(request, what=what)
    if not isinstance(body, dict):
        raise invalid(f"invalid {what}", [FieldError("", "expected a JSON object {…}")])
    return body


def int_param(
    request: web.Request, name: str, *, default: int, low: int = 0, high: int = 10_000
) -> int:
    """An integer query parameter within ``[low, high]``; 422 otherwise."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    # ASCII digits only: int() would also take "٣", " 3 " and "1_000"
    value = int(raw) if _INTEGER.fullmatch(raw) else low - 1
    if not low <= value <= high:
        raise invalid(
            "invalid query parameter",
            [FieldError(name, f"'{raw}' is not a whole number between {low} and {high}")],
        )
    return value


def float_param(
    request: web.Request, name: str, *, default: float, low: float, high: float
) -> float:
    """A number query parameter within ``(low, high]``; 422 otherwise."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = low
    if not low < value <= high:
        raise invalid(
            "invalid query parameter",
            [FieldError(name, f"'{raw}' is not a number above {low:g} and up to {high:g}")],
        )
    return value


def choice_param(request: web.Request, name: str, choices: tuple[str, ...]) -> str | None:
    """An optional query parameter that must be one of ``choices``."""
    raw = request.query.get(name) or None
    if raw is not None and raw not in choices:
        raise invalid(
            "invalid query parameter",
            [FieldError(name, f"'{raw}' is not one of {', '.join(choices)}")],
        )
    return raw
