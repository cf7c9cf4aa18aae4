"""The Batch API: ``POST /`` with ``batch`` (at most 50 sub-requests), answered item by item.

Each sub-request runs through the router exactly as if it had been sent
alone, so it is counted, scoped, throttled and fault-injected alike; the batch
itself adds no counted call. Under ``null_item_rate`` an item comes back as
``null`` without having run (it still counts, as Meta counts it). Under ``lost_answers`` an
item runs and then comes back ``null``, or the whole call's answer is lost (the response
says how: the app answers 502 or closes the connection).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from graph_sandbox.errors import GraphError, invalid_param
from graph_sandbox.limits import UseCase
from graph_sandbox.protocol import (
    DEFAULT_VERSION,
    GraphRequest,
    GraphResponse,
    item_request_parts,
    split_token,
)
from graph_sandbox.router import execute, kind_of
from graph_sandbox.state import SandboxState

#: Meta's own limit on the sub-requests of one batch call.
BATCH_MAX_ITEMS: Final = 50


def run_batch(
    state: SandboxState, params: dict[str, str], token: str | None, origin: str
) -> GraphResponse:
    """Answer a batch request.

    Args:
        state: The sandbox.
        params: The batch request's parameters (``batch``, ``include_headers``), token removed.
        token: The batch's access token; an item may carry its own instead.
        origin: Scheme and host, e.g. ``http://127.0.0.1:8081`` (for ``paging.next``).
    """
    now = state.now()
    try:
        items = _parse(params.get("batch"))
        requests = [_item_request(item, token, origin) for item in items]
    except GraphError as error:
        state.stats.error(error.code)
        headers = state.usage.headers(now, (), UseCase.ADS_MANAGEMENT)
        return GraphResponse(error.status, error.body(state.trace_id()), headers)
    include_headers = (params.get("include_headers") or "true").lower() not in ("false", "0")
    results: list[dict[str, Any] | None] = []
    lost: str | None = None
    for req in requests:
        item, item_lost = _run_item(state, req, include_headers)
        results.append(item)
        lost = lost or item_lost
    headers = state.usage.headers(now, (), UseCase.ADS_MANAGEMENT)
    return GraphResponse(200, results, headers, lost=lost)


def _parse(raw: str | None) -> list[Any]:
    if not raw:
        raise invalid_param("The parameter batch is required")
    try:
        items = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_param("batch must be a JSON array of requests") from exc
    if not isinstance(items, list) or not items:
        raise invalid_param("batch must be a non-empty JSON array of requests")
    if len(items) > BATCH_MAX_ITEMS:
        raise invalid_param(
            f"Too many requests in batch message. Maximum batch size is {BATCH_MAX_ITEMS}"
        )
    return items


def _item_request(item: Any, token: str | None, origin: str) -> GraphRequest:
    if not isinstance(item, dict) or not isinstance(item.get("relative_url"), str):
        raise invalid_param("Each batch request needs a method and a relative_url")
    version, path, params = item_request_parts(item)
    rest, item_token = split_token(params, None)
    return GraphRequest(
        method=str(item.get("method") or "GET").upper(),
        path=path,
        params=rest,
        token=item_token or token,
        base_url=f"{origin}/{version or DEFAULT_VERSION}",
        version=version,
    )


def _run_item(
    state: SandboxState, req: GraphRequest, include_headers: bool
) -> tuple[dict[str, Any] | None, str | None]:
    """The item's answer, and how the whole call's answer is lost because of it (if it is)."""
    if state.faults.null_item():  # not run
        state.stats.call(kind_of(state, req))
        return None, None
    lost = state.faults.lost_answer(req.method, req.path, in_batch=True)
    response = execute(state, req)
    if lost == "null":  # run, then answered null
        return None, None
    item: dict[str, Any] = {"code": response.status}
    if include_headers:
        headers = {"Content-Type": "application/json; charset=UTF-8", **response.headers}
        item["headers"] = [{"name": name, "value": value} for name, value in headers.items()]
    item["body"] = orjson.dumps(response.body).decode()
    return item, lost
