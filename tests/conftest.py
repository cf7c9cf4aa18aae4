"""Real servers for the test suite, started once per session.

MongoDB-compatible server and Redis: the embedded binaries on free loopback
ports, unless ``RULEENGINE_MONGODB_URL`` / ``RULEENGINE_REDIS_URL`` point at
running ones. The Graph sandbox runs as its own process too. Every test gets a
fresh database (dropped afterwards), an empty Redis and a reset sandbox.

Under pytest-xdist (``make test``) each test process starts its own servers; a
Redis given by URL is shared, so each process takes a database number of its own
(``gw0`` → 1, ``gw1`` → 2, …).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from cryptography.fernet import Fernet
from hypothesis import settings as hypothesis_settings

from graph_sandbox.admin import SandboxAdmin
from ruleengine.devstack.embedded import (
    ProcessGroup,
    free_port,
    port_answers,
    start_mongodb,
    start_redis,
)
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database, create_client, database, ensure_indexes
from support import SANDBOX_ACCOUNTS, SANDBOX_NOW, SANDBOX_TOKEN

# Property tests search new examples on every local run. CI (`.ci/run`) loads the `ci`
# profile: the same examples on every run, so a change lands or fails on its own merits;
# whatever a local run finds is kept as an explicit @example.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Read before the autouse fixture below clears the environment for each test.
_EXTERNAL_MONGODB = os.environ.get("RULEENGINE_MONGODB_URL")
_EXTERNAL_REDIS = os.environ.get("RULEENGINE_REDIS_URL")


def _own_redis_database(url: str, worker: str | None) -> str:
    """``url`` with the database number of this xdist test process (tests empty their
    Redis database: two processes sharing one would empty each other's)."""
    if not worker or not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{int(worker[2:]) + 1}"))


@dataclass(frozen=True)
class Servers:
    """Where the session's servers listen."""

    mongodb_url: str
    redis_url: str
    sandbox_url: str


@pytest.fixture(scope="session")
def process_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessGroup]:
    """Children started for the whole session, stopped at its end."""
    with ProcessGroup(log_dir=tmp_path_factory.mktemp("server-logs")) as group:
        yield group


def _start_sandbox(group: ProcessGroup) -> str:
    port = free_port()
    argv = [sys.executable, "-m", "graph_sandbox", "--port", str(port), "--seed", "1"]
    argv += ["--token", SANDBOX_TOKEN]  # the sandbox accepts only tokens it issued
    child = group.start(
        "sandbox", argv, address=f"http://127.0.0.1:{port}", ready=lambda: port_answers(port)
    )
    return child.address


@pytest.fixture(scope="session")
def servers(process_group: ProcessGroup) -> Servers:
    """The session's MongoDB-compatible server, Redis and Graph sandbox."""
    mongodb_url = (
        _EXTERNAL_MONGODB
        or start_mongodb(process_group, port=free_port(), storage_path=":memory:").address
    )
    redis_url = (
        _own_redis_database(_EXTERNAL_REDIS, os.environ.get("PYTEST_XDIST_WORKER"))
        if _EXTERNAL_REDIS
        else start_redis(process_group, port=free_port(), data_dir=None).address
    )
    return Servers(mongodb_url, redis_url, _start_sandbox(process_group))


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never depend on RULEENGINE_* variables of the machine."""
    for name in list(os.environ):
        if name.startswith("RULEENGINE_"):
            monkeypatch.delenv(name)


@pytest.fixture
def settings(servers: Servers, tmp_path: Path) -> Settings:
    """Settings pointing at the session's servers, with a database of this test's own."""
    return Settings(
        mongodb_url=servers.mongodb_url,
        mongodb_database=f"test_{uuid.uuid4().hex[:12]}",
        redis_url=servers.redis_url,
        graph_url=servers.sandbox_url,
        data_dir=tmp_path / "var",
        token_encryption_key=Fernet.generate_key().decode(),
        listing_retry_waits_s=(0.05, 0.1),
        read_retry_waits_s=(0.01, 0.02),
        tick_seconds=0.2,
        dispatcher_metrics_port=0,
        worker_metrics_port=0,
    )


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    """This test's database, with indexes; dropped afterwards."""
    client = create_client(settings)
    db = database(client, settings)
    await ensure_indexes(db)
    try:
        yield db
    finally:
        await client.drop_database(settings.mongodb_database)
        await client.close()


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Any]:
    """A Redis client on an emptied database."""
    from redis.asyncio import Redis

    client = Redis.from_url(settings.redis_url)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.flushdb()
        await client.aclose()


@pytest.fixture
async def sandbox(servers: Servers) -> AsyncIterator[SandboxAdmin]:
    """The session's Graph sandbox, reset to the demo world with its clock frozen."""
    admin = SandboxAdmin(servers.sandbox_url)
    await admin.reset(seed=1, scenario="demo")
    await admin.set_clock(SANDBOX_NOW)
    try:
        yield admin
    finally:
        await admin.close()


@pytest.fixture
async def accounts(db: Database, settings: Settings, sandbox: SandboxAdmin) -> list[str]:
    """The sandbox's demo accounts registered with a (sandbox) token."""
    store = CredentialStore(db, load_key(settings))
    for account, (name, timezone, currency) in SANDBOX_ACCOUNTS.items():
        await store.add(
            account,
            SANDBOX_TOKEN,
            now=SANDBOX_NOW,
            name=name,
            timezone=timezone,
            currency=currency,
        )
    return list(SANDBOX_ACCOUNTS)


@pytest.fixture
async def webhook(settings: Settings) -> AsyncIterator[tuple[Settings, list[dict[str, Any]]]]:
    """A local webhook receiver named ``ops`` in a copy of the settings, and what it received."""
    from aiohttp import web
    from pydantic import SecretStr

    received: list[dict[str, Any]] = []

    async def receive(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = SecretStr(f"http://127.0.0.1:{runner.addresses[0][1]}/hook")
    try:
        yield settings.model_copy(update={"webhooks": {"ops": url}}), received
    finally:
        await runner.cleanup()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[ProcessGroup, int]]:
    """A Redis of this test's own, which the test may stop and restart on the same port."""
    with ProcessGroup(log_dir=tmp_path / "own-redis") as group:
        port = free_port()
        start_redis(group, port=port, data_dir=None)
        yield group, port
