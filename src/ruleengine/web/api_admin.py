"""REST API for the error log (``/api/errors``) and ad accounts (``/api/accounts``).

An account's token is accepted once, on registration, and never answered back:
responses carry only its fingerprint.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, get_args

from aiohttp import web

from ruleengine.errors import FieldError
from ruleengine.redact import REDACTOR
from ruleengine.rules.basics import is_account_id, timezone_problem
from ruleengine.store.credentials import Account, is_currency
from ruleengine.store.errorlog import ErrorGroup, ErrorStatus, hours_ending
from ruleengine.web.jsonio import (
    choice_param,
    int_param,
    invalid,
    json_response,
    read_object,
)
from ruleengine.web.state import services

ERROR_STATUSES: Final[tuple[str, ...]] = get_args(ErrorStatus)
_ACCOUNT_FIELDS: Final = frozenset({"id", "token", "name", "timezone", "currency"})


def error_group(group: ErrorGroup) -> dict[str, Any]:
    """An error group for the API (samples newest first, occurrences of the last 48 hours)."""
    now = datetime.now(UTC)
    per_hour = {"since": hours_ending(now)[0], "counts": group.per_hour(now)}
    return group.model_dump(exclude={"hourly"}) | {"per_hour": per_hour}


def account_entry(account: Account) -> dict[str, Any]:
    """An account for the API: never the token, only its fingerprint."""
    return account.model_dump()


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
        request.match_info["id"], status, now=datetime.now(UTC)
    )
    return json_response(error_group(group))


async def list_accounts(request: web.Request) -> web.Response:
    """``GET /api/accounts``: registered ad accounts, without tokens."""
    accounts = await services(request).credentials.all()
    return json_response({"items": [account_entry(a) for a in accounts]})


def _account_errors(body: dict[str, Any]) -> list[FieldError]:
    errors = [
        FieldError(k, "unknown field; send id, token, name, timezone, currency")
        for k in body
        if k not in _ACCOUNT_FIELDS
    ]
    if not isinstance(body.get("id"), str) or not is_account_id(body["id"]):
        errors.append(FieldError("id", "needs an ad account id like 'act_123'"))
    token = body.get("token")
    if not isinstance(token, str) or not token.strip():
        errors.append(FieldError("token", "needs the account's access token (a non-empty string)"))
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 200):
        errors.append(FieldError("name", "needs a string of at most 200 characters"))
    errors += _zone_errors(body.get("timezone"))
    currency = body.get("currency")
    if currency is not None and (not isinstance(currency, str) or not is_currency(currency)):
        errors.append(FieldError("currency", "needs a 3-letter ISO 4217 code such as 'USD'"))
    return errors


def _zone_errors(timezone: Any) -> list[FieldError]:
    if timezone is None:
        return []
    if not isinstance(timezone, str):
        return [FieldError("timezone", "needs an IANA timezone name such as 'Asia/Jakarta'")]
    problem = timezone_problem(timezone)
    return [] if problem is None else [FieldError("timezone", problem)]


async def add_account(request: web.Request) -> web.Response:
    """``POST /api/accounts``: register (or update) an account and its token; 201 without it."""
    body = await read_object(request, what="account")
    errors = _account_errors(body)
    if errors:
        raise invalid("invalid account", errors)
    token = body["token"].strip()
    REDACTOR.register(token)  # masked in this process's logs and responses from now on
    account = await services(request).credentials.add(
        body["id"],
        token,
        now=datetime.now(UTC),
        name=body.get("name"),
        timezone=body.get("timezone") or "UTC",
        currency=body.get("currency") or "USD",
    )
    return json_response(account_entry(account), status=201)


def add_routes(app: web.Application) -> None:
    """Register the error-log and account routes."""
    r = app.router
    r.add_get("/api/errors", list_errors, name="api.errors")
    r.add_patch("/api/errors/{id}", patch_error)
    r.add_get("/api/accounts", list_accounts, name="api.accounts")
    r.add_post("/api/accounts", add_account)
