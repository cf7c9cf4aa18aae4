"""Admin routes under ``/_sandbox``: stats, reset, faults, write log, raw objects, clock, limits,
the size and report-run settings of Insights, changes "made in Ads Manager", an ad's weights
in its ad set's delivery, tokens, runs of ad rules (their history), and the truth Graph never
shows (quality, counterfactual).

For tests and benchmarks only: they need no token and are never counted.
Bad input answers 400 with ``{"error": "<what was wrong>"}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from graph_sandbox.activities import ADS_MANAGER
from graph_sandbox.adrule_specs import HISTORY_ACTIONS, HISTORY_OBJECT_TYPES
from graph_sandbox.adrules import HISTORY_FIELDS, render_run
from graph_sandbox.errors import GraphError
from graph_sandbox.periods import MAX_HISTORY_DAYS
from graph_sandbox.state import STATE, SandboxState
from graph_sandbox.stats import Stats
from graph_sandbox.tokens import INVALIDATIONS, PERMISSIONS, Grant
from graph_sandbox.truth import Increment, counterfactual, default_period, members, quality
from graph_sandbox.world import Account, AdObject
from graph_sandbox.writes import apply_changes

M = TypeVar("M", bound=BaseModel)


class _Reset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int | None = None
    scenario: str | None = None
    accounts: int | None = Field(default=None, ge=1)
    campaigns_per_account: int | None = Field(default=None, ge=1)
    adsets_per_campaign: int | None = Field(default=None, ge=1)
    # ad account id → IANA time zone, replacing that account's
    timezones: dict[str, str] | None = Field(default=None, max_length=100)
    app: str | None = None


class _Clock(BaseModel):
    model_config = ConfigDict(extra="forbid")

    now: datetime | None = None
    advance_s: float | None = None


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account_calls_per_hour: int | None = Field(default=None, ge=0)
    app_calls_per_hour: int | None = Field(default=None, ge=0)
    insights_app_calls_per_hour: int | None = Field(default=None, ge=0)
    insights_account_calls_per_hour: int | None = Field(default=None, ge=0)


Permission = Literal["ads_management", "ads_read"]


class _Issue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str | None = Field(default=None, min_length=1)
    accounts: list[str] | None = None
    permissions: list[Permission] | None = None
    expires_in_s: float | None = None


class _TokenUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1)
    expire: bool = False
    invalidate: Literal["password_changed", "logged_out"] | None = None
    permissions: list[Permission] | None = None
    restore: bool = False


class _Factors(BaseModel):
    """An ad's weights (:mod:`graph_sandbox.ads`); those not given stay as they are."""

    model_config = ConfigDict(extra="forbid")

    delivery: int | None = None
    clicks: int | None = None
    conversions: int | None = None
    quality: float | None = None


class _RunAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: str
    field: str | None = None
    old_value: str | None = None
    new_value: str | None = None


class _RunResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    object_id: str = Field(min_length=1)
    object_type: str
    actions: list[_RunAction] = Field(default_factory=list)


class _Run(BaseModel):
    """A run of an ad rule, in the shape of Meta's ``AdRuleHistory``."""

    model_config = ConfigDict(extra="forbid")

    timestamp: datetime | None = None
    is_manual: bool = False
    results: list[_RunResult] = Field(default_factory=list)
    exception_code: int | None = None
    exception_message: str | None = None


class _Counterfactual(BaseModel):
    """The query of ``GET /_sandbox/counterfactual/{id}``."""

    model_config = ConfigDict(extra="forbid")

    since: datetime | None = None
    date_start: date | None = None
    date_stop: date | None = None
    increment: Increment = "all"


