"""The ports ``ruleengine up`` is about to listen on, and the refusal when one is not free.

``ruleengine up`` starts an embedded server only for a URL that points at it (a derived
one, see ``settings.py``); an explicitly set ``RULEENGINE_MONGODB_URL``, ``REDIS_URL`` or
``GRAPH_URL`` elsewhere is used as it is. Every port of the plan is checked before anything
starts, and each refusal names the port, what wanted it and the setting that moves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ruleengine.devstack.embedded import EmbeddedError, port_free
from ruleengine.settings import (
    Settings,
    embedded_graph_url,
    embedded_mongodb_url,
    embedded_redis_url,
)

LOOPBACK = "127.0.0.1"
MOVE_ALL = "or move the whole stack with RULEENGINE_PORT_BASE (ruleengine up --port-base N)"


class PortsUnavailable(EmbeddedError):
    """A port ``ruleengine up`` needs is taken, repeated, 0 or out of range."""


@dataclass(frozen=True)
class EmbeddedServers:
    """Which servers ``ruleengine up`` starts itself (the others are reached at their URL)."""

    mongodb: bool
    redis: bool
    sandbox: bool

    @classmethod
    def of(cls, settings: Settings) -> EmbeddedServers:
        """A server is embedded when its URL is the embedded server's address."""
        return cls(
            mongodb=settings.mongodb_url == embedded_mongodb_url(settings.mongodb_port),
            redis=settings.redis_url == embedded_redis_url(settings.redis_port),
            sandbox=settings.graph_url == embedded_graph_url(settings.sandbox_port),
        )


@dataclass(frozen=True)
class PortUse:
    """One port a component of the stack will listen on, and the setting that chose it."""

    component: str
    port: int
    host: str
    setting: str  # a Settings field name, e.g. "web_port"
    offset: int = 0  # added to the setting's value (worker-2: worker_metrics_port + 1)

    @property
    def variable(self) -> str:
        """The environment variable to change, as a user would write it."""
        name = f"RULEENGINE_{self.setting.upper()}"
        return f"{name} (+{self.offset} for {self.component})" if self.offset else name


def planned_ports(settings: Settings, *, workers: int) -> list[PortUse]:
    """Every port ``ruleengine up`` listens on with these settings; metrics port 0 is off."""
    servers = EmbeddedServers.of(settings)
    s = settings
    uses = [
        PortUse("mongodb", s.mongodb_port, LOOPBACK, "mongodb_port") if servers.mongodb else None,
        PortUse("redis", s.redis_port, LOOPBACK, "redis_port") if servers.redis else None,
        PortUse("sandbox", s.sandbox_port, LOOPBACK, "sandbox_port") if servers.sandbox else None,
    ]
    if s.dispatcher_metrics_port:
        uses.append(
            PortUse(
                "dispatcher", s.dispatcher_metrics_port, s.metrics_host, "dispatcher_metrics_port"
            )
        )
    if s.worker_metrics_port:
        uses += [
            PortUse(
                f"worker-{i + 1}",
                s.worker_metrics_port + i,
                s.metrics_host,
                "worker_metrics_port",
                i,
            )
            for i in range(workers)
        ]
    uses.append(PortUse("web", s.web_port, s.web_host, "web_port"))
    return [use for use in uses if use is not None]


def plan_problems(uses: list[PortUse]) -> list[str]:
    """What is wrong with the plan itself, before looking at the machine (pure)."""
    problems = []
    owners: dict[int, PortUse] = {}
    for use in uses:
        if use.port == 0:
            problems.append(f"{use.variable} is 0: {use.component} needs a fixed port; {_set(use)}")
        elif use.port > 65535:
            problems.append(
                f"{use.component} would listen on port {use.port}, above 65535; {_set(use)}"
            )
        elif (other := owners.setdefault(use.port, use)) is not use:
            problems.append(
                f"{other.component} and {use.component} would both listen on port {use.port}:"
                f" set {other.variable} or {use.variable} to another port"
            )
    return problems


def taken_ports(uses: list[PortUse]) -> list[str]:
    """One message per port of the plan that something on this machine already holds."""
    problems = []
    for use in uses:
        if (why := port_free(use.port, use.host)) is not None:
            problems.append(
                f"port {use.port} ({use.component}) on {use.host} is not free: {why.strerror}."
                f" Stop what listens there, or choose another port: {_set(use)}"
            )
    return problems


def check_ports(settings: Settings, *, workers: int) -> list[PortUse]:
    """The plan, when every port of it can be listened on; else ``PortsUnavailable``."""
    uses = planned_ports(settings, workers=workers)
    problems = plan_problems(uses) or taken_ports(uses)
    if problems:
        raise PortsUnavailable("nothing was started:\n  " + "\n  ".join(problems))
    return uses


def _set(use: PortUse) -> str:
    return f"set {use.variable}, {MOVE_ALL}"
