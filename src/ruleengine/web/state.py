"""The web app's state: typed app keys and the clients opened for the app's lifetime.

MongoDB, the arq/Redis client and the preview's read-only services are created in a cleanup
context (startup) and closed when the app shuts down, never at import time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from arq.connections import ArqRedis
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from ruleengine.analysis.conflicts import ConflictGate, StoredAnalysis
from ruleengine.queue import connect_queue
from ruleengine.redact import REDACTOR
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database, Document, create_client, database, ensure_indexes
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.followups import FollowupStore
from ruleengine.store.formats import migrate_rules
from ruleengine.store.heartbeats import Heartbeats
from ruleengine.store.records import BatchStore, ExecutionStore
from ruleengine.store.rollups import RollupStore
from ruleengine.store.rules import RuleStore
from ruleengine.web.costly import CostlyReads
from ruleengine.worker.preview import open_preview
from ruleengine.worker.stages import Reading

log = logging.getLogger(__name__)


@dataclass
class Services:
    """Every client and store the handlers use, opened once per app."""

    mongo: AsyncMongoClient[Document]
    db: Database
    queue: ArqRedis
    preview: Reading
    rules: RuleStore
    batches: BatchStore
    executions: ExecutionStore
    rollups: RollupStore
    errors: ErrorLog
    credentials: CredentialStore
    heartbeats: Heartbeats
    followups: FollowupStore
    conflicts: StoredAnalysis  # the conflict analysis of the stored rules, kept until they change
    costly: CostlyReads  # the limit, single flight and memory of the costly reads


SETTINGS = web.AppKey("settings", Settings)
SERVICES = web.AppKey("services", Services)
STARTED_AT = web.AppKey("started_at", float)  # time.monotonic() at startup


def services(request: web.Request) -> Services:
    """The app's services (only valid once the app has started)."""
    return request.app[SERVICES]


def settings_of(request: web.Request) -> Settings:
    """The app's settings."""
    return request.app[SETTINGS]


def _open(settings: Settings) -> Services:
    # load_key first: a missing key fails startup with a message that says what to set.
    key = load_key(settings)
    client = create_client(settings)
    db = database(client, settings)
    queue = connect_queue(settings)
    return Services(
        mongo=client,
        db=db,
        queue=queue,
        preview=open_preview(settings, db=db),
        rules=RuleStore(db, admit=ConflictGate(refuse=settings.refuse_conflicting_rules)),
        batches=BatchStore(db),
        executions=ExecutionStore(db),
        rollups=RollupStore(db),
        errors=ErrorLog(db),
        credentials=CredentialStore(db, key),
        heartbeats=Heartbeats(db),
        followups=FollowupStore(db),
        conflicts=StoredAnalysis(),
        costly=CostlyReads(
            concurrency=settings.costly_reads_concurrency, cache_s=settings.costly_reads_cache_s
        ),
    )


async def _close(svc: Services) -> None:
    await svc.preview.close()
    await svc.queue.aclose(close_connection_pool=True)
    await svc.mongo.close()


async def services_context(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: open the clients on startup, close them on shutdown."""
    settings = app[SETTINGS]
    if settings.api_token is not None:
        REDACTOR.register(settings.api_token.get_secret_value())
    svc = _open(settings)
    try:
        await ensure_indexes(svc.db)
        await svc.rules.repair_orphans(now=datetime.now(UTC))
        await migrate_rules(svc.db, now=datetime.now(UTC))
    except PyMongoError as exc:
        # Keep serving: /health/ready will name MongoDB until it is back.
        log.warning("could not prepare MongoDB at startup: %s", exc)
    app[SERVICES] = svc
    app[STARTED_AT] = time.monotonic()
    try:
        yield
    finally:
        await _close(svc)


def uptime_s(app: web.Application) -> float:
    """Seconds since the app started."""
    started: Any = app.get(STARTED_AT)
    return 0.0 if started is None else time.monotonic() - float(started)
