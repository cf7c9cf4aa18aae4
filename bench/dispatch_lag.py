"""Dispatch of 1,000 due rules × 3 ad accounts with 150 ms of Graph latency.

Creates 1,000 ACTIVE rules (25 different filter sets, so entity listings are
shared the way real rule sets share them), makes them all due at the same
instant, sets the sandbox's latency to 150 ms and runs dispatcher sweeps.
Dispatch lag = when a job was enqueued − when its rule was scheduled.
Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from _common import TOKEN, figures, open_database, percentile, say, stack, stack_settings
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatch import Dispatcher
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.payload import deserialize
from ruleengine.queue import connect_queue
from ruleengine.rules.model import parse_rule
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.rules import RuleStore

RULES = 1000
ACCOUNTS = ["act_1001", "act_1002", "act_1003"]
LATENCY_MS = 150


def rule(index: int) -> dict[str, object]:
    variant = index % 25
    filters: list[dict[str, object]] = [
        {
            "field": "name",
            "operator": "CONTAIN",
            "value": f"{['[AUTO]', 'Prospecting', 'Retargeting', 'Lead', 'Broad'][variant % 5]}",
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
    return {
        "name": f"bench rule {index:04d}",
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


async def main() -> None:
    with stack(databases=True) as servers:
        settings = stack_settings(servers)
        client, db = await open_database(settings)
        credentials = CredentialStore(db, load_key(settings))
        now = datetime.now(UTC)
        for account in ACCOUNTS:
            await credentials.add(account, TOKEN, now=now)
        store = RuleStore(db)
        started = time.perf_counter()
        for index in range(RULES):
            await store.save(parse_rule(rule(index)), now=now, author="bench", source="bench")
        say(f"{RULES} rules saved in {time.perf_counter() - started:.1f}s")
        admin = SandboxAdmin(servers.sandbox_url)
        await admin.set_faults(latency_ms=LATENCY_MS)
        await admin.clear_stats()
        queue = connect_queue(settings)
        session = GraphSession(settings)
        dispatcher = Dispatcher(
            settings, db=db, queue=queue, reader=GraphReader.from_settings(session)
        )
        due_at = datetime.now(UTC)
        await db[c.RULES].update_many({}, {"$set": {"next_execute_at": due_at}})
        say(
            f"all {RULES} rules due at {due_at:%H:%M:%S}; sandbox latency {LATENCY_MS} ms; sweeping"
        )
        report = await dispatcher.tick()
        assert report is not None
        say(f"sweep 1: {report.as_dict()}")
        idle = await dispatcher.tick()
        assert idle is not None
        say(f"sweep 2 (nothing due): {idle.as_dict()}")
        stats = await admin.stats()
        values = await lags(queue, await queue.zrange(c.QUEUE_NAME, 0, -1))
        figures(
            {
                "rules": RULES,
                "accounts_per_rule": len(ACCOUNTS),
                "latency_ms": LATENCY_MS,
                "sweep_s": round(report.duration_s, 3),
                "idle_sweep_s": round(idle.duration_s, 3),
                "lag_p50_s": round(percentile(values, 50), 3),
                "lag_p99_s": round(percentile(values, 99), 3),
                "jobs": report.jobs,
                "listings": report.listings,
                "graph_calls": stats["counted_calls"],
                "graph_http_requests": stats["http_requests"],
            }
        )
        await admin.close()
        await session.close()
        await queue.aclose()
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
