"""The worker end to end: dispatcher + arq worker + sandbox + embedded servers."""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from arq.worker import Worker

from flow import (
    LOSER,
    NEW_YORK,
    WINNER,
    campaign_ids,
    campaign_rule,
    dispatch,
    kill,
    objects_named,
    reap,
    records,
    run_rule,
    save_rule,
    start_worker,
    successful_writes,
    wait_for,
    work,
    worker_env,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob, deserialize, evaluate_job_id
from ruleengine.jobs import WorkerSettings, worker_kwargs
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.process import GC_YOUNGEST_THRESHOLD
from support import SANDBOX_NOW, SANDBOX_TOKEN


@pytest.fixture
async def wired(settings: Settings, db: Database, redis: Any, accounts: list[str]) -> Settings:
    """Everything a flow needs: accounts registered, Redis and the database empty."""
    return settings


# ---------------------------------------------------------------- arq settings


def test_every_worker_setting_is_a_real_arq_worker_parameter(settings: Settings) -> None:
    parameters = set(inspect.signature(Worker).parameters)
    kwargs = worker_kwargs(settings)
    assert set(kwargs) <= parameters
    assert kwargs["max_tries"] == 1
    assert kwargs["retry_jobs"] is False
    assert kwargs["keep_result"] == 0
    assert kwargs["queue_name"] == c.QUEUE_NAME
    assert {f.name: f.max_tries for f in kwargs["functions"]}[c.EVALUATE_JOB] == 1
    assert kwargs["job_serializer"]({"a": 1}) == b'{"a":1}'


def test_worker_settings_reads_the_environment_only_when_arq_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RULEENGINE_WORKER_MAX_JOBS", "7")
    fresh = type(WorkerSettings)()
    assert dict.__len__(fresh) == 0  # nothing read at import
    assert dict(fresh.items())["max_jobs"] == 7


_STARTED_WORKER = """
import asyncio, gc, json
from ruleengine.worker.process import shutdown, startup
before = gc.get_threshold()
async def main():
    ctx = {}
    await startup(ctx)
    try:
        seen = {"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}
        print(json.dumps(seen))
    finally:
        await shutdown(ctx)
asyncio.run(main())
"""


def test_a_started_worker_has_its_garbage_collector_look_less_often(settings: Settings) -> None:
    """The worker's startup raises the youngest generation's threshold (Python's default,
    700, walks a worker's whole heap about once per job that builds thousands of records)
    and freezes what it built, in the process ``arq ruleengine.jobs.WorkerSettings`` runs."""
    done = subprocess.run(
        [sys.executable, "-c", _STARTED_WORKER],
        env=worker_env(settings),
        capture_output=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert seen["before"][0] == 700  # what it starts from: Python's default
    assert seen["after"] == [GC_YOUNGEST_THRESHOLD, *seen["before"][1:]]
    assert seen["frozen"] > 0


# ---------------------------------------------------------------- budgets


async def test_a_scaling_rule_raises_the_live_budget_by_exactly_20_percent_once(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    before = await objects_named(sandbox)
    rule = await run_rule(
        wired,
        db,
        campaign_rule({"type": "increase_budget", "percent": 20}, [WINNER], cooldown_minutes=360),
    )
    after = await objects_named(sandbox)
    applied = await records(db, outcome="applied")
    assert applied, await records(db)
    for record in applied:
        name = record["entity_name"]
        live = int(before[name]["daily_budget"])
        assert record["before"] == live
        assert record["after"] == round(live * 1.2)
        assert int(after[name]["daily_budget"]) == round(live * 1.2)
        assert [c["passed"] for c in record["conditions"]] == [True]
        assert record["conditions"][0]["actual"] > 3
        assert set(record["trace"]) == {"cooldown", "fetch", "evaluate", "act"}
        assert record["rule_version"] == 1
        assert record["next_execute_at"] is not None  # cooldown written
    writes = await successful_writes(sandbox)
    assert len(writes) == len(applied)
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None
    assert (batch["status"], batch["execute_count"], batch["applied_count"]) == (
        "DONE",
        1,
        len(applied),
    )
    assert batch["evaluated_count"] == 12
    assert batch["graph"]["counted_calls"] >= 1
    assert set(batch["trace"]) == {"cooldown", "fetch", "evaluate", "act"}


async def test_a_redelivered_batch_writes_nothing_and_keeps_what_the_batch_did(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    rule = await save_rule(db, campaign_rule({"type": "increase_budget", "percent": 20}, [WINNER]))
    await dispatch(wired, db)
    raw = await redis.get(b"arq:job:" + (await redis.zrange(c.QUEUE_NAME, 0, 0))[0])
    payload = EvaluateJob.model_validate(deserialize(raw)["a"][0])
    await work(wired)
    writes_after_first = len(await successful_writes(sandbox))
    assert writes_after_first
    queue = connect_queue(wired)
    await queue.enqueue_job(
        c.EVALUATE_JOB, payload.to_job(), _job_id=evaluate_job_id(payload.batch_id) + ":again"
    )
    await queue.aclose()
    await work(wired)
    assert len(await successful_writes(sandbox)) == writes_after_first
    # one record per (batch, task, entity), still saying what the batch did
    batch_records = await records(db, batch_id=payload.batch_id)
    assert len(batch_records) == 12
    applied = [r for r in batch_records if r["outcome"] == "applied"]
    assert len(applied) == writes_after_first
    assert {r["delivery"] for r in applied} == {1}
    assert {r["delivery"] for r in batch_records if r["outcome"] != "applied"} == {2}
    batch = await db[c.BATCHES].find_one({"_id": payload.batch_id})
    assert batch is not None and batch["execute_count"] == 2
    assert batch["rule_id"] == rule.id
    assert (batch["applied_count"], batch["affected_count"], batch["evaluated_count"]) == (
        writes_after_first,
        writes_after_first,
        12,
    )


async def test_max_budget_and_min_budget_clamp(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    before = await objects_named(sandbox)
    await run_rule(
        wired,
        db,
        campaign_rule(
            {"type": "increase_budget", "percent": 40, "max_budget": 210}, [WINNER], name="up"
        ),
    )
    await run_rule(
        wired,
        db,
        campaign_rule(
            {"type": "decrease_budget", "percent": 50, "min_budget": 250}, [LOSER], name="down"
        ),
    )
    for record in await records(db, outcome="applied"):
        live = int(before[record["entity_name"]]["daily_budget"])
        if record["action"]["type"] == "increase_budget":
            assert record["after"] == min(round(live * 1.4), 21000)
        else:
            assert record["after"] == max(round(live * 0.5), 25000)
            assert record["clamped_by"] == ["min_budget"]
    clamped = await records(db, reason="at_max_budget") + await records(db, clamped_by="max_budget")
    assert clamped


async def test_engine_wide_change_cap_applies_to_set_budget(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    capped = settings.model_copy(update={"max_budget_change_pct": 10})
    await run_rule(capped, db, campaign_rule({"type": "set_budget", "amount": 990}, [WINNER]))
    for record in await records(db, outcome="applied"):
        assert record["after"] == record["before"] + int(record["before"] * 0.10)
        assert record["clamped_by"] == ["max_budget_change_pct"]


async def test_a_campaign_without_its_own_budget_is_skipped_not_crashed(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    spends = {"metric": "spend", "period": "today", "operator": ">", "value": 0}
    await run_rule(wired, db, campaign_rule({"type": "increase_budget", "percent": 10}, [spends]))
    reasons = {r["entity_name"]: r["reason"] for r in await records(db)}
    assert reasons["[AUTO] Prospecting US 3"] == "no_campaign_budget"  # ad-set budgets
    assert reasons["[AUTO] Broad US 1"] == "no_daily_budget"  # lifetime budget


async def test_ad_set_budgets_change_at_most_4_times_an_hour(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    spends = {"metric": "spend", "period": "today", "operator": ">", "value": 0}
    data = campaign_rule({"type": "increase_budget", "percent": 1}, [spends], level="adset")
    data["filters"] = [{"field": "campaign.name", "operator": "CONTAIN", "value": "Creative Test"}]
    rule = await save_rule(db, data)
    start = datetime.now(UTC)
    for run in range(5):
        await dispatch(wired, db, now=start + timedelta(minutes=15 * run))
        await work(wired)
    per_adset: dict[str, list[str]] = {}
    for record in await records(db, rule_id=rule.id):
        per_adset.setdefault(record["entity_id"], []).append(
            record["outcome"] if record["outcome"] != "skipped" else record["reason"]
        )
    assert per_adset
    for outcomes in per_adset.values():
        assert outcomes[:4] == ["applied"] * 4
        assert outcomes[4] == "meta_budget_change_limit"
    assert not [w for w in await sandbox.writes() if not w["ok"]]  # never hit Meta's error 17


# ---------------------------------------------------------------- every action


async def test_every_action_type_changes_the_sandbox_and_records_before_after(
    webhook: tuple[Settings, list[dict[str, Any]]],
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
) -> None:
    settings, received = webhook
    winner = "[AUTO] Prospecting US 1"
    always = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"type": "pause"}, lambda o, r: o["status"] == "PAUSED" == r["after"]),
        ({"type": "activate"}, lambda o, r: o["status"] == "ACTIVE" == r["after"]),
        (
            {"type": "rename", "template": "{name} [checked {date}]"},
            lambda o, r: (
                o["name"]
                == r["after"]
                == f"{winner} [checked {r['created_at'].astimezone(NEW_YORK).date()}]"
            ),
        ),
        (
            {"type": "append_to_name", "text": " [A]"},
            lambda o, r: o["name"] == r["after"] == r["before"] + " [A]",
        ),
        (
            {"type": "prepend_to_name", "text": "[P] "},
            lambda o, r: o["name"] == r["after"] == "[P] " + r["before"],
        ),
        (
            {"type": "set_budget", "amount": 250},
            lambda o, r: int(o["daily_budget"]) == r["after"] == 25000,
        ),
        (
            {"type": "decrease_budget", "percent": 10},
            lambda o, r: int(o["daily_budget"]) == r["after"] == 22500,
        ),
        (
            {"type": "increase_budget", "percent": 10},
            lambda o, r: int(o["daily_budget"]) == r["after"] == 24750,
        ),
        ({"type": "duplicate", "rename_suffix": " - Copy", "status_option": "PAUSED"}, None),
        (
            {"type": "notify", "webhook": "ops", "template": "{rule}: {entity_name} {conditions}"},
            None,
        ),
    ]
    entity_id = (await campaign_ids(sandbox))[winner]
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]  # names change below
    for action, check in cases:
        rule = await run_rule(
            settings,
            db,
            campaign_rule(action, [always], name=f"every {action['type']}", filters=only),
        )
        (record,) = await records(db, rule_id=rule.id)
        assert record["outcome"] == "applied", record
        assert record["executed"] is True
        assert record["before"] is not None or action["type"] in ("notify",)
        assert record["after"] is not None
        if check is not None:
            live = await sandbox.object(entity_id)
            assert check(live, record), (action, live, record["before"], record["after"])
    copy = await sandbox.object((await records(db, field="copies"))[0]["after"])
    assert copy["name"].endswith(" - Copy")
    assert copy["status"] == "PAUSED"
    assert len(received) == 1
    name = (await sandbox.object(entity_id))["name"]
    assert received[0]["text"].startswith(f"every notify: {name} impressions (last_7d) ")
    assert received[0]["text"].endswith("&gt; 0 ✓")  # Slack shows "&gt;" as ">"


async def test_append_never_doubles_across_runs(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    always = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
    rule = await save_rule(db, campaign_rule({"type": "append_to_name", "text": " [X]"}, [always]))
    start = datetime.now(UTC)
    for run in range(2):
        await dispatch(wired, db, now=start + timedelta(minutes=15 * run))
        await work(wired)
    names = [o["name"] for o in (await objects_named(sandbox)).values()]
    assert all(not n.endswith(" [X] [X]") for n in names)
    assert sum(n.endswith(" [X]") for n in names) >= 10
    second = await records(db, rule_id=rule.id, reason="already_named")
    assert len(second) >= 10


# ---------------------------------------------------------------- evaluation outcomes


async def test_a_ratio_without_data_fails_its_condition_with_no_data(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    await run_rule(wired, db, campaign_rule({"type": "pause"}, [LOSER]))
    creative = [r for r in await records(db) if r["entity_name"].startswith("[AUTO] Creative Test")]
    assert creative
    condition = creative[0]["conditions"][0]
    assert (condition["actual"], condition["passed"], condition["reason"]) == (
        None,
        False,
        "no_data",
    )
    assert creative[0]["outcome"] == "not_matched"
    assert creative[0]["reason"] == "no_data"


async def test_a_second_evaluation_inside_the_cooldown_is_recorded_as_skipped(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    rule = await save_rule(db, campaign_rule({"type": "pause"}, [LOSER], cooldown_minutes=60))
    start = datetime.now(UTC)
    await dispatch(wired, db, now=start)
    await work(wired)
    paused = {r["entity_id"] for r in await records(db, rule_id=rule.id, outcome="applied")}
    assert paused
    await dispatch(wired, db, now=start + timedelta(minutes=15))
    await work(wired)
    skipped = await records(db, rule_id=rule.id, reason="next_execute_not_reached")
    assert {r["entity_id"] for r in skipped} == paused
    assert all(r["outcome"] == "skipped" and r["next_execute_at"] for r in skipped)
    assert len(await successful_writes(sandbox)) == len(paused)


async def test_fetch_failures_become_records_not_a_crashed_worker(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_faults(rules=[{"path_contains": "insights", "code": 100}])
    rule = await run_rule(wired, db, campaign_rule({"type": "pause"}, [LOSER]))
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None and batch["status"] == "FAILED"
    assert {r["reason"] for r in await records(db, rule_id=rule.id)} == {"fetch_failed"}


# ---------------------------------------------------------------- the error log


async def test_fifty_similar_write_failures_become_one_group(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    await sandbox.reset(scenario="bench", accounts=1, campaigns_per_account=60)
    await sandbox.set_clock(SANDBOX_NOW)
    from ruleengine.store.credentials import CredentialStore, load_key

    await CredentialStore(db, load_key(settings)).add(
        "act_2001", SANDBOX_TOKEN, now=datetime.now(UTC)
    )
    await sandbox.set_faults(
        rules=[{"path_contains": "", "method": "POST", "code": 2, "times": 50}]
    )
    data = campaign_rule(
        {"type": "pause"},
        [{"metric": "impressions", "period": "today", "operator": ">", "value": 0}],
    )
    data["ad_accounts"] = ["act_2001"]
    await save_rule(db, data)
    await dispatch(settings, db)
    worker = await work(settings)
    registry = worker.ctx["metrics"].registry
    assert (
        registry.get_sample_value("ruleengine_actions_total", {"type": "pause", "result": "failed"})
        == 50
    )
    assert (
        registry.get_sample_value(
            "ruleengine_actions_total", {"type": "pause", "result": "applied"}
        )
        == 10
    )
    assert registry.get_sample_value("ruleengine_graph_errors_total", {"code": "2"}) == 50
    assert registry.get_sample_value("ruleengine_evaluations_total", {"outcome": "failed"}) == 50
    groups = [g async for g in db[c.ERROR_LOG].find({"function": "meta.writer.set_status"})]
    assert len(groups) == 1
    group = groups[0]
    assert group["count"] == 50
    assert len(group["samples"]) == 10
    assert (
        "<id>" in str(group["samples"][0]["params"])
        or group["samples"][0]["params"]["path"].isdigit()
    )
    assert group["samples"][0]["response"]["error"]["code"] == 2
    assert len(await records(db, reason="write_failed")) == 50
    assert len(await records(db, outcome="applied")) == 10
    # no token anywhere: Redis, MongoDB (records, error samples, batches), logs
    everything = caplog.text
    for name in await db.list_collection_names():
        everything += str([d async for d in db[name].find({})])
    async for key in redis.scan_iter():
        if await redis.type(key) == b"string":
            everything += str(await redis.get(key))
    assert SANDBOX_TOKEN not in everything


# ---------------------------------------------------------------- a worker that dies


async def test_a_worker_killed_between_intent_and_write_never_doubles_the_change(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, tmp_path: Path
) -> None:
    before = await objects_named(sandbox)
    rule = await save_rule(
        db,
        campaign_rule({"type": "increase_budget", "percent": 20}, [WINNER], cooldown_minutes=360),
    )
    start = datetime.now(UTC)
    await dispatch(wired, db, now=start)
    await sandbox.set_faults(latency_ms=1500)  # every Graph request takes 1.5 s: time to kill
    worker = start_worker(wired, tmp_path / "worker.log")
    try:
        await wait_for(lambda: db[c.ACTION_INTENTS].find_one({"status": "pending"}), 10)
    finally:
        kill(worker)
    await sandbox.clear_faults()
    # No waiting here: the reaper settles under the account's write lock, which the dead
    # worker renewed right before its write, so a write in flight lands (or not) first.
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None and batch["status"] == "RUNNING"
    assert await reap(wired, db, redis, now=start + timedelta(hours=1)) == 1
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None and batch["status"] == "ABANDONED"
    assert batch["recovered_at"] is not None
    assert await db[c.ACTION_INTENTS].count_documents({"status": "pending"}) == 0
    # every write Meta received in the abandoned run is an execution record
    landed = {w["id"] for w in await successful_writes(sandbox)}
    recovered = await records(db, batch_id=batch["_id"], recovered_by="reaper")
    assert {r["entity_id"] for r in recovered if r["outcome"] == "applied"} == landed
    assert batch["applied_count"] == len(landed)
    # the next scheduled runs act once more at most per campaign: never a second +20 %
    await redis.flushdb()
    await dispatch(wired, db, now=start + timedelta(minutes=15))
    await work(wired)
    after = await objects_named(sandbox)
    for name, obj in after.items():
        live = int(before[name].get("daily_budget") or 0)
        if live and name.startswith(("[AUTO] Prospecting US 1", "[AUTO] Retargeting US 1")):
            assert int(obj["daily_budget"]) == round(live * 1.2), name
    per_entity: dict[str, int] = {}
    for write in await successful_writes(sandbox):
        per_entity[write["id"]] = per_entity.get(write["id"], 0) + 1
    assert per_entity
    assert max(per_entity.values()) == 1


async def test_the_reaper_fails_an_intent_whose_write_never_landed(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(sandbox)
    entity_id = ids["[AUTO] Prospecting US 1"]
    live = int((await sandbox.object(entity_id))["daily_budget"])
    now = datetime.now(UTC)
    stale = now - timedelta(hours=2)
    await db[c.BATCHES].insert_one(
        {
            "_id": "b-lost",
            "status": "RUNNING",
            "account": "act_1001",
            "last_started_at": stale,
            "started_at": stale,
        }
    )
    await db[c.ACTION_INTENTS].insert_one(
        {
            "batch_id": "b-lost",
            "task_id": "t",
            "entity_id": entity_id,
            "rule_id": "r",
            "account": "act_1001",
            "field": "daily_budget",
            "before": live,
            "target": round(live * 1.2),
            "status": "pending",
            "created_at": stale,
            "cooldown_minutes": 60,
        }
    )
    assert await reap(wired, db, redis, now=now) == 1
    intent = await db[c.ACTION_INTENTS].find_one({"batch_id": "b-lost"})
    assert intent is not None and (intent["status"], intent["reason"]) == ("failed", "not_applied")
    assert await sandbox.writes() == []


async def test_custom_metrics_come_from_the_sheet_once_per_job(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    from graph_sandbox.extras import write_sheets_credentials

    key_file = write_sheets_credentials(tmp_path / "sheets.json", sandbox.base_url)
    with_sheet = settings.model_copy(
        update={
            "sheets_credentials_file": key_file,
            "sheets_api_url": f"{sandbox.base_url}/sheets",
            "sheets_call_interval_s": 0.0,
        }
    )
    data = campaign_rule(
        {"type": "pause"},
        [
            {
                "metric": "purchase_roas.omni_purchase",
                "period": "last_7d",
                "operator": "<",
                "compare_to": {"metric": "custom:target_roas"},
            },
            {"metric": "custom:missing_column", "operator": ">", "value": 0},
        ],
        custom_metrics={"spreadsheet_id": "demo-margins", "worksheet": "targets", "key": "id"},
    )
    data["tasks"][0]["match"] = "any"
    rule = await run_rule(with_sheet, db, data)
    evaluated = await records(db, rule_id=rule.id)
    assert len(evaluated) == 12
    for record in evaluated:
        target, missing = record["conditions"]
        assert target["compare_to"] == "custom:target_roas"
        assert target["expected"] is not None and 1.4 <= target["expected"] <= 2.6  # from the sheet
        assert (missing["actual"], missing["reason"]) == (None, "no_data")
    assert await records(db, rule_id=rule.id, outcome="applied")  # losers sit below their target
    stats_url = f"{sandbox.base_url}/sheets/_admin/stats"
    async with aiohttp.ClientSession() as http, http.get(stats_url) as response:
        counts = (await response.json())["counts"]
    assert counts["values.get"] == 1  # read once for the job, not once per campaign
