"""Worker throughput: one evaluate_account job over 2,000 campaigns × 2 tasks, through arq.

The embedded stack (MongoDB-compatible server, Redis, Graph sandbox) with one
large ad account. The job is built as the dispatcher builds it, enqueued with
the production serializer (its size in Redis is ``payload_bytes``), dequeued and
run by a real ``arq.worker.Worker`` built from the production ``worker_kwargs``
(in this process, so its MongoDB commands can be timed; without its crons),
including the writes its actions make; the figures run from the enqueue to arq
finishing the job.

The sandbox answers every request after ``--latency-ms`` (default 150, a
realistic Graph round trip; ``--latency-ms 0`` is the SPEC §11 scenario, which
measures the worker's own cost) and its clock is frozen at ``FROZEN_AT``: the
Insights that decide which campaigns pass — hence the number of writes — are
the same on every run, whatever the time of day.

The job is built as the dispatcher builds it: an entity list over
``RULEENGINE_PAYLOAD_INLINE_MAX_BYTES`` is stored once in MongoDB and the job
carries a reference (``payload_bytes``; ``payload_inline_bytes`` is the same job
carrying its entities). ``payload_5000_adsets`` measures the same for an ad-set
rule on an account of 5,000 ad sets (1,000 campaigns × 5): the job's bytes in
Redis with the entities inline and as the dispatcher enqueues it.

Prints evaluations (entity × task) per second, writes Meta received, Graph
cost, the time each stage took, the time spent in MongoDB by collection and the
p50/p95 of each trace stage. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from arq.constants import job_key_prefix
from arq.worker import Worker
from pymongo import monitoring

from _common import TOKEN, figures, open_database, percentile, say, stack, stack_settings
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.jobs import worker_kwargs
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.payload import EvaluateJob, ListingPacker, Packed, batch_id_for, evaluate_job_id
from ruleengine.queue import connect_queue
from ruleengine.rules.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore
from ruleengine.store.snapshots import ListingSnapshots

ACCOUNT = "act_2001"
#: The sandbox's frozen clock: noon in New York on a Tuesday, a day of full delivery.
FROZEN_AT = datetime(2026, 11, 24, 17, 0, tzinfo=UTC)
RULE = {
    "name": "throughput",
    "level": "campaign",
    "ad_accounts": [ACCOUNT],
    "schedule": {"mode": "interval", "every_minutes": 15},
    "timezone": "UTC",
    "tasks": [
        {
            "id": "pause-losers",
            "conditions": [
                {
                    "metric": "purchase_roas.omni_purchase",
                    "period": "last_7d",
                    "operator": "<",
                    "value": 1.2,
                },
                {"metric": "spend", "period": "today", "operator": ">", "value": 20},
            ],
            "action": {"type": "pause"},
            "cooldown_minutes": 60,
        },
        {
            "id": "scale-winners",
            "conditions": [
                {
                    "metric": "purchase_roas.omni_purchase",
                    "period": "last_7d",
                    "operator": ">",
                    "value": 3,
                },
                {
                    "metric": "spend",
                    "period": "today",
                    "operator": ">",
                    "compare_to": {"metric": "daily_budget", "multiplier": 0.25},
                },
            ],
            "action": {"type": "increase_budget", "percent": 15, "max_budget": 50000},
            "cooldown_minutes": 360,
        },
    ],
}


class MongoTimes(monitoring.CommandListener):
    """Seconds the MongoDB commands took, by collection, while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.seconds: dict[str, float] = defaultdict(float)
        self._pending: dict[int, str] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.active:
            target = event.command.get(event.command_name)
            if event.command_name == "getMore":
                target = event.command.get("collection")
            self._pending[event.request_id] = str(target)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._done(event.request_id, event.duration_micros)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._done(event.request_id, event.duration_micros)

    def _done(self, request_id: int, micros: int) -> None:
        target = self._pending.pop(request_id, None)
        if target is not None:
            self.seconds[target] += micros / 1e6

    def by_collection(self) -> dict[str, float]:
        """The totals, largest first, rounded to ms."""
        ordered = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        return {name: round(s, 3) for name, s in ordered if s >= 0.0005}


