"""A 2,000-campaign account's Insights three ways: synchronous, split after timeouts, async.

The rule of ``graph_cost.py`` (6 conditions over 2 periods) on one ad account of 2,000
campaigns. Prints, for each way, the HTTP requests, the calls Meta counts and the time:

* ``sync``  — account-level requests of 500 ids, in Batch API calls (no size limit);
* ``split`` — the sandbox times out requests over 1,000 ad-set-days, so each request is
  split by ids down to ``RULEENGINE_INSIGHTS_MIN_IDS_PER_REQUEST`` and the rest goes async;
* ``async`` — past ``RULEENGINE_INSIGHTS_ASYNC_THRESHOLD``: one report run per period,
  polled (the sandbox completes a run in 3 reads; polls 50 ms apart here), then paged.

``--ads``: the ad-level scenario instead — one ad account of about 5,000 ads (1,390 campaigns
× 2 ad sets, 1–3 ads each) and a 2-task rule at ``"level": "ad"``: pause the ads whose
results cost too much, and mark in their names the ads Meta ranks lowest for quality.
The job is built as the dispatcher builds it and run through arq (``_through_arq``); prints
the Graph HTTP requests and counted calls of the job, its seconds (enqueue → arq done),
the pauses and renames Meta received, and the MongoDB documents it wrote (``dbStats``).

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from _common import TOKEN, figures, open_database, say, stack, stack_settings
from _through_arq import MongoTimes, build_job, run_through_arq
from graph_cost import RULE
from graph_sandbox.admin import SandboxAdmin
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.http import READ_WRITE, GraphSession
from ruleengine.meta.insights import LargeAccounts, fetch_insights
from ruleengine.meta.reader import GraphReader, RetryPolicy
from ruleengine.meta.reports import ReportRunner
from ruleengine.rules.fetch import fetch_groups
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings

CAMPAIGNS = 2000
ACCOUNT = "act_2001"


async def measure(
    settings: Settings, groups: dict[str, list[str]], ids: list[str], *, threshold: int | None
) -> dict[str, Any]:
    graph = GraphSession(settings, methods=READ_WRITE)
    try:
        policy = RetryPolicy((0.5,), rate_limit_cap_s=5)
        batch = BatchReader(graph, policy=policy, concurrency=8)
        reports = ReportRunner(graph, policy=policy, poll_first_s=0.05, max_wait_s=60)
        started = time.perf_counter()
        result = await fetch_insights(
            batch,
            strategy="account_level",
            account_id=ACCOUNT,
            level="campaign",
            entity_ids=ids,
            groups=groups,
            token=TOKEN,
            large=LargeAccounts(reports=reports, async_threshold=threshold, min_ids=250),
        )
        seconds = time.perf_counter() - started
        assert not result.errors, next(iter(result.errors.values()))
        return {
            "http": graph.cost.http_requests,
            "calls": graph.cost.counted_calls,
            "s": round(seconds, 3),
            "rows": sum(len(r) for r in result.rows.values()),
        }
    finally:
        await graph.close()


async def main() -> None:
    args = ("--scenario", "bench", "--accounts", "1", "--campaigns", str(CAMPAIGNS))
    with stack(databases=False, sandbox_args=args) as servers:
        settings = Settings(graph_url=servers.sandbox_url)
        groups = fetch_groups(parse_rule(RULE))
        graph = GraphSession(settings)
        reader = GraphReader.from_settings(graph)
        ids = [
            e["id"]
            for e in await reader.list_entities(ACCOUNT, "campaign", token=TOKEN, fields=["id"])
        ]
        await graph.close()
        say(f"{len(ids)} campaigns listed; {len(groups)} periods: {groups}")
        async with SandboxAdmin(servers.sandbox_url) as admin:
            ways: dict[str, dict[str, Any]] = {}
            ways["sync"] = await measure(settings, groups, ids, threshold=None)
            await admin.set_insights(sync_max_cells=1000)
            ways["split"] = await measure(settings, groups, ids, threshold=None)
            stats = await admin.stats()
            await admin.set_insights(sync_max_cells=100_000_000)
            ways["async"] = await measure(settings, groups, ids, threshold=CAMPAIGNS)
            runs = (await admin.insights())["report_runs"]
        for name, way in ways.items():
            say(f"{name:>5}: {way['http']} HTTP requests, {way['calls']} calls, {way['s']}s")
        say(f"report runs started: {runs} (split: {stats['calls_by_kind'].get('report', 0)})")
        assert ways["sync"]["rows"] == ways["split"]["rows"] == ways["async"]["rows"]
        figures(
            {"campaigns": len(ids), "periods": len(groups), "report_runs": runs}
            | {f"{name}_{k}": v for name, way in ways.items() for k, v in way.items()}
        )


#: About 5,000 ads (1 or 2 in each ad set, 3 in the no-purchase ones).
AD_CAMPAIGNS = 1390
#: The sandbox's frozen clock: noon in New York on a Tuesday, a day of full delivery.
FROZEN_AT = datetime(2026, 11, 24, 17, 0, tzinfo=UTC)
AD_RULE = {
    "name": "ads at scale",
    "format": 2,
    "level": "ad",
    "ad_accounts": [ACCOUNT],
    "filters": [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}],
    "schedule": {"mode": "interval", "every_minutes": 15},
    "timezone": "UTC",
    "tasks": [
        {
            "id": "dear-results",
            "conditions": [
                {"metric": "results", "period": "last_7d", "operator": ">=", "value": 1},
                {"metric": "cost_per_result", "period": "last_7d", "operator": ">", "value": 60},
            ],
            "action": {"type": "pause"},
        },
        {
            "id": "weak-creative",
            "conditions": [
                {
                    "metric": "quality_ranking",
                    "period": "last_7d",
                    "operator": "<=",
                    "value": "BELOW_AVERAGE_20",
                },
                {"metric": "spend", "period": "today", "operator": ">", "value": 1},
            ],
            "action": {"type": "prepend_to_name", "text": "[weak] "},
        },
    ],
}


async def stored(db: Any) -> int:
    """Documents the database holds (``dbStats``)."""
    return int((await db.command({"dbStats": 1}))["objects"])


async def ads() -> None:
    args = ("--scenario", "bench", "--accounts", "1", "--campaigns", str(AD_CAMPAIGNS))
    with stack(databases=True, sandbox_args=(*args, "--adsets", "2")) as servers:
        settings = stack_settings(servers)
        async with SandboxAdmin(servers.sandbox_url) as sandbox:
            await sandbox.set_clock(FROZEN_AT)
            client, db = await open_database(settings)
            try:
                built = await build_job(settings, db, AD_RULE, ACCOUNT)
                docs = await stored(db)
                result = await run_through_arq(settings, built.job, MongoTimes())
                written = await stored(db) - docs
                writes = [w for w in await sandbox.writes() if w["ok"]]
            finally:
                await client.close()
        batch = result.batch
        kinds = {"status": 0, "name": 0}
        for write in writes:
            for field in kinds:
                kinds[field] += field in write["params"]
        say(
            f"{built.job.entity_count} ads × {len(AD_RULE['tasks'])} tasks:"
            f" {batch['graph']['http_requests']} HTTP requests,"
            f" {batch['graph']['counted_calls']} calls, {result.job_s:.2f}s,"
            f" {kinds['status']} paused, {kinds['name']} renamed, {written} MongoDB documents"
        )
        figures(
            {
                "ads": built.job.entity_count,
                "tasks": len(AD_RULE["tasks"]),
                "evaluations": batch["evaluated_count"],
                "applied": batch["applied_count"],
                "paused": kinds["status"],
                "renamed": kinds["name"],
                "graph_http_requests": batch["graph"]["http_requests"],
                "graph_calls": batch["graph"]["counted_calls"],
                "job_s": round(result.job_s, 3),
                "mongo_docs_written": written,
            }
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ads", action="store_true", help="the ad-level scenario")
    asyncio.run(ads() if parser.parse_args().ads else main())
