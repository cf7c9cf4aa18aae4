"""REST API for ad accounts (``/api/accounts``): list, register, rotate a token, re-read
Meta's currency and timezone, remove.

An account's token is accepted on registration or rotation and never answered back:
responses carry only its fingerprint. It is registered with the redactor at once, so
this process masks it in every later log line and response. Registration reads the
account's currency and timezone from Meta with that token (:mod:`ruleengine.accounts.currency`).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from ruleengine import constants as c
from ruleengine.accounts.currency import refresh, register
from ruleengine.errors import AccountCheckError, FieldError, MetaUnreachable
from ruleengine.meta.http import Cost
from ruleengine.meta.reader import GraphReader
from ruleengine.redact import REDACTOR
from ruleengine.rules.basics import is_account_id, timezone_problem
from ruleengine.store.credentials import Account, is_currency
from ruleengine.web.auth import actor
from ruleengine.web.jsonio import ApiError, invalid, json_response, read_object
from ruleengine.web.state import Services, services, settings_of

log = logging.getLogger(__name__)

_ACCOUNT_FIELDS: Final = frozenset({"id", "token", "name", "timezone", "currency"})
MAX_TOKEN_CHARS: Final = 4096
# Meta's tokens are printable ASCII without spaces; anything else cannot be one (and a
# control character or a non-ASCII letter would break the request that carries it).
_TOKEN: Final = re.compile(r"[!-~]+")
_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})
SANDBOX_TIMEOUT_S: Final = 5.0


def account_entry(account: Account) -> dict[str, Any]:
    """An account for the API: never the token, only its fingerprint."""
    return account.model_dump()


async def _rules_using(svc: Services, account_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each account's rules (id, name, status), by name."""
    found: dict[str, list[dict[str, Any]]] = {a: [] for a in account_ids}
    cursor = svc.db[c.RULES].find(
        {"definition.ad_accounts": {"$in": account_ids}},
        {"name": 1, "status": 1, "definition.ad_accounts": 1},
    )
    async for doc in cursor:
        entry = {"id": doc["_id"], "name": doc["name"], "status": doc["status"]}
        for account in doc["definition"].get("ad_accounts", []):
            if account in found:
                found[account].append(entry)
    for rules in found.values():
        rules.sort(key=lambda r: str(r["name"]))
    return found


async def _last_batch(svc: Services, account_id: str) -> dict[str, Any] | None:
    """The account's most recent batch row: id, rule, start, finish and status."""
    fields = ("rule_id", "rule_name", "status", "started_at", "finished_at")
    doc = await svc.db[c.BATCHES].find_one(
        {"account": account_id}, dict.fromkeys(fields, 1), sort=[("started_at", -1)]
    )
    return None if doc is None else {"id": doc["_id"], **{k: doc.get(k) for k in fields}}


async def list_accounts(request: web.Request) -> web.Response:
    """``GET /api/accounts``: registered accounts without tokens, their rules and last batch."""
    svc = services(request)
    accounts = await svc.credentials.all()
    rules = await _rules_using(svc, [a.id for a in accounts])
    items = [
        account_entry(a) | {"rules": rules[a.id], "last_batch": await _last_batch(svc, a.id)}
        for a in accounts
    ]
    return json_response({"items": items})


def _token_errors(token: Any) -> list[FieldError]:
    if not isinstance(token, str) or not token.strip():
        return [FieldError("token", "needs the account's access token (a non-empty string)")]
    if len(token) > MAX_TOKEN_CHARS or not _TOKEN.fullmatch(token.strip()):
        return [
            FieldError(
                "token",
                f"an access token is at most {MAX_TOKEN_CHARS} printable ASCII characters"
                " without spaces",
            )
        ]
    return []


def _account_errors(body: dict[str, Any]) -> list[FieldError]:
    errors = [
        FieldError(str(k)[:100], "unknown field; send id, token, name, timezone, currency")
        for k in body
        if k not in _ACCOUNT_FIELDS
    ]
    if not isinstance(body.get("id"), str) or not is_account_id(body["id"]):
        errors.append(FieldError("id", "needs an ad account id like 'act_123'"))
    errors += _token_errors(body.get("token"))
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


def _graph_reader(svc: Services) -> GraphReader:
    """A read-only Graph reader (the preview's session: no write can leave this process)."""
    return svc.preview.readers(Cost()).reader


async def add_account(request: web.Request) -> web.Response:
    """``POST /api/accounts``: register (or update) an account and its token with Meta's
    currency and timezone; 201 without the token, 422 when Meta's answer stands against it,
    502 when Meta cannot be asked (and the currency or timezone is not given)."""
    body = await read_object(request, what="account")
    errors = _account_errors(body)
    if errors:
        raise invalid("invalid account", errors)
    token = body["token"].strip()
    REDACTOR.register(token)  # masked in this process's logs and responses from now on
    svc = services(request)
    try:
        registered = await register(
            svc.credentials,
            _graph_reader(svc),
            body["id"],
            token,
            now=datetime.now(UTC),
            name=body.get("name"),
            timezone=body.get("timezone"),  # not given: Meta's
            currency=body.get("currency"),
            by=actor(request),
        )
    except AccountCheckError as exc:
        raise invalid("invalid account", [FieldError(exc.field, str(exc))]) from None
    except MetaUnreachable as exc:
        raise ApiError(
            502,
            f"{exc}; nothing was registered. Try again, or send both currency and timezone"
            " (the ad account's, as Ads Manager shows them) to register it without Meta's word",
        ) from None
    unchecked = {"unchecked": registered.unchecked} if registered.unchecked else {}
    return json_response(account_entry(registered.account) | unchecked, status=201)


