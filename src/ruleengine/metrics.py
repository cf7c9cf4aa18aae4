"""Prometheus metrics of each process, each set in its own registry.

The dispatcher and every worker serve theirs on a metrics port
(``RULEENGINE_DISPATCHER_METRICS_PORT``, ``RULEENGINE_WORKER_METRICS_PORT``; 0
turns it off); the web app serves its own on ``GET /metrics``.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class DispatcherMetrics:
    """Ticks, sweep time, dispatch lag, jobs, listing failures, lease and Redis state."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ticks = Counter("ruleengine_dispatcher_ticks_total", "Dispatcher ticks", registry=r)
        self.sweep_seconds = Histogram(
            "ruleengine_dispatcher_sweep_seconds",
            "Duration of a sweep",
            buckets=_SECONDS,
            registry=r,
        )
        self.dispatch_lag = Histogram(
            "ruleengine_dispatch_lag_seconds",
            "Enqueue time minus the rule's scheduled time",
            buckets=_SECONDS,
            registry=r,
        )
        self.jobs_enqueued = Counter(
            "ruleengine_jobs_enqueued_total", "evaluate_account jobs enqueued", registry=r
        )
        self.jobs_duplicate = Counter(
            "ruleengine_jobs_duplicate_total", "Enqueues refused as already dispatched", registry=r
        )
        self.listing_failures = Counter(
            "ruleengine_listing_failures_total",
            "Ad accounts skipped because entity listing failed 3 times",
            ["account"],
            registry=r,
        )
        self.redis_up = Gauge("ruleengine_dispatcher_redis_up", "1 when Redis answers", registry=r)
        self.leader = Gauge("ruleengine_dispatcher_leader", "1 while holding the lease", registry=r)
        self.followups_rearmed = Counter(
            "ruleengine_followups_rearmed_total", "Follow-up timers re-armed", registry=r
        )


class WorkerMetrics:
    """Jobs, evaluations, actions, Graph cost and errors, follow-ups."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Counter("ruleengine_jobs_total", "Jobs finished", ["status"], registry=r)
        self.job_seconds = Histogram(
            "ruleengine_job_seconds", "Duration of evaluate_account", buckets=_SECONDS, registry=r
        )
        self.evaluations = Counter(
            "ruleengine_evaluations_total", "Entity × task evaluations", ["outcome"], registry=r
        )
        self.actions = Counter(
            "ruleengine_actions_total", "Actions by type and result", ["type", "result"], registry=r
        )
        self.graph_calls = Counter(
            "ruleengine_graph_calls_total", "Graph calls as Meta counts them", registry=r
        )
        self.graph_requests = Counter(
            "ruleengine_graph_http_requests_total", "Graph HTTP requests", registry=r
        )
        self.graph_errors = Counter(
            "ruleengine_graph_errors_total", "Graph errors by Meta code", ["code"], registry=r
        )
        self.followups = Counter(
            "ruleengine_followups_total",
            "Follow-ups by result (scheduled, done, skipped, failed, pending)",
            ["result"],
            registry=r,
        )


def serve(registry: CollectorRegistry, port: int, *, what: str, host: str = "127.0.0.1") -> None:
    """Serve ``registry`` on ``host:port`` (port 0 = off); a busy port is logged, not fatal."""
    if port <= 0:
        return
    try:
        start_http_server(port, addr=host, registry=registry)
        log.info("%s metrics on http://%s:%d/metrics", what, host, port)
    except OSError as exc:
        log.warning("%s metrics port %d unavailable (%s); metrics not served", what, port, exc)
