"""Reads: ``/me/adaccounts``, ``/act_{id}`` and its edges, ``/{id}`` and its edges, ``?ids=``.

The router has already checked that the ids exist (``scope``), so these
handlers only read and render.
"""

from __future__ import annotations

from typing import Any

from graph_sandbox.errors import invalid_param
from graph_sandbox.objects import (
    ACCOUNT_FIELDS,
    EXPANDABLE,
    filter_fields,
    filter_value,
    getters,
    render_account,
    render_object,
)
from graph_sandbox.protocol import GraphRequest, page_body
from graph_sandbox.query import (
    Filter,
    matches,
    paginate,
    parse_expanded_fields,
    parse_fields,
    parse_filtering,
    parse_limit,
    parse_list_param,
)
from graph_sandbox.state import SandboxState
from graph_sandbox.world import HIDDEN_BY_DEFAULT, AdObject

#: Every ``effective_status`` Graph's listings filter on, in the order its error message
#: lists them. Campaigns and ad sets only ever have some of them (the rest are ads').
EFFECTIVE_STATUSES = (
    "ACTIVE",
    "PAUSED",
    "DELETED",
    "PENDING_REVIEW",
    "DISAPPROVED",
    "PREAPPROVED",
    "PENDING_BILLING_INFO",
    "CAMPAIGN_PAUSED",
    "ARCHIVED",
    "ADSET_PAUSED",
    "IN_PROCESS",
    "WITH_ISSUES",
)

_NODE = {"campaign": "Campaign", "adset": "AdSet", "ad": "Ad"}
_EDGE_KIND = {"campaigns": "campaign", "adsets": "adset", "ads": "ad"}


def list_accounts(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /me/adaccounts``: the ad accounts of the world the token may see."""
    fields = parse_fields(
        req.param("fields"), default=("id",), allowed=ACCOUNT_FIELDS, node="AdAccount"
    )
    grant = state.tokens.grant(req.token or "")
    page = paginate(
        [a for a in state.world.accounts.values() if grant is None or grant.covers(a.id)],
        lambda account: account.id,
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [render_account(a, fields) for a in page.items], page)


def read(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /{id}``, ``GET /act_{id}``, ``GET /me`` and ``GET /?ids=a,b``."""
    if not req.segments:
        ids = [part.strip() for part in (req.param("ids") or "").split(",") if part.strip()]
        if not ids:
            raise invalid_param("The parameter ids is required")
        return {object_id: _read_one(state, req, object_id) for object_id in ids}
    if req.segments == ("me",):
        return {"id": "100000000000001", "name": "Sandbox User"}
    return _read_one(state, req, req.segments[0])


def _read_one(state: SandboxState, req: GraphRequest, object_id: str) -> dict[str, Any]:
    account = state.world.account(object_id)
    if account is not None:
        fields = parse_fields(
            req.param("fields"), default=("id",), allowed=ACCOUNT_FIELDS, node="AdAccount"
        )
        return render_account(account, fields)
    obj = state.world.get(object_id)
    assert obj is not None, "the router checks ids before reads"
    fields, expanded = _fields(req, obj.kind)
    return render_object(state, obj, fields, expanded)


def _fields(req: GraphRequest, kind: str) -> tuple[list[str], dict[str, list[str]]]:
    """``fields`` of a campaign, ad set or ad, with their parents expanded (``adset{name}``)."""
    return parse_expanded_fields(
        req.param("fields"),
        default=("id",),
        allowed=getters(kind).keys(),
        node=_NODE[kind],
        expandable={edge: (_NODE[edge], getters(edge).keys()) for edge in EXPANDABLE[kind]},
    )


def list_objects(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /act_{id}/campaigns|adsets|ads``, ``/{campaign_id}/adsets|ads``, ``/{adset}/ads``,
    and ``/{id}/copies``: the copies made of a campaign, ad set or ad (Meta's ``copies`` edge
    read)."""
    owner, edge = req.segments
    items = _edge_items(state, owner, edge)
    kind = _EDGE_KIND.get(edge) or _kind_of(state, owner)
    fields, expanded = _fields(req, kind)
    filters = parse_filtering(req.param("filtering"), filter_fields(kind))
    statuses = _effective_statuses(req.param("effective_status"))
    # Like Meta, archived and deleted objects are listed only when asked for by status.
    hidden = frozenset() if statuses or _filters_status(filters) else HIDDEN_BY_DEFAULT
    selected = [obj for obj in items if _keep(state, obj, filters, statuses, hidden)]
    page = paginate(
        selected,
        lambda obj: obj.id,
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [render_object(state, obj, fields, expanded) for obj in page.items], page)


def _keep(
    state: SandboxState,
    obj: AdObject,
    filters: list[Filter],
    statuses: frozenset[str],
    hidden: frozenset[str],
) -> bool:
    status = state.world.effective_status(obj)
    if status in hidden or (statuses and status not in statuses):
        return False
    return matches(filters, lambda field: filter_value(state, obj, field))


def _filters_status(filters: list[Filter]) -> bool:
    return any(f.field.rpartition(".")[2] == "effective_status" for f in filters)


def _edge_items(state: SandboxState, owner: str, edge: str) -> list[AdObject]:
    world = state.world
    if owner.startswith("act_"):
        edges = {"campaigns": world.campaigns, "adsets": world.adsets, "ads": world.ads}
        return edges[edge](owner)
    parent = world.get(owner)
    if parent is not None and edge == "copies":
        return [obj for obj in world.objects.values() if obj.source_id == owner]
    if parent is not None and parent.kind == "campaign" and edge == "adsets":
        return world.adsets_of(owner)
    if parent is not None and parent.kind in ("campaign", "adset") and edge == "ads":
        return world.ads_of(owner)
    raise invalid_param(f"Unknown path components: /{owner}/{edge}")


def _kind_of(state: SandboxState, object_id: str) -> str:
    found = state.world.get(object_id)
    if found is None:
        raise invalid_param(f"Unknown path components: /{object_id}/copies")
    return found.kind


def _effective_statuses(raw: str | None) -> frozenset[str]:
    """``effective_status``, a JSON array or a comma list of Graph's values.

    Raises:
        GraphError: 100 naming the first unknown value's position, as Graph words it.
    """
    values = parse_list_param(raw, "effective_status")
    for index, value in enumerate(values):
        if value not in EFFECTIVE_STATUSES:
            raise invalid_param(
                f"Param effective_status[{index}] must be one of "
                f"{{{', '.join(EFFECTIVE_STATUSES)}}}"
            )
    return frozenset(values)
