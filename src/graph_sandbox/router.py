"""Runs one Graph call: count it, check token, scope, faults and quotas, then hand it to its route.

The same path serves direct HTTP requests and batch sub-requests, which is why
a batch item costs exactly what the same request sent alone costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graph_sandbox import activities, reads, reports, writes
from graph_sandbox.errors import (
    GraphError,
    invalid_param,
    invalid_token,
    missing_aliases,
    missing_token,
    no_permission,
    nonexistent_object,
)
from graph_sandbox.limits import UseCase
from graph_sandbox.protocol import GraphRequest, GraphResponse
from graph_sandbox.state import SandboxState, WriteRecord

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
}
#: Calls Meta counts as Insights (the ``ads_insights`` use case, the Insights throttle).
INSIGHTS_KINDS = frozenset({"insights", "report", "report_run", "report_results"})

_GET_EDGES = {
    "campaigns": "list",
    "adsets": "list",
    "insights": "insights",
    "activities": "activities",
}


def classify(req: GraphRequest) -> str:
    """The kind of call (a key of ``Stats.calls_by_kind``), from method and path alone."""
    segments, method = req.segments, req.method
    if method == "GET":
        if segments == ("me", "adaccounts"):
            return "accounts"
        if len(segments) <= 1:
            return "read"
        if len(segments) == 2:
            return _GET_EDGES.get(segments[1], "other")
    if method == "POST" and len(segments) == 1:
        return "write"
    if method == "POST" and len(segments) == 2 and segments[1] == "copies":
        return "copies"
    if method == "POST" and len(segments) == 2 and segments[1] == "insights":
        return "report"
    return "other"


def kind_of(state: SandboxState, req: GraphRequest) -> str:
    """:func:`classify`, knowing this world's async report runs (``GET /{report_run_id}``)."""
    segments = req.segments
    if req.method == "GET" and segments and state.report_runs.get(segments[0]) is not None:
        if len(segments) == 1:
            return "report_run"
        if segments[1:] == ("insights",):
            return "report_results"
    return classify(req)


def execute(state: SandboxState, req: GraphRequest) -> GraphResponse:
    """Answer one counted call the way Meta would."""
    kind = kind_of(state, req)
    use_case = UseCase.ADS_INSIGHTS if kind in INSIGHTS_KINDS else UseCase.ADS_MANAGEMENT
    now = state.now()
    state.stats.call(kind)
    accounts: tuple[str, ...] = ()
    try:
        _check_token(state, req)
        accounts = scope(state, req, kind)
        state.stats.accounts(accounts)
        failure = state.faults.failure(req.method, req.path)
        if failure is not None:
            raise failure
        state.usage.admit(now, accounts, use_case)
        status, body = 200, _HANDLERS[kind](state, req)
    except GraphError as error:
        status, body = error.status, error.body(state.trace_id())
        state.stats.error(error.code)
    if kind in ("write", "copies"):
        _log_write(state, req, kind, status, body)
    headers = state.usage.headers(now, accounts, use_case)
    if use_case is UseCase.ADS_INSIGHTS and accounts:
        headers |= state.usage.insights_throttle(now, accounts)
    return GraphResponse(status, body, headers)


def _check_token(state: SandboxState, req: GraphRequest) -> None:
    if not req.token:
        raise missing_token()
    if state.faults.token_revoked(req.token):
        raise invalid_token()


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
    obj = state.world.get(node)
    return f"act_{obj.account_id}" if obj is not None else None


def _log_write(state: SandboxState, req: GraphRequest, kind: str, status: int, body: Any) -> None:
    state.writes.append(
        WriteRecord(
            at=state.now(),
            id=req.segments[0],
            kind="update" if kind == "write" else "copies",
            params=dict(req.params),
            ok=status == 200,
            error=body.get("error") if status != 200 else None,
        )
    )
