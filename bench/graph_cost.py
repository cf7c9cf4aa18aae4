"""Graph cost of fetching the metrics of 500 campaigns, both Insights strategies.

The SPEC §11 scenario: 500 campaigns, a rule of 6 conditions over 2 periods,
one of them metric-vs-metric. Prints the HTTP requests and the calls Meta
counts for each strategy, and the extra calls that comparator costs (0: its
period is already fetched, so it rides in that period's request).

A comparator on a period no other condition uses cannot ride anywhere: the
same rule with a 7th condition, ``cpc`` today below 0.8 × ``cpc`` over
``last_30d``, is measured too (``comparator_new_period``). It should cost one
more account-level request (a counted call, in the same Batch API HTTP call) per
chunk of ids (``IDS_PER_REQUEST``), whatever the number of campaigns: measured
with all 500 campaigns (1 chunk), with 50, and with the ids cut into chunks of
100 (5 chunks), against the seed design's per-campaign requests. Last line: one
JSON object.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from _common import TOKEN, figures, say, stack
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.http import READ_WRITE, GraphSession
from ruleengine.meta.insights import IDS_PER_REQUEST, fetch_insights
from ruleengine.meta.reader import GraphReader, RetryPolicy
from ruleengine.rules.fetch import fetch_groups
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings

CAMPAIGNS = 500
RULE = {
    "name": "bench",
    "format": 2,
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

#: A comparator on a period (``last_30d``) that no condition of RULE uses.
NEW_PERIOD_COMPARATOR = {
    "metric": "cpc",
    "period": "today",
    "operator": "<",
    "compare_to": {"metric": "cpc", "period": "last_30d", "multiplier": 0.8},
}


def with_conditions(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """RULE with its task's conditions replaced."""
    return {**RULE, "tasks": [{**RULE["tasks"][0], "conditions": conditions}]}


async def measure(
    settings: Settings,
    strategy: str,
    groups: dict[str, list[str]],
    ids: list[str],
    *,
    ids_per_request: int = IDS_PER_REQUEST,
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
            ids_per_request=ids_per_request,
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
        conditions = RULE["tasks"][0]["conditions"]
        without = parse_rule(with_conditions(conditions[:3] + conditions[4:]))
        base = await measure(settings, "account_level", fetch_groups(without), ids)
        extra = acc["calls"] - base["calls"]
        say(f"extra counted calls for the metric-vs-metric condition: {extra}")
        new_period = await comparator_new_period(settings, groups, ids, per=per, acc=acc)
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
                "comparator_new_period": new_period,
            }
        )


async def extra_calls(
    settings: Settings,
    groups: dict[str, list[str]],
    more: dict[str, list[str]],
    ids: list[str],
    *,
    ids_per_request: int = IDS_PER_REQUEST,
) -> float:
    """Counted calls of fetching ``more`` minus those of ``groups``, at account level."""
    with_more = await measure(settings, "account_level", more, ids, ids_per_request=ids_per_request)
    without = await measure(settings, "account_level", groups, ids, ids_per_request=ids_per_request)
    return with_more["calls"] - without["calls"]


async def comparator_new_period(
    settings: Settings,
    groups: dict[str, list[str]],
    ids: list[str],
    *,
    per: dict[str, float],
    acc: dict[str, float],
) -> dict[str, Any]:
    """What NEW_PERIOD_COMPARATOR adds to RULE: at account level with every campaign (the
    keys others read), with 50 campaigns, with chunks of 100 ids, and per campaign."""
    conditions = RULE["tasks"][0]["conditions"]
    more = fetch_groups(parse_rule(with_conditions([*conditions, NEW_PERIOD_COMPARATOR])))
    period = NEW_PERIOD_COMPARATOR["compare_to"]["period"]
    assert period in more and period not in groups, (groups, more)
    new = await measure(settings, "account_level", more, ids)
    chunks = math.ceil(len(ids) / IDS_PER_REQUEST)
    say(
        f"with a comparator on {period} (a 3rd period): account_level {new['http']} HTTP"
        f" requests, {new['calls']} counted calls: +{new['calls'] - acc['calls']}"
        f" for {len(ids)} campaigns in {chunks} chunk(s) of ≤ {IDS_PER_REQUEST} ids"
    )
    few = ids[:50]
    few_extra = await extra_calls(settings, groups, more, few)
    say(f"  the same for {len(few)} campaigns: +{few_extra}")
    chunked_extra = await extra_calls(settings, groups, more, ids, ids_per_request=100)
    say(
        f"  {len(ids)} campaigns in {math.ceil(len(ids) / 100)} chunks of 100 ids: +{chunked_extra}"
    )
    per_new = await measure(settings, "per_campaign", more, ids)
    say(f"  per_campaign (seed design): +{per_new['calls'] - per['calls']}")
    return {
        "period": period,
        "periods": len(more),
        "http_requests": new["http"],
        "counted_calls": new["calls"],
        "extra_http_requests": new["http"] - acc["http"],
        "extra_counted_calls": new["calls"] - acc["calls"],
        "chunks": chunks,
        "extra_counted_calls_50_campaigns": few_extra,
        "extra_counted_calls_chunks_of_100": chunked_extra,
        "per_campaign_extra_counted_calls": per_new["calls"] - per["calls"],
    }


if __name__ == "__main__":
    asyncio.run(main())
