"""A 2,000-campaign account's Insights three ways: synchronous, split after timeouts, async.

The rule of ``graph_cost.py`` (6 conditions over 2 periods) on one ad account of 2,000
campaigns. Prints, for each way, the HTTP requests, the calls Meta counts and the time:

* ``sync``  — account-level requests of 500 ids, in Batch API calls (no size limit);
* ``split`` — the sandbox times out requests over 1,000 ad-set-days, so each request is
  split by ids down to ``RULEENGINE_INSIGHTS_MIN_IDS_PER_REQUEST`` and the rest goes async;
* ``async`` — past ``RULEENGINE_INSIGHTS_ASYNC_THRESHOLD``: one report run per period,
  polled (the sandbox completes a run in 3 reads; polls 50 ms apart here), then paged.

Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _common import TOKEN, figures, say, stack
from graph_cost import RULE
from graph_sandbox.admin import SandboxAdmin
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.http import READ_WRITE, GraphSession
from ruleengine.meta.insights import LargeAccounts, fetch_insights
from ruleengine.meta.reader import GraphReader, RetryPolicy
from ruleengine.meta.reports import ReportRunner
from ruleengine.rules.fetch import fetch_groups
from ruleengine.rules.model import parse_rule
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


if __name__ == "__main__":
    asyncio.run(main())
