"""Helpers shared by the web tests: the API token, rule bodies, and real batches."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from arq.utils import timestamp_ms

from flow import records, run_rule, work
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob, batch_id_for, evaluate_job_id
from ruleengine.meta.http import READ_ONLY
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.language.model import Rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import token_ref
from ruleengine.store.db import Database
from ruleengine.store.followups import followup_job_id
from ruleengine.store.records import BatchStart, BatchStore
from ruleengine.store.ruledocs import RuleDoc
from ruleengine.web.app import create_app
from ruleengine.worker.deps import build_engine, close_engine
from ruleengine.worker.job import evaluate_account

API_TOKEN = "web-test-api-token-7f3a9c2e41b8d6"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}

Client = TestClient[web.Request, web.Application]


async def start_client(settings: Settings) -> Client:
    """A started test client of ``create_app(settings)``; close it with ``client.close()``."""
    client: Client = TestClient(TestServer(create_app(settings), host="127.0.0.1"))
    await client.start_server()
    return client


def rule_body(name: str = "Pause spenders", **overrides: Any) -> dict[str, Any]:
    """A valid rule on act_1001 whose condition passes for the sandbox's spending campaigns."""
    body: dict[str, Any] = {
        "name": name,
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "filters": [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "pause-spenders",
                "match": "all",
                "conditions": [
                    {"metric": "spend", "period": "today", "operator": ">", "value": 1},
                    {
                        "metric": "purchase_roas.omni_purchase",
                        "period": "last_7d",
                        "operator": "<",
                        "value": 100,
                    },
                ],
                "action": {"type": "pause"},
                "cooldown_minutes": 60,
            }
        ],
    }
    body.update(overrides)
    return body


async def run_batch(
    settings: Settings,
    db: Database,
    redis: Any,
    *,
    rule_id: str,
    version: int,
    rule: Rule,
    account: str,
    now: datetime | None = None,
) -> str:
    """Evaluate ``rule`` on ``account`` with the real engine (it writes to the sandbox).

    Returns:
        The batch id.
    """
    now = now or datetime.now(UTC)
    engine = build_engine(settings, db=db, redis=redis, worker="worker:test:1")
    try:
        token = await engine.credentials.token(token_ref(account))
        reader = GraphReader.from_settings(engine.session.view(methods=READ_ONLY))
        job = EvaluateJob.of(
            rule,
            batch_id=batch_id_for(rule_id, account, now),
            rule_id=rule_id,
            version=version,
            account=account,
            entities=await reader.list_for_rule(rule, account, token=token),
            scheduled_at=now,
            dispatched_at=now,
        )
        summary = await evaluate_account(engine, job, now=now, job_id=evaluate_job_id(job.batch_id))
        return summary.batch_id
    finally:
        await close_engine(engine)


async def insert_batch(
    db: Database,
    *,
    batch_id: str,
    rule_id: str,
    rule_name: str,
    account: str = "act_1001",
    started_at: datetime,
    status: str = "DONE",
    duration_s: float = 1.0,
    trace: dict[str, float] | None = None,
    graph: dict[str, int] | None = None,
    total: int = 10,
) -> None:
    """A batch row written through BatchStore as the engine writes it (start, then finish)."""
    store = BatchStore(db)
    await store.start(
        BatchStart(
            batch_id=batch_id,
            rule_id=rule_id,
            rule_name=rule_name,
            rule_version=1,
            account=account,
            level="campaign",
            scheduled_at=started_at,
            total=total,
            job_id=evaluate_job_id(batch_id),
            worker="worker:test:1",
        ),
        now=started_at,
    )
    if status == "RUNNING":
        await store.progress(batch_id, done=total // 2, total=total)
        return
    await store.finish(
        batch_id,
        status=status,  # type: ignore[arg-type]
        now=started_at,
        progress={"done": total, "total": total},
        evaluated_count=total,
        affected_count=total // 2,
        applied_count=total // 4,
        failed_count=0,
        graph=graph or {"http_requests": 2, "counted_calls": 4},
        trace=trace or {"cooldown": 0.01, "fetch": 0.5, "evaluate": 0.02, "act": 0.3},
        duration_s=duration_s,
        error=None,
    )


# The two losing campaigns of act_1001: purchase ROAS over the last 7 days below 1.2.
LOSERS = ["[AUTO] Prospecting US 2", "[AUTO] Retargeting US 2"]


def pause_then_body(name: str = "Pause losers for an hour", **then: Any) -> dict[str, Any]:
    """A rule pausing the losers of act_1001 now and re-activating them 60 minutes later."""
    return {
        "name": name,
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "filters": [{"field": "name", "operator": "IN", "value": LOSERS}],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "cool-off",
                "conditions": [
                    {
                        "metric": "purchase_roas.omni_purchase",
                        "period": "last_7d",
                        "operator": "<",
                        "value": 1.2,
                    }
                ],
                "action": {"type": "pause", "then": {"after_minutes": 60, "do": "activate"} | then},
            }
        ],
    }


async def run_followup_rule(settings: Settings, db: Database) -> tuple[RuleDoc, str]:
    """Run :func:`pause_then_body` through the real dispatcher and a worker.

    Returns:
        The rule and the batch id of its run (one batch: one account).
    """
    rule = await run_rule(settings, db, pause_then_body())
    (batch_id,) = {r["batch_id"] for r in await records(db, rule_id=rule.id)}
    return rule, batch_id


async def fire_followup(settings: Settings, redis: Any, key: str, *, generation: int = 1) -> None:
    """Make one follow-up's timer due now and let a real worker run it."""
    job_id = followup_job_id(key, generation)
    assert await redis.zscore(c.QUEUE_NAME, job_id) is not None, f"no timer for {key}"
    await redis.zadd(c.QUEUE_NAME, {job_id: timestamp_ms() - 1})  # arq skips a score of 0
    await work(settings)


def evening_push(campaign: str = "[AUTO] Prospecting US 1") -> dict[str, Any]:
    """A rule scheduling the campaign's daily budget × 1.5 for 4 hours, whenever it runs."""
    always = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
    return {
        "name": "Evening push",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "filters": [{"field": "name", "operator": "EQUAL", "value": campaign}],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "t",
                "conditions": [always],
                "action": {"type": "schedule_budget", "multiplier": 1.5, "window": {"hours": 4}},
                "cooldown_minutes": 0,
            }
        ],
    }
