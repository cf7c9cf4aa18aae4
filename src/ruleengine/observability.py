"""Every Prometheus collector of ruleengine, one registry per process, never the global one.

* :class:`DispatcherMetrics` — served by the dispatcher on
  ``RULEENGINE_DISPATCHER_METRICS_PORT`` (0 turns it off);
* :class:`WorkerMetrics` — served by each worker on ``RULEENGINE_WORKER_METRICS_PORT``;
* :class:`WebMetrics` — served by the web app on ``GET /metrics``
  (:mod:`ruleengine.web.prometheus` fills its gauges at scrape time).
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

# Histogram buckets: processes' durations (ticks, jobs) and web requests.
PROCESS_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
REQUEST_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _Metrics:
    """A registry of the process's own and shorthands that create collectors in it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        """A counter in this registry."""
        return Counter(name, doc, list(labels), registry=self.registry)

    def gauge(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        """A gauge in this registry."""
        return Gauge(name, doc, list(labels), registry=self.registry)

    def histogram(
        self, name: str, doc: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()
    ) -> Histogram:
        """A histogram in this registry."""
        return Histogram(name, doc, list(labels), buckets=buckets, registry=self.registry)


class DispatcherMetrics(_Metrics):
    """Ticks, sweep time, dispatch lag, jobs, listing failures, lease and Redis state."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks = self.counter("ruleengine_dispatcher_ticks_total", "Dispatcher ticks")
        self.sweep_seconds = self.histogram(
            "ruleengine_dispatcher_sweep_seconds", "Duration of a sweep", PROCESS_SECONDS
        )
        self.dispatch_lag = self.histogram(
            "ruleengine_dispatch_lag_seconds",
            "Enqueue time minus the rule's scheduled time",
            PROCESS_SECONDS,
        )
        self.jobs_enqueued = self.counter(
            "ruleengine_jobs_enqueued_total", "evaluate_account jobs enqueued"
        )
        self.jobs_duplicate = self.counter(
            "ruleengine_jobs_duplicate_total", "Enqueues refused as already dispatched"
        )
        self.listing_failures = self.counter(
            "ruleengine_listing_failures_total",
            "Ad accounts skipped because entity listing failed 3 times",
            ("account",),
        )
        self.redis_up = self.gauge("ruleengine_dispatcher_redis_up", "1 when Redis answers")
        self.leader = self.gauge("ruleengine_dispatcher_leader", "1 while holding the lease")
        self.followups_rearmed = self.counter(
            "ruleengine_followups_rearmed_total", "Follow-up timers re-armed"
        )


class WorkerMetrics(_Metrics):
    """Jobs, evaluations, actions, Graph cost and errors, follow-ups."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs = self.counter("ruleengine_jobs_total", "Jobs finished", ("status",))
        self.job_seconds = self.histogram(
            "ruleengine_job_seconds", "Duration of evaluate_account", PROCESS_SECONDS
        )
        self.evaluations = self.counter(
            "ruleengine_evaluations_total", "Entity × task evaluations", ("outcome",)
        )
        self.actions = self.counter(
            "ruleengine_actions_total", "Actions by type and result", ("type", "result")
        )
        self.graph_calls = self.counter(
            "ruleengine_graph_calls_total", "Graph calls as Meta counts them"
        )
        self.graph_requests = self.counter(
            "ruleengine_graph_http_requests_total", "Graph HTTP requests"
        )
        self.graph_errors = self.counter(
            "ruleengine_graph_errors_total", "Graph errors by Meta code", ("code",)
        )
        self.oscillations = self.counter(
            "ruleengine_oscillations_total",
            "Changes that completed an oscillation of an entity's field, by field",
            ("field",),
        )
        self.followups = self.counter(
            "ruleengine_followups_total",
            "Follow-ups by result (scheduled, done, skipped, failed, pending)",
            ("result",),
        )


class WebMetrics(_Metrics):
    """The web process's requests, and the product-wide gauges it reads at scrape time."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = self.counter(
            "ruleengine_web_requests_total",
            "HTTP requests by method, route and status",
            ("method", "route", "status"),
        )
        self.request_seconds = self.histogram(
            "ruleengine_web_request_seconds",
            "HTTP request duration by route",
            REQUEST_SECONDS,
            ("route",),
        )
        self.queue_depth = self.gauge("ruleengine_queue_depth", "Jobs waiting in the arq queue")
        self.dispatcher_tick_age = self.gauge(
            "ruleengine_dispatcher_last_tick_age_seconds",
            "Seconds since the dispatcher's last tick",
        )
        self.live_workers = self.gauge(
            "ruleengine_live_workers", "Workers with a heartbeat in the last 30 s"
        )
        self.active_error_groups = self.gauge(
            "ruleengine_error_groups_active", "Error log groups with status active"
        )
        self.batches_last_hour = self.gauge(
            "ruleengine_batches_last_hour",
            "Batches started in the last hour, by status",
            ("status",),
        )
        self.followups = self.gauge(
            "ruleengine_followups_by_status",
            "Follow-ups by status (pending, scheduled, running, done, skipped, failed)",
            ("status",),
        )
        self.followups_overdue = self.gauge(
            "ruleengine_followups_overdue",
            "Follow-ups still pending or scheduled more than 5 min past their due time",
        )
        self.approvals_pending = self.gauge(
            "ruleengine_approvals_pending", "Planned changes waiting for a person's approval"
        )
        self.approvals_oldest_age = self.gauge(
            "ruleengine_approvals_oldest_pending_age_seconds",
            "Age of the oldest pending approval (0 when none waits)",
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
