"""Asynchronous batch requests: ``POST /act_{id}/async_batch_requests`` and its request sets.

Meta runs the requests of an async batch in the background. The call answers
``{"id": <request set id>}`` at once; a client then polls the set
(``GET /{set_id}``: ``is_completed`` and the counts) and its requests
(``GET /{set_id}/requests``: each one's ``status`` and ``result``). It is how
Meta copies a tree too big for a synchronous ``/copies`` call (more than 3
objects; one asynchronous copy may hold 51).

The sandbox keeps the sets here; the router runs a set's requests, in order,
through the same path as any call (counted, scoped, checked against the token
that made the set) on the first Graph call that arrives once the fault setting
``async_batch_delay_s`` (0 by default) has passed since the set was made.
Until then every request is ``IN_PROGRESS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import orjson

from graph_sandbox.errors import invalid_param
from graph_sandbox.protocol import GraphRequest, item_request_parts, page_body, split_token
from graph_sandbox.query import paginate, parse_fields, parse_json_list, parse_limit

if TYPE_CHECKING:  # the state holds the sets: a runtime import would go round in a circle
    from graph_sandbox.state import SandboxState

#: Request sets and requests get ids of their own kind (numeric, as Meta's).
SET_ID_PREFIX: Final = "12024"
REQUEST_ID_PREFIX: Final = "12025"
#: The most requests one async batch may carry in the sandbox (Meta documents no number).
MAX_REQUESTS: Final = 1000
SET_FIELDS: Final = (
    "id",
    "name",
    "owner_id",
    "is_completed",
    "total_count",
    "initial_count",
    "in_progress_count",
    "success_count",
    "error_count",
    "canceled_count",
    "created_time",
    "updated_time",
)
REQUEST_FIELDS: Final = (
    "id",
    "status",
    "result",
    "input",
    "scope_object_id",
    "async_request_set",
    "created_time",
    "updated_time",
)
STATUSES: Final = frozenset({"INITIAL", "IN_PROGRESS", "SUCCESS", "ERROR", "CANCELED"})


def meta_time(moment: datetime) -> str:
    """Meta's timestamp format (as :func:`graph_sandbox.objects.meta_time`, without its imports)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class AsyncRequest:
    """One request of a set: what to run, and once run, Meta's answer."""

    id: str
    name: str
    method: str
    path: str
    params: dict[str, str]
    created_time: datetime
    status: str = "IN_PROGRESS"
    result: Any = None
    updated_time: datetime | None = None

    def as_graph_request(self, token: str | None, base_url: str) -> GraphRequest:
        """The call this request makes, flagged as part of an asynchronous batch."""
        return GraphRequest(
            self.method, self.path, self.params, token, base_url, in_async_batch=True
        )


@dataclass
class RequestSet:
    """One ``async_batch_requests`` call: its requests and whose token runs them."""

    id: str
    name: str
    account_id: str
    token: str | None
    base_url: str
    created_time: datetime
    ready_at: datetime
    requests: list[AsyncRequest] = field(default_factory=list)
    ran: bool = False

    def count(self, status: str) -> int:
        """How many of the set's requests are in ``status``."""
        return sum(r.status == status for r in self.requests)

    def updated_time(self) -> datetime:
        """When a request last changed (or the set was made)."""
        times = [r.updated_time for r in self.requests if r.updated_time is not None]
        return max(times, default=self.created_time)


