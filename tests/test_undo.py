"""Undo a batch: each change set back once, where nobody changed it since (against the sandbox)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from flow import (
    aged,
    campaign_ids,
    campaign_rule,
    dispatch,
    engine_for,
    kill,
    process_env,
    reap,
    records,
    run_rule,
    sandbox_quiet,
    successful_writes,
    wait_for,
    work,
    writes_at_least,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.undo.plan import revert_state, undo_batch_id
from ruleengine.undo.run import preview, undo_batch
from undo_helpers import (
    DELIVERING,
    RAISED,
    adset_budgets,
    adset_ids,
    limit_used_up,
    misfire,
    state,
)

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


async def test_an_undo_killed_then_reaped_is_finished_by_asking_again_with_its_records_whole(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    batch_id, before = await misfire(settings, db, sandbox)
    writes = len(await successful_writes(sandbox))
    env = process_env(settings, account_lock_ttl_s="2") | {"PYTHONPATH": str(SRC)}
    await sandbox.set_faults(latency_ms=400)  # room to kill between the writes
    with (tmp_path / "undo.log").open("wb") as log:
        undo = subprocess.Popen(
            [sys.executable, "-m", "ruleengine", "batches", "undo", batch_id],
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
    # the reaper, long after: the undo batch ABANDONED, its landed reverts recovered as records
    await reap(settings, db, redis, now=now() + timedelta(hours=2))
    undo_id = f"undo:{batch_id}"
    recovered = await records(db, batch_id=undo_id)
    assert recovered and all(r["recovered_by"] == "reaper" for r in recovered)
    assert all("undoes_execution" not in r for r in recovered)
    async with engine_for(settings, db) as engine:
        result = await undo_batch(engine, batch_id, by="api", now=now())
    assert await state(sandbox) == before
    assert len(await successful_writes(sandbox)) == writes + 8
    assert len(result["changes"]) == 8
    applied = {str(r["_id"]) for r in await records(db, batch_id=batch_id, outcome="applied")}
    assert {c["undoes_execution"] for c in result["changes"]} == applied
    assert {(c["kind"], c["revert"]) for c in result["changes"]} == {("undo", "reverted")}
    assert result["complete"] is True and result["batch"]["reverted_count"] == 8
    original = await db["batches"].find_one({"_id": batch_id})
    assert original is not None and original["not_undone"] == []


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
    assert table.splitlines()[0] == (
        f"undo of {batch_id} (would be undo:{batch_id}), dry run,"
        " account Demo Store US (act_1001), amounts in USD"
    )
    assert "will revert" in table.splitlines()[1]
    assert sum(line.split()[-1] == "yes" for line in table.splitlines()[2:]) == 8
    assert await state(sandbox) != before
    result = await asyncio.to_thread(cli)
    assert result.splitlines()[0].startswith(f"undo:{batch_id}: undoes {batch_id}, account ")
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
            "group": None,
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


async def test_reverts_are_not_held_to_the_change_budget_yet_later_rule_changes_count_them(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    guarded = settings.model_copy(update={"max_daily_budget_change_pct": 30})
    batch_id, before = await misfire(guarded, db, sandbox)
    async with engine_for(guarded, db) as engine:
        result = await undo_batch(engine, batch_id, by="api", now=now())
    budgets = [c for c in result["changes"] if c["field"] == "daily_budget"]
    assert len(budgets) == 5
    for change in budgets:  # +20 % used 20 of the 30 %: the undo still goes all the way back
        base = before[str(change["entity_name"])][1]
        assert change["outcome"] == "applied" and change["clamped_by"] == []
        assert change["before"] == base * 12 // 10 and change["after"] == base
    assert await state(sandbox) == before
    assert result["complete"] is True and result["batch"]["change_budget_count"] == 0
    # the rule's next run sees +20 % and -20 %: 40 % of the base moved, nothing left
    await dispatch(guarded, db, now=now() + timedelta(minutes=16))
    await work(guarded)
    again = await records(db, rule_id=result["batch"]["rule_id"], task_id="raise")
    later = [r for r in again if r["batch_id"] != batch_id and r["entity_name"] in RAISED]
    assert {(r["outcome"], r["reason"]) for r in later} == {("skipped", "change_budget_exhausted")}
    assert len(later) == 5


async def test_a_halved_budget_is_set_back_exactly_not_through_the_engines_cap(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    campaign = (await campaign_ids(sandbox))["Brand Awareness US"]
    await sandbox.ads_manager_change(campaign, daily_budget=30000)
    cut = campaign_rule({"type": "decrease_budget", "percent": 50}, [DELIVERING], name="Cut")
    cut["filters"] = [{"field": "id", "operator": "EQUAL", "value": campaign}]
    await run_rule(settings, db, cut)
    [record] = await records(db)
    assert (record["outcome"], record["before"], record["after"]) == ("applied", 30000, 15000)
    assert (await sandbox.object(campaign))["daily_budget"] == 15000
    async with engine_for(settings, db) as engine:
        result = await undo_batch(engine, str(record["batch_id"]), by="api", now=now())
    [change] = result["changes"]
    assert (change["outcome"], change["before"], change["after"]) == ("applied", 15000, 30000)
    assert change["clamped_by"] == [] and change["revert"] == "reverted"
    assert (await sandbox.object(campaign))["daily_budget"] == 30000
    assert result["complete"] is True and result["batch"]["reverted_count"] == 1


async def test_a_revert_metas_limit_holds_back_is_reported_and_a_later_undo_sets_it_back(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch = await limit_used_up(settings, db, sandbox)
    writes = len(await successful_writes(sandbox))
    async with engine_for(settings, db) as engine:
        first = await undo_batch(engine, batch.batch_id, by="api", now=now())
        others = [i for i in batch.execution if i != batch.limited]
        assert await adset_budgets(sandbox, others) == {i: batch.before[i] for i in others}
        [held] = [c for c in first["changes"] if c["entity_id"] == batch.limited]
        assert (held["outcome"], held["reason"]) == ("skipped", "meta_budget_change_limit")
        assert held["revert"] == "not_reverted" and held["error"]["allowed_at"] is not None
        assert first["complete"] is False
        row = first["batch"]
        assert (row["status"], row["complete"]) == ("DONE", False)
        assert (row["reverted_count"], row["not_reverted_count"]) == (2, 1)
        assert len(await successful_writes(sandbox)) == writes + 2
        noted = await db["batches"].find_one({"_id": batch.batch_id})
        assert noted is not None and noted["not_undone"] == [batch.execution[batch.limited]]
        # an hour later Meta allows it: a second undo names the execution the first missed
        later = batch.at + timedelta(minutes=61)
        await sandbox.set_clock(later)
        # an hour later by MongoDB's clock too, which the engine's own changes are stamped by;
        # the sandbox cannot move the times its activity log shows, so the engine goes by its
        # own changes here (Meta, on its clock an hour on, allows the change)
        await aged(db, batch.batch_id, timedelta(minutes=61))
        await sandbox.set_faults(rules=[{"path_contains": "/activities", "code": 2}])
        asked = [batch.execution[batch.limited]]
        second = await undo_batch(engine, batch.batch_id, by="ops", executions=asked, now=later)
        again = await undo_batch(engine, batch.batch_id, by="ops", executions=asked, now=later)
        undone = [batch.execution[i] for i in others]
        nothing = await undo_batch(engine, batch.batch_id, by="ops", executions=undone, now=later)
    assert second["undo_batch_id"].startswith(f"undo:{batch.batch_id}:")
    assert second["undo_batch_id"] != first["undo_batch_id"]
    [restored] = second["changes"]
    assert (restored["outcome"], restored["after"]) == ("applied", batch.before[batch.limited])
    assert second["complete"] is True
    assert again["existing"] is True and again["undo_batch_id"] == second["undo_batch_id"]
    assert nothing["undo_batch_id"] not in (first["undo_batch_id"], second["undo_batch_id"])
    assert {(c["outcome"], c["reason"]) for c in nothing["changes"]} == {
        ("skipped", "already_undone")
    }
    assert nothing["complete"] is True
    assert await adset_budgets(sandbox, list(batch.execution)) == batch.before
    assert len(await successful_writes(sandbox)) == writes + 3  # each change set back once
    original = await db["batches"].find_one({"_id": batch.batch_id})
    assert original is not None and original["undone_by"] == first["undo_batch_id"]
    assert len(original["undos"]) == 3 and original["not_undone"] == []


async def test_a_budget_below_metas_minimum_now_is_not_written_and_reported(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    adset = (await adset_ids(sandbox, "act_1004"))["Creative Test JP 1 - Lookalike 1%"]
    await sandbox.ads_manager_change(adset, daily_budget=200)  # ¥200; Meta's minimum is ¥150
    rule = campaign_rule({"type": "increase_budget", "percent": 10}, [], level="adset")
    rule |= {"ad_accounts": ["act_1004"], "name": "Raise yen"}
    rule["filters"] = [{"field": "id", "operator": "EQUAL", "value": adset}]
    rule["tasks"][0]["conditions"] = [{"metric": "daily_budget", "operator": ">", "value": 0}]
    await run_rule(settings, db, rule)
    [record] = await records(db)
    assert (record["outcome"], record["before"], record["after"]) == ("applied", 200, 220)
    # a record kept when the account's minimum was lower: its value is below Meta's now
    await db["executions"].update_one({"_id": record["_id"]}, {"$set": {"before": 100}})
    writes = len(await successful_writes(sandbox))
    async with engine_for(settings, db) as engine:
        result = await undo_batch(engine, str(record["batch_id"]), by="api", now=now())
    [change] = result["changes"]
    assert (change["outcome"], change["reason"], change["revert"]) == (
        "no_change",
        "at_min_budget",
        "not_reverted",
    )
    assert (change["requested"], change["clamped_by"]) == (100, ["min_daily_budget"])
    assert result["complete"] is False and result["batch"]["not_reverted_count"] == 1
    assert len(await successful_writes(sandbox)) == writes
    assert (await sandbox.object(adset))["daily_budget"] == 220


async def test_the_cli_exits_3_when_a_change_could_not_be_set_back(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch = await limit_used_up(settings, db, sandbox)
    env = process_env(settings) | {"PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "ruleengine", "batches", "undo", batch.batch_id]
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert "incomplete: 1 change(s) could not be set back" in lines[0]
    [held] = [line for line in lines if "not_reverted" in line.split()]
    assert "meta_budget_change_limit" in held.split()
    assert sum("reverted" in line.split() for line in lines) == 2


async def test_the_cli_undoes_one_execution_then_the_rest_each_its_own_undo(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(settings, db, sandbox)
    first_id = str((await records(db, batch_id=batch_id, outcome="applied"))[0]["_id"])
    env = process_env(settings) | {"PYTHONPATH": str(SRC)}
    writes = len(await successful_writes(sandbox))

    def cli(*args: str) -> dict[str, Any]:
        command = [sys.executable, "-m", "ruleengine", "batches", "undo", batch_id, "--json"]
        done = subprocess.run(
            [*command, *args], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        answer: dict[str, Any] = orjson.loads(done.stdout)
        return answer

    one = await asyncio.to_thread(cli, "--execution", first_id)
    assert one["undo_batch_id"].startswith(f"undo:{batch_id}:")
    assert [c["outcome"] for c in one["changes"]] == ["applied"]
    rest = await asyncio.to_thread(cli)
    assert rest["undo_batch_id"] == f"undo:{batch_id}"
    assert sorted(c["reason"] or "" for c in rest["changes"]) == ["", *[""] * 6, "already_undone"]
    assert await state(sandbox) == before
    again = await asyncio.to_thread(cli, "--execution", first_id)
    assert again["existing"] is True and again["undo_batch_id"] == one["undo_batch_id"]
    assert len(await successful_writes(sandbox)) == writes + 8


def test_an_undo_of_chosen_executions_has_the_id_of_that_set() -> None:
    a, b, c = ({"_id": f"6750000000000000000000a{i}"} for i in range(3))
    assert undo_batch_id("B") == "undo:B"
    assert undo_batch_id("B", [a, b]) == undo_batch_id("B", [b, a, b])
    assert undo_batch_id("B", [a, b]).startswith("undo:B:")
    assert len({undo_batch_id("B", s) for s in ([a], [b], [a, b], [a, b, c])}) == 4


def test_what_an_undo_result_means() -> None:
    assert revert_state("revert", "applied", None) == "reverted"
    assert revert_state("revert", "no_change", "already_applied") == "reverted"
    assert revert_state("pause_copy", "no_change", "already_paused") == "reverted"
    assert revert_state("revert", "skipped", "changed_by_someone_else") == "left_alone"
    assert revert_state("none", "skipped", "already_undone") == "left_alone"
    assert revert_state("none", "skipped", "notification_cannot_be_undone") == "left_alone"
    for outcome, reason in [
        ("skipped", "meta_budget_change_limit"),
        ("failed", "meta_budget_change_limit"),
        ("no_change", "at_min_budget"),
        ("failed", "write_failed"),
        ("failed", "write_unconfirmed"),
        ("skipped", "write_pending_elsewhere"),
        ("failed", "live_read_failed"),
    ]:
        assert revert_state("revert", outcome, reason) == "not_reverted", reason
