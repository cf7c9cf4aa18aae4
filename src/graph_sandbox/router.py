"""Runs one Graph call: count it, check token, scope, faults and quotas, then hand it to its route.

The same path serves direct HTTP requests, batch sub-requests and the requests of
an asynchronous batch, which is why a batch item costs exactly what the same
request sent alone costs. Asynchronous batches whose time has come run first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graph_sandbox import (
    activities,
    adrules,
    async_batches,
    reads,
    reports,
    schedule_routes,
    writes,
)
from graph_sandbox.errors import (
    GraphError,
    invalid_param,
    invalid_token,
    missing_aliases,
    no_permission,
    nonexistent_object,
)
from graph_sandbox.legacy import legacy_feature, not_for_new_apps
from graph_sandbox.limits import UseCase
from graph_sandbox.protocol import GraphRequest, GraphResponse, version_error
from graph_sandbox.state import SandboxState, WriteRecord
from graph_sandbox.tokens import Grant

Handler = Callable[[SandboxState, GraphRequest], Any]

_HANDLERS: dict[str, Handler] = {
    "accounts": reads.list_accounts,
    "list": reads.list_objects,
    "read": reads.read,
    "insights": reports.insights,
    "write": writes.update,
    "copies": writes.copy,
    "report": reports.create_report_run,
    "report_run": reports.report_run,
    "report_results": reports.report_run_insights,
    "activities": activities.list_activities,
    "async_batch": async_batches.create_set,
    "async_set": async_batches.read_set,
    "async_requests": async_batches.read_requests,
    "adrules": adrules.read_call,
    "adrules_write": adrules.write_call,
    "schedules": schedule_routes.list_periods,
    "schedule_write": schedule_routes.create,
    "schedule": schedule_routes.read_period,
    "delete": schedule_routes.delete,
}
#: Calls Meta counts as Insights (the ``ads_insights`` use case, the Insights throttle).
INSIGHTS_KINDS = frozenset({"insights", "report", "report_run", "report_results"})

_GET_EDGES = {
    "campaigns": "list",
    "adsets": "list",
    "ads": "list",
    "copies": "list",
    "insights": "insights",
    "activities": "activities",
    "requests": "async_requests",
    "adrules_library": "adrules",
    "adrules_history": "adrules",
    "history": "adrules",
    "budget_schedules": "schedules",
}
_POST_EDGES = {
    "copies": "copies",
    "insights": "report",
    "async_batch_requests": "async_batch",
    "adrules_library": "adrules_write",
    "budget_schedules": "schedule_write",
}
#: Calls that change something at Meta (they need ``ads_management``).
_WRITES = frozenset({"write", "copies", "async_batch", "adrules_write", "schedule_write", "delete"})


def classify(req: GraphRequest) -> str:
    """The kind of call (a key of ``Stats.calls_by_kind``), from method and path alone."""
    segments, method = req.segments, req.method
    if method == "GET":
        if segments == ("me", "adaccounts"):
            return "accounts"
        if len(segments) == 1 and segments[0].startswith(async_batches.SET_ID_PREFIX):
            return "async_set"
        if len(segments) <= 1:
            return "read"
        if len(segments) == 2:
            return _GET_EDGES.get(segments[1], "other")
    if method == "POST" and len(segments) == 1:
        return "write"
    if method == "POST" and len(segments) == 2:
        return _POST_EDGES.get(segments[1], "other")
    if method == "DELETE" and len(segments) == 1:
        return "delete"
    return "other"


def kind_of(state: SandboxState, req: GraphRequest) -> str:
    """:func:`classify`, knowing this world's async report runs (``GET /{report_run_id}``)
    and ad rules (``GET``/``POST /{rule_id}``)."""
    segments = req.segments
    if req.method == "GET" and len(segments) == 1 and state.world.schedules.live(segments[0]):
        return "schedule"
    if len(segments) == 1 and state.world.adrules.get(segments[0]) is not None:
        return "adrules" if req.method == "GET" else "adrules_write"
    if req.method == "GET" and segments and state.report_runs.get(segments[0]) is not None:
        if len(segments) == 1:
            return "report_run"
        if segments[1:] == ("insights",):
            return "report_results"
    return classify(req)


def execute(state: SandboxState, req: GraphRequest) -> GraphResponse:
    """Answer one counted call the way Meta would."""
    _run_async_batches(state)
    kind = kind_of(state, req)
    use_case = UseCase.ADS_INSIGHTS if kind in INSIGHTS_KINDS else UseCase.ADS_MANAGEMENT
    now = state.now()
    state.stats.call(kind)
    accounts: tuple[str, ...] = ()
    try:
        if (wrong_version := version_error(req.version, now)) is not None:
            raise wrong_version
        grant = _check_token(state, req)
        if state.config.app == "new" and (feature := legacy_feature(req, kind)) is not None:
            raise not_for_new_apps(feature)
        accounts = scope(state, req, kind)
        _authorize(state, req, grant, accounts, kind)
        state.stats.accounts(accounts)
        failure = state.faults.failure(req.method, req.path)
        if failure is not None:
            raise failure
        state.usage.admit(now, accounts, use_case)
        status, body = 200, _HANDLERS[kind](state, req)
    except GraphError as error:
        status, body = error.status, error.body(state.trace_id())
        state.stats.error(error.code)
    if kind in _WRITES:
        _log_write(state, req, kind, status, body)
    for change in state.faults.changes_due(req.method, req.path):
        _apply_change(state, change.object_id, change.status)
    headers = state.usage.headers(now, accounts, use_case)
    if use_case is UseCase.ADS_INSIGHTS and accounts:
        headers |= state.usage.insights_throttle(now, accounts)
    return GraphResponse(status, body, headers)


def _check_token(state: SandboxState, req: GraphRequest) -> Grant:
    if req.token and state.faults.token_revoked(req.token):
        raise invalid_token()
    return state.tokens.check(req.token, state.now())


def _authorize(
    state: SandboxState, req: GraphRequest, grant: Grant, accounts: tuple[str, ...], kind: str
) -> None:
    """The token must cover every ad account the call touches, with the right permission.

    An ad account the token does not cover answers as an object the caller cannot see.
    """
    hidden = [account for account in accounts if not grant.covers(account)]
    if hidden:
        if not req.segments:
            ids = [part.strip() for part in (req.param("ids") or "").split(",") if part.strip()]
            raise missing_aliases([i for i in ids if _owner(state, i) in hidden])
        node = req.segments[0]
        if node.startswith("act_"):
            raise no_permission(node)
        raise nonexistent_object(node, req.method)
    for account in accounts:
        state.tokens.authorize(grant, write=kind in _WRITES, account_id=account)


def scope(state: SandboxState, req: GraphRequest, kind: str) -> tuple[str, ...]:
    """The ad accounts a call touches (for quotas and headers); unknown ids fail here.

    Raises:
        GraphError: 100 for an unknown path or object, 803 for unknown ``ids``,
            200 for an ad account outside the world.
    """
    if kind == "other":
        if req.method == "GET":
            raise invalid_param(f"Unknown path components: {req.path}")
        raise invalid_param(f"Unsupported {req.method.lower()} request: {req.path}")
    if kind == "accounts" or req.segments == ("me",):
        return ()
    if not req.segments:
        ids = [part.strip() for part in (req.param("ids") or "").split(",") if part.strip()]
        owners = [_owner(state, object_id) for object_id in ids]
        unknown = [object_id for object_id, owner in zip(ids, owners, strict=True) if not owner]
        if unknown:
            raise missing_aliases(unknown)
        return tuple(dict.fromkeys(owner for owner in owners if owner))
    node = req.segments[0]
    owner = _owner(state, node)
    if owner is None:
        if node.startswith("act_"):
            raise no_permission(node)
        raise nonexistent_object(node, req.method)
    return (owner,)


def _owner(state: SandboxState, node: str) -> str | None:
    """``act_<n>`` of the ad account a node belongs to, or ``None`` for an unknown node."""
    if state.world.account(node) is not None:
        return node
    if (run := state.report_runs.get(node)) is not None:
        return run.account
    if (rule_owner := state.world.adrules.owner(node)) is not None:
        return rule_owner
    if (period := state.world.schedules.live(node)) is not None:
        return f"act_{period.account_id}"
    obj = state.world.get(node)
    if obj is None:
        return state.async_batches.owner(node)
    return f"act_{obj.account_id}"


def _run_async_batches(state: SandboxState) -> None:
    """Run the requests of every asynchronous batch whose time has come, in order."""
    for request_set in state.async_batches.take_due(state.now()):
        for request in request_set.requests:
            response = execute(
                state, request.as_graph_request(request_set.token, request_set.base_url)
            )
            async_batches.record_result(request, response.status, response.body, state.now())


def _apply_change(state: SandboxState, object_id: str, status: str) -> None:
    """A change made outside the API (a fault's ``changes``), after the call that triggered it."""
    obj = state.world.get(object_id)
    if obj is not None:
        obj.status = status
        obj.updated_time = state.now()


_WRITE_LOG_KINDS = {
    "write": "update",
    "adrules_write": "adrules",
    "schedule_write": "budget_schedule",
}


def _log_write(state: SandboxState, req: GraphRequest, kind: str, status: int, body: Any) -> None:
    state.writes.append(
        WriteRecord(
            at=state.now(),
            id=req.segments[0],
            kind=_WRITE_LOG_KINDS.get(kind, kind),
            params=dict(req.params),
            ok=status == 200,
            error=body.get("error") if status != 200 else None,
        )
    )
