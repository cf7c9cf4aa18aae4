"""REST API over approvals (``/api/approvals``): planned changes that wait for a person.

Listing and reading mark proposals past their expiry ``expired`` first (lazily, as the
reaper does every minute). Approving and rejecting need the ``approver`` role and record
who decided (:func:`~ruleengine.web.auth.actor`); an approved change is written by a
worker through the intent path (:mod:`ruleengine.approvals.deciding`,
:mod:`ruleengine.approvals.applying`).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from aiohttp import web

from ruleengine.approvals.deciding import decide
from ruleengine.store.approvals import STATUSES, ApprovalStore
from ruleengine.store.db import Document
from ruleengine.web.api.labels import with_accounts
from ruleengine.web.auth import actor, require_role
from ruleengine.web.jsonio import ApiError, choice_param, int_param, json_response
from ruleengine.web.state import services, settings_of

MAX_PAGE: Final = 500


def approval_item(doc: Document, *, base_url: str | None = None) -> dict[str, Any]:
    """An approval for the API: what would change, where it stands, and who decided."""
    item = {
        "id": doc["_id"],
        "status": doc.get("status"),
        "rule": {
            "id": doc.get("rule_id"),
            "name": doc.get("rule_name"),
            "version": doc.get("rule_version"),
        },
        "task_id": doc.get("task_id"),
        "action": doc.get("action"),
        "account": doc.get("account"),
        "entity": {"id": doc.get("entity_id"), "name": doc.get("entity_name")},
        "field": doc.get("field"),
        "before": doc.get("before"),
        "after": doc.get("after"),
        "batch_id": doc.get("batch_id"),
        "created_at": doc.get("created_at"),
        "expires_at": doc.get("expires_at"),
        "decided_by": doc.get("decided_by"),
        "decided_at": doc.get("decided_at"),
        "reason": doc.get("reason") or doc.get("result"),
        "live": doc.get("live"),
        "write_batch": doc.get("batch"),
        "attempts": doc.get("attempts", 0),
        "last_error": doc.get("last_error"),
        "retry_at": doc.get("retry_at") if doc.get("status") == "approved" else None,
        "notified": doc.get("notified"),
    }
    if base_url is not None:
        item["url"] = f"{base_url}/approvals/{doc['_id']}"
    return item


def _store(request: web.Request) -> ApprovalStore:
    return ApprovalStore(services(request).db)


async def list_approvals(request: web.Request) -> web.Response:
    """``GET /api/approvals?status=&limit=&offset=``, newest first; each with its account's
    name and currency (``account_name``, ``currency``)."""
    limit = int_param(request, "limit", default=50, low=1, high=MAX_PAGE)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    status = choice_param(request, "status", STATUSES)
    store = _store(request)
    await store.expire_due(now=await store.now())
    docs = await store.page(status=status, limit=limit, skip=offset)
    total = await store.count(status=status)
    base = settings_of(request).public_url
    items = [approval_item(d, base_url=base) for d in docs]
    await with_accounts(request, items)
    return json_response({"items": items, "total": total, "limit": limit, "offset": offset})


async def get_approval(request: web.Request) -> web.Response:
    """``GET /api/approvals/{id}``; 404 if unknown."""
    store = _store(request)
    approval = request.match_info["id"]
    await store.expire(approval, now=await store.now())
    doc = await store.get(approval)
    item = approval_item(doc, base_url=settings_of(request).public_url)
    await with_accounts(request, [item])
    return json_response(item)


async def _decide(request: web.Request, status: Literal["approved", "rejected"]) -> web.Response:
    require_role(request, "approver")
    store = _store(request)
    decision = await decide(
        store,
        services(request).queue,
        request.match_info["id"],
        status=status,
        by=actor(request),
        now=await store.now(),  # an approval's expiry is by MongoDB's clock
    )
    item = approval_item(decision.doc, base_url=settings_of(request).public_url)
    await with_accounts(request, [item])
    if not decision.changed:
        verb = "approved" if status == "approved" else "rejected"
        raise ApiError(
            409,
            f"approval {item['id']} cannot be {verb}: it is {item['status']}",
            reason=decision.reason,
            approval=item,
        )
    return json_response(item)


async def approve(request: web.Request) -> web.Response:
    """``POST /api/approvals/{id}/approve``: the change is written by a worker, once."""
    return await _decide(request, "approved")


async def reject(request: web.Request) -> web.Response:
    """``POST /api/approvals/{id}/reject``: the change is never written."""
    return await _decide(request, "rejected")


def add_routes(app: web.Application) -> None:
    """Register the approval routes."""
    r = app.router
    r.add_get("/api/approvals", list_approvals, name="api.approvals")
    r.add_get("/api/approvals/{id}", get_approval)
    r.add_post("/api/approvals/{id}/approve", approve)
    r.add_post("/api/approvals/{id}/reject", reject)
