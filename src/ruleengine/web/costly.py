"""Reads that cost: a few at once, the same question answered once, a short memory.

Some reads spend real work in the web process or in the stores the workers share: a rule's
impact (Insights for every decision's window), the impact ranking (that, for every rule
with a holdout), the slow-rule report (an aggregation over days of batches), a draft's
conflict check (every active rule parsed and compared) and a preview (an account listed,
its Insights fetched, every entity evaluated). Each kind of them goes through
:class:`CostlyReads`:

* at most ``RULEENGINE_COSTLY_READS_CONCURRENCY`` computations of a kind at once; one more
  is answered ``429`` at once, with ``Retry-After`` from how long the kind's recent
  computations took — it is never queued behind the others;
* a request whose inputs are those of a computation in flight waits for that computation
  instead of starting its own (single flight), taking no place of the limit;
* an answer is kept ``RULEENGINE_COSTLY_READS_CACHE_S`` seconds for the same inputs (the
  answers say when they were computed), at most :data:`MAX_KEPT` answers per kind.

The work itself keeps its CPU-heavy parts off the event loop (threads), so ``/health`` and
the cheap reads answer while costly ones run.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Final

from ruleengine.web.jsonio import ApiError

#: Answers kept per kind (the least recently asked for goes first).
MAX_KEPT: Final = 32
#: What a 429 asks a client to wait, in seconds, at least and at most.
RETRY_AFTER_MIN_S: Final = 1
RETRY_AFTER_MAX_S: Final = 60

Clock = Callable[[], float]


@dataclass
class _Kind:
    """One kind of costly read: what runs, what is kept, how long it took lately."""

    running: int = 0
    flights: dict[Hashable, asyncio.Future[Any]] = field(default_factory=dict)  # in flight
    kept: OrderedDict[Hashable, tuple[float, Any]] = field(default_factory=OrderedDict)
    recent_s: float = 0.0  # a moving mean of the kind's computations, seconds


class CostlyReads:
    """The limit, the single flight and the memory of the web process's costly reads."""

    def __init__(self, *, concurrency: int, cache_s: float, clock: Clock = time.monotonic) -> None:
        self.concurrency = concurrency
        self.cache_s = cache_s
        self._clock = clock
        self._kinds: dict[str, _Kind] = {}

    def running(self, kind: str) -> int:
        """How many computations of ``kind`` run now."""
        return self._kinds[kind].running if kind in self._kinds else 0

    async def answer(
        self, kind: str, inputs: Hashable, compute: Callable[[], Awaitable[Any]]
    ) -> Any:
        """The answer for ``inputs``: kept, in flight, or computed now within the limit.

        Raises:
            ApiError: 429 with ``Retry-After`` when ``kind`` runs its limit already.
        """
        state = self._kinds.setdefault(kind, _Kind())
        kept = state.kept.get(inputs)
        if kept is not None and self._clock() < kept[0]:
            state.kept.move_to_end(inputs)
            return kept[1]
        flight = state.flights.get(inputs)
        if flight is not None:
            return await asyncio.shield(flight)
        if state.running >= self.concurrency:
            raise self._busy(kind, state)
        return await self._compute(state, inputs, compute)

    async def _compute(
        self, state: _Kind, inputs: Hashable, compute: Callable[[], Awaitable[Any]]
    ) -> Any:
        # The computation is a task of its own: a client that hangs up neither wastes it
        # (it is kept for the next asker) nor fails the requests waiting for the same answer.
        task = asyncio.ensure_future(compute())
        state.flights[inputs] = task
        state.running += 1
        started = self._clock()

        def landed(done: asyncio.Future[Any]) -> None:
            state.running -= 1
            del state.flights[inputs]
            took = self._clock() - started
            state.recent_s = took if not state.recent_s else 0.7 * state.recent_s + 0.3 * took
            if not done.cancelled() and done.exception() is None:
                self._keep(state, inputs, done.result())

        task.add_done_callback(landed)
        return await asyncio.shield(task)

    def _keep(self, state: _Kind, inputs: Hashable, value: Any) -> None:
        if self.cache_s <= 0:
            return
        state.kept[inputs] = (self._clock() + self.cache_s, value)
        state.kept.move_to_end(inputs)
        while len(state.kept) > MAX_KEPT:
            state.kept.popitem(last=False)

    def _busy(self, kind: str, state: _Kind) -> ApiError:
        wait_s = min(max(math.ceil(state.recent_s), RETRY_AFTER_MIN_S), RETRY_AFTER_MAX_S)
        return ApiError(
            429,
            f"{state.running} {kind.replace('_', ' ')} request(s) are being computed already,"
            f" the most this web app runs at once (RULEENGINE_COSTLY_READS_CONCURRENCY); ask"
            f" again in {wait_s} s",
            headers={"Retry-After": str(wait_s)},
        )
