"""Everything one sandbox app holds: world, tokens, clock, usage, faults, counters, write log."""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web

from graph_sandbox.activities import ActivityLog
from graph_sandbox.async_batches import AsyncBatches
from graph_sandbox.clock import SandboxClock
from graph_sandbox.faults import Faults
from graph_sandbox.insights import InsightsEngine
from graph_sandbox.legacy import APP_MODES
from graph_sandbox.limits import BudgetChangeLimiter, UsageModel
from graph_sandbox.report_runs import ReportRuns
from graph_sandbox.scenarios import WorldConfig, build_world
from graph_sandbox.stats import Stats
from graph_sandbox.tokens import Tokens
from graph_sandbox.world import World

_TRACE_ALPHABET = string.ascii_letters + string.digits


@dataclass(frozen=True)
class WriteRecord:
    """One POST to an object, as ``GET /_sandbox/writes`` lists it."""

    at: datetime
    id: str
    kind: str
    params: dict[str, str]
    ok: bool
    error: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        """The record as JSON (``at`` in ISO 8601)."""
        return {
            "at": self.at.isoformat(),
            "id": self.id,
            "kind": self.kind,
            "params": self.params,
            "ok": self.ok,
            "error": self.error,
        }


class SandboxState:
    """The mutable state of one sandbox app; ``reset`` rebuilds all of it.

    Args:
        config: The world to build now, and the defaults of later resets.
        operator_tokens: Tokens accepted for every ad account, in this world and after
            every reset (besides the demo tokens and those made through the admin API).
    """

    world: World
    insights: InsightsEngine
    usage: UsageModel
    faults: Faults
    stats: Stats
    writes: list[WriteRecord]
    budget_changes: BudgetChangeLimiter
    report_runs: ReportRuns
    activity: ActivityLog
    tokens: Tokens
    async_batches: AsyncBatches

    def __init__(self, config: WorldConfig, *, operator_tokens: Iterable[str] = ()) -> None:
        self.defaults = config
        self.operator_tokens = tuple(operator_tokens)
        self.clock = SandboxClock()
        self.on_reset: Callable[[SandboxState], None] | None = None
        self.reset(config)

    def reset(self, config: WorldConfig) -> None:
        """Build ``config``'s world and clear counters, usage, faults, the write log and the clock.

        Raises:
            ValueError: The config names an unknown scenario or a size below 1.
        """
        if config.app not in APP_MODES:
            raise ValueError(f"app must be one of {', '.join(APP_MODES)}, not {config.app!r}")
        world = build_world(config)
        self.config = config
        self.world = world
        self.insights = InsightsEngine(world)
        self.usage = UsageModel()
        self.faults = Faults(config.seed)
        self.stats = Stats()
        self.writes = []
        self.budget_changes = BudgetChangeLimiter()
        self.report_runs = ReportRuns()
        self.activity = ActivityLog()
        self.tokens = Tokens(world.accounts, seed=config.seed, operator_tokens=self.operator_tokens)
        self.async_batches = AsyncBatches(config.seed)
        self.clock.reset()
        self._trace_rng = random.Random(f"trace:{config.seed}")
        if self.on_reset is not None:
            self.on_reset(self)

    def now(self) -> datetime:
        """The sandbox clock's current instant."""
        return self.clock.now()

    def trace_id(self) -> str:
        """A fresh ``fbtrace_id``-like string."""
        return "A" + "".join(self._trace_rng.choices(_TRACE_ALPHABET, k=22))


#: Where an aiohttp app keeps its sandbox state.
STATE: web.AppKey[SandboxState] = web.AppKey("sandbox_state", SandboxState)
