"""arq worker: ``arq ruleengine.jobs.WorkerSettings`` — the job functions and the settings.

A thin entry point: each job hands its payload to the package that owns the work
(:mod:`ruleengine.worker`, :mod:`ruleengine.followups`, :mod:`ruleengine.approvals`,
:mod:`ruleengine.undo`, :mod:`ruleengine.maintenance.reaper`, :mod:`ruleengine.maintenance`);
the process's clients are built by :mod:`ruleengine.worker.process`.

Jobs run once: retries are disabled (``max_tries=1``, ``retry_jobs=False``) and
results are not kept (``keep_result=0``); the retry of a failed evaluation is
the rule's next scheduled run. Jobs are serialised with orjson. Clients
(MongoDB, Redis, the Graph session, Sheets, webhooks) are created in
``on_startup`` and closed in ``on_shutdown``; a reaper runs every minute to
close batches whose worker died (once a minute between all workers, whatever their clocks
do: :mod:`ruleengine.maintenance.periodic`).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from arq.worker import func

from ruleengine import constants as c
from ruleengine.approvals.applying import apply_approval
from ruleengine.approvals.deciding import requeue_approved
from ruleengine.dispatching.payload import EvaluateJob, deserialize, serialize
from ruleengine.errors import ConfigurationError
from ruleengine.followups.running import run_followup
from ruleengine.maintenance.periodic import every_minute
from ruleengine.maintenance.reaper import Reaper
from ruleengine.maintenance.retention import retention_job
from ruleengine.observability import WorkerMetrics
from ruleengine.queue import redis_settings
from ruleengine.redact import setup_logging
from ruleengine.settings import Settings, load_settings
from ruleengine.undo.run import undo_batch
from ruleengine.worker.deps import Engine
from ruleengine.worker.job import evaluate_account
from ruleengine.worker.process import shutdown, startup

log = logging.getLogger(__name__)


async def evaluate_account_job(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """arq job: evaluate one rule on one ad account (see :mod:`ruleengine.worker.job`)."""
    engine: Engine = ctx["engine"]
    metrics: WorkerMetrics = ctx["metrics"]
    job = EvaluateJob.model_validate(payload)
    summary = await evaluate_account(engine, job, now=datetime.now(UTC), job_id=ctx.get("job_id"))
    ctx["jobs_done"] = ctx.get("jobs_done", 0) + 1
    metrics.jobs.labels(status=summary.status).inc()
    metrics.job_seconds.observe(summary.duration_s)
    metrics.graph_calls.inc(summary.cost.get("counted_calls", 0))
    metrics.graph_requests.inc(summary.cost.get("http_requests", 0))
    for outcome, count in summary.outcomes.items():
        metrics.evaluations.labels(outcome=outcome).inc(count)
    for (action, outcome), count in summary.actions.items():
        metrics.actions.labels(type=action, result=outcome).inc(count)
    for code, count in summary.graph_errors.items():
        metrics.graph_errors.labels(code=code).inc(count)
    log.info(
        "batch %s %s: %d evaluated, %d affected, %d applied, %d failed, %s Graph calls, %.2fs",
        summary.batch_id,
        summary.status,
        summary.evaluated,
        summary.affected,
        summary.applied,
        summary.failed,
        summary.cost.get("counted_calls"),
        summary.duration_s,
    )
    return {"batch_id": summary.batch_id, "status": summary.status, "applied": summary.applied}


async def run_followup_job(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """arq job: a follow-up's timer fired (see :mod:`ruleengine.followup_runner`)."""
    result = await run_followup(ctx["engine"], payload, now=datetime.now(UTC))
    for outcome in [result, *result.get("together", [])]:  # and those run with it
        ctx["metrics"].followups.labels(result=outcome["status"]).inc()
    return result


