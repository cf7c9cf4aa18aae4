"""Shared set-up for the benchmark scripts: real servers on free loopback ports."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from cryptography.fernet import Fernet
from pymongo import AsyncMongoClient

from ruleengine.accounts.currency import register
from ruleengine.devstack.embedded import (
    Child,
    ProcessGroup,
    free_port,
    port_answers,
    start_mongodb,
    start_redis,
)
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database, Document, create_client, database, ensure_indexes

TOKEN = "EAAGbenchTOKEN0123456789abcdefghijklmn"


@dataclass(frozen=True)
class Stack:
    """Where the benchmark's servers listen."""

    sandbox_url: str
    mongodb_url: str | None = None
    redis_url: str | None = None


def stack_settings(servers: Stack, **overrides: Any) -> Settings:
    """Settings pointing at the benchmark's servers, with a fresh token key and metrics off."""
    assert servers.mongodb_url
    assert servers.redis_url
    values: dict[str, Any] = {
        "mongodb_url": servers.mongodb_url,
        "redis_url": servers.redis_url,
        "graph_url": servers.sandbox_url,
        "token_encryption_key": Fernet.generate_key().decode(),
        "dispatcher_metrics_port": 0,
        "worker_metrics_port": 0,
    }
    return Settings(**(values | overrides))


async def register_accounts(
    settings: Settings, db: Database, accounts: list[str], *, now: datetime
) -> None:
    """Register ``accounts`` with :data:`TOKEN` as ``ruleengine accounts add`` does: with the
    currency and timezone the sandbox (Meta) holds (one GET each). An account registered
    with others gets no budget or bid change."""
    credentials = CredentialStore(db, load_key(settings))
    session = GraphSession(settings)
    try:
        reader = GraphReader.from_settings(session)
        for account in accounts:
            await register(credentials, reader, account, TOKEN, now=now)
    finally:
        await session.close()


async def open_database(settings: Settings) -> tuple[AsyncMongoClient[Document], Database]:
    """A client and the engine's database with its indexes (close the client when done)."""
    client = create_client(settings)
    db = database(client, settings)
    await ensure_indexes(db)
    return client, db


def say(message: str) -> None:
    """Progress on stderr, so the last line of stdout stays the JSON figures."""
    print(message, file=sys.stderr, flush=True)


def figures(values: dict[str, Any]) -> None:
    """Print the figures as the last line: one JSON object."""
    print(orjson.dumps(values).decode(), flush=True)


def start_sandbox(group: ProcessGroup, *args: str) -> str:
    """The Graph sandbox as a child process."""
    port = free_port()
    argv = [sys.executable, "-m", "graph_sandbox", "--port", str(port), "--token", TOKEN, *args]
    group.start(
        "sandbox", argv, address=f"http://127.0.0.1:{port}", ready=lambda: port_answers(port)
    )
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def stack(*, databases: bool, sandbox_args: tuple[str, ...] = ()) -> Iterator[Stack]:
    """Sandbox, and with ``databases`` an in-memory MongoDB-compatible server and Redis."""
    log_dir = Path("var") / "bench-logs"
    with ProcessGroup(log_dir=log_dir) as group:
        yield start_servers(group, databases=databases, sandbox_args=sandbox_args)


def start_servers(
    group: ProcessGroup, *, databases: bool, sandbox_args: tuple[str, ...] = ()
) -> Stack:
    """Start the sandbox (and the databases) as children of ``group``."""
    started = time.perf_counter()
    sandbox = start_sandbox(group, *sandbox_args)
    if not databases:
        return Stack(sandbox)
    mongo = start_mongodb(group, port=free_port(), storage_path=":memory:")
    redis = start_redis(group, port=free_port(), data_dir=None)
    say(f"servers up in {time.perf_counter() - started:.1f}s (logs in {group.log_dir})")
    return Stack(sandbox, mongo.address, redis.address)


def engine_env(settings: Settings, **extra: str) -> dict[str, str]:
    """What a dispatcher or worker process needs to find the benchmark's servers (the
    process group adds this process's own environment)."""
    assert settings.token_encryption_key is not None
    return {
        "RULEENGINE_MONGODB_URL": settings.mongodb_url,
        "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
        "RULEENGINE_REDIS_URL": settings.redis_url,
        "RULEENGINE_GRAPH_URL": settings.graph_url,
        "RULEENGINE_TOKEN_ENCRYPTION_KEY": settings.token_encryption_key.get_secret_value(),
        **extra,
    }


def start_dispatcher(group: ProcessGroup, env: dict[str, str]) -> Child:
    """``python -m ruleengine.dispatch`` as a child; ready when its metrics port answers."""
    return _start_engine(group, "dispatcher", [sys.executable, "-m", "ruleengine.dispatch"], env)


def start_worker(group: ProcessGroup, env: dict[str, str], name: str = "worker") -> Child:
    """``arq ruleengine.jobs.WorkerSettings`` as a child; ready when its metrics port answers."""
    arq = str(Path(sys.executable).with_name("arq"))
    return _start_engine(group, name, [arq, "ruleengine.jobs.WorkerSettings"], env)


def _start_engine(group: ProcessGroup, name: str, argv: list[str], env: dict[str, str]) -> Child:
    port = free_port()
    kind = "DISPATCHER" if name == "dispatcher" else "WORKER"
    return group.start(
        name,
        argv,
        address=f"http://127.0.0.1:{port}",
        ready=lambda: port_answers(port),
        env=env | {f"RULEENGINE_{kind}_METRICS_PORT": str(port)},
        timeout_s=60,
    )


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile (nearest rank) of ``values``."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]
