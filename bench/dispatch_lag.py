"""Dispatch of 1,000 due rules × 3 ad accounts with 150 ms of Graph latency.

Two scenarios on the same servers, one after the other:

- the main one: 1,000 ACTIVE rules with 25 different filter sets (the way real rule sets
  repeat filters);
- ``distinct_filters``: 1,000 rules, each with a filter set of its own (a tag to look
  for and a rule number to leave out), so no two rules could share a filtered listing.

Each makes all its rules due at the same instant, sets the sandbox's latency to 150 ms
(its clock frozen) and runs two dispatcher sweeps (the second finds nothing due).
Dispatch lag = when a job was enqueued − when its rule was scheduled. ``listings`` is
the sweep's listings (one per ad account and level), ``listing_calls`` the Graph list
requests they took (pages). ``--rules N`` runs a smaller version. Last line: one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

from _common import (
    figures,
    open_database,
    percentile,
    register_accounts,
    say,
    stack,
    stack_settings,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import deserialize
from ruleengine.dispatching.sweep import Dispatcher
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

RULES = 1000
TAGS = ["[AUTO]", "Prospecting", "Retargeting", "Lead", "Broad"]
ACCOUNTS = ["act_1001", "act_1002", "act_1003"]
LATENCY_MS = 150


def rule(index: int) -> dict[str, object]:
    variant = index % 25
    filters: list[dict[str, object]] = [
        {
            "field": "name",
            "operator": "CONTAIN",
            "value": TAGS[variant % 5],
        }
    ]
    if variant >= 5:
        filters.append(
            {
                "field": "effective_status",
                "operator": "IN",
                "value": [["ACTIVE"], ["ACTIVE", "PAUSED"], ["PAUSED"], ["ACTIVE", "WITH_ISSUES"]][
                    variant // 5 - 1
                ],
            }
        )
    return rule_with(index, filters)


def distinct_rule(index: int) -> dict[str, object]:
    """A rule whose filters no other rule has: a tag to look for, its own number left out."""
    filters: list[dict[str, object]] = [
        {"field": "name", "operator": "CONTAIN", "value": TAGS[index % 5]},
        {"field": "name", "operator": "NOT_CONTAIN", "value": f"#{index:04d}"},
    ]
    return rule_with(index, filters)


def rule_with(index: int, filters: list[dict[str, object]]) -> dict[str, object]:
    return {
        "name": f"bench rule {index:04d}",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ACCOUNTS,
        "filters": filters,
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": "t",
                "conditions": [
                    {"metric": "spend", "period": "today", "operator": ">", "value": 50}
                ],
                "action": {"type": "pause"},
            }
        ],
    }


async def lags(queue: object, redis_keys: list[bytes]) -> list[float]:
    values: list[float] = []
    for key in redis_keys:
        raw = await queue.get(b"arq:job:" + key)  # type: ignore[attr-defined]
        job = deserialize(raw)
        scheduled = datetime.fromisoformat(job["a"][0]["scheduled_at"])
        values.append(job["et"] / 1000 - scheduled.timestamp())
    return values


async def sweep(
    settings: Settings,
    db: Database,
    admin: SandboxAdmin,
    make_rule: Callable[[int], dict[str, object]],
    *,
    rules: int,
    label: str,
) -> dict[str, object]:
    """Save ``rules`` rules, make them all due at once and sweep twice; the figures."""
    now = datetime.now(UTC)
    await db[c.RULES].delete_many({})  # the previous scenario's rules
    store = RuleStore(db)
    started = time.perf_counter()
    for index in range(rules):
        await store.save(parse_rule(make_rule(index)), now=now, author="bench", source="bench")
    say(f"{label}: {rules} rules saved in {time.perf_counter() - started:.1f}s")
    await admin.set_faults(latency_ms=LATENCY_MS)
    await admin.clear_stats()
    queue = connect_queue(settings)
    session = GraphSession(settings)
    dispatcher = Dispatcher(settings, db=db, queue=queue, reader=GraphReader.from_settings(session))
    before = set(await queue.zrange(c.QUEUE_NAME, 0, -1))
    due_at = datetime.now(UTC)
    await db[c.RULES].update_many({}, {"$set": {"next_execute_at": due_at}})
    say(f"{label}: all {rules} rules due at {due_at:%H:%M:%S}; latency {LATENCY_MS} ms; sweeping")
    report = await dispatcher.tick()
    assert report is not None
    say(f"{label}: sweep 1: {report.as_dict()}")
    idle = await dispatcher.tick()
    assert idle is not None
    say(f"{label}: sweep 2 (nothing due): {idle.as_dict()}")
    stats = await admin.stats()
    values = await lags(
        queue, [k for k in await queue.zrange(c.QUEUE_NAME, 0, -1) if k not in before]
    )
    await admin.set_faults(latency_ms=0)
    await dispatcher.lease.release()  # the next scenario's dispatcher takes it
    await session.close()
    await queue.aclose()
    return {
        "rules": rules,
        "sweep_s": round(report.duration_s, 3),
        "idle_sweep_s": round(idle.duration_s, 3),
        "lag_p50_s": round(percentile(values, 50), 3),
        "lag_p99_s": round(percentile(values, 99), 3),
        "jobs": report.jobs,
        "listings": report.listings,
        "listing_calls": stats["calls_by_kind"]["list"],
        "graph_calls": stats["counted_calls"],
        "graph_http_requests": stats["http_requests"],
    }


async def main(rules: int) -> None:
    with stack(databases=True) as servers:
        settings = stack_settings(servers)
        client, db = await open_database(settings)
        await register_accounts(settings, db, list(ACCOUNTS), now=datetime.now(UTC))
        admin = SandboxAdmin(servers.sandbox_url)
        await admin.set_clock(datetime.now(UTC).replace(microsecond=0))
        shared = await sweep(settings, db, admin, rule, rules=rules, label="shared filters")
        distinct = await sweep(
            settings, db, admin, distinct_rule, rules=rules, label="distinct filters"
        )
        shared.pop("rules")
        figures(
            {
                "rules": rules,
                "accounts_per_rule": len(ACCOUNTS),
                "latency_ms": LATENCY_MS,
                **shared,
                "distinct_filters": distinct,
            }
        )
        await admin.close()
        await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=RULES, help="due rules per scenario")
    asyncio.run(main(parser.parse_args().rules))
