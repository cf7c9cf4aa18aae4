"""Due → budget written: how long after a rule's scheduled time its budget change lands at Meta.

An idle system: the embedded servers, the Graph sandbox, one dispatcher and one
worker as real processes (default 10 s tick). Twenty budget rules, each on its
own campaign, fall due at staggered moments over half a minute; the figure is
the time from each rule's scheduled time to the sandbox receiving its write.
A write that has not landed by the deadline counts as late (an unbounded latency) in the
percentiles, and ``missed`` says how many there were: percentiles over the landed writes
alone would flatter a run that lost some. Target (SPEC §11): p50 ≤ tick + 2 s. Last line:
one JSON object (a percentile that falls on a missed write is ``null``).
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import (
    TOKEN,
    engine_env,
    figures,
    open_database,
    percentile,
    register_accounts,
    say,
    stack,
    stack_settings,
    start_dispatcher,
    start_worker,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.devstack.embedded import ProcessGroup
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.language.model import parse_rule
from ruleengine.store.rules import RuleStore

RULES = 20
SPREAD_S = 30
TICK_S = 10.0


def rule(index: int, campaign_id: str) -> dict[str, object]:
    return {
        "name": f"due-to-write {index:02d}",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_2001"],
        "filters": [{"field": "id", "operator": "EQUAL", "value": campaign_id}],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "tasks": [
            {
                "id": "raise",
                "conditions": [
                    {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
                ],
                "action": {"type": "increase_budget", "percent": 5},
            }
        ],
    }


def _seconds(value: float) -> float | None:
    """A latency for the JSON line: None for a missed write."""
    return None if math.isinf(value) else round(value, 3)


async def main() -> None:
    args = ("--scenario", "bench", "--accounts", "1", "--campaigns", str(RULES))
    with stack(databases=True, sandbox_args=args) as servers:
        settings = stack_settings(servers)
        client, db = await open_database(settings)
        now = datetime.now(UTC)
        await register_accounts(settings, db, ["act_2001"], now=now)
        admin = SandboxAdmin(servers.sandbox_url)
        graph = GraphSession(settings)
        campaigns = await GraphReader.from_settings(graph).list_entities(
            "act_2001", "campaign", token=TOKEN, fields=["id"]
        )
        await graph.close()
        store = RuleStore(db)
        start = now + timedelta(seconds=5)
        due: dict[str, datetime] = {}
        for index, campaign in enumerate(campaigns[:RULES]):
            doc = (
                await store.save(
                    parse_rule(rule(index, campaign["id"])), now=now, author="bench", source="bench"
                )
            ).rule
            at = start + timedelta(seconds=SPREAD_S * index / RULES)
            await db[c.RULES].update_one({"_id": doc.id}, {"$set": {"next_execute_at": at}})
            due[campaign["id"]] = at
        env = engine_env(settings, RULEENGINE_TICK_SECONDS=str(TICK_S))
        with ProcessGroup(log_dir=Path("var") / "bench-logs") as group:
            start_dispatcher(group, env)
            start_worker(group, env)
            say(f"dispatcher and worker up (tick {TICK_S:g}s); {RULES} rules due over {SPREAD_S}s")
            deadline = time.monotonic() + SPREAD_S + 5 + TICK_S * 3
            writes: dict[str, datetime] = {}
            while time.monotonic() < deadline and len(writes) < len(due):
                await asyncio.sleep(1)
                for write in await admin.writes():
                    if write["ok"] and write["id"] in due:
                        writes.setdefault(write["id"], datetime.fromisoformat(write["at"]))
            say(f"{len(writes)} of {len(due)} writes landed")
        # every rule counts: one whose write never landed is later than any that did
        latencies = [
            (writes[cid] - at).total_seconds() if cid in writes else math.inf
            for cid, at in due.items()
        ]
        figures(
            {
                "rules": len(due),
                "tick_s": TICK_S,
                "writes": len(writes),
                "missed": len(due) - len(writes),
                "due_to_write_p50_s": _seconds(percentile(latencies, 50)),
                "due_to_write_p95_s": _seconds(percentile(latencies, 95)),
                "due_to_write_max_s": _seconds(max(latencies, default=0.0)),
                "target_p50_s": TICK_S + 2,
            }
        )
        await admin.close()
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
