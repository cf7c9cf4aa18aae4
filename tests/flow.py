"""Test helpers that drive the real processes' code: dispatcher sweeps and arq workers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
from arq.utils import timestamp_ms
from arq.worker import Worker

from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.dispatching.sweep import Dispatcher
from ruleengine.jobs import worker_kwargs
from ruleengine.maintenance.reaper import Reaper
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.records import ExecutionStore
from ruleengine.store.ruledocs import RuleDoc
from ruleengine.store.rules import RuleStore
from ruleengine.worker.deps import Engine, build_engine, close_engine
from ruleengine.worker.job import evaluate_account
from support import SANDBOX_TOKEN


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


async def work(settings: Settings, *, cron_jobs: list[Any] | None = None) -> Worker:
    """Run an arq worker (the production settings) until no job is due, with ``cron_jobs``
    only (none by default: the reaper is tested on its own)."""
    kwargs = worker_kwargs(settings) | {"poll_delay": 0.01, "handle_signals": False}
    kwargs["cron_jobs"] = cron_jobs or []
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
    """What Rule Logs show of every (batch, task, entity) matching ``query`` (equality on each
    field), oldest batch first: the pair's execution record where it has one, the row of its
    batch's chunk of evaluations otherwise (:meth:`ExecutionStore.rows`)."""
    store = ExecutionStore(db)
    batches: list[str] = []
    async for doc in db[c.EVALUATIONS].find({}, {"batch_id": 1}).sort([("created_at", 1)]):
        if doc["batch_id"] not in batches:
            batches.append(doc["batch_id"])
    async for doc in db[c.EXECUTIONS].find({}, {"batch_id": 1}).sort("_id"):
        if doc["batch_id"] not in batches:
            batches.append(doc["batch_id"])
    rows = [row for batch_id in batches for row in await store.rows(batch_id)]
    return [r for r in rows if all(_matches(r.get(k), v) for k, v in query.items())]


def _matches(value: Any, wanted: Any) -> bool:
    """MongoDB's equality: a list matches a scalar it holds."""
    if isinstance(value, list) and not isinstance(wanted, list):
        return wanted in value
    return bool(value == wanted)


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


def point_cli_at(settings: Settings, monkeypatch: Any) -> None:
    """Make ``ruleengine`` commands run in this process use ``settings``' database."""
    for name, value in {
        "RULEENGINE_MONGODB_URL": settings.mongodb_url,
        "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
        "RULEENGINE_DATA_DIR": str(settings.data_dir),
    }.items():
        monkeypatch.setenv(name, value)


def budget_rule(name: str = "Scale", percent: float = 20, **extra: Any) -> Rule:
    """A validated campaign rule raising budgets by ``percent`` when anything was spent today."""
    spent = {"metric": "spend", "period": "today", "operator": ">", "value": 1}
    data = campaign_rule({"type": "increase_budget", "percent": percent}, [spent], name=name)
    return parse_rule(data | extra)


def campaign_rule(
    action: dict[str, Any], conditions: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    """A campaign rule on act_1001 with one task ``t``, every 15 minutes."""
    return {
        "name": extra.pop("name", f"rule {action['type']}"),
        "format": 2,
        "level": extra.pop("level", "campaign"),
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "t",
                "conditions": conditions,
                "action": action,
                "cooldown_minutes": extra.pop("cooldown_minutes", 0),
            }
        ],
        **extra,
    }


NEW_YORK = ZoneInfo("America/New_York")
WINNER = {"metric": "purchase_roas.omni_purchase", "period": "last_7d", "operator": ">", "value": 3}
LOSER = {
    "metric": "purchase_roas.omni_purchase",
    "period": "last_7d",
    "operator": "<",
    "value": 1.2,
}


async def objects_named(
    sandbox: SandboxAdmin, account: str = "act_1001"
) -> dict[str, dict[str, Any]]:
    """Every campaign of ``account`` by its original name, as the sandbox holds it now."""
    ids = await campaign_ids(sandbox, account)
    return {name: await sandbox.object(cid) for name, cid in ids.items()}


async def campaign_ids(sandbox: SandboxAdmin, account: str = "act_1001") -> dict[str, str]:
    """Campaign ids of ``account`` by name, listed through the sandbox's Graph API."""
    async with aiohttp.ClientSession() as http:
        url = f"{sandbox.base_url}/v27.0/{account}/campaigns"
        params = {"fields": "id,name", "limit": "500", "access_token": SANDBOX_TOKEN}
        async with http.get(url, params=params) as response:
            body = await response.json()
    return {c["name"]: c["id"] for c in body["data"]}


