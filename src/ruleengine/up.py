"""``ruleengine up``: every process of the product on embedded defaults, one terminal.

Children start in dependency order and each is waited for until it answers;
one line per component is printed with its address, then ``ready``. Ctrl-C (or
SIGTERM, or any child dying) stops them all in reverse order.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from ruleengine.embedded import Child, EmbeddedError, ProcessGroup, start_mongodb, start_redis
from ruleengine.settings import Settings
from ruleengine.store.credentials import load_key
from ruleengine.store.db import create_client, database, ensure_indexes


class _Stop(Exception):
    """Raised by the SIGTERM handler to leave the wait loop."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _announce(child: Child) -> None:
    print(f"{child.name:<12} {child.address}", flush=True)


async def _bootstrap(settings: Settings) -> None:
    client = create_client(settings)
    try:
        await ensure_indexes(database(client, settings))
    finally:
        await client.close()


def _child_env(settings: Settings, mongo: Child, redis: Child) -> dict[str, str]:
    return {
        "RULEENGINE_MONGODB_URL": mongo.address,
        "RULEENGINE_REDIS_URL": redis.address,
        "RULEENGINE_DATA_DIR": str(Path(settings.data_dir).resolve()),
        "PYTHONUNBUFFERED": "1",
    }


def _wait(group: ProcessGroup) -> int:
    while True:
        for child in group.children:
            if not child.running:
                print(
                    f"{child.name} exited with code {child.popen.returncode};"
                    " stopping everything (see its log under the data dir)",
                    file=sys.stderr,
                )
                return 1
        time.sleep(0.5)


def run_up(settings: Settings, *, demo: bool, workers: int) -> int:
    """Start everything and block until Ctrl-C; returns the exit code."""
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    load_key(settings, create=True)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    started = datetime.now(UTC)
    try:
        with ProcessGroup(log_dir=data_dir / "logs") as group:
            mongo = start_mongodb(
                group, port=settings.mongodb_port, storage_path=str(data_dir / "mongodb")
            )
            _announce(mongo)
            redis = start_redis(group, port=settings.redis_port, data_dir=data_dir / "redis")
            _announce(redis)
            settings = settings.model_copy(
                update={"mongodb_url": mongo.address, "redis_url": redis.address}
            )
            asyncio.run(_bootstrap(settings))
            print(
                f"ready (started in {(datetime.now(UTC) - started).total_seconds():.1f}s)",
                flush=True,
            )
            return _wait(group)
    except (KeyboardInterrupt, _Stop):
        print("stopped", flush=True)
        return 0
    except EmbeddedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
