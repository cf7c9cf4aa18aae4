"""The sandbox's aiohttp application: Graph routes under any ``/vNN.0/`` prefix, plus admin routes.

HTTP concerns live here (parameters from query, form or JSON; the token from
``access_token`` or ``Authorization``; latency; the batch endpoint). What a
call means is decided by the router, the same for direct and batch calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import Any

import orjson
from aiohttp import web

from graph_sandbox.admin_routes import add_admin_routes
from graph_sandbox.batch import run_batch
from graph_sandbox.errors import GraphError, invalid_param
from graph_sandbox.extras import add_extras, seed_sheets
from graph_sandbox.faults import is_write
from graph_sandbox.limits import UseCase
from graph_sandbox.protocol import (
    DEFAULT_VERSION,
    GraphRequest,
    GraphResponse,
    as_param,
    split_token,
    split_version,
    version_error,
)
from graph_sandbox.router import execute
from graph_sandbox.scenarios import WorldConfig
from graph_sandbox.state import STATE, SandboxState

# Batch bodies of 50 sub-requests with long id filters exceed aiohttp's 1 MiB default.
_MAX_BODY_BYTES = 16 * 1024 * 1024
# What a proxy in front of Graph answers when it lost Graph's answer.
_BAD_GATEWAY = (
    "<html><head><title>502 Bad Gateway</title></head>"
    "<body><center><h1>502 Bad Gateway</h1></center></body></html>"
)


def create_app(
    *,
    seed: int = 1,
    scenario: str = "demo",
    accounts: int | None = None,
    campaigns_per_account: int | None = None,
    adsets_per_campaign: int | None = None,
    tokens: Iterable[str] = (),
    app: str = "new",
) -> web.Application:
    """Build a sandbox app holding a fresh world.

    Args:
        seed: Drives ids and numbers; the same seed always gives the same world.
        scenario: ``demo`` (3 varied accounts) or ``bench`` (many uniform campaigns).
        accounts: Number of ad accounts (scenario default when ``None``).
        campaigns_per_account: Campaigns per ad account (scenario default when ``None``).
        adsets_per_campaign: Ad sets per campaign (scenario default when ``None``).
        tokens: Access tokens to accept for every ad account, in this world and after every
            reset (the sandbox also issues one per ad account; see ``graph_sandbox.tokens``).
        app: ``new`` (the default: an app created since 2026-11-04, refused Graph's legacy
            features, :mod:`graph_sandbox.legacy`) or ``legacy`` (an older app).

    Raises:
        ValueError: Unknown scenario, or a size below 1.
    """
    config = WorldConfig(
        seed=seed,
        scenario=scenario,
        accounts=accounts,
        campaigns_per_account=campaigns_per_account,
        adsets_per_campaign=adsets_per_campaign,
        app=app,
    )
    application = web.Application(client_max_size=_MAX_BODY_BYTES)
    application[STATE] = SandboxState(config, operator_tokens=tokens)
    add_admin_routes(application)
    add_extras(application)
    state = application[STATE]

    def reseed(state: SandboxState) -> None:
        seed_sheets(
            application, state.world, seed=state.config.seed, scenario=state.config.scenario
        )

    state.on_reset = reseed  # a reset reloads the demo spreadsheet for the new world
    reseed(state)
    application.router.add_route("*", "/{tail:.*}", _graph)
    return application


async def _graph(request: web.Request) -> web.Response:
    stats = request.app[STATE].stats  # the counters of this request, whatever resets meanwhile
    stats.http(request.method)
    stats.in_flight += 1
    try:
        return await _answer(request)
    finally:
        stats.in_flight -= 1


async def _answer(request: web.Request) -> web.Response:
    state = request.app[STATE]
    version, path = split_version(request.match_info["tail"])
    try:
        # The request is read whole first, as Meta does: a client that gives up while the
        # answer is delayed does not stop a write from landing.
        raw_params = await _params(request)
    except GraphError as error:
        state.stats.error(error.code)
        return _http(_failure(state, error))
    batch_writes = path == "/" and _carries_writes(raw_params.get("batch"))
    writes = is_write(request.method, path, batch_writes=batch_writes)
    stats = state.stats
    stats.call_started(writes=writes)
    try:
        return await _run(
            request, state, version, path, raw_params, batch_writes=batch_writes, writes=writes
        )
    finally:
        stats.call_finished(writes=writes)


async def _run(
    request: web.Request,
    state: SandboxState,
    version: str | None,
    path: str,
    raw_params: dict[str, str],
    *,
    batch_writes: bool,
    writes: bool,
) -> web.Response:
    """Answer a call once read (``writes``: it is a write, or a batch carrying some)."""
    delay_s = state.faults.delay_s(request.method, path, batch_writes=batch_writes)
    if delay_s:
        stats = state.stats
        stats.writes_in_flight += writes
        try:
            await asyncio.sleep(delay_s)
        finally:
            stats.writes_in_flight -= writes
    params, token = split_token(raw_params, request.headers.get("Authorization"))
    origin = f"{request.scheme}://{request.host}"
    if request.method == "POST" and path == "/":
        if (wrong_version := version_error(version, state.now())) is not None:
            state.stats.error(wrong_version.code)
            return _http(_failure(state, wrong_version))
        return _deliver(request, run_batch(state, params, token, origin))
    lost = state.faults.lost_answer(request.method, path, in_batch=False)
    base_url = f"{origin}/{version or DEFAULT_VERSION}"
    graph_request = GraphRequest(request.method, path, params, token, base_url, version=version)
    response = execute(state, graph_request)
    return _deliver(request, dataclasses.replace(response, lost=lost))


def _deliver(request: web.Request, response: GraphResponse) -> web.Response:
    """The answer, or what reaches the client once it is lost (the call has run)."""
    if response.lost == "reset" and request.transport is not None:
        request.transport.abort()  # the client sees the connection closed, no answer
    if response.lost in ("bad_gateway", "reset"):
        return web.Response(status=502, text=_BAD_GATEWAY, content_type="text/html")
    return _http(response)


def _carries_writes(batch: str | None) -> bool:
    """True for a Batch API call with a POST or a DELETE among its items (it is delayed as a
    write)."""
    try:
        items = orjson.loads(batch or "[]")
    except orjson.JSONDecodeError:
        return False
    return isinstance(items, list) and any(
        isinstance(item, dict) and str(item.get("method", "")).upper() in ("POST", "DELETE")
        for item in items
    )


async def _params(request: web.Request) -> dict[str, str]:
    """Query parameters, overlaid with form or JSON body parameters."""
    params = {name: value for name, value in request.query.items()}
    if request.method != "POST" or not request.can_read_body:
        return params
    if request.content_type == "application/json":
        try:
            body: Any = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise invalid_param("The request body is not valid JSON") from exc
        if not isinstance(body, dict):
            raise invalid_param("A JSON request body must be an object")
        params |= {name: as_param(value) for name, value in body.items()}
    else:
        form = await request.post()
        params |= {name: str(value) for name, value in form.items()}
    return params


def _failure(state: SandboxState, error: GraphError) -> GraphResponse:
    headers = state.usage.headers(state.now(), (), UseCase.ADS_MANAGEMENT)
    return GraphResponse(error.status, error.body(state.trace_id()), headers)


def _http(response: GraphResponse) -> web.Response:
    return web.Response(
        body=orjson.dumps(response.body),
        status=response.status,
        headers=response.headers,
        content_type="application/json",
    )
