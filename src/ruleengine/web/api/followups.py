"""REST API over follow-ups (``/api/followups``): the delayed second steps of actions.

A follow-up is keyed by (rule, task, entity) and linked by ``batch_id`` to the
batch whose action created it; its status is live (the workers and the
dispatcher move it), unlike the snapshot in that action's execution record.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from aiohttp import web

from ruleengine.store.db import Document
from ruleengine.store.followups import FOLLOWUP_STATUSES, FollowupDoc, is_overdue
from ruleengine.web.jsonio import choice_param, int_param, json_response
from ruleengine.web.state import services

MAX_PAGE: Final = 500


def followup_item(raw: Document, *, now: datetime) -> dict[str, Any]:
    """A follow-up for the API: its key as ``id``, what it will do, when, and where it stands.

    ``field``/``set_value``/``previous`` are what the original action changed, the
    value it left and the value before (what ``restore_budget`` puts back).
    """
    doc = FollowupDoc.from_mongo(raw)
    return {
        "id": doc.id,
        "rule": {"id": doc.rule_id, "name": doc.rule_name, "version": doc.rule_version},
        "task_id": doc.task_id,
        "entity": {"id": doc.entity_id, "name": doc.entity_name},
        "account": doc.account,
        "level": doc.level,
        "batch_id": doc.batch_id,
        "do": doc.do,
        "webhook": doc.webhook,
        "due_at": doc.due_at,
        "status": doc.status,
        "reason": doc.reason,
        "overdue": is_overdue(doc.status, doc.due_at, now=now),
        "generation": doc.generation,
        "late_s": doc.late_s,
        "field": doc.field,
        "set_value": doc.set_value,
        "previous": doc.previous,
        "created_at": doc.created_at,
        "updated_at": doc.updated_at,
        "done_at": raw.get("done_at"),
    }


async def list_followups(request: web.Request) -> web.Response:
    """``GET /api/followups?status=&rule_id=&batch_id=&limit=&offset=``, soonest due first."""
    limit = int_param(request, "limit", default=50, low=1, high=MAX_PAGE)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    filters = {
        "status": choice_param(request, "status", FOLLOWUP_STATUSES),
        "rule_id": request.query.get("rule_id") or None,
        "batch_id": request.query.get("batch_id") or None,
    }
    page = await services(request).followups.page(filters=filters, limit=limit, skip=offset)
    now = datetime.now(UTC)
    return json_response(
        {
            "items": [followup_item(d, now=now) for d in page.items],
            "total": page.total,
            "limit": limit,
            "offset": offset,
        }
    )


async def get_followup(request: web.Request) -> web.Response:
    """``GET /api/followups/{key}``: one follow-up; 404 for an unknown key."""
    doc = await services(request).followups.find(request.match_info["key"])
    return json_response(followup_item(doc, now=datetime.now(UTC)))


def add_routes(app: web.Application) -> None:
    """Register the follow-up routes."""
    r = app.router
    r.add_get("/api/followups", list_followups, name="api.followups")
    r.add_get("/api/followups/{key}", get_followup)