def add_admin_routes(app: web.Application) -> None:
    """Register the ``/_sandbox`` routes on ``app`` (before the Graph catch-all)."""
    app.router.add_get("/_sandbox/stats", _guarded(_stats))
    app.router.add_delete("/_sandbox/stats", _guarded(_clear_stats))
    app.router.add_post("/_sandbox/reset", _guarded(_reset))
    app.router.add_get("/_sandbox/faults", _guarded(_faults))
    app.router.add_post("/_sandbox/faults", _guarded(_set_faults))
    app.router.add_delete("/_sandbox/faults", _guarded(_clear_faults))
    app.router.add_get("/_sandbox/writes", _guarded(_writes))
    app.router.add_get("/_sandbox/objects/{id}", _guarded(_object))
    app.router.add_get("/_sandbox/clock", _guarded(_clock))
    app.router.add_post("/_sandbox/clock", _guarded(_set_clock))
    app.router.add_get("/_sandbox/limits", _guarded(_limits))
    app.router.add_post("/_sandbox/limits", _guarded(_set_limits))
    app.router.add_get("/_sandbox/world", _guarded(_world))
    app.router.add_get("/_sandbox/insights", _guarded(_insights))
    app.router.add_post("/_sandbox/insights", _guarded(_set_insights))
    app.router.add_post("/_sandbox/ads_manager/{id}", _guarded(_ads_manager_change))
    app.router.add_post("/_sandbox/ads/{id}/factors", _guarded(_set_ad_factors))
    app.router.add_get("/_sandbox/tokens", _guarded(_tokens))
    app.router.add_post("/_sandbox/tokens", _guarded(_issue_token))
    app.router.add_post("/_sandbox/tokens/update", _guarded(_update_token))
    app.router.add_post("/_sandbox/adrules/{id}/history", _guarded(_add_rule_run))
    app.router.add_get("/_sandbox/quality/{id}", _guarded(_quality))
    app.router.add_get("/_sandbox/counterfactual/{id}", _guarded(_counterfactual))


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


class _BadInput(Exception):
    """Admin input that cannot be used; answered with 400 and the message."""


