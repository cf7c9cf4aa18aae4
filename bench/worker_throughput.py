"""Worker throughput: one evaluate_account over 2,000 campaigns × 2 tasks, 0 ms Graph latency.

The embedded stack (MongoDB-compatible server, Redis, Graph sandbox) with one
large ad account; the job is built as the dispatcher builds it and run through
the worker's own code (``evaluate_account``), including the writes its actions
make. Prints evaluations (entity × task) per second, Graph cost and the p50/p95
of each trace stage. Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from _common import TOKEN, figures, open_database, percentile, say, stack, stack_settings
from ruleengine import constants as c
from ruleengine.engine import build_engine, close_engine, evaluate_account
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.payload import EvaluateJob, batch_id_for
from ruleengine.queue import connect_queue
from ruleengine.rules.model import parse_rule
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.rules import RuleStore

CAMPAIGNS = 2000
ACCOUNT = "act_2001"
RULE = {
    "name": "throughput",
    "level": "campaign",
    "ad_accounts": [ACCOUNT],
    "schedule": {"mode": "interval", "every_minutes": 15},
    "timezone": "UTC",
    "tasks": [
        {
            "id": "pause-losers",
            "conditions": [
                {
                    "metric": "purchase_roas.omni_purchase",
                    "period": "last_7d",
                    "operator": "<",
                    "value": 1.2,
                },
                {"metric": "spend", "period": "today", "operator": ">", "value": 20},
            ],
            "action": {"type": "pause"},
            "cooldown_minutes": 60,
        },
        {
            "id": "scale-winners",
            "conditions": [
                {
                    "metric": "purchase_roas.omni_purchase",
                    "period": "last_7d",
                    "operator": ">",
                    "value": 3,
                },
                {
                    "metric": "spend",
                    "period": "today",
                    "operator": ">",
                    "compare_to": {"metric": "daily_budget", "multiplier": 0.25},
                },
            ],
            "action": {"type": "increase_budget", "percent": 15, "max_budget": 50000},
            "cooldown_minutes": 360,
        },
    ],
}


def stages(records: list[dict[str, object]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for stage in ("cooldown", "fetch", "evaluate", "act"):
        values = [float(r["trace"][stage]) for r in records if r.get("trace")]  # type: ignore[index]
        if stage == "act":
            values = [v for v in values if v > 0] or [0.0]
        out[f"{stage}_p50_s"] = round(percentile(values, 50), 6)
        out[f"{stage}_p95_s"] = round(percentile(values, 95), 6)
    return out


async def main() -> None:
    args = ("--scenario", "bench", "--accounts", "1", "--campaigns", str(CAMPAIGNS))
    with stack(databases=True, sandbox_args=args) as servers:
        settings = stack_settings(servers)
        client, db = await open_database(settings)
        now = datetime.now(UTC)
        await CredentialStore(db, load_key(settings)).add(ACCOUNT, TOKEN, now=now)
        rule = parse_rule(RULE)
        doc = (await RuleStore(db).save(rule, now=now, author="bench", source="bench")).rule
        graph = GraphSession(settings)
        entities = await GraphReader.from_settings(graph).list_for_rule(rule, ACCOUNT, token=TOKEN)
        await graph.close()
        say(f"{len(entities)} campaigns listed; evaluate_account with {len(rule.tasks)} tasks")
        job = EvaluateJob.of(
            rule,
            batch_id=batch_id_for(doc.id, ACCOUNT, now),
            rule_id=doc.id,
            version=doc.version,
            account=ACCOUNT,
            entities=entities,
            scheduled_at=now,
            dispatched_at=now,
        )
        redis = connect_queue(settings)
        engine = build_engine(settings, db=db, redis=redis, worker="bench")
        started = time.perf_counter()
        summary = await evaluate_account(engine, job, now=datetime.now(UTC))
        seconds = time.perf_counter() - started
        records = [r async for r in db[c.EXECUTIONS].find({"batch_id": job.batch_id})]
        evaluations = summary.evaluated
        say(
            f"{summary.status}: {evaluations} evaluations, {summary.affected} affected,"
            f" {summary.applied} applied in {seconds:.2f}s"
        )
        figures(
            {
                "campaigns": len(entities),
                "tasks": len(rule.tasks),
                "evaluations": evaluations,
                "applied": summary.applied,
                "job_s": round(seconds, 3),
                "evals_per_s": round(evaluations / seconds, 1),
                "graph_calls": summary.cost["counted_calls"],
                "graph_http_requests": summary.cost["http_requests"],
                **stages(records),
            }
        )
        await close_engine(engine)
        await redis.aclose()
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
