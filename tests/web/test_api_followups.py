"""Follow-ups in the API, in readiness and in the metrics, created by a real rule run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from web_helpers import (
    AUTH,
    Client,
    fire_followup,
    pause_then_body,
    run_followup_rule,
    start_client,
)

from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.heartbeats import Heartbeats

STATUSES = "pending, scheduled, running, done, skipped, failed"


@pytest.fixture
async def ran(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> tuple[str, str, list[str]]:
    """A real run that paused both losers: rule id, batch id, follow-up keys soonest first."""
    rule, batch_id = await run_followup_rule(web_settings, db)
    keys = [d["_id"] async for d in db[c.FOLLOWUPS].find({}).sort([("due_at", 1), ("_id", 1)])]
    assert len(keys) == 2
    return rule.id, batch_id, keys


async def _beat(db: Database) -> None:
    now = datetime.now(UTC)
    await Heartbeats(db).beat("worker:host:1", now=now)
    await Heartbeats(db).beat("dispatcher", now=now, role="leader")


async def test_followups_of_a_real_run_are_listed_soonest_first(
    client: Client, ran: tuple[str, str, list[str]]
) -> None:
    rule_id, batch_id, keys = ran
    page = await (await client.get("/api/followups")).json()
    assert (page["total"], page["limit"], page["offset"]) == (2, 50, 0)
    assert [f["id"] for f in page["items"]] == keys
    first = page["items"][0]
    assert first["rule"] == {"id": rule_id, "name": pause_then_body()["name"], "version": 1}
    assert first["task_id"] == "cool-off"
    assert first["id"] == f"{rule_id}:cool-off:{first['entity']['id']}"
    assert first["entity"]["name"] in {"[AUTO] Prospecting US 2", "[AUTO] Retargeting US 2"}
    assert (first["account"], first["batch_id"], first["do"]) == ("act_1001", batch_id, "activate")
    assert (first["status"], first["reason"], first["generation"]) == ("scheduled", None, 1)
    assert (first["field"], first["set_value"], first["previous"]) == ("status", "PAUSED", "ACTIVE")
    assert (first["late_s"], first["overdue"], first["done_at"]) == (None, False, None)
    due = datetime.fromisoformat(first["due_at"])
    created = datetime.fromisoformat(first["created_at"])
    assert due - created == timedelta(minutes=60)
    one = await client.get(f"/api/followups/{first['id']}")
    assert one.status == 200
    assert await one.json() == first
    missing = await client.get("/api/followups/no:such:key")
    assert missing.status == 404
    assert "no:such:key" in (await missing.json())["error"]


async def test_filters_paging_and_a_bad_status(
    client: Client, web_settings: Settings, redis: Any, ran: tuple[str, str, list[str]]
) -> None:
    rule_id, batch_id, keys = ran
    await fire_followup(web_settings, redis, keys[0])

    async def ids(query: str) -> list[str]:
        page = await (await client.get(f"/api/followups?{query}")).json()
        return [f["id"] for f in page["items"]]

    assert await ids("status=done") == [keys[0]]
    assert await ids("status=scheduled") == [keys[1]]
    assert await ids("status=pending") == []
    assert await ids(f"rule_id={rule_id}&batch_id={batch_id}") == keys
    assert await ids("rule_id=someone-else") == []
    assert await ids(f"batch_id={batch_id}&status=done") == [keys[0]]
    paged = await (await client.get("/api/followups?limit=1&offset=1")).json()
    assert (paged["total"], [f["id"] for f in paged["items"]]) == (2, [keys[1]])
    done = await (await client.get(f"/api/followups/{keys[0]}")).json()
    assert (done["status"], done["reason"], done["late_s"]) == ("done", None, 0.0)
    assert done["done_at"] is not None
    for query, path in (
        ("status=finished", "status"),
        ("limit=0", "limit"),
        ("offset=-1", "offset"),
    ):
        response = await client.get(f"/api/followups?{query}")
        assert response.status == 422, query
        (error,) = (await response.json())["errors"]
        assert error["path"] == path
    bad = await (await client.get("/api/followups?status=finished")).json()
    assert bad["errors"][0]["message"] == f"'finished' is not one of {STATUSES}"


async def test_the_batch_executions_carry_the_followup_and_its_run(
    client: Client, web_settings: Settings, redis: Any, ran: tuple[str, str, list[str]]
) -> None:
    _, batch_id, keys = ran
    await fire_followup(web_settings, redis, keys[0])
    answer = await (await client.get(f"/api/batches/{batch_id}/executions")).json()
    actions = [r for r in answer["items"] if r.get("kind") != "followup"]
    assert {r["outcome"] for r in actions} == {"applied"}
    snapshots = {r["followup"]["key"]: r["followup"] for r in actions}
    assert set(snapshots) == set(keys)
    for snapshot in snapshots.values():
        assert set(snapshot) == {"key", "do", "due_at", "status", "reason"}
        assert (snapshot["do"], snapshot["status"]) == ("activate", "scheduled")
    (run,) = [r for r in answer["items"] if r.get("kind") == "followup"]
    assert (run["followup_key"], run["outcome"]) == (keys[0], "applied")
    assert (run["before"], run["after"], run["late_s"]) == ("PAUSED", "ACTIVE", 0.0)
    assert run["action"] == {"type": "then:activate"}


async def test_reads_of_followups_follow_the_read_rule(
    web_settings: Settings, db: Database, accounts: list[str]
) -> None:
    closed = await start_client(web_settings.model_copy(update={"api_reads_require_token": True}))
    try:
        for path in ("/api/followups", "/api/followups/a:b:c"):
            assert (await closed.get(path)).status == 401, path
        assert (await closed.get("/api/followups", headers=AUTH)).status == 200
        assert (await closed.get("/api/followups/a:b:c", headers=AUTH)).status == 404
    finally:
        await closed.close()


async def test_ready_counts_pending_and_names_overdue_followups(
    client: Client, db: Database, ran: tuple[str, str, list[str]]
) -> None:
    _, _, keys = ran
    await _beat(db)
    response = await client.get("/health/ready")
    answer = await response.json()
    assert response.status == 200, answer
    followups = answer["checks"]["followups"]
    assert (followups["ok"], followups["pending"], followups["overdue"]) == (True, 0, 0)

    # Stored while Redis was away: pending, waiting to be re-armed — still healthy.
    await db[c.FOLLOWUPS].update_one(
        {"_id": keys[1]}, {"$set": {"status": "pending", "reason": "redis_unavailable"}}
    )
    answer = await (await client.get("/health/ready")).json()
    assert answer["failing"] == []
    assert (answer["checks"]["followups"]["pending"], answer["checks"]["followups"]["overdue"]) == (
        1,
        0,
    )

    # Its timer never fired and it is now 10 minutes past due: overdue, unhealthy.
    past = datetime.now(UTC) - timedelta(minutes=10)
    await db[c.FOLLOWUPS].update_one({"_id": keys[1]}, {"$set": {"due_at": past}})
    response = await client.get("/health/ready")
    answer = await response.json()
    assert response.status == 503
    assert answer["failing"] == ["followups"]
    followups = answer["checks"]["followups"]
    assert (followups["ok"], followups["pending"], followups["overdue"]) == (False, 1, 1)
    assert "past due" in followups["error"]
    listed = await (await client.get(f"/api/followups/{keys[1]}")).json()
    assert (listed["status"], listed["overdue"]) == ("pending", True)


async def test_ready_names_redis_and_overdue_followups_when_redis_is_down(
    web_settings: Settings, db: Database, ran: tuple[str, str, list[str]]
) -> None:
    _, _, keys = ran
    await _beat(db)
    past = datetime.now(UTC) - timedelta(minutes=30)
    await db[c.FOLLOWUPS].update_many({}, {"$set": {"due_at": past}})
    down = await start_client(
        web_settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    )
    try:
        response = await down.get("/health/ready")
        answer = await response.json()
        assert response.status == 503
        assert {"redis", "followups"} <= set(answer["failing"])
        assert "mongodb" not in answer["failing"]
        assert answer["checks"]["followups"]["overdue"] == len(keys)
        # the follow-ups live in MongoDB: the API still lists them
        assert (await (await down.get("/api/followups")).json())["total"] == len(keys)
    finally:
        await down.close()


async def test_metrics_expose_followups_by_status(
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    ran: tuple[str, str, list[str]],
) -> None:
    _, _, keys = ran
    await fire_followup(web_settings, redis, keys[0])
    text = await (await client.get("/metrics")).text()
    assert "# TYPE ruleengine_followups_by_status gauge" in text
    for status, count in (
        ("scheduled", 1),
        ("done", 1),
        ("pending", 0),
        ("running", 0),
        ("skipped", 0),
        ("failed", 0),
    ):
        assert f'ruleengine_followups_by_status{{status="{status}"}} {count}.0' in text, status
    assert "ruleengine_followups_overdue 0.0" in text
    await db[c.FOLLOWUPS].update_one(
        {"_id": keys[1]}, {"$set": {"due_at": datetime.now(UTC) - timedelta(hours=1)}}
    )
    text = await (await client.get("/metrics")).text()  # read at scrape time, not cached
    assert "ruleengine_followups_overdue 1.0" in text