def stages(records: list[dict[str, Any]]) -> dict[str, float]:
    """p50/p95 of each trace stage over the execution records (act: records that acted)."""
    out: dict[str, float] = {}
    for stage in ("cooldown", "fetch", "evaluate", "act"):
        values = [float(r["trace"][stage]) for r in records if r.get("trace")]
        if stage == "act":
            values = [v for v in values if v > 0] or [0.0]
        out[f"{stage}_p50_s"] = round(percentile(values, 50), 6)
        out[f"{stage}_p95_s"] = round(percentile(values, 95), 6)
    return out


async def until(predicate: Callable[[], bool], *, timeout_s: float) -> None:
    """Wait (polling every 10 ms) until ``predicate()`` is true; fail after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise SystemExit(f"condition not reached within {timeout_s}s")
        await asyncio.sleep(0.01)


async def main(campaigns: int, latency_ms: float) -> None:
    mongo_times = MongoTimes()
    monitoring.register(mongo_times)  # before any client exists: the worker's is timed too
    args = ("--scenario", "bench", "--accounts", "1", "--campaigns", str(campaigns))
    with stack(databases=True, sandbox_args=args) as servers:
        settings = stack_settings(servers)
        async with SandboxAdmin(servers.sandbox_url) as sandbox:
            await sandbox.set_clock(FROZEN_AT)
            await sandbox.set_faults(latency_ms=latency_ms)
            client, db = await open_database(settings)
            try:
                job, inline = await build_job(settings, db)
                result = await run_through_arq(settings, job, mongo_times)
                writes = [w for w in await sandbox.writes() if w["ok"]]
                records = [r async for r in db[c.EXECUTIONS].find({"batch_id": job.batch_id})]
                inline_bytes = await enqueued_bytes(settings, inline, "inline")
                adsets = await adset_payloads(settings, db, sandbox)
            finally:
                await client.close()
        batch, job_s, queue_s, payload_bytes = result
        if batch.get("status") != "DONE":
            raise SystemExit(
                f"the job did not finish DONE: {batch.get('status')} {batch.get('error')}"
            )
        evaluations = int(batch["evaluated_count"])
        say(
            f"DONE: {evaluations} evaluations, {batch['affected_count']} affected,"
            f" {batch['applied_count']} applied, {len(writes)} writes in {job_s:.2f}s"
            f" (enqueue → arq done) at {latency_ms:g} ms Graph latency"
        )
        say(f"time in MongoDB by collection: {mongo_times.by_collection()}")
        figures(
            {
                "campaigns": job.entity_count,
                "tasks": len(job.rule["tasks"]),
                "latency_ms": latency_ms,
                "sandbox_clock": FROZEN_AT.isoformat(),
                "payload_bytes": payload_bytes,
                "payload_inline_bytes": inline_bytes,
                "payload_5000_adsets": adsets,
                "evaluations": evaluations,
                "applied": batch["applied_count"],
                "writes": len(writes),
                "job_s": round(job_s, 3),
                "queue_s": round(queue_s, 3),
                "evals_per_s": round(evaluations / job_s, 1),
                "graph_calls": batch["graph"]["counted_calls"],
                "graph_http_requests": batch["graph"]["http_requests"],
                **{f"{stage}_s": round(s, 3) for stage, s in batch["trace"].items()},
                "mongo_s": mongo_times.by_collection(),
                **stages(records),
            }
        )


async def build_job(
    settings: Settings, db: Database, rule_data: dict[str, Any] = RULE
) -> tuple[EvaluateJob, EvaluateJob]:
    """Register the account, save the rule, list its entities: the job the dispatcher sends,
    and the same job carrying its entities inline."""
    now = datetime.now(UTC)
    await CredentialStore(db, load_key(settings)).add(ACCOUNT, TOKEN, now=now)
    rule = parse_rule(rule_data)
    doc = (await RuleStore(db).save(rule, now=now, author="bench", source="bench")).rule
    graph = GraphSession(settings)
    try:
        entities = await GraphReader.from_settings(graph).list_for_rule(rule, ACCOUNT, token=TOKEN)
    finally:
        await graph.close()
    say(f"{len(entities)} {rule.level}s listed; a job with {len(rule.tasks)} tasks")
    packer = ListingPacker(ListingSnapshots(db), inline_max_bytes=settings.payload_inline_max_bytes)
    packed = await packer.pack(
        entities,
        account=ACCOUNT,
        level=rule.level,
        now=now,
        keep_until=now + timedelta(minutes=15, seconds=settings.job_timeout_s),
    )

    def job(carried: Packed) -> EvaluateJob:
        return EvaluateJob.of(
            rule,
            batch_id=batch_id_for(doc.id, ACCOUNT, now),
            rule_id=doc.id,
            version=doc.version,
            account=ACCOUNT,
            entities=carried,
            scheduled_at=now,
            dispatched_at=now,
        )

    return job(packed), job(entities)


async def enqueued_bytes(settings: Settings, job: EvaluateJob, suffix: str) -> int:
    """The size of ``job`` in Redis (enqueued under a job id of its own, then removed)."""
    queue = connect_queue(settings)
    job_id = f"{evaluate_job_id(job.batch_id)}:{suffix}"
    try:
        await queue.enqueue_job(c.EVALUATE_JOB, job.to_job(), _job_id=job_id)
        size = int(await queue.strlen(job_key_prefix + job_id))
        await queue.delete(job_key_prefix + job_id)
        await queue.zrem(c.QUEUE_NAME, job_id)
        return size
    finally:
        await queue.aclose()


async def adset_payloads(settings: Settings, db: Database, sandbox: SandboxAdmin) -> dict[str, int]:
    """An ad-set rule's job on an account of 5,000 ad sets: its bytes in Redis, before/after."""
    await sandbox.reset(
        scenario="bench", accounts=1, campaigns_per_account=1000, adsets_per_campaign=5
    )
    await sandbox.set_clock(FROZEN_AT)
    job, inline = await build_job(settings, db, RULE | {"name": "adsets", "level": "adset"})
    sizes = {
        "adsets": job.entity_count,
        "inline_bytes": await enqueued_bytes(settings, inline, "inline"),
        "bytes": await enqueued_bytes(settings, job, "packed"),
    }
    say(f"an ad-set job on 5,000 ad sets: {sizes}")
    return sizes


