"""Backtest speed: a 3-task rule at 15-minute cadence over 500 campaigns, 30 days.

One bench account (America/New_York) with ``--campaigns`` campaigns, 150 ms Graph
latency, sandbox clock frozen, embedded MongoDB-compatible server. The rule: pause when
ROAS 7d < 1.2 and spend today > 50; budget +20 % (at most 500, cooldown 6 h) when ROAS
3d > 3; notify when CPC today > 2 (cooldown 24 h). Cold: an empty history cache; warm:
the same backtest again a minute later (a threshold moved: the numbers asked for are the
same). Prints seconds, Graph calls, cache hits, runs and fires, and where the warm
time goes (history read, replay); last line one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import figures, open_database, register_accounts, say, stack, stack_settings
from graph_sandbox.admin import SandboxAdmin
from ruleengine.backtest.result import BacktestRequest
from ruleengine.backtest.service import BacktestDeps, run_backtest
from ruleengine.rules.language.model import parse_rule

ACCOUNT = "act_2001"  # America/New_York
FROZEN_AT = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)  # 13:00 in New York


def rule(roas_floor: float) -> dict[str, Any]:
    """The benched rule; ``roas_floor`` is the threshold a person tweaks between runs."""
    return {
        "name": "Bench backtest",
        "format": 2,
        "level": "campaign",
        "ad_accounts": [ACCOUNT],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "filters": [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}],
        "tasks": [
            {
                "id": "stop-losers",
                "conditions": [
                    {
                        "metric": "purchase_roas.omni_purchase",
                        "period": "last_7d",
                        "operator": "<",
                        "value": roas_floor,
                    },
                    {"metric": "spend", "period": "today", "operator": ">", "value": 50},
                ],
                "action": {"type": "pause"},
            },
            {
                "id": "scale-winners",
                "conditions": [
                    {
                        "metric": "purchase_roas.omni_purchase",
                        "period": "last_3d",
                        "operator": ">",
                        "value": 3,
                    },
                ],
                "action": {"type": "increase_budget", "percent": 20, "max_budget": 500},
                "cooldown_minutes": 360,
            },
            {
                "id": "watch-cpc",
                "conditions": [{"metric": "cpc", "period": "today", "operator": ">", "value": 2}],
                "action": {"type": "rename", "template": "{name} [high CPC]"},
                "cooldown_minutes": 1440,
            },
        ],
    }


async def one(deps: BacktestDeps, data: dict[str, Any], days: int, now: datetime) -> dict[str, Any]:
    started = time.perf_counter()
    result = await run_backtest(deps, BacktestRequest(parse_rule(data), days=days), now=now)
    return {
        "s": round(time.perf_counter() - started, 2),
        "graph_calls": result["graph_calls"],
        "cache_hits": result["cache_hits"],
        "runs": result["runs"],
        "fires": len(result["fires"]),
        "seconds": result["seconds"],
    }


async def main(campaign_count: int, days: int, latency_ms: float, profile: bool) -> None:
    args = ("--scenario", "bench", "--accounts", "1", "--campaigns", str(campaign_count))
    with stack(databases=True, sandbox_args=args) as servers:
        settings = stack_settings(servers, mongodb_database="bench_backtest")
        client, db = await open_database(settings)
        try:
            await register_accounts(settings, db, [ACCOUNT], now=FROZEN_AT)
            async with (
                SandboxAdmin(servers.sandbox_url) as sandbox,
                BacktestDeps.open(settings, db) as deps,
            ):
                await sandbox.set_clock(FROZEN_AT)
                await sandbox.set_faults(latency_ms=latency_ms)
                say(
                    f"{campaign_count} campaigns × {days} days, 3 tasks every 15 min,"
                    f" {latency_ms} ms latency"
                )
                cold = await one(deps, rule(1.2), days, FROZEN_AT)
                say(f"cold: {cold}")
                later = FROZEN_AT + timedelta(minutes=1)
                profiler = cProfile.Profile() if profile else None
                if profiler:
                    profiler.enable()
                warm = await one(deps, rule(1.0), days, later)
                if profiler:
                    profiler.disable()
                    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
                say(f"warm: {warm}")
        finally:
            await client.drop_database(settings.mongodb_database)
            await client.close()
    figures(
        {
            "campaigns": campaign_count,
            "days": days,
            "latency_ms": latency_ms,
            "cold_s": cold["s"],
            "cold_graph_calls": cold["graph_calls"],
            "warm_s": warm["s"],
            "warm_graph_calls": warm["graph_calls"],
            "warm_cache_hits": warm["cache_hits"],
            "runs": warm["runs"],
            "fires_cold": cold["fires"],
            "fires_warm": warm["fires"],
        }
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=500)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--latency-ms", type=float, default=150.0, help="Graph latency")
    parser.add_argument("--profile", action="store_true", help="cProfile the warm run")
    options = parser.parse_args()
    asyncio.run(main(options.campaigns, options.days, options.latency_ms, options.profile))