class _NotFound(Exception):
    """An admin route named an object the world does not hold; answered with 404."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _guarded(handler: Handler) -> Handler:
    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except _BadInput as exc:
            return _json({"error": str(exc)}, status=400)
        except _NotFound as exc:
            return _json({"error": str(exc)}, status=404)

    return guarded


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadInput("the body must be a JSON object") from exc
    if not isinstance(body, dict):
        raise _BadInput("the body must be a JSON object")
    return body


def _validated(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _BadInput(str(exc)) from exc


async def _stats(request: web.Request) -> web.Response:
    return _json(request.app[STATE].stats.snapshot())


async def _clear_stats(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.stats = Stats()
    return _json(state.stats.snapshot())


async def _reset(request: web.Request) -> web.Response:
    state = request.app[STATE]
    changes = _validated(_Reset, await _body(request)).model_dump(exclude_none=True)
    if "timezones" in changes:
        changes["timezones"] = tuple(sorted(changes["timezones"].items()))
    try:
        state.reset(dataclasses.replace(state.defaults, **changes))
    except ValueError as exc:
        raise _BadInput(str(exc)) from exc
    return _json(_world_summary(state))


async def _faults(request: web.Request) -> web.Response:
    return _json(request.app[STATE].faults.describe())


async def _set_faults(request: web.Request) -> web.Response:
    faults = request.app[STATE].faults
    try:
        faults.update(await _body(request))
    except ValidationError as exc:
        raise _BadInput(str(exc)) from exc
    return _json(faults.describe())


async def _clear_faults(request: web.Request) -> web.Response:
    faults = request.app[STATE].faults
    faults.clear()
    return _json(faults.describe())


async def _writes(request: web.Request) -> web.Response:
    return _json([record.as_json() for record in request.app[STATE].writes])


async def _object(request: web.Request) -> web.Response:
    world = request.app[STATE].world
    object_id = request.match_info["id"]
    found: Any = world.get(object_id) or world.account(object_id)
    if found is None:
        return _json({"error": f"no object {object_id} in this world"}, status=404)
    raw = dataclasses.asdict(found)
    if getattr(found, "kind", None) == "ad":
        raw["factors"] = dataclasses.asdict(world.factors(found))
    return _json({name: value for name, value in raw.items() if not name.startswith("_")})


def _clock_json(state: SandboxState) -> dict[str, Any]:
    return {"now": state.now().isoformat(), "frozen": state.clock.frozen}


async def _clock(request: web.Request) -> web.Response:
    return _json(_clock_json(request.app[STATE]))


async def _set_clock(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = _validated(_Clock, await _body(request))
    if "now" in body.model_fields_set:
        if body.now is None:
            state.clock.reset()
        else:
            state.clock.freeze(body.now if body.now.tzinfo else body.now.replace(tzinfo=UTC))
    if body.advance_s:
        state.clock.advance(body.advance_s)
    return _json(_clock_json(state))


async def _limits(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json(state.usage.snapshot(state.now()))


async def _set_limits(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = _validated(_Limits, await _body(request))
    for name, value in body.model_dump(exclude_none=True).items():
        setattr(state.usage.limits, name, value)
    return _json(state.usage.snapshot(state.now()))


async def _insights(request: web.Request) -> web.Response:
    return _json(request.app[STATE].report_runs.describe())


async def _set_insights(request: web.Request) -> web.Response:
    runs = request.app[STATE].report_runs
    try:
        runs.configure(await _body(request))
    except ValidationError as exc:
        raise _BadInput(str(exc)) from exc
    return _json(runs.describe())


async def _ads_manager_change(request: web.Request) -> web.Response:
    """A change a person makes in Ads Manager: validated and limited like a Graph write,
    logged in the activity log under Ads Manager, and absent from the write log."""
    state = request.app[STATE]
    obj = state.world.get(request.match_info["id"])
    if obj is None:
        return _json({"error": f"no campaign, ad set or ad {request.match_info['id']}"}, status=404)
    params = {name: str(value) for name, value in (await _body(request)).items()}
    try:
        apply_changes(state, obj, params, actor=ADS_MANAGER)
    except GraphError as exc:
        return _json({"error": exc.message, "graph_error": exc.body(state.trace_id())}, status=400)
    return _json({"success": True})


async def _set_ad_factors(request: web.Request) -> web.Response:
    """Set an ad's weights in its ad set's delivery (and so its rankings); the ad set's own
    numbers do not change, its ads share them differently from then on, past days too."""
    state = request.app[STATE]
    ad = state.world.get(request.match_info["id"])
    if ad is None or ad.kind != "ad":
        return _json({"error": f"no ad {request.match_info['id']}"}, status=404)
    changes = _validated(_Factors, await _body(request)).model_dump(exclude_none=True)
    try:
        factors = dataclasses.replace(state.world.factors(ad), **changes)
    except ValueError as exc:
        raise _BadInput(str(exc)) from exc
    state.world.ad_factors[ad.id] = factors
    return _json(dataclasses.asdict(factors))


async def _world(request: web.Request) -> web.Response:
    return _json(_world_summary(request.app[STATE]))


def _world_summary(state: SandboxState) -> dict[str, Any]:
    world = state.world
    kinds = [obj.kind for obj in world.objects.values()]
    return {
        "seed": world.seed,
        "scenario": world.scenario,
        "accounts": list(world.accounts),
        "campaigns": kinds.count("campaign"),
        "adsets": kinds.count("adset"),
        "ads": kinds.count("ad"),
        "adrules": len(world.adrules.rules),
        "app": state.config.app,
    }


async def _tokens(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json([grant.describe(state.now()) for grant in state.tokens.all()])


async def _issue_token(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = _validated(_Issue, await _body(request))
    unknown = [a for a in body.accounts or () if state.world.account(a) is None]
    if unknown:
        raise _BadInput(f"{unknown[0]} is not an ad account of this world")
    expires_at = None
    if body.expires_in_s is not None:
        expires_at = state.now() + timedelta(seconds=body.expires_in_s)
    grant = state.tokens.issue(
        token=body.token,
        accounts=body.accounts,
        permissions=PERMISSIONS if body.permissions is None else body.permissions,
        expires_at=expires_at,
    )
    return _json(grant.describe(state.now()), status=201)


async def _update_token(request: web.Request) -> web.Response:
    """Expire, invalidate (``password_changed``, ``logged_out``) or restore a token, or set
    its permissions."""
    state = request.app[STATE]
    body = _validated(_TokenUpdate, await _body(request))
    grant: Grant | None = state.tokens.grant(body.token)
    if grant is None:
        return _json({"error": "the sandbox never issued this token"}, status=404)
    if body.restore:
        grant.invalidated, grant.expires_at = None, None
    if body.expire:
        grant.expires_at = state.now()
    if body.invalidate is not None:
        assert body.invalidate in INVALIDATIONS
        grant.invalidated = body.invalidate
    if body.permissions is not None:
        grant.permissions = set(body.permissions)
    return _json(grant.describe(state.now()))


async def _add_rule_run(request: web.Request) -> web.Response:
    """Add a run to an ad rule's history (the sandbox never runs rules itself)."""
    state = request.app[STATE]
    rule = state.world.adrules.get(request.match_info["id"])
    if rule is None:
        return _json({"error": f"no ad rule {request.match_info['id']}"}, status=404)
    run = _validated(_Run, await _body(request))
    for result in run.results:
        if result.object_type not in HISTORY_OBJECT_TYPES:
            raise _BadInput(f"object_type must be one of {HISTORY_OBJECT_TYPES}")
        unknown = [a.action for a in result.actions if a.action not in HISTORY_ACTIONS]
        if unknown:
            raise _BadInput(f"{unknown[0]} is not one of Meta's AdRuleHistory actions")
    at = run.timestamp or state.now()
    entry = state.world.adrules.record(
        rule,
        at=at if at.tzinfo else at.replace(tzinfo=UTC),
        results=[r.model_dump(exclude_none=True) for r in run.results],
        is_manual=run.is_manual,
        exception=(run.exception_code, run.exception_message or "")
        if run.exception_code is not None
        else None,
    )
    return _json(render_run(entry, HISTORY_FIELDS), status=201)