async def successful_writes(sandbox: SandboxAdmin) -> list[dict[str, Any]]:
    """The writes the sandbox accepted, in order."""
    return [w for w in await sandbox.writes() if w["ok"]]


async def writes_at_least(sandbox: SandboxAdmin, count: int) -> int:
    """How many writes the sandbox accepted, once there are ``count`` or more (else 0)."""
    writes = len(await successful_writes(sandbox))
    return writes if writes >= count else 0


async def sandbox_quiet(sandbox: SandboxAdmin) -> bool:
    """True when no Graph request is in flight at the sandbox."""
    return bool((await sandbox.stats())["in_flight"] == 0)


async def write_in_flight(sandbox: SandboxAdmin) -> bool:
    """True while a write the sandbox received is still held back (``write_latency_ms``): it
    is at Meta and has not landed yet — the worst moment to kill its sender."""
    return bool((await sandbox.stats())["writes_in_flight"])


async def dead_worker_forgotten(redis: Any) -> list[str]:
    """A SIGKILLed worker's in-progress marks, expired at once (arq lets another worker take
    its jobs only once they expire, after the job timeout); the keys that were removed. Only
    for a test whose every other worker is gone too."""
    keys = [k.decode() async for k in redis.scan_iter(match="arq:in-progress:*")]
    if keys:
        await redis.delete(*keys)
    return keys


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of an ``arq ruleengine.jobs.WorkerSettings`` child process."""
    # a short write-lock lifetime: the lock of a killed worker is free again in 2 s
    return process_env(settings, worker_metrics_port="0", account_lock_ttl_s="2")


async def reap(settings: Settings, db: Database, redis: Any, *, now: datetime) -> int:
    """One reaper pass at ``now``, as a worker's cron runs it."""
    engine = build_engine(settings, db=db, redis=redis)
    try:
        return await Reaper(engine).reap(now=now)
    finally:
        await close_engine(engine)


async def wait_for(predicate: Callable[[], Awaitable[Any]], timeout_s: float = 20.0) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"condition not reached within {timeout_s}s")


def start_worker(settings: Settings, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """A real worker process (``arq ruleengine.jobs.WorkerSettings``) logging to ``log``."""
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [str(Path(sys.executable).with_name("arq")), "ruleengine.jobs.WorkerSettings"],
            env=worker_env(settings) | {f"RULEENGINE_{k.upper()}": v for k, v in env.items()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child process and reap it."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


async def run_at(
    settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
    conditions: list[dict[str, Any]],
    instants: tuple[datetime, ...],
) -> None:
    """Evaluate a rule with ``conditions`` (one that never fires) on act_1001's campaigns
    at each instant, as the worker does, the sandbox's clock frozen there: execution
    records of conversions as they were seen then (what the lag model learns from)."""
    rule = parse_rule(campaign_rule({"type": "pause"}, conditions, name="lag probe"))
    async with engine_for(settings, db) as engine:
        reader = GraphReader.from_settings(engine.session)
        for n, instant in enumerate(sorted(instants)):
            await sandbox.set_clock(instant)
            entities = await reader.list_for_rule(rule, "act_1001", token=SANDBOX_TOKEN)
            job = EvaluateJob.of(
                rule,
                batch_id=f"lag-probe-{n}",
                rule_id="rule-lag-probe",
                version=1,
                account="act_1001",
                entities=entities,
                scheduled_at=instant,
                dispatched_at=instant,
            )
            summary = await evaluate_account(engine, job, now=instant)
            assert summary.status == "DONE" and summary.applied == 0


async def aged(db: Database, batch_id: str, by: timedelta) -> None:
    """Make a batch look ``by`` older on MongoDB's clock — the clock every time the engine
    stores to compare later is by (its intents' times, its row's last start): a run that
    happened ``by`` ago, for a test that cannot wait that long."""
    async for doc in db[c.ACTION_INTENTS].find({"batch_id": batch_id}):
        older = {k: v - by for k, v in doc.items() if isinstance(v, datetime)}
        if older:
            await db[c.ACTION_INTENTS].update_one({"_id": doc["_id"]}, {"$set": older})
    row = await db[c.BATCHES].find_one({"_id": batch_id}, {"last_started_at": 1})
    if row is not None and isinstance(row.get("last_started_at"), datetime):
        started = row["last_started_at"] - by
        await db[c.BATCHES].update_one({"_id": batch_id}, {"$set": {"last_started_at": started}})
