"""Liveness, readiness (200 / 503 naming the failing parts) and the Prometheus text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from web_helpers import Client, insert_batch, start_client

from ruleengine import __version__
from ruleengine.constants import QUEUE_NAME
from ruleengine.errors import ErrorReport
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.heartbeats import Heartbeats


async def _beat(db: Database, *, worker_age_s: float = 1, dispatcher_age_s: float = 1) -> None:
    beats = Heartbeats(db)
    now = datetime.now(UTC)
    await beats.beat("worker:host:1", now=now - timedelta(seconds=worker_age_s))
    await beats.beat("dispatcher", now=now - timedelta(seconds=dispatcher_age_s), role="leader")


async def test_health_is_liveness(client: Client) -> None:
    answer = await (await client.get("/health")).json()
    assert answer["status"] == "ok"
    assert answer["version"] == __version__
    assert answer["uptime_s"] >= 0


async def test_ready_is_200_when_everything_is_healthy(
    client: Client, db: Database, redis: Any
) -> None:
    await _beat(db)
    await redis.zadd(QUEUE_NAME, {"job-a": 1, "job-b": 2})
    response = await client.get("/health/ready")
    answer = await response.json()
    assert response.status == 200, answer
    assert (answer["status"], answer["failing"]) == ("ok", [])
    assert set(answer["checks"]) == {
        "mongodb",
        "redis",
        "workers",
        "dispatcher",
        "queue",
        "followups",
        "tokens",
        "currencies",
        "approvals",
    }
    assert all(check["ok"] for check in answer["checks"].values())
    assert answer["checks"]["queue"]["depth"] == 2
    assert answer["checks"]["workers"]["live"] == 1
    assert answer["checks"]["followups"]["pending"] == 0
    assert answer["checks"]["approvals"] | {"latency_ms": 0} == {
        "ok": True,
        "pending": 0,
        "oldest_age_s": None,
        "latency_ms": 0,
    }


async def test_ready_names_stale_workers_and_dispatcher(client: Client, db: Database) -> None:
    await _beat(db, worker_age_s=31, dispatcher_age_s=45)  # tick_seconds 0.2: limit is 30 s
    response = await client.get("/health/ready")
    answer = await response.json()
    assert response.status == 503
    assert answer["status"] == "unhealthy"
    assert answer["failing"] == ["workers", "dispatcher"]
    assert answer["checks"]["dispatcher"]["max_age_s"] == 30


async def test_ready_is_503_naming_redis_when_it_is_down(
    web_settings: Settings, db: Database
) -> None:
    await _beat(db)
    down = web_settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    client = await start_client(down)
    try:
        response = await client.get("/health/ready")
        answer = await response.json()
        assert response.status == 503
        assert "redis" in answer["failing"]
        assert "mongodb" not in answer["failing"]
        assert answer["checks"]["redis"]["ok"] is False
        assert answer["checks"]["redis"]["error"]
        assert (await client.get("/api/rules")).status == 200  # reads do not need Redis
        metrics = await (await client.get("/metrics")).text()
        assert "ruleengine_queue_depth NaN" in metrics
    finally:
        await client.close()


async def test_metrics_exposes_requests_and_product_gauges(
    client: Client, db: Database, redis: Any
) -> None:
    await _beat(db)
    await redis.zadd(QUEUE_NAME, {"job-a": 1})
    await ErrorLog(db).record(ErrorReport(function="f", message="boom"), now=datetime.now(UTC))
    now = datetime.now(UTC)
    await insert_batch(db, batch_id="b1", rule_id="r", rule_name="R", started_at=now)
    await insert_batch(
        db, batch_id="b2", rule_id="r", rule_name="R", started_at=now, status="RUNNING"
    )
    await client.get("/api/rules")
    await client.get("/api/rules/unknown")
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    text = await response.text()
    assert 'ruleengine_web_requests_total{method="GET",route="/api/rules",status="200"} 1.0' in text
    assert 'route="/api/rules/{id}",status="404"' in text
    assert "ruleengine_queue_depth 1.0" in text
    assert "ruleengine_live_workers 1.0" in text
    assert "ruleengine_error_groups_active 1.0" in text
    assert 'ruleengine_batches_last_hour{status="DONE"} 1.0' in text
    assert 'ruleengine_batches_last_hour{status="RUNNING"} 1.0' in text
    assert "ruleengine_dispatcher_last_tick_age_seconds" in text
