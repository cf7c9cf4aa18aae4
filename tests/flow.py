"""Test helpers that drive the real processes' code: dispatcher sweeps and arq workers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from arq.worker import Worker

from ruleengine.dispatch import Dispatcher
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


async def work(settings: Settings) -> Worker:
    """Run an arq worker (the production settings) until the queue is empty."""
    kwargs = worker_kwargs(settings) | {"burst": True, "poll_delay": 0, "handle_signals": False}
    worker = Worker(**kwargs)
    try:
        await worker.main()
    finally:
        await worker.close()
    return worker


async def run_rule(settings: Settings, db: Database, data: dict[str, Any]) -> RuleDoc:
    """Save, dispatch and work a rule once."""
    rule = await save_rule(db, data)
    await dispatch(settings, db)
    await work(settings)
    return rule


async def records(db: Database, **query: Any) -> list[dict[str, Any]]:
    """Execution records matching ``query``, oldest first."""
    return [d async for d in db["executions"].find(query).sort("_id")]
