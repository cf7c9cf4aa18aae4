"""The worker process's life: its clients and engine built at arq's startup, closed at shutdown.

Clients (MongoDB, Redis, the Graph session, Sheets, webhooks) are created in
``on_startup`` and closed in ``on_shutdown`` (:mod:`ruleengine.jobs` names both in the
worker's settings); a heartbeat shows the worker on ``/health/ready``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
from datetime import UTC, datetime
from typing import Any

from ruleengine.observability import WorkerMetrics, serve
from ruleengine.queue import connect_queue
from ruleengine.rules.meta.versions import version_warning
from ruleengine.settings import Settings
from ruleengine.store.db import create_client, database, ensure_indexes
from ruleengine.store.heartbeats import Heartbeats
from ruleengine.worker.deps import Engine, build_engine, close_engine

log = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 5.0
#: Container objects allocated (net) before the collector looks at the youngest generation.
#: Python's default, 700, has a job that builds 4,000 records collect ~150 times and walk
#: the whole heap once or twice (~45 ms each, 6 % of a run that only looks); at 10,000 it
#: collects ~10 times and walks the heap in about one job of six. A record is freed by its
#: reference count, not by the collector, so memory stays as it was
#: (bench/worker_throughput.py's ``no_fire``, docs/performance.md).
GC_YOUNGEST_THRESHOLD = 10_000


def _worker_name() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}"


def tune_gc() -> None:
    """Have the cyclic garbage collector look less often (:data:`GC_YOUNGEST_THRESHOLD`), and
    leave what the process built at startup out of its walks from now on (``gc.freeze``)."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNGEST_THRESHOLD, middle, oldest)
    gc.freeze()


async def startup(ctx: dict[str, Any]) -> None:
    """Create the process's clients and the engine; start the heartbeat."""
    settings: Settings = ctx.setdefault("settings", Settings())
    if (warning := version_warning(settings.graph_version, datetime.now(UTC).date())) is not None:
        log.warning("%s", warning)
    client = create_client(settings)
    db = database(client, settings)
    await ensure_indexes(db)
    queue = connect_queue(settings)
    metrics = WorkerMetrics()
    serve(metrics.registry, settings.worker_metrics_port, what="worker", host=settings.metrics_host)
    engine = build_engine(settings, db=db, redis=queue, worker=_worker_name())
    if engine.executor.guards is not None:
        engine.executor.guards.on_oscillation = lambda field: metrics.oscillations.labels(
            field=field
        ).inc()
    if engine.followups is not None:
        engine.followups.on_result = lambda result, n: metrics.followups.labels(result=result).inc(
            n
        )
    ctx.update(mongo=client, db=db, queue=queue, engine=engine, metrics=metrics, jobs_done=0)
    ctx["heartbeat"] = asyncio.create_task(_heartbeat(ctx, Heartbeats(db), engine.worker))
    tune_gc()
    log.info("%s ready (max %d jobs at once)", engine.worker, settings.worker_max_jobs)


async def _heartbeat(ctx: dict[str, Any], beats: Heartbeats, name: str) -> None:
    while True:
        try:
            await beats.beat(name, now=datetime.now(UTC), jobs_done=ctx.get("jobs_done", 0))
        except Exception:
            log.exception("worker heartbeat failed")
        await asyncio.sleep(HEARTBEAT_EVERY_S)


async def shutdown(ctx: dict[str, Any]) -> None:
    """Stop the heartbeat and close every client."""
    beat: asyncio.Task[None] | None = ctx.get("heartbeat")
    if beat is not None:
        beat.cancel()
    engine: Engine | None = ctx.get("engine")
    if engine is not None:
        await close_engine(engine)
        await Heartbeats(ctx["db"]).remove(engine.worker)
    if "queue" in ctx:
        await ctx["queue"].aclose()
    if "mongo" in ctx:
        await ctx["mongo"].close()