class AsyncBatches:
    """Every request set of one world, by id."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._sets: dict[str, RequestSet] = {}
        self._requests: dict[str, RequestSet] = {}
        self._serial = 0

    def _next_id(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}{self._seed % 1000:03d}{self._serial:07d}"

    def get(self, set_id: str) -> RequestSet | None:
        """A request set by id, or ``None``."""
        return self._sets.get(set_id)

    def owner(self, node: str) -> str | None:
        """``act_…`` of the ad account a set or request belongs to, or ``None``."""
        found = self._sets.get(node) or self._requests.get(node)
        return found.account_id if found is not None else None

    def create(self, req: GraphRequest, *, account_id: str, now: datetime, delay_s: float) -> str:
        """Store the set ``req`` asks for; its id.

        Raises:
            GraphError: 100 for a missing name, a malformed ``adbatch`` or a request that
                is not a POST.
        """
        name = (req.param("name") or "").strip()
        if not name:
            raise invalid_param("The parameter name is required")
        items = parse_json_list(req.param("adbatch"), "adbatch")
        if not items:
            raise invalid_param("The parameter adbatch is required")
        if len(items) > MAX_REQUESTS:
            raise invalid_param(f"adbatch holds at most {MAX_REQUESTS} requests in the sandbox")
        base_url = req.base_url
        request_set = RequestSet(
            id=self._next_id(SET_ID_PREFIX),
            name=name,
            account_id=account_id,
            token=req.token,
            base_url=base_url,
            created_time=now,
            ready_at=now + timedelta(seconds=delay_s),
        )
        for index, item in enumerate(items):
            request_set.requests.append(self._request(item, index, now))
        self._sets[request_set.id] = request_set
        for request in request_set.requests:
            self._requests[request.id] = request_set
        return request_set.id

    def _request(self, item: Any, index: int, now: datetime) -> AsyncRequest:
        if not isinstance(item, dict) or not isinstance(item.get("relative_url"), str):
            raise invalid_param(f"adbatch[{index}] needs a relative_url")
        method = str(item.get("method") or "POST").upper()
        if method != "POST":
            raise invalid_param(f"adbatch[{index}]: an asynchronous batch runs POST requests only")
        _, path, params = item_request_parts(item)
        rest, _ = split_token(params, None)  # a request runs with the set's token
        name = str(item.get("name") or f"request {index + 1}")
        return AsyncRequest(self._next_id(REQUEST_ID_PREFIX), name, method, path, rest, now)

    def take_due(self, now: datetime) -> list[RequestSet]:
        """Sets whose time has come and that have not run; they are marked run."""
        due = [s for s in self._sets.values() if not s.ran and s.ready_at <= now]
        for request_set in due:
            request_set.ran = True
        return due


def create_set(state: SandboxState, req: GraphRequest) -> dict[str, str]:
    """``POST /act_{id}/async_batch_requests``: ``{"id": <request set id>}``."""
    node = req.segments[0]
    if not node.startswith("act_"):
        raise invalid_param(f"Unsupported post request: {req.path}")
    delay_s = state.faults.settings.async_batch_delay_s
    set_id = state.async_batches.create(req, account_id=node, now=state.now(), delay_s=delay_s)
    return {"id": set_id}


def read_set(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /{set_id}`` (Meta's default fields: id, owner_id, name, is_completed)."""
    request_set = state.async_batches.get(req.segments[0])
    assert request_set is not None, "the router checks ids before reads"
    default = ("id", "owner_id", "name", "is_completed")
    fields = parse_fields(
        req.param("fields"), default=default, allowed=SET_FIELDS, node="AdAsyncRequestSet"
    )
    return render_set(request_set, fields)


def read_requests(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /{set_id}/requests``."""
    request_set = state.async_batches.get(req.segments[0])
    if request_set is None:
        raise invalid_param(f"Unknown path components: {req.path}")
    return list_requests(request_set, req)


def render_set(request_set: RequestSet, fields: list[str]) -> dict[str, Any]:
    """A request set as ``GET /{set_id}`` answers it."""
    counts = {status: request_set.count(status) for status in STATUSES}
    values: dict[str, Any] = {
        "id": request_set.id,
        "name": request_set.name,
        "owner_id": request_set.account_id.removeprefix("act_"),
        "is_completed": counts["SUCCESS"] + counts["ERROR"] + counts["CANCELED"]
        == len(request_set.requests),
        "total_count": len(request_set.requests),
        "initial_count": counts["INITIAL"],
        "in_progress_count": counts["IN_PROGRESS"],
        "success_count": counts["SUCCESS"],
        "error_count": counts["ERROR"],
        "canceled_count": counts["CANCELED"],
        "created_time": meta_time(request_set.created_time),
        "updated_time": meta_time(request_set.updated_time()),
    }
    return {name: values[name] for name in fields}


def list_requests(request_set: RequestSet, req: GraphRequest) -> dict[str, Any]:
    """``GET /{set_id}/requests`` (``statuses`` filters), paged like every edge."""
    fields = parse_fields(
        req.param("fields"), default=("id", "status"), allowed=REQUEST_FIELDS, node="AdAsyncRequest"
    )
    statuses = {str(s) for s in parse_json_list(req.param("statuses"), "statuses")}
    unknown = statuses - STATUSES
    if unknown:
        raise invalid_param(f"Param statuses[{sorted(unknown)[0]}] is not a request status")
    chosen = [r for r in request_set.requests if not statuses or r.status in statuses]
    page = paginate(
        chosen,
        lambda r: r.id,
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    rows = [_render_request(request_set, r, fields) for r in page.items]
    return page_body(req, rows, page)


def _render_request(
    request_set: RequestSet, request: AsyncRequest, fields: list[str]
) -> dict[str, Any]:
    segments = [part for part in request.path.split("/") if part]
    values: dict[str, Any] = {
        "id": request.id,
        "status": request.status,
        "result": request.result,
        "input": {
            "name": request.name,
            "method": request.method,
            "relative_url": request.path.lstrip("/"),
            "body": request.params,
        },
        "scope_object_id": segments[0] if segments else None,
        "async_request_set": {"id": request_set.id},
        "created_time": meta_time(request.created_time),
        "updated_time": meta_time(request.updated_time or request.created_time),
    }
    return {name: values[name] for name in fields if values[name] is not None}


def record_result(request: AsyncRequest, status: int, body: Any, now: datetime) -> None:
    """Keep what running a request answered."""
    request.status = "SUCCESS" if status == 200 else "ERROR"
    request.result = orjson.loads(orjson.dumps(body))
    request.updated_time = now
