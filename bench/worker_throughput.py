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
cost, the time each stage took, the time spent in MongoDB by collection, the
p50/p95 of each trace stage, and what the job added to MongoDB
(``mongo_docs_written``, ``mongo_bytes_written``: ``dbStats`` objects and data size
before and after the job). ``no_fire`` is the same job with conditions that match
nothing — every pair evaluated, nothing attempted: what a run costs when it only looks.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

from arq.constants import job_key_prefix
from pymongo import monitoring

from _common import figures, open_database, percentile, say, stack, stack_settings
from _through_arq import MongoTimes, build_job, run_through_arq
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob, evaluate_job_id
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.records import ExecutionStore

ACCOUNT = "act_2001"
#: The sandbox's frozen clock: noon in New York on a Tuesday, a day of full delivery.
FROZEN_AT = datetime(2026, 11, 24, 17, 0, tzinfo=UTC)
RULE = {
    "name": "throughput",
    "format": 2,
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
            "action": {"type": "increase_budget", "percent": 15, "max_budget": 500},
            "cooldown_minutes": 360,
        },
    ],
}


#: The same tasks with thresholds no campaign reaches: every pair is evaluated, none acts.
NO_FIRE = RULE | {
    "name": "throughput, matching nothing",
    "tasks": [
        task
        | {
            "conditions": [
                {"metric": "spend", "period": "today", "operator": "<", "value": -1},
                *task["conditions"],
            ]
        }
        for task in RULE["tasks"]
    ],
}


async def stored(db: Database) -> tuple[int, int]:
    """Documents and bytes of data the database holds (``dbStats``)."""
    stats = await db.command({"dbStats": 1})
    return int(stats["objects"]), int(stats["dataSize"])


async def measured_job(
    settings: Settings, db: Database, rule: dict[str, Any], mongo_times: MongoTimes
) -> tuple[Any, dict[str, int]]:
    """Build ``rule``'s job, run it through arq; the result and what it added to MongoDB."""
    built = await build_job(settings, db, rule, ACCOUNT)
    docs, size = await stored(db)
    result = await run_through_arq(settings, built.job, mongo_times)
    docs_after, size_after = await stored(db)
    written = {"mongo_docs_written": docs_after - docs, "mongo_bytes_written": size_after - size}
    return (built, result), written


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
                (built, result), written = await measured_job(settings, db, RULE, mongo_times)
                job, inline = built.job, built.inline
                writes = [w for w in await sandbox.writes() if w["ok"]]
                records = await ExecutionStore(db).rows(job.batch_id)
                inline_bytes = await enqueued_bytes(settings, inline, "inline")
                quiet_times = MongoTimes()
                monitoring.register(quiet_times)  # the next job's worker client is new
                no_fire = await quiet_job(settings, db, quiet_times)
                adsets = await adset_payloads(settings, db, sandbox)
            finally:
                await client.close()
        batch, job_s, queue_s = result.batch, result.job_s, result.queue_s
        payload_bytes = result.payload_bytes
        evaluations = int(batch["evaluated_count"])
        say(
            f"DONE: {evaluations} evaluations, {batch['affected_count']} affected,"
            f" {batch['applied_count']} applied, {len(writes)} writes in {job_s:.2f}s"
            f" (enqueue → arq done) at {latency_ms:g} ms Graph latency"
        )
        say(f"time in MongoDB by collection: {mongo_times.by_collection()}")
        say(f"MongoDB commands (calls, seconds): {mongo_times.by_command()}")
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
                **written,
                **stages(records),
                "no_fire": no_fire,
            }
        )


async def quiet_job(settings: Settings, db: Database, times: MongoTimes) -> dict[str, Any]:
    """``NO_FIRE``'s job: every pair evaluated, nothing attempted."""
    (_built, result), written = await measured_job(settings, db, NO_FIRE, times)
    evaluations = int(result.batch["evaluated_count"])
    figures_of = {
        "evaluations": evaluations,
        "applied": result.batch["applied_count"],
        "job_s": round(result.job_s, 3),
        "evals_per_s": round(evaluations / result.job_s, 1),
        **written,
        "docs_per_evaluation": round(written["mongo_docs_written"] / max(1, evaluations), 4),
        "mongo_commands": sum(int(n) for n, _ in times.by_command().values()),
        "mongo_s": times.by_collection(),
        **{f"{stage}_s": round(s, 3) for stage, s in result.batch["trace"].items()},
    }
    say(f"no_fire: {figures_of}")
    say(f"no_fire MongoDB commands (calls, seconds): {times.by_command()}")
    return figures_of


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
    built = await build_job(settings, db, RULE | {"name": "adsets", "level": "adset"}, ACCOUNT)
    job, inline = built.job, built.inline
    sizes = {
        "adsets": job.entity_count,
        "inline_bytes": await enqueued_bytes(settings, inline, "inline"),
        "bytes": await enqueued_bytes(settings, job, "packed"),
    }
    say(f"an ad-set job on 5,000 ad sets: {sizes}")
    return sizes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=2000)
    parser.add_argument(
        "--latency-ms", type=float, default=150.0, help="Graph latency (0: the SPEC's scenario)"
    )
    options = parser.parse_args()
    asyncio.run(main(options.campaigns, options.latency_ms))
