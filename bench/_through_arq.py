"""One evaluation job through arq, as production runs it: built as the dispatcher builds it,
enqueued with the production serializer, run by a real ``arq.worker.Worker`` built from the
production ``worker_kwargs`` (in the benchmark's process, so its MongoDB commands can be
timed; without its crons)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from arq.constants import job_key_prefix
from arq.worker import Worker
from pymongo import monitoring

from _common import TOKEN, register_accounts, say
from ruleengine import constants as c
from ruleengine.dispatching.payload import (
    EvaluateJob,
    ListingPacker,
    Packed,
    batch_id_for,
    evaluate_job_id,
)
from ruleengine.jobs import worker_kwargs
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore
from ruleengine.store.snapshots import ListingSnapshots


class MongoTimes(monitoring.CommandListener):
    """Seconds the MongoDB commands took, by collection, while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.seconds: dict[str, float] = defaultdict(float)
        self._pending: dict[int, str] = {}
        self._commands: dict[int, str] = {}
        self.calls: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.active:
            target = event.command.get(event.command_name)
            if event.command_name == "getMore":
                target = event.command.get("collection")
            self._pending[event.request_id] = str(target)
            self._commands[event.request_id] = f"{target}.{event.command_name}"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._done(event.request_id, event.duration_micros)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._done(event.request_id, event.duration_micros)

    def _done(self, request_id: int, micros: int) -> None:
        target = self._pending.pop(request_id, None)
        command = self._commands.pop(request_id, None)
        if target is not None:
            self.seconds[target] += micros / 1e6
        if command is not None:
            self.calls[command][0] += 1
            self.calls[command][1] += micros / 1e6

    def by_command(self) -> dict[str, list[float]]:
        """(calls, seconds) by collection and command, largest first."""
        ordered = sorted(self.calls.items(), key=lambda kv: -kv[1][1])
        return {name: [int(n), round(s, 3)] for name, (n, s) in ordered if s >= 0.0005}

    def by_collection(self) -> dict[str, float]:
        """The totals, largest first, rounded to ms."""
        ordered = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        return {name: round(s, 3) for name, s in ordered if s >= 0.0005}


@dataclass(frozen=True)
class Finished:
    """What arq finished: the batch row, enqueue → done and enqueue → start, the payload size."""

    batch: dict[str, Any]
    job_s: float
    queue_s: float
    payload_bytes: int


async def until(predicate: Callable[[], bool], *, timeout_s: float) -> None:
    """Wait (polling every 10 ms) until ``predicate()`` is true; fail after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise SystemExit(f"condition not reached within {timeout_s}s")
        await asyncio.sleep(0.01)


@dataclass(frozen=True)
class Built:
    """A job as the dispatcher sends it, the same job with its entities inline, the entities."""

    job: EvaluateJob
    inline: EvaluateJob
    entities: list[Entity]


async def build_job(
    settings: Settings,
    db: Database,
    definition: dict[str, Any],
    account: str,
    *,
    limit: int | None = None,
) -> Built:
    """Register ``account``, save the rule, list its entities (only the first ``limit``, when
    given) and pack them as the dispatcher does: a big listing goes to MongoDB by reference."""
    now = datetime.now(UTC)
    await register_accounts(settings, db, [account], now=now)
    rule = parse_rule(definition)
    doc = (await RuleStore(db).save(rule, now=now, author="bench", source="bench")).rule
    graph = GraphSession(settings)
    try:
        entities = await GraphReader.from_settings(graph).list_for_rule(rule, account, token=TOKEN)
    finally:
        await graph.close()
    entities = entities[:limit] if limit is not None else entities
    say(f"{len(entities)} {rule.level}s of {account} listed; a job with {len(rule.tasks)} tasks")
    packer = ListingPacker(ListingSnapshots(db), inline_max_bytes=settings.payload_inline_max_bytes)
    packed = await packer.pack(
        entities,
        account=account,
        level=rule.level,
        now=now,
        keep_until=now + timedelta(minutes=15, seconds=settings.job_timeout_s),
    )

    def job(carried: Packed) -> EvaluateJob:
        return EvaluateJob.of(
            rule,
            batch_id=batch_id_for(doc.id, account, now),
            rule_id=doc.id,
            version=doc.version,
            account=account,
            entities=carried,
            scheduled_at=now,
            dispatched_at=now,
        )

    return Built(job(packed), job(entities), entities)


async def run_through_arq(
    settings: Settings, job: EvaluateJob, mongo_times: MongoTimes | None = None
) -> Finished:
    """Start a production worker, enqueue ``job``, wait until arq has finished it."""
    # The production settings, but no crons: the reaper and retention would run at startup,
    # beside the job, and count in the worker's job counters that tell when it is done.
    kwargs = worker_kwargs(settings) | {"handle_signals": False, "cron_jobs": []}
    worker = Worker(**kwargs)
    worker.main_task = asyncio.create_task(worker.main())  # close() cancels it
    queue = connect_queue(settings)
    times = mongo_times or MongoTimes()
    try:
        await until(lambda: "engine" in worker.ctx, timeout_s=30)  # on_startup is done
        job_id = evaluate_job_id(job.batch_id)
        times.active = True
        enqueued_at = datetime.now(UTC)
        started = time.perf_counter()
        enqueued = await queue.enqueue_job(c.EVALUATE_JOB, job.to_job(), _job_id=job_id)
        assert enqueued is not None, "arq refused the job"
        payload_bytes = int(await queue.strlen(job_key_prefix + job_id))
        say(f"enqueued: {payload_bytes:,} bytes in Redis for {job.entity_count} entities")
        # counted when the function returns; the task ends once arq has finished the job
        await until(
            lambda: (
                worker.jobs_complete + worker.jobs_failed > 0
                and all(task.done() for task in worker.tasks.values())
            ),
            timeout_s=3600,
        )
        job_s = time.perf_counter() - started
        times.active = False
        batch = await worker.ctx["db"][c.BATCHES].find_one({"_id": job.batch_id}) or {}
    finally:
        await worker.close()
        with contextlib.suppress(asyncio.CancelledError):
            await worker.main_task
        await queue.aclose()
    if worker.jobs_failed:
        raise SystemExit(f"arq failed the job (batch row: {batch})")
    if batch.get("status") != "DONE":
        raise SystemExit(f"the job did not finish DONE: {batch.get('status')} {batch.get('error')}")
    queue_s = (batch["started_at"] - enqueued_at).total_seconds()
    return Finished(batch, job_s, queue_s, payload_bytes)