async def run_through_arq(
    settings: Settings, job: EvaluateJob, mongo_times: MongoTimes
) -> tuple[dict[str, Any], float, float, int]:
    """Start a production worker, enqueue ``job``, wait until arq has finished it.

    Returns the batch row, enqueue → done seconds, enqueue → job start seconds
    and the size of the job in Redis.
    """
    # The production settings, but no crons: the reaper and retention would run at startup,
    # beside the job, and count in the worker's job counters that tell when it is done.
    kwargs = worker_kwargs(settings) | {"handle_signals": False, "cron_jobs": []}
    worker = Worker(**kwargs)
    worker.main_task = asyncio.create_task(worker.main())  # close() cancels it
    queue = connect_queue(settings)
    try:
        await until(lambda: "engine" in worker.ctx, timeout_s=30)  # on_startup is done
        job_id = evaluate_job_id(job.batch_id)
        mongo_times.active = True
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
        mongo_times.active = False
        batch = await worker.ctx["db"][c.BATCHES].find_one({"_id": job.batch_id}) or {}
    finally:
        await worker.close()
        with contextlib.suppress(asyncio.CancelledError):
            await worker.main_task
        await queue.aclose()
    if worker.jobs_failed:
        raise SystemExit(f"arq failed the job (batch row: {batch})")
    queue_s = (batch["started_at"] - enqueued_at).total_seconds()
    return batch, job_s, queue_s, payload_bytes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=2000)
    parser.add_argument(
        "--latency-ms", type=float, default=150.0, help="Graph latency (0: the SPEC's scenario)"
    )
    options = parser.parse_args()
    asyncio.run(main(options.campaigns, options.latency_ms))
