"""Batches, executions, the slow-rule report and daily rollups, over rows the engine writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from web_helpers import AUTH, Client, insert_batch, rule_body, run_batch

from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rollups import RollupStore


async def _engine_batches(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> tuple[str, dict[str, str]]:
    """A saved rule run by the real engine on two accounts; rule id and account → batch id."""
    body = rule_body(ad_accounts=["act_1001", "act_1002"])
    body["tasks"][0]["conditions"][0]["value"] = {"USD": 1, "EUR": 1}  # dollars and euros
    created = await (await client.post("/api/rules", json=body, headers=AUTH)).json()
    rule = parse_rule(body)
    batches = {}
    for account in rule.ad_accounts:
        batches[account] = await run_batch(
            web_settings, db, redis, rule_id=created["id"], version=1, rule=rule, account=account
        )
    return created["id"], batches


async def test_batches_of_the_engine_are_listed_filtered_and_paged(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> None:
    rule_id, batches = await _engine_batches(client, web_settings, db, redis)
    old = datetime.now(UTC) - timedelta(hours=2)
    for n in range(3):
        await insert_batch(
            db,
            batch_id=f"other-{n}",
            rule_id="other",
            rule_name="Other",
            started_at=old + timedelta(minutes=n),
            status="FAILED" if n == 0 else "DONE",
        )
    page = await (await client.get("/api/batches")).json()
    assert page["total"] == 5
    assert [b["batch_id"] for b in page["items"][:2]] == [batches["act_1002"], batches["act_1001"]]
    first = page["items"][1]
    assert (first["rule_id"], first["account"], first["status"]) == (rule_id, "act_1001", "DONE")
    assert first["evaluated_count"] > 0
    assert first["graph"]["counted_calls"] > 0
    assert set(first["trace"]) == {"cooldown", "fetch", "evaluate", "act"}
    assert "_id" not in first
    by_rule = await (await client.get(f"/api/batches?rule_id={rule_id}&account=act_1002")).json()
    assert [b["batch_id"] for b in by_rule["items"]] == [batches["act_1002"]]
    failed = await (await client.get("/api/batches?status=FAILED")).json()
    assert [b["batch_id"] for b in failed["items"]] == ["other-0"]
    paged = await (await client.get("/api/batches?limit=2&offset=2")).json()
    assert (paged["total"], paged["limit"], paged["offset"]) == (5, 2, 2)
    assert [b["batch_id"] for b in paged["items"]] == ["other-2", "other-1"]


async def test_bad_query_parameters_are_422_naming_the_parameter(client: Client) -> None:
    for query, name in (
        ("limit=0", "limit"),
        ("offset=-1", "offset"),
        ("status=DONEISH", "status"),
    ):
        response = await client.get(f"/api/batches?{query}")
        assert response.status == 422, query
        assert (await response.json())["errors"][0]["path"] == name
    slow = await client.get("/api/benchmark/slow-rules?since_hours=abc", headers=AUTH)
    assert slow.status == 422


async def test_a_batch_and_its_executions(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> None:
    _, batches = await _engine_batches(client, web_settings, db, redis)
    batch_id = batches["act_1001"]
    batch = await (await client.get(f"/api/batches/{batch_id}")).json()
    assert batch["batch_id"] == batch_id
    assert batch["execute_count"] == 1
    answer = await (await client.get(f"/api/batches/{batch_id}/executions")).json()
    records = answer["items"]
    assert len(records) == batch["evaluated_count"]
    record = records[0]
    assert {c["metric"] for c in record["conditions"]} == {"spend", "purchase_roas.omni_purchase"}
    assert all(isinstance(c["passed"], bool) for c in record["conditions"])
    assert record["batch_id"] == batch_id
    assert isinstance(record["id"], str)
    applied = [r for r in records if r["outcome"] == "applied"]
    assert applied, [r["outcome"] for r in records]
    assert (applied[0]["field"], applied[0]["before"], applied[0]["after"]) == (
        "status",
        "ACTIVE",
        "PAUSED",
    )
    missing = await client.get("/api/batches/nope/executions")
    assert missing.status == 404
    assert (await missing.json()) == {"error": "batch 'nope' does not exist"}


async def test_slow_rules_are_ranked_by_p95(client: Client, db: Database) -> None:
    now = datetime.now(UTC)
    durations = {
        "steady": [1.0, 1.0, 1.0, 1.0],
        "spiky": [0.5, 0.5, 0.5, 9.0],  # lower median, far higher p95
        "fast": [0.2, 0.3],
    }
    for rule_id, values in durations.items():
        for n, seconds in enumerate(values):
            await insert_batch(
                db,
                batch_id=f"{rule_id}-{n}",
                rule_id=rule_id,
                rule_name=rule_id.title(),
                started_at=now - timedelta(minutes=10 + n),
                duration_s=seconds,
                trace={
                    "cooldown": 0.0,
                    "fetch": seconds * 0.6,
                    "evaluate": 0.0,
                    "act": seconds * 0.4,
                },
                graph={"http_requests": 1, "counted_calls": 2 + n},
            )
    await insert_batch(
        db,
        batch_id="ancient",
        rule_id="ancient",
        rule_name="Ancient",
        started_at=now - timedelta(hours=30),
        duration_s=99.0,
    )
    await insert_batch(
        db,
        batch_id="running",
        rule_id="running",
        rule_name="Running",
        started_at=now - timedelta(minutes=1),
        status="RUNNING",
    )
    report = await (
        await client.get("/api/benchmark/slow-rules?since_hours=24", headers=AUTH)
    ).json()
    rules = report["rules"]
    assert [r["rule_id"] for r in rules] == ["spiky", "steady", "fast"]
    spiky = rules[0]
    assert spiky["count"] == 4
    assert spiky["p50_s"] == 0.5
    assert spiky["max_s"] == 9.0
    assert 7.0 < spiky["p95_s"] < 9.0
    assert spiky["stages_mean_s"]["fetch"] == round(sum(durations["spiky"]) * 0.6 / 4, 6)
    assert set(spiky["stages_mean_s"]) == {"cooldown", "fetch", "evaluate", "act"}
    assert spiky["graph_calls_mean"] == 3.5
    wide = await (await client.get("/api/benchmark/slow-rules?since_hours=48", headers=AUTH)).json()
    assert wide["rules"][0]["rule_id"] == "ancient"


async def test_daily_rollups_are_listed_per_rule_and_day(client: Client, db: Database) -> None:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    for days_ago, rule_id, seconds in ((1, "scale", 2.0), (1, "pause", 1.0), (3, "scale", 4.0)):
        day = today - timedelta(days=days_ago)
        for n in range(3):
            await insert_batch(
                db,
                batch_id=f"{rule_id}-{days_ago}-{n}",
                rule_id=rule_id,
                rule_name=rule_id.title(),
                started_at=day + timedelta(hours=n),
                duration_s=seconds * (n + 1),
            )
        await RollupStore(db).roll_up(day.date(), now=datetime.now(UTC))
    page = await (await client.get("/api/benchmark/daily?days=7")).json()
    assert page["total"] == 3 and page["days"] == 7
    assert page["since"] == (today - timedelta(days=7)).date().isoformat()
    rows = [(r["day"], r["rule_name"]) for r in page["items"]]
    yesterday, three_ago = ((today - timedelta(days=d)).date().isoformat() for d in (1, 3))
    assert rows == [(yesterday, "Pause"), (yesterday, "Scale"), (three_ago, "Scale")]
    scale = page["items"][1]
    assert (scale["batches"], scale["done"], scale["applied"], scale["graph_calls"]) == (
        3,
        3,
        6,
        12,
    )
    assert (scale["duration_max_s"], scale["duration_p50_s"], scale["duration_sum_s"]) == (
        6.0,
        4.0,
        12.0,
    )
    assert "_id" not in scale and "date" not in scale
    one_rule = await (await client.get("/api/benchmark/daily?rule_id=scale&days=2")).json()
    assert [(r["day"], r["rule_id"]) for r in one_rule["items"]] == [(yesterday, "scale")]
    bad = await client.get("/api/benchmark/daily?days=0")
    assert bad.status == 422
    assert (await bad.json())["errors"][0]["path"] == "days"
