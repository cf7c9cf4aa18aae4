"""Shared set-up for the benchmark scripts: real servers on free loopback ports."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ruleengine.embedded import ProcessGroup, free_port, port_answers, start_mongodb, start_redis

TOKEN = "EAAGbenchTOKEN0123456789abcdefghijklmn"


@dataclass(frozen=True)
class Stack:
    """Where the benchmark's servers listen."""

    sandbox_url: str
    mongodb_url: str | None = None
    redis_url: str | None = None


def say(message: str) -> None:
    """Progress on stderr, so the last line of stdout stays the JSON figures."""
    print(message, file=sys.stderr, flush=True)


def figures(values: dict[str, Any]) -> None:
    """Print the figures as the last line: one JSON object."""
    print(orjson.dumps(values).decode(), flush=True)


def start_sandbox(group: ProcessGroup, *args: str) -> str:
    """The Graph sandbox as a child process."""
    port = free_port()
    argv = [sys.executable, "-m", "ruleengine.sandbox", "--port", str(port), *args]
    group.start(
        "sandbox", argv, address=f"http://127.0.0.1:{port}", ready=lambda: port_answers(port)
    )
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def stack(*, databases: bool, sandbox_args: tuple[str, ...] = ()) -> Iterator[Stack]:
    """Sandbox, and with ``databases`` an in-memory MongoDB-compatible server and Redis."""
    log_dir = Path("var") / "bench-logs"
    with ProcessGroup(log_dir=log_dir) as group:
        started = time.perf_counter()
        sandbox = start_sandbox(group, *sandbox_args)
        if not databases:
            yield Stack(sandbox)
            return
        mongo = start_mongodb(group, port=free_port(), storage_path=":memory:")
        redis = start_redis(group, port=free_port(), data_dir=None)
        say(f"servers up in {time.perf_counter() - started:.1f}s (logs in {log_dir})")
        yield Stack(sandbox, mongo.address, redis.address)


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile (nearest rank) of ``values``."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]
