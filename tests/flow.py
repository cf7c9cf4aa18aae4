"""Test helpers that drive the real processes' code: dispatcher sweeps and arq workers."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from arq.utils import timestamp_ms
from arq.worker import Worker

from ruleengine.dispatch import Dispatcher
from ruleengine.engine import Engine, build_engine, close_engine
from ruleengine.jobs import worker_kwargs
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleDoc, RuleStore


async def save_rule(db: Database, data: dict[str, Any], *, now: datetime | None = None) -> RuleDoc:
    """Save a rule (validated like the API does)."""
    result = await RuleStore(db).save(
        parse_rule(data), now=now or datetime.now(UTC), author="test", source="test"
    )
    return result.rule


async def dispatch(settings: Settings, db: Database, *, now: datetime | None = None) -> Any:
    """One dispatcher tick at ``now`` (default: the real time)."""
    session = GraphSession(settings)
    queue = connect_queue(settings)
    try:
        clock = (lambda: now) if now is not None else (lambda: datetime.now(UTC))
        dispatcher = Dispatcher(
            settings,
            db=db,
            queue=queue,
            reader=GraphReader.from_settings(session),
            clock=clock,
            owner="tests",
        )
        return await dispatcher.tick()
    finally:
        await session.close()
        await queue.aclose()


class _Idle(Exception):
    """No job is due and none is running."""


class DueBurstWorker(Worker):
    """arq's burst mode waits for *delayed* jobs too; this one stops once nothing is due."""

    async def _poll_iteration(self) -> None:
        await super()._poll_iteration()
        self.tasks = {k: t for k, t in self.tasks.items() if not t.done()}
        due = await self.pool.zcount(self.queue_name, "-inf", timestamp_ms())
        if not due and not self.tasks:
            raise _Idle


async def work(settings: Settings) -> Worker:
    """Run an arq worker (the production settings) until no job is due."""
    kwargs = worker_kwargs(settings) | {"poll_delay": 0.01, "handle_signals": False}
    kwargs["cron_jobs"] = []  # the reaper is tested on its own
    worker = DueBurstWorker(**kwargs)
    try:
        await worker.main()
    except _Idle:
        pass
    finally:
        await worker.close()
    return worker


@asynccontextmanager
async def engine_for(settings: Settings, db: Database) -> AsyncIterator[Engine]:
    """The worker's engine, as a worker process builds it, closed afterwards."""
    queue = connect_queue(settings)
    engine = build_engine(settings, db=db, redis=queue)
    try:
        yield engine
    finally:
        await close_engine(engine)
        await queue.aclose()


async def run_rule(settings: Settings, db: Database, data: dict[str, Any]) -> RuleDoc:
    """Save, dispatch and work a rule once."""
    rule = await save_rule(db, data)
    await dispatch(settings, db)
    await work(settings)
    return rule


async def records(db: Database, **query: Any) -> list[dict[str, Any]]:
    """Execution records matching ``query``, oldest first."""
    return [d async for d in db["executions"].find(query).sort("_id")]


def process_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a child process (dispatcher, worker, web) using ``settings``."""
    assert settings.token_encryption_key is not None
    base = {k: v for k, v in os.environ.items() if not k.startswith("RULEENGINE_")}
    return base | {
        "RULEENGINE_MONGODB_URL": settings.mongodb_url,
        "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
        "RULEENGINE_REDIS_URL": settings.redis_url,
        "RULEENGINE_GRAPH_URL": settings.graph_url,
        "RULEENGINE_TOKEN_ENCRYPTION_KEY": settings.token_encryption_key.get_secret_value(),
        "RULEENGINE_DATA_DIR": str(settings.data_dir),
        **{f"RULEENGINE_{k.upper()}": v for k, v in extra.items()},
    }
