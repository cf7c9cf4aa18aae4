"""REST API over what the workers recorded: batches, executions, the slow-rule report, rollups."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final, get_args

from aiohttp import web

from ruleengine.store.db import Document
from ruleengine.store.records import BatchStatus
from ruleengine.web.api.labels import with_accounts
from ruleengine.web.jsonio import choice_param, float_param, int_param, json_response
from ruleengine.web.slowrules import slow_rules
from ruleengine.web.state import services

BATCH_STATUSES: Final[tuple[str, ...]] = get_args(BatchStatus)
MAX_PAGE: Final = 500
#: Rows of a batch's executions per page, by default and at most.
EXECUTIONS_PAGE: Final = 1000
MAX_EXECUTIONS_PAGE: Final = 5000
#: The slow-rule report's widest window: a week of batches (the Benchmark screen's widest).
MAX_SINCE_HOURS: Final = 24 * 7
MAX_DAYS: Final = 3660


def batch_row(doc: Document) -> dict[str, Any]:
    """A batch row for the API: ``batch_id`` is the document ``_id``."""
    row = {k: v for k, v in doc.items() if k != "_id"}
    return {"batch_id": doc["_id"], **row}


def execution_row(doc: Document) -> dict[str, Any]:
    """An execution for the API: a record's ObjectId as a string ``id``; a pair assembled
    from its batch's chunk has no document of its own, and its ``key`` is its ``id``."""
    identity = str(doc["_id"]) if "_id" in doc else str(doc.get("key"))
    return {"id": identity, **{k: v for k, v in doc.items() if k != "_id"}}


async def list_batches(request: web.Request) -> web.Response:
    """``GET /api/batches?rule_id=&account=&status=&limit=&offset=``, newest first; each
    with its account's name and currency (``account_name``, ``currency``)."""
    limit = int_param(request, "limit", default=50, low=1, high=MAX_PAGE)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    filters = {
        "rule_id": request.query.get("rule_id") or None,
        "account": request.query.get("account") or None,
        "status": choice_param(request, "status", BATCH_STATUSES),
    }
    page = await services(request).batches.page(filters=filters, limit=limit, skip=offset)
    items = [batch_row(d) for d in page.items]
    await with_accounts(request, items)
    return json_response(
        {
            "items": items,
            "total": page.total,
            "limit": limit,
            "offset": offset,
        }
    )


async def get_batch(request: web.Request) -> web.Response:
    """``GET /api/batches/{batch_id}``, with its account's name and currency."""
    row = batch_row(await services(request).batches.get(request.match_info["batch_id"]))
    await with_accounts(request, [row])
    return json_response(row)


async def batch_executions(request: web.Request) -> web.Response:
    """``GET /api/batches/{batch_id}/executions?limit=&offset=&acted=``: one row per (entity,
    task) in evaluation order — its execution record where something happened or was
    attempted, assembled from the batch's chunks otherwise (the same JSON either way); with
    ``acted=1`` only the pairs with a record (and the follow-ups' records)."""
    svc = services(request)
    batch_id = request.match_info["batch_id"]
    limit = int_param(request, "limit", default=EXECUTIONS_PAGE, low=1, high=MAX_EXECUTIONS_PAGE)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    acted_only = choice_param(request, "acted", ("0", "1", "true", "false")) in ("1", "true")
    await svc.batches.get(batch_id)  # 404 for an unknown batch, not an empty list
    page = await svc.executions.page(batch_id, limit=limit, offset=offset, acted_only=acted_only)
    return json_response(
        {
            "batch_id": batch_id,
            "items": [execution_row(d) for d in page.items],
            "total": page.total,
            "limit": limit,
            "offset": offset,
        }
    )


async def slow_rule_report(request: web.Request) -> web.Response:
    """``GET /api/benchmark/slow-rules?since_hours=24``: rules by p95 batch duration, over at
    most :data:`MAX_SINCE_HOURS` (the daily rollups hold the longer history); a costly read
    (:mod:`ruleengine.web.costly`): MongoDB aggregates every batch of the window."""
    hours = float_param(request, "since_hours", default=24.0, low=0.0, high=MAX_SINCE_HOURS)

    async def compute() -> dict[str, Any]:
        since = datetime.now(UTC) - timedelta(hours=hours)
        rows = await services(request).batches.durations(since=since)
        return {"since": since, "since_hours": hours, "rules": slow_rules(rows)}

    return json_response(await services(request).costly.answer("slow_rules", hours, compute))


def rollup_row(doc: Document) -> dict[str, Any]:
    """A daily rollup for the API (without its storage keys)."""
    return {k: v for k, v in doc.items() if k not in ("_id", "date")}


async def daily_rollups(request: web.Request) -> web.Response:
    """``GET /api/benchmark/daily?rule_id=&days=30``: rollups per rule and day, newest first."""
    days = int_param(request, "days", default=30, low=1, high=MAX_DAYS)
    limit = int_param(request, "limit", default=100, low=1, high=MAX_PAGE)
    offset = int_param(request, "offset", default=0, low=0, high=10_000_000)
    since = datetime.now(UTC).date() - timedelta(days=days)
    page = await services(request).rollups.page(
        since=since, rule_id=request.query.get("rule_id") or None, limit=limit, skip=offset
    )
    return json_response(
        {
            "since": since.isoformat(),
            "days": days,
            "items": [rollup_row(d) for d in page.items],
            "total": page.total,
            "limit": limit,
            "offset": offset,
        }
    )


def add_routes(app: web.Application) -> None:
    """Register the batch and benchmark routes."""
    r = app.router
    r.add_get("/api/batches", list_batches, name="api.batches")
    r.add_get("/api/batches/{batch_id}", get_batch)
    r.add_get("/api/batches/{batch_id}/executions", batch_executions)
    r.add_get("/api/benchmark/slow-rules", slow_rule_report, name="api.slow_rules")
    r.add_get("/api/benchmark/daily", daily_rollups, name="api.daily_rollups")
