"""Undo a batch: each change set back once, where nobody changed it since (against the sandbox)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from flow import (
    campaign_ids,
    engine_for,
    kill,
    process_env,
    records,
    run_rule,
    sandbox_quiet,
    successful_writes,
    wait_for,
    writes_at_least,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.undo import preview, undo_batch
from undo_helpers import misfire, state

SRC = Path(__file__).parents[1] / "src"


def now() -> datetime:
    return datetime.now(UTC)


async def test_undo_of_5_budgets_and_3_pauses_restores_all_8(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(settings, db, sandbox)
    assert await state(sandbox) != before
    writes = len(await successful_writes(sandbox))
    async with engine_for(settings, db) as engine:
        plan = await preview(engine, batch_id, now=now())
        assert plan.as_json()["will_revert"] == 8
        assert len(await successful_writes(sandbox)) == writes  # a dry run writes nothing
        result = await undo_batch(engine, batch_id, by="api", now=now())
    assert await state(sandbox) == before
    undo_writes = (await successful_writes(sandbox))[writes:]
    assert len(undo_writes) == 8
    assert result["undo_batch_id"] == f"undo:{batch_id}"
    assert [c["outcome"] for c in result["changes"]] == ["applied"] * 8
    assert result["batch"]["undoes"] == batch_id and result["batch"]["by"] == "api"
    assert result["batch"]["applied_count"] == 8
    original = await db["batches"].find_one({"_id": batch_id})
    assert original is not None and original["undone_by"] == f"undo:{batch_id}"


async def test_a_change_made_by_someone_else_is_left_alone_and_its_live_value_shown(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(settings, db, sandbox)
    ids = await campaign_ids(sandbox)
    touched = ids["[AUTO] Retargeting US 1"]
    await sandbox.ads_manager_change(touched, daily_budget=15555)
    async with engine_for(settings, db) as engine:
        plan = (await preview(engine, batch_id, now=now())).as_json()
        skipped = [c for c in plan["changes"] if not c["will_revert"]]
        assert skipped == [
            c | {"live": 15555, "will_revert": False, "reason": "changed_by_someone_else"}
            for c in skipped
        ]
        assert [c["entity_id"] for c in skipped] == [touched] and plan["will_revert"] == 7
        result = await undo_batch(engine, batch_id, by="api", now=now())
    [kept] = [c for c in result["changes"] if c["entity_id"] == touched]
    assert kept["outcome"] == "skipped" and kept["reason"] == "changed_by_someone_else"
    assert kept["live"] == 15555 and kept["after"] == 15555
    after = await state(sandbox)
    assert after["[AUTO] Retargeting US 1"] == ("ACTIVE", 15555)
    assert {k: v for k, v in after.items() if k != "[AUTO] Retargeting US 1"} == {
        k: v for k, v in before.items() if k != "[AUTO] Retargeting US 1"
    }


async def test_undo_asked_twice_at_once_and_again_reverts_once(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(settings, db, sandbox)
    writes = len(await successful_writes(sandbox))
    async with engine_for(settings, db) as one, engine_for(settings, db) as two:
        first, second = await asyncio.gather(
            undo_batch(one, batch_id, by="api", now=now()),
            undo_batch(two, batch_id, by="api", now=now()),
        )
        again = await undo_batch(one, batch_id, by="someone", now=now())
    assert await state(sandbox) == before
    assert len(await successful_writes(sandbox)) == writes + 8
    assert again["existing"] is True and again["batch"]["by"] == "api"
    for result in (first, second, again):
        assert [c["outcome"] for c in result["changes"]] == ["applied"] * 8
    assert len(await records(db, batch_id=f"undo:{batch_id}")) == 8


async def test_the_follow_ups_of_the_batch_are_cancelled(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    then = {"do": "activate", "after_minutes": 360}
    batch_id, before = await misfire(settings, db, sandbox, then=then)
    waiting = [d async for d in db["followups"].find({"batch_id": batch_id})]
    assert len(waiting) == 3 and {d["status"] for d in waiting} <= {"pending", "scheduled"}
    async with engine_for(settings, db) as engine:
        plan = (await preview(engine, batch_id, now=now())).as_json()
        assert [f["will_cancel"] for f in plan["followups"]] == [True] * 3
        result = await undo_batch(engine, batch_id, by="api", now=now())
    assert sorted(result["batch"]["cancelled_followups"]) == sorted(d["_id"] for d in waiting)
    cancelled = [d async for d in db["followups"].find({"batch_id": batch_id})]
    assert {(d["status"], d["reason"]) for d in cancelled} == {("skipped", "cancelled_by_undo")}
    assert await state(sandbox) == before


async def test_an_undo_killed_half_way_and_retried_reverts_each_change_once(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    batch_id, before = await misfire(settings, db, sandbox)
    writes = len(await successful_writes(sandbox))
    env = process_env(settings, account_lock_ttl_s="2")
    env["PYTHONPATH"] = str(SRC)  # this tree's code, whatever the environment names
    await sandbox.set_faults(latency_ms=400)  # room to kill between the writes
    with (tmp_path / "undo.log").open("wb") as log:
        undo = subprocess.Popen(
            [sys.executable, "-m", "ruleengine", "batches", "undo", batch_id, "--json"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        await wait_for(lambda: writes_at_least(sandbox, writes + 2))
    finally:
        kill(undo)
    await wait_for(lambda: sandbox_quiet(sandbox))
    await sandbox.clear_faults()
    landed = len(await successful_writes(sandbox)) - writes
    assert 2 <= landed < 8, (tmp_path / "undo.log").read_text()
    row = await db["batches"].find_one({"_id": f"undo:{batch_id}"})
    assert row is not None and row["status"] == "RUNNING"  # the killed attempt never finished
    async with engine_for(settings, db) as engine:
        result = await undo_batch(engine, batch_id, by="api", now=now())
    undo_writes = (await successful_writes(sandbox))[writes:]
    assert len(undo_writes) == 8
    per_field = {(w["id"], tuple(sorted(w["params"]))) for w in undo_writes}
    assert len(per_field) == 8  # each change written back once
    assert await state(sandbox) == before
    assert [c["outcome"] for c in result["changes"]] == ["applied"] * 8
    assert result["batch"]["status"] == "DONE" and result["batch"]["execute_count"] == 2


async def test_the_cli_previews_as_a_table_then_undoes_and_answers_the_undo_again(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    batch_id, before = await misfire(settings, db, sandbox)
    env = process_env(settings) | {"PYTHONPATH": str(SRC)}

    def cli(*args: str) -> str:
        command = [sys.executable, "-m", "ruleengine", "batches", "undo", batch_id, *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    table = await asyncio.to_thread(cli, "--dry-run")
    assert table.splitlines()[0] == f"undo of {batch_id} (would be undo:{batch_id}), dry run"
    assert "will revert" in table.splitlines()[1]
    assert sum(line.split()[-1] == "yes" for line in table.splitlines()[2:]) == 8
    assert await state(sandbox) != before
    result = await asyncio.to_thread(cli)
    assert result.splitlines()[0] == f"undo:{batch_id}: undoes {batch_id}"
    assert sum("applied" in line.split() for line in result.splitlines()) == 8
    assert await state(sandbox) == before
    again = orjson.loads(await asyncio.to_thread(cli, "--json"))
    assert again["existing"] is True and again["batch"]["by"].startswith("cli:")


async def test_copies_are_paused_on_request_and_messages_listed_as_not_undoable(
    webhook: tuple[Settings, list[dict[str, Any]]],
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
) -> None:
    settings, received = webhook
    source = (await campaign_ids(sandbox))["[AUTO] Retargeting US 1"]
    always = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
    rule = {
        "name": "Copy and tell",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "filters": [{"field": "id", "operator": "EQUAL", "value": source}],
        "tasks": [
            {
                "id": "copy",
                "conditions": [always],
                "action": {"type": "duplicate", "status_option": "ACTIVE"},
            },
            {"id": "tell", "conditions": [always], "action": {"type": "notify", "webhook": "ops"}},
        ],
    }
    await run_rule(settings, db, rule)
    copy_record, told = await records(db)
    assert (copy_record["field"], told["field"], len(received)) == ("copies", "notify", 1)
    copy_id = str(copy_record["after"])
    assert (await sandbox.object(copy_id))["status"] == "ACTIVE"
    batch_id = str(copy_record["batch_id"])
    async with engine_for(settings, db) as engine:
        kept = (await preview(engine, batch_id, now=now())).as_json()
        assert [(c["action"], c["reason"]) for c in kept["changes"]] == [
            ("none", "copy_kept"),
            ("none", "notification_cannot_be_undone"),
        ]
        assert kept["changes"][0]["entity_id"] == copy_id  # the copy, not its source
        offered = (await preview(engine, batch_id, pause_copies=True, now=now())).as_json()
        assert offered["changes"][0] | {"execution_id": None} == {
            "execution_id": None,
            "record_key": copy_record["key"],
            "task_id": "copy",
            "entity_id": copy_id,
            "entity_name": f"copy of {copy_record['entity_name']}",
            "field": "status",
            "before": None,
            "after": "PAUSED",
            "live": "ACTIVE",
            "action": "pause_copy",
            "will_revert": True,
            "reason": None,
        }
        result = await undo_batch(engine, batch_id, by="api", pause_copies=True, now=now())
    paused, message = result["changes"]
    assert (paused["entity_id"], paused["outcome"], paused["after"]) == (
        copy_id,
        "applied",
        "PAUSED",
    )
    assert (message["outcome"], message["reason"]) == ("skipped", "notification_cannot_be_undone")
    assert (await sandbox.object(copy_id))["status"] == "PAUSED"
    assert (await sandbox.object(source))["status"] == "ACTIVE"  # the source is not touched
    assert len(received) == 1


async def test_budget_reverts_count_against_the_change_budget_like_any_change(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    guarded = settings.model_copy(update={"max_daily_budget_change_pct": 30})
    batch_id, before = await misfire(guarded, db, sandbox)
    async with engine_for(guarded, db) as engine:
        result = await undo_batch(engine, batch_id, by="api", now=now())
    budgets = [c for c in result["changes"] if c["field"] == "daily_budget"]
    assert len(budgets) == 5
    for change in budgets:  # +20 % used 20 of the 30 % a budget may move in 24 h
        base = before[str(change["entity_name"])][1]
        assert change["outcome"] == "applied" and change["clamped_by"] == ["change_budget"]
        assert change["before"] == base * 12 // 10 and change["after"] == base * 11 // 10
    statuses = [c for c in result["changes"] if c["field"] == "status"]
    assert [c["after"] for c in statuses] == ["ACTIVE"] * 3