def _members(state: SandboxState, node_id: str) -> tuple[Account, list[AdObject]]:
    found = members(state.world, node_id)
    if found is not None:
        return found
    if state.world.get(node_id) is not None:
        raise _BadInput(f"{node_id} is an ad: ask its ad set, whose delivery it is")
    raise _NotFound(f"no ad account, campaign or ad set {node_id} in this world")


async def _quality(request: web.Request) -> web.Response:
    """The hidden quality of an ad account, campaign or ad set (tests only; never in Graph)."""
    state = request.app[STATE]
    node_id = request.match_info["id"]
    _, adsets = _members(state, node_id)
    return _json(quality(state.insights, node_id, adsets, state.now()))


async def _counterfactual(request: web.Request) -> web.Response:
    """What a node delivered, what it would have without the Graph API's writes since
    ``since``, and the difference (tests only)."""
    state = request.app[STATE]
    node_id = request.match_info["id"]
    account, adsets = _members(state, node_id)
    query = _validated(_Counterfactual, dict(request.query))
    now = state.now()
    since = query.since
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)  # a naive instant is UTC, as the clock route takes it
    first, last = default_period(account, adsets, since, now)
    period = (query.date_start or first, query.date_stop or last)
    if period[0] > period[1]:
        raise _BadInput("date_start must not be after date_stop")
    if (period[1] - period[0]).days >= MAX_HISTORY_DAYS:
        raise _BadInput(f"the period may hold at most {MAX_HISTORY_DAYS} days")
    rows = counterfactual(
        state.insights, adsets, since=since, period=period, increment=query.increment, now=now
    )
    return _json(
        {
            "id": node_id,
            "account_id": account.id,
            "currency": account.currency,
            "timezone": account.timezone_name,
            "now": now.isoformat(),
            "since": since.isoformat() if since is not None else None,
            "increment": query.increment,
            "rows": rows,
        }
    )
