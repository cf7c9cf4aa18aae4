"""Insights history for a backtest: cold cache vs warm cache.

500 campaigns × 30 days of daily ``spend``, ``impressions``, ``actions``,
``action_values`` (and, with ``--hourly``, ``spend`` and ``impressions`` by hour of
each day too, as ``today``-style conditions need) on one bench account, 150 ms Graph
latency, sandbox clock frozen, embedded MongoDB-compatible server. Cold: an empty
``insights_history``; warm: the same request again a minute later (nothing stale).
Prints seconds, Graph HTTP requests and counted calls, cache hits and documents; last
line one JSON object.

Measured on the shared 2-core machine, the same script on the commit before month
buckets and after, run in turn (load 3.3–4.9, then 2 for the last line):

=====================================  ===========  ==========  =============  =============
cache layout                           cold         warm        cold, hourly   warm, hourly
=====================================  ===========  ==========  =============  =============
one document per entity and day        11.7–14.7 s  3.7–4.6 s   38.3–39.0 s    7.8–9.5 s
one bucket per entity and month        7.3–8.5 s    1.1–1.2 s   15.0–16.0 s    1.7–3.2 s
the same, load 2                       4.7–5.1 s    0.8 s       13.3–14.2 s    1.6 s
=====================================  ===========  ==========  =============  =============

1,000 buckets (2,000 with hours) instead of 15,000 (30,000) documents. Where the warm
second goes (cProfile and timers, load 2, with hours): the embedded server's find and
PyMongo's decoding 0.3 s per granularity, ``orjson.loads`` of the action lists and hour
objects 0.1–0.15 s, the rest of the store's loop 0.1–0.25 s, freshness and ordering in
``history.py`` 0.3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

from _common import TOKEN, figures, open_database, say, stack, stack_settings
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.backtest.history import HistoryRequest, InsightsHistory
from ruleengine.meta.http import READ_AND_BATCH, GraphSession
from ruleengine.rules.replay.history import DayRange
from ruleengine.store.insights_history import InsightsHistoryStore

ACCOUNT = "act_2001"  # America/New_York
TIMEZONE = "America/New_York"
FROZEN_AT = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)  # 13:00 in New York
TODAY = date(2026, 12, 1)
FIELDS = ("spend", "impressions", "actions", "action_values")


async def campaigns(graph: GraphSession) -> tuple[str, ...]:
    body = await graph.request(
        "GET", f"{ACCOUNT}/campaigns", token=TOKEN, params={"fields": "id", "limit": 5000}
    )
    return tuple(row["id"] for row in body["data"])


async def run(history: InsightsHistory, request: HistoryRequest, now: datetime) -> dict[str, Any]:
    started = time.perf_counter()
    result = await history.get(request, token=TOKEN, timezone=TIMEZONE, now=now)
    seconds = time.perf_counter() - started
    assert not result.errors, result.errors
    return {
        "s": round(seconds, 2),
        "http_requests": result.http_requests,
        "graph_calls": result.graph_calls,
        "cache_hits": result.cache_hits,
        "cells_fetched": result.cells_fetched,
    }


async def main(campaign_count: int, days: int, hourly: bool, latency_ms: float) -> None:
    args = ("--scenario", "bench", "--accounts", "1", "--campaigns", str(campaign_count))
    with stack(databases=True, sandbox_args=args) as servers:
        settings = stack_settings(servers, mongodb_database="bench_history")
        client, db = await open_database(settings)
        graph = GraphSession(settings, methods=READ_AND_BATCH)
        try:
            async with SandboxAdmin(servers.sandbox_url) as sandbox:
                await sandbox.set_clock(FROZEN_AT)
                ids = await campaigns(graph)
                await sandbox.set_faults(latency_ms=latency_ms)
                span = DayRange.last(days, TODAY)
                by_hour = ("spend", "impressions") if hourly else ()
                request = HistoryRequest(ACCOUNT, "campaign", ids, FIELDS, span, by_hour)
                history = InsightsHistory(InsightsHistoryStore(db), graph)
                say(f"{len(ids)} campaigns × {len(span)} days ({span}), {latency_ms} ms latency")
                cold = await run(history, request, FROZEN_AT)
                say(f"cold: {cold}")
                warm = await run(history, request, FROZEN_AT + timedelta(minutes=1))
                say(f"warm: {warm}")
                documents = await db[c.INSIGHTS_HISTORY].count_documents({})
        finally:
            await graph.close()
            await client.drop_database(settings.mongodb_database)
            await client.close()
    figures(
        {
            "campaigns": len(ids),
            "days": len(span),
            "hourly": hourly,
            "latency_ms": latency_ms,
            "cold_s": cold["s"],
            "cold_http_requests": cold["http_requests"],
            "cold_graph_calls": cold["graph_calls"],
            "warm_s": warm["s"],
            "warm_http_requests": warm["http_requests"],
            "warm_graph_calls": warm["graph_calls"],
            "warm_cache_hits": warm["cache_hits"],
            "documents": documents,
        }
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=500)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--hourly", action="store_true", help="hours of each day too")
    parser.add_argument("--latency-ms", type=float, default=150.0, help="Graph latency")
    options = parser.parse_args()
    asyncio.run(main(options.campaigns, options.days, options.hourly, options.latency_ms))