async def apply_approval_job(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """arq job: one attempt at writing an approved change (:mod:`ruleengine.approvals`), on
    MongoDB's clock: an approval's expiry, retries and whose write is gone are compared with
    times stored by other hosts."""
    engine: Engine = ctx["engine"]
    now = await engine.intents.db_time()
    return await apply_approval(engine, str(payload["approval"]), now=now)


async def undo_batch_job(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """arq job: undo a batch as ``POST /api/batches/{id}/undo`` asked (:mod:`ruleengine.undo`)."""
    result = await undo_batch(
        ctx["engine"],
        str(payload["batch_id"]),
        by=str(payload["by"]),
        executions=payload.get("executions"),
        pause_copies=bool(payload.get("pause_copies")),
        now=datetime.now(UTC),
    )
    return {
        "undo_batch_id": result["undo_batch_id"],
        "status": result["batch"]["status"],
        "complete": result["complete"],
    }


async def reap_job(ctx: dict[str, Any]) -> int:
    """arq cron: mark batches whose worker died ABANDONED and reconcile their intents, mark
    approvals past their expiry ``expired``; then enqueue again approved changes whose write
    is due again (it did not run, met a transient failure, or was just settled).

    Every time a pass compares is by MongoDB's clock, read here — never this worker's, which
    may have stepped: a batch is abandoned, an owner judged gone, an approval expired or due
    by the clock that stamped them."""
    engine: Engine = ctx["engine"]
    now = await engine.intents.db_time()
    abandoned = await Reaper(engine).reap(now=now)
    await requeue_approved(engine.approvals, ctx["queue"], now=now)
    return abandoned


def worker_kwargs(settings: Settings) -> dict[str, Any]:
    """Every keyword argument of ``arq.Worker`` for this engine (what WorkerSettings holds)."""
    return {
        "functions": [
            func(evaluate_account_job, name=c.EVALUATE_JOB, max_tries=1),
            func(run_followup_job, name=c.FOLLOWUP_JOB, max_tries=1),
            func(apply_approval_job, name=c.APPROVAL_JOB, max_tries=1),
            func(undo_batch_job, name=c.UNDO_JOB, max_tries=1),
        ],
        "cron_jobs": [
            every_minute(reap_job, name="reap_abandoned_batches", second=30),
            every_minute(retention_job, name="retention", second=45),
        ],
        "queue_name": c.QUEUE_NAME,
        "redis_settings": redis_settings(settings),
        "on_startup": startup,
        "on_shutdown": shutdown,
        "ctx": {"settings": settings},
        "max_jobs": settings.worker_max_jobs,
        "job_timeout": timedelta(seconds=settings.job_timeout_s),
        # on SIGTERM (a deploy, systemctl restart) let running jobs finish instead of
        # cancelling them half-way, which would leave their batches to the reaper
        "job_completion_wait": settings.job_timeout_s,
        "max_tries": 1,
        "retry_jobs": False,
        "keep_result": 0,
        "keep_result_forever": False,
        "health_check_interval": 5,
        "job_serializer": serialize,
        "job_deserializer": deserialize,
        # an idle worker looks for jobs every 50 ms: a job waits 25 ms on average before a
        # worker takes it (100 ms cost a run that only looks ~6 % of its time, measured by
        # bench/worker_throughput.py's no_fire); a look is one Redis command
        "poll_delay": 0.05,
    }


class _LazyWorkerSettings(dict[str, Any]):
    """arq reads worker settings from a class or a dict when it starts; this dict builds
    its entries only then, so importing this module never reads the environment."""

    def _fill(self) -> None:
        if not self:
            try:
                settings = load_settings()
            except ConfigurationError as exc:  # arq would print a traceback: one line instead
                print(f"error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
            setup_logging(settings.log_level)
            super().update(worker_kwargs(settings))

    def items(self) -> Any:  # arq's get_kwargs() reads the settings through items()
        self._fill()
        return super().items()

    def get(self, key: str, default: Any = None) -> Any:
        self._fill()
        return super().get(key, default)


WorkerSettings = _LazyWorkerSettings()
