"""Keeping ``ruleengine up``'s children running: restart the engine, stop with the servers.

A dispatcher, worker or web process that exits is started again in its place after a
backoff (0.5 s, doubling), at most ``max_restarts`` times within ``window_s`` — like
systemd's start limit, so a child that keeps crashing stops the stack instead of looping,
while one that crashes once a day is restarted every time. A server the engine stands on
(MongoDB, Redis, the Graph sandbox, which holds the simulated ad accounts) exiting stops
the whole stack: an engine restarted against it would only fail again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ruleengine.devstack.embedded import Child, EmbeddedError, ProcessGroup

MAX_RESTARTS = 5
RESTART_WINDOW_S = 300.0


def restart_delay_s(attempt: int) -> float:
    """The wait before restart number ``attempt`` (1, 2, …): 0.5 s doubling, at most 8 s."""
    return float(min(0.5 * 2 ** (attempt - 1), 8.0))


@dataclass
class Supervisor:
    """Watches a ``ProcessGroup`` until a child that may not restart exits.

    ``essential`` names the children whose exit stops everything; ``announce`` is called
    with each restarted child (``ruleengine up`` prints its line again).
    """

    group: ProcessGroup
    essential: Collection[str]
    announce: Callable[[Child], None]
    max_restarts: int = MAX_RESTARTS
    window_s: float = RESTART_WINDOW_S
    poll_s: float = 0.5
    _restarts: dict[str, list[float]] = field(default_factory=dict)

    def watch(self) -> int:
        """Block until the stack must stop; the exit code (1). Signals interrupt it."""
        while True:
            exited = [child for child in self.group.children if not child.running]
            for child in exited:
                if child.name in self.essential:
                    self._stopping(child, "the stack cannot run without it")
                    return 1
            for child in exited:
                if not self._restart(child):
                    return 1
            time.sleep(self.poll_s)

    def _restart(self, child: Child) -> bool:
        """Start ``child`` again after its backoff; False once it used up its restarts."""
        now = time.monotonic()
        recent = [t for t in self._restarts.get(child.name, []) if now - t < self.window_s]
        if len(recent) >= self.max_restarts:
            minutes = self.window_s / 60
            self._stopping(child, f"restarted {len(recent)} times within {minutes:g} min")
            return False
        self._restarts[child.name] = [*recent, now]
        attempt = len(recent) + 1
        code = child.popen.returncode
        print(
            f"{child.name} exited with code {code}; restarting ({attempt}/{self.max_restarts})",
            flush=True,
        )
        time.sleep(restart_delay_s(attempt))
        try:
            self.announce(self.group.restart(child))
        except EmbeddedError as exc:
            print(f"{child.name} did not restart: {exc}", file=sys.stderr, flush=True)
        return True

    def _stopping(self, child: Child, why: str) -> None:
        log = f" (its log: {self.group.log_dir / child.name}.log)" if self.group.log_dir else ""
        print(
            f"{child.name} exited with code {child.popen.returncode}; stopping everything:"
            f" {why}{log}",
            file=sys.stderr,
            flush=True,
        )
