"""``GET /metrics``: Prometheus text for the web process (its collectors: ``observability``).

Request counters are updated by a middleware; the gauges that describe the
whole product (queue depth, dispatcher tick age, live workers, active error
groups, batches of the last hour, follow-ups by status and overdue, approvals pending and
the oldest one's age) are read at
scrape time, each with the
readiness check's timeout. A source that cannot be read reports NaN rather than
a stale number.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Final, TypeVar, get_args

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ruleengine import constants as c
from ruleengine.observability import WebMetrics
from ruleengine.store.approvals import ApprovalStore
from ruleengine.store.followups import FOLLOWUP_STATUSES
from ruleengine.store.records import BatchStatus
from ruleengine.web.health import CHECK_TIMEOUT_S, queue_depth, read_beats
from ruleengine.web.state import Services, services

log = logging.getLogger(__name__)

BATCH_STATUSES: Final[tuple[str, ...]] = get_args(BatchStatus)
T = TypeVar("T")


METRICS = web.AppKey("metrics", WebMetrics)


def route_label(request: web.Request) -> str:
    """The matched route's template (bounded label values), or ``unmatched``."""
    resource = getattr(request.match_info.route, "resource", None)
    canonical = getattr(resource, "canonical", None)
    return str(canonical) if canonical else "unmatched"


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count every request by route and final status."""
    metrics = request.app[METRICS]
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        route = route_label(request)
        metrics.requests.labels(request.method, route, str(status)).inc()
        metrics.request_seconds.labels(route).observe(time.perf_counter() - started)


async def _batches_last_hour(svc: Services) -> dict[str, int]:
    since = datetime.now(UTC) - timedelta(hours=1)
    collection = svc.db[c.BATCHES]
    counts = await asyncio.gather(
        *(
            collection.count_documents({"status": s, "started_at": {"$gte": since}})
            for s in BATCH_STATUSES
        )
    )
    return dict(zip(BATCH_STATUSES, counts, strict=True))


async def _read(what: str, source: Awaitable[T]) -> T | None:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await source
    except Exception as exc:  # an unreadable source is reported as NaN, never a failed scrape
        log.warning("metrics: could not read %s: %s", what, exc)
        return None


def _value(value: float | None) -> float:
    return math.nan if value is None else float(value)


async def refresh(metrics: WebMetrics, svc: Services) -> None:
    """Read the product-wide gauges (concurrently, each bounded by the check timeout)."""
    depth, beats, active, batches, followups, overdue = await asyncio.gather(
        _read("queue depth", queue_depth(svc)),
        _read("heartbeats", read_beats(svc)),
        _read("error groups", svc.errors.count(status="active")),
        _read("batches", _batches_last_hour(svc)),
        _read("follow-ups", svc.followups.counts()),
        _read("overdue follow-ups", svc.followups.overdue(now=datetime.now(UTC))),
    )
    approvals = await _read("approvals", ApprovalStore(svc.db).pending_summary())
    metrics.queue_depth.set(_value(depth))
    metrics.active_error_groups.set(_value(active))
    metrics.live_workers.set(_value(None if beats is None else beats.live_workers()))
    metrics.dispatcher_tick_age.set(_value(None if beats is None else beats.dispatcher))
    for status in BATCH_STATUSES:
        metrics.batches_last_hour.labels(status).set(_value((batches or {}).get(status)))
    for status in FOLLOWUP_STATUSES:
        metrics.followups.labels(status).set(_value((followups or {}).get(status)))
    metrics.followups_overdue.set(_value(overdue))
    metrics.approvals_pending.set(_value(None if approvals is None else approvals.count))
    oldest = None if approvals is None else approvals.oldest
    age = 0.0 if oldest is None else (datetime.now(UTC) - oldest).total_seconds()
    metrics.approvals_oldest_age.set(_value(None if approvals is None else age))


async def metrics_handler(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text exposition."""
    metrics = request.app[METRICS]
    await refresh(metrics, services(request))
    return web.Response(
        body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def setup_metrics(app: web.Application) -> None:
    """Give ``app`` its metrics, the request middleware and the ``/metrics`` route."""
    app[METRICS] = WebMetrics()
    app.middlewares.append(metrics_middleware)
    app.router.add_get("/metrics", metrics_handler, name="metrics")
