"""Graph cost of fetching the metrics of 500 campaigns, both Insights strategies.

The SPEC §11 scenario: 500 campaigns, a rule of 6 conditions over 2 periods,
one of them metric-vs-metric. Prints the HTTP requests and the calls Meta
counts for each strategy, and the extra calls the comparator costs (0: it rides
in the same period groups). Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import time

from _common import TOKEN, figures, say, stack
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.http import READ_WRITE, GraphSession
from ruleengine.meta.insights import fetch_insights
from ruleengine.meta.reader import GraphReader, RetryPolicy
from ruleengine.rules.fetch import fetch_groups
from ruleengine.rules.model import parse_rule
from ruleengine.settings import Settings

CAMPAIGNS = 500
RULE = {
    "name": "bench",
    "level": "campaign",
    "ad_accounts": ["act_2001"],
    "schedule": {"mode": "interval", "every_minutes": 15},
    "tasks": [
        {
            "id": "scale",
            "conditions": [
                {
                    "metric": "purchase_roas.omni_purchase",
                    "period": "last_7d",
                    "operator": ">",
                    "value": 3,
                },
                {"metric": "spend", "period": "last_7d", "operator": ">", "value": 100},
                {"metric": "ctr", "period": "last_7d", "operator": ">", "value": 0.8},
                {
                    "metric": "spend",
                    "period": "today",
                    "operator": ">",
                    "compare_to": {"metric": "cpc", "period": "today", "multiplier": 20},
                },
                {
                    "metric": "cost_per_action_type.omni_purchase",
                    "period": "last_7d",
                    "operator": "<",
                    "value": 40,
                },
                {"metric": "impressions", "period": "today", "operator": ">", "value": 1000},
            ],
            "action": {"type": "increase_budget", "percent": 20},
        }
    ],
}


async def measure(
    settings: Settings, strategy: str, groups: dict[str, list[str]], ids: list[str]
) -> dict[str, float]:
    graph = GraphSession(settings, methods=READ_WRITE)
    try:
        batch = BatchReader(graph, policy=RetryPolicy((0.5,), rate_limit_cap_s=5), concurrency=8)
        started = time.perf_counter()
        result = await fetch_insights(
            batch,
            strategy=strategy,
            account_id="act_2001",
            level="campaign",  # type: ignore[arg-type]
            entity_ids=ids,
            groups=groups,
            token=TOKEN,
        )
        seconds = time.perf_counter() - started
        assert not result.errors, result.errors
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
        rule = parse_rule(RULE)
        groups = fetch_groups(rule)
        say(
            f"rule: {sum(len(t.conditions) for t in rule.tasks)} conditions"
            f" over {len(groups)} periods: {groups}"
        )
        graph = GraphSession(settings)
        reader = GraphReader.from_settings(graph)
        ids = [
            e["id"]
            for e in await reader.list_entities("act_2001", "campaign", token=TOKEN, fields=["id"])
        ]
        await graph.close()
        say(f"{len(ids)} campaigns listed")
        per = await measure(settings, "per_campaign", groups, ids)
        say(
            f"per_campaign:  {per['http']} HTTP requests, {per['calls']} counted calls, {per['s']}s"
        )
        acc = await measure(settings, "account_level", groups, ids)
        say(
            f"account_level: {acc['http']} HTTP requests, {acc['calls']} counted calls, {acc['s']}s"
        )
        without = parse_rule(
            {
                **RULE,
                "tasks": [
                    {
                        **RULE["tasks"][0],
                        "conditions": RULE["tasks"][0]["conditions"][:3]
                        + RULE["tasks"][0]["conditions"][4:],
                    }
                ],
            }
        )
        base = await measure(settings, "account_level", fetch_groups(without), ids)
        extra = acc["calls"] - base["calls"]
        say(f"extra counted calls for the metric-vs-metric condition: {extra}")
        figures(
            {
                "campaigns": len(ids),
                "periods": len(groups),
                "per_campaign_http_requests": per["http"],
                "per_campaign_counted_calls": per["calls"],
                "per_campaign_s": per["s"],
                "account_level_http_requests": acc["http"],
                "account_level_counted_calls": acc["calls"],
                "account_level_s": acc["s"],
                "compare_to_extra_calls": extra,
            }
        )


if __name__ == "__main__":
    asyncio.run(main())
