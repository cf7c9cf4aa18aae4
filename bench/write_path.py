"""Write path: one job that changes 800 campaigns of one ad account at once, through arq.

The embedded stack (MongoDB-compatible server, Redis, Graph sandbox) with two bench ad
accounts of ``--campaigns`` campaigns each, the sandbox answering every request after
``--latency-ms`` (default 150, a realistic Graph round trip) with its clock frozen. One
rule, two tasks that split the campaigns by daily budget: below $175 pause, from $175
raise the budget 10 % — so every campaign gets exactly one write, a pause or a budget
change, and the conditions need no Insights call: every Graph request of the job is
the act stage's (the ad account's minimum daily budget, the live re-reads, the writes).

The job is built as the dispatcher builds it and run by a real arq worker with the
production settings (``bench/_through_arq.py``), writes batched as in production
(``RULEENGINE_WRITE_BATCH_SIZE=50``). For the figure before batching, the same rule runs
on the second account with ``RULEENGINE_WRITE_BATCH_SIZE=1`` — each write alone, after
its own live read — over a sample of ``--sample`` campaigns only (at 150 ms, 800 writes
one at a time take over four minutes); its act time is scaled to the batched run's
number of writes (``sequential_act_s``, measured on ``sequential_sample`` writes).

Prints the act stage's time, Graph HTTP requests and writes per second, both ways.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

from pymongo import monitoring

from _common import figures, open_database, say, stack, stack_settings
from _through_arq import Finished, MongoTimes, build_job, run_through_arq
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database

BATCHED_ACCOUNT = "act_2001"
SEQUENTIAL_ACCOUNT = "act_2002"
#: The sandbox's frozen clock (as bench/worker_throughput.py): the figures do not depend on
#: when the benchmark runs.
FROZEN_AT = datetime(2026, 11, 24, 17, 0, tzinfo=UTC)
SPLIT = 175  # dollars: the bench world's budgets are $50–$300


def rule(account: str) -> dict[str, Any]:
    """Pause the smaller budgets, raise the larger ones: one write per campaign."""
    budget = {"metric": "daily_budget"}
    return {
        "name": f"write path {account}",
        "level": "campaign",
        "ad_accounts": [account],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "UTC",
        "tasks": [
            {
                "id": "pause-small",
                "conditions": [budget | {"operator": "<", "value": SPLIT}],
                "action": {"type": "pause"},
            },
            {
                "id": "scale-large",
                "conditions": [budget | {"operator": ">=", "value": SPLIT}],
                "action": {"type": "increase_budget", "percent": 10},
            },
        ],
    }


async def run_one(
    settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
    account: str,
    *,
    limit: int | None = None,
    mongo_times: MongoTimes | None = None,
) -> tuple[Finished, int, dict[str, Any]]:
    """Run the rule's job on ``account``; what arq finished, the writes Meta received, and the
    sandbox's counters for the job."""
    built = await build_job(settings, db, rule(account), account, limit=limit)
    job, ids = built.job, {entity.id for entity in built.entities}
    before = await sandbox.stats()
    finished = await run_through_arq(settings, job, mongo_times)
    after = await sandbox.stats()
    writes = [w for w in await sandbox.writes() if w["ok"] and w["id"] in ids]
    counters = {
        "http_requests": after["http_requests"] - before["http_requests"],
        "insights_calls": after["calls_by_kind"]["insights"] - before["calls_by_kind"]["insights"],
    }
    return finished, len(writes), counters


async def main(campaigns: int, sample: int, latency_ms: float) -> None:
    mongo_times = MongoTimes()
    monitoring.register(mongo_times)
    args = ("--scenario", "bench", "--accounts", "2", "--campaigns", str(campaigns))
    with stack(databases=True, sandbox_args=args) as servers:
        async with SandboxAdmin(servers.sandbox_url) as sandbox:
            await sandbox.set_clock(FROZEN_AT)
            await sandbox.set_faults(latency_ms=latency_ms)
            batched_settings = stack_settings(servers, write_batch_size=50)
            client, db = await open_database(batched_settings)
            try:
                batched, writes, counters = await run_one(
                    batched_settings, db, sandbox, BATCHED_ACCOUNT, mongo_times=mongo_times
                )
                act_s = float(batched.batch["trace"]["act"])
                say(
                    f"batched: {writes} writes, act stage {act_s:.2f}s,"
                    f" {batched.batch['graph']['http_requests']} Graph HTTP requests"
                )
                sequential_settings = batched_settings.model_copy(update={"write_batch_size": 1})
                one_by_one, sample_writes, _ = await run_one(
                    sequential_settings, db, sandbox, SEQUENTIAL_ACCOUNT, limit=sample
                )
            finally:
                await client.close()
    if counters["insights_calls"]:
        raise SystemExit("the job fetched Insights: its Graph requests are not the act stage's")
    sample_act_s = float(one_by_one.batch["trace"]["act"])
    sequential_act_s = sample_act_s * writes / sample_writes
    say(
        f"one write per call: {sample_writes} writes, act stage {sample_act_s:.2f}s"
        f" → {sequential_act_s:.1f}s for {writes} writes"
    )
    graph = batched.batch["graph"]
    figures(
        {
            "campaigns": campaigns,
            "latency_ms": latency_ms,
            "sandbox_clock": FROZEN_AT.isoformat(),
            "write_batch_size": 50,
            "writes": writes,
            "applied": batched.batch["applied_count"],
            "act_s": round(act_s, 3),
            "job_s": round(batched.job_s, 3),
            "graph_http_requests": graph["http_requests"],
            "graph_calls": graph["counted_calls"],
            "writes_per_s": round(writes / act_s, 1),
            "sequential_act_s": round(sequential_act_s, 1),
            "sequential_sample": sample_writes,
            "sequential_scaled_from_sample": True,
            "sequential_sample_act_s": round(sample_act_s, 3),
            "sequential_sample_graph_http_requests": one_by_one.batch["graph"]["http_requests"],
            "speedup": round(sequential_act_s / act_s, 1),
            "mongo_s": mongo_times.by_collection(),
        }
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=800, help="campaigns per account")
    parser.add_argument(
        "--sample", type=int, default=50, help="campaigns written one at a time, then scaled"
    )
    parser.add_argument("--latency-ms", type=float, default=150.0, help="Graph latency")
    options = parser.parse_args()
    asyncio.run(main(options.campaigns, options.sample, options.latency_ms))