async def refresh_account(request: web.Request) -> web.Response:
    """``POST /api/accounts/{id}/refresh``: register Meta's currency and timezone, read with
    the stored token (clears ``currency_state``); 200 with the account and ``changed``."""
    svc = services(request)
    try:
        done = await refresh(
            svc.credentials,
            _graph_reader(svc),
            request.match_info["id"],
            now=datetime.now(UTC),
            by=actor(request),
        )
    except AccountCheckError as exc:
        raise ApiError(422, str(exc)) from None
    except MetaUnreachable as exc:
        raise ApiError(502, f"{exc}; nothing was changed. Try again") from None
    log.info("ad account %s re-read from Meta by %s", done.account.id, actor(request))
    return json_response(account_entry(done.account) | {"changed": done.changes()})


async def rotate_token(request: web.Request) -> web.Response:
    """``PUT /api/accounts/{id}/token`` with ``{"token": …}``: replace the token; 404 unknown."""
    body = await read_object(request, what="token")
    errors = [
        FieldError(str(k)[:100], "unknown field; send only token") for k in body if k != "token"
    ]
    errors += _token_errors(body.get("token"))
    if errors:
        raise invalid("invalid token", errors)
    token = body["token"].strip()
    REDACTOR.register(token)
    account = await services(request).credentials.replace_token(
        request.match_info["id"], token, now=datetime.now(UTC), by=actor(request)
    )
    return json_response(account_entry(account))


async def remove_account(request: web.Request) -> web.Response:
    """``DELETE /api/accounts/{id}``: 204; 409 with the rules while active rules use it."""
    svc = services(request)
    account_id = request.match_info["id"]
    await svc.credentials.get(account_id)  # 404 first: an unknown account has no rules either
    used_by = (await _rules_using(svc, [account_id]))[account_id]
    active = [r for r in used_by if r["status"] == "ACTIVE"]
    if active:
        names = ", ".join(str(r["name"]) for r in active)
        raise ApiError(
            409,
            f"ad account '{account_id}' is used by {len(active)} active rule(s): {names};"
            " pause them or take the account out of them first",
            rules=active,
        )
    await svc.credentials.remove(account_id)
    log.info("ad account %s removed by %s", account_id, actor(request))
    return web.Response(status=204)


async def _sandbox_world(graph_url: str) -> list[dict[str, Any]] | None:
    """The sandbox's ad accounts (id, name, currency, timezone), None when it is no sandbox."""
    timeout = aiohttp.ClientTimeout(total=SANDBOX_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with http.get(f"{graph_url}/_sandbox/world") as response:
                world = await response.json() if response.status == 200 else None
            if not isinstance(world, dict) or not isinstance(world.get("accounts"), list):
                return None
            found = []
            ids = [a for a in world["accounts"][:100] if isinstance(a, str) and is_account_id(a)]
            for account_id in ids:
                async with http.get(f"{graph_url}/_sandbox/objects/{account_id}") as response:
                    raw = await response.json()
                if not isinstance(raw, dict):
                    continue
                found.append(
                    {
                        "id": account_id,
                        "name": str(raw.get("name", account_id)),
                        "currency": str(raw.get("currency", "USD")),
                        "timezone": str(raw.get("timezone_name", "UTC")),
                    }
                )
            return found
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def sandbox_accounts(request: web.Request) -> web.Response:
    """``GET /api/accounts/sandbox``: the Graph sandbox's ad accounts, when Graph is one.

    Only a Graph URL on this machine is asked (the sandbox of ``ruleengine up`` or of the
    tests); Meta is never sent an admin request. ``{"sandbox": false, "items": []}`` when
    there is no sandbox there.
    """
    graph_url = settings_of(request).graph_url
    world = None
    if urlsplit(graph_url).hostname in _LOOPBACK:
        world = await _sandbox_world(graph_url)
    if world is None:
        return json_response({"sandbox": False, "items": []})
    registered = await services(request).credentials.ids()
    items = [a | {"registered": a["id"] in registered} for a in world]
    return json_response({"sandbox": True, "items": items})


def add_routes(app: web.Application) -> None:
    """Register the account routes."""
    r = app.router
    r.add_get("/api/accounts", list_accounts, name="api.accounts")
    r.add_post("/api/accounts", add_account)
    r.add_get("/api/accounts/sandbox", sandbox_accounts)
    r.add_put("/api/accounts/{id}/token", rotate_token)
    r.add_post("/api/accounts/{id}/refresh", refresh_account)
    r.add_delete("/api/accounts/{id}", remove_account)
