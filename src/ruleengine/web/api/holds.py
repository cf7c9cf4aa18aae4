"""REST API over oscillation holds (``/api/holds``): fields the engine stopped changing.

A hold is placed when an entity's field oscillates and a task involved says
``"on_oscillation": "hold"`` (docs/rules.md "Rules that fight"); every rule's later change
of that field on that entity skips with ``oscillation_hold`` until the hold is cleared here.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from ruleengine.store.db import Document, server_time
from ruleengine.store.holds import HoldStore
from ruleengine.web.auth import actor
from ruleengine.web.jsonio import choice_param, int_param, json_response
from ruleengine.web.state import services

MAX_PAGE: Final = 500


def hold_item(doc: Document) -> dict[str, Any]:
    """A hold for the API: its id, the entity and field, why, and where it stands."""
    return {
        "id": doc["_id"],
        "entity": {"id": doc.get("entity_id"), "name": doc.get("entity_name")},
        "field": doc.get("field"),
        "account": doc.get("account"),
        "status": doc.get("status"),
        "rules": doc.get("rules", []),
        "changes": doc.get("changes", []),
        "placed_at": doc.get("placed_at"),
        "cleared_at": doc.get("cleared_at"),
        "cleared_by": doc.get("cleared_by"),
    }


def _store(request: web.Request) -> HoldStore:
    return HoldStore(services(request).db)


async def list_holds(request: web.Request) -> web.Response:
    """``GET /api/holds?status=active|cleared&limit=&offset=``, most recently placed first."""
    limit = int_param(request, "limit", default=50, low=1, high=MAX_PAGE)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    status = choice_param(request, "status", ("active", "cleared"))
    store = _store(request)
    docs = await store.page(status=status, limit=limit, skip=offset)
    total = await store.count(status=status)
    items = [hold_item(d) for d in docs]
    return json_response({"items": items, "total": total, "limit": limit, "offset": offset})


async def clear_hold(request: web.Request) -> web.Response:
    """``DELETE /api/holds/{id}``: clear a hold, the field may change again; 404 if unknown."""
    # by MongoDB's clock: the changes it forgets were stamped by it
    now = await server_time(services(request).db)
    doc = await _store(request).clear(request.match_info["id"], now=now, by=actor(request))
    return json_response(hold_item(doc))


def add_routes(app: web.Application) -> None:
    """Register the hold routes."""
    r = app.router
    r.add_get("/api/holds", list_holds, name="api.holds")
    r.add_delete("/api/holds/{id}", clear_hold)
