"""``schedule_budget`` through the sandbox: a budget increase for a window made as one of Meta's
budget schedules (high-demand periods) through the budget write path — live read, clamp,
intent, never twice, approvals, Rule Logs, the preview, undo by deleting it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from flow import (
    aged,
    campaign_rule,
    dispatch,
    engine_for,
    kill,
    reap,
    records,
    run_rule,
    sandbox_quiet,
    save_rule,
    start_worker,
    wait_for,
    work,
    write_in_flight,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.ruledocs import RuleDoc
from ruleengine.undo.run import undo_batch
from ruleengine.worker.job import evaluate_account
from ruleengine.worker.preview import open_preview, preview_rule
from support import SANDBOX_TOKEN
from test_approved import approval, propose_and_approve
from test_copies import graph

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
PROSPECTING = "[AUTO] Prospecting US 1"  # campaign daily budget 200.00


def schedule_rule(action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A campaign rule scheduling ``action`` on Prospecting US 1 (act_1001, New York)."""
    return campaign_rule(
        {"type": "schedule_budget", **action},
        [ALWAYS],
        filters=[{"field": "name", "operator": "EQUAL", "value": PROSPECTING}],
        **extra,
    )


async def schedules_of(sandbox: SandboxAdmin, object_id: str) -> list[dict[str, Any]]:
    """The budget schedules Meta holds of an object, as any client lists them."""
    fields = "id,time_start,time_end,budget_value,budget_value_type"
    return list((await graph(sandbox, f"{object_id}/budget_schedules", fields=fields))["data"])


async def test_a_window_of_hours_is_scheduled_once_and_undone_by_deleting_it(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    started = datetime.now(UTC)
    rule = await run_rule(settings, db, schedule_rule({"multiplier": 1.5, "window": {"hours": 4}}))
    finished = datetime.now(UTC)
    (row,) = await records(db, rule_id=rule.id, outcome="applied")
    assert (row["field"], row["before"], row["after"]) == ("budget_schedules", 20000, 30000)
    schedule = row["schedule"]
    assert (schedule["budget_value_type"], schedule["budget_value"]) == ("MULTIPLIER", 50)
    start = schedule["time_start"]  # the first quarter hour after the run
    assert start % 900 == 0 and started.timestamp() <= start < finished.timestamp() + 900
    assert schedule["time_end"] == start + 4 * 3600
    (held,) = await schedules_of(sandbox, row["entity_id"])
    assert held["id"] == row["response"]["id"]
    assert (held["budget_value"], held["budget_value_type"]) == (50, "MULTIPLIER")
    intents = await db[c.ACTION_INTENTS].find({"field": "budget_schedules"}).to_list(None)
    assert [(i["status"], i["schedule"]["time_start"]) for i in intents] == [("done", start)]

    # the next run finds it at Meta: the window overlaps it, nothing is sent again
    await dispatch(settings, db, now=datetime.now(UTC) + timedelta(minutes=15))
    await work(settings)
    again = [r for r in await records(db, rule_id=rule.id) if r["batch_id"] != row["batch_id"]]
    assert [(r["outcome"], r["reason"]) for r in again] == [("skipped", "schedule_overlap")]
    assert len(await schedules_of(sandbox, row["entity_id"])) == 1

    async with engine_for(settings, db) as engine:
        undone = await undo_batch(engine, row["batch_id"], by="api", now=datetime.now(UTC))
    assert [(c["outcome"], c["revert"]) for c in undone["changes"]] == [("applied", "reverted")]
    assert await schedules_of(sandbox, row["entity_id"]) == []
    writes = [(w["kind"], w["ok"]) for w in await sandbox.writes()]
    assert writes == [("budget_schedule", True), ("delete", True)]


async def run_once(
    settings: Settings,
    db: Database,
    data: dict[str, Any],
    *,
    at: datetime,
    batch_id: str | None = None,
    rule: RuleDoc | None = None,
) -> RuleDoc:
    """Save ``data`` (unless ``rule`` is given) and evaluate it once on its account at ``at``,
    as a worker does — under ``batch_id`` when given: a delivery of that batch again."""
    saved = rule or await save_rule(db, data)
    parsed = parse_rule(data)
    account = parsed.ad_accounts[0]
    async with engine_for(settings, db) as engine:
        reader = GraphReader.from_settings(engine.session)
        entities = await reader.list_for_rule(parsed, account, token=SANDBOX_TOKEN)
        job = EvaluateJob.of(
            parsed,
            batch_id=batch_id or f"{saved.id}-{account}-{at:%Y%m%dT%H%M}",
            rule_id=saved.id,
            version=saved.version,
            account=account,
            entities=entities,
            scheduled_at=at,
            dispatched_at=at,
        )
        await evaluate_account(engine, job, now=at)
    return saved


#: Saturday 5 December 2026, 12:00 UTC (the sandbox's clock stays at 1 December: ahead of it).
AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


async def test_a_local_window_in_a_half_hour_timezone_sends_whole_yen(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    data = campaign_rule(
        {
            "type": "schedule_budget",
            "amount": 40000,
            "window": {"start": "23:30", "end": "01:00"},
        },
        [ALWAYS],
        ad_accounts=["act_1004"],
        timezone="Asia/Kolkata",  # UTC+05:30
        filters=[{"field": "name", "operator": "EQUAL", "value": "[AUTO] Prospecting JP 1"}],
    )
    rule = await run_once(settings, db, data, at=AT)
    (row,) = await records(db, rule_id=rule.id, outcome="applied")
    assert (row["before"], row["after"]) == (30000, 40000)  # ¥30,000 → ¥40,000
    # 23:30–01:00 in Kolkata is 18:00–19:30 UTC, today
    start = int(datetime(2026, 12, 5, 18, 0, tzinfo=UTC).timestamp())
    assert row["schedule"] | {"offset": 1} == {
        "op": "create",
        "time_start": start,
        "time_end": start + 90 * 60,
        "budget_value_type": "ABSOLUTE",
        "budget_value": 10000,
        "offset": 1,
    }
    ((kind, params),) = [(w["kind"], w["params"]) for w in await sandbox.writes()]
    assert kind == "budget_schedule"
    assert params == {
        "budget_value": "10000",  # whole yen: the increase, rounded down
        "budget_value_type": "ABSOLUTE",
        "time_start": str(start),
        "time_end": str(start + 90 * 60),
    }


async def answer_lost(
    settings: Settings, db: Database, sandbox: SandboxAdmin, data: dict[str, Any]
) -> tuple[RuleDoc, dict[str, Any]]:
    """Run ``data`` once while the schedule's POST lands and the whole Batch API call's answer
    is lost (a proxy's 502): the rule, and its record saying ``write_unconfirmed``, its
    intent left pending."""
    await sandbox.set_faults(
        lost_answers=[{"path_contains": "budget_schedules", "method": "POST", "times": 1}]
    )
    rule = await run_once(settings, db, data, at=AT)
    (lost,) = [r for r in await records(db, rule_id=rule.id) if r["outcome"] != "not_matched"]
    assert (lost["outcome"], lost["reason"]) == ("failed", "write_unconfirmed")
    (intent,) = await db[c.ACTION_INTENTS].find({"rule_id": rule.id}).to_list(None)
    assert intent["status"] == "pending"
    return rule, lost


async def test_a_lost_answer_is_settled_from_metas_schedules_on_redelivery_never_sent_twice(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    data = schedule_rule({"multiplier": 1.25, "window": {"hours": 2}})
    rule, lost = await answer_lost(settings, db, sandbox, data)
    # the batch delivered again: the schedule is found at Meta, nothing is sent again
    await run_once(settings, db, data, at=AT, batch_id=lost["batch_id"], rule=rule)
    (row,) = await records(db, rule_id=rule.id)
    assert (row["outcome"], row["recovered_by"]) == ("applied", "redelivery")
    (held,) = await schedules_of(sandbox, row["entity_id"])
    assert row["response"] == {"id": held["id"]}
    (intent,) = await db[c.ACTION_INTENTS].find({"rule_id": rule.id}).to_list(None)
    assert (intent["status"], intent["response"]) == ("done", {"id": held["id"]})
    assert [w["kind"] for w in await sandbox.writes()] == ["budget_schedule"]  # one POST


async def test_a_schedule_never_made_is_settled_failed_once_its_request_cannot_land(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    data = schedule_rule({"multiplier": 1.25, "window": {"hours": 2}})
    rule, lost = await answer_lost(settings, db, sandbox, data)
    # what Meta made is gone again (as if the request had never landed)
    (held,) = await schedules_of(sandbox, lost["entity_id"])
    await graph_delete(sandbox, held["id"])
    # young, it stays pending: its request might still land; a later run does not send another
    await reap(settings, db, redis, now=datetime.now(UTC))
    (intent,) = await db[c.ACTION_INTENTS].find({"rule_id": rule.id}).to_list(None)
    assert intent["status"] == "pending"
    later = await run_once(settings, db, data, at=AT + timedelta(minutes=15), rule=rule)
    fresh = [r for r in await records(db, rule_id=later.id) if r["batch_id"] != lost["batch_id"]]
    assert [(r["outcome"], r["reason"]) for r in fresh] == [("skipped", "write_pending_elsewhere")]
    # once no request of its owner can land: failed, not made; the record says so
    await aged(db, lost["batch_id"], timedelta(hours=2))
    await reap(settings, db, redis, now=datetime.now(UTC))
    (intent,) = await db[c.ACTION_INTENTS].find({"batch_id": lost["batch_id"]}).to_list(None)
    assert (intent["status"], intent["reason"]) == ("failed", "not_made")
    (row,) = await records(db, batch_id=lost["batch_id"])
    assert (row["outcome"], row["reason"], row["recovered_by"]) == ("failed", "not_made", "reaper")
    kinds = [(w["kind"], w["ok"]) for w in await sandbox.writes()]
    assert kinds == [("budget_schedule", True), ("delete", True)]  # never sent again


async def graph_delete(sandbox: SandboxAdmin, object_id: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.delete(
            f"{sandbox.base_url}/v27.0/{object_id}", params={"access_token": SANDBOX_TOKEN}
        ) as response,
    ):
        assert response.status == 200, await response.text()


async def test_a_worker_killed_while_the_post_is_in_flight_leaves_exactly_one_schedule(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    accounts: list[str],
    tmp_path: Path,
) -> None:
    rule = await save_rule(db, schedule_rule({"multiplier": 1.5, "window": {"hours": 3}}))
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    # the schedule's POST answered after 3 s: the worker dies with it on its way
    await sandbox.set_faults(write_latency_ms=3000)
    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        await wait_for(lambda: write_in_flight(sandbox), timeout_s=60)
    finally:
        kill(worker)
    await wait_for(lambda: sandbox_quiet(sandbox))  # the POST lands at Meta all the same
    await sandbox.clear_faults()
    (intent,) = await db[c.ACTION_INTENTS].find({"rule_id": rule.id}).to_list(None)
    assert intent["status"] == "pending" and intent["schedule"]["op"] == "create"
    await redis.delete(c.QUEUE_NAME)
    await reap(settings, db, redis, now=start + timedelta(hours=1))  # from Meta's schedules
    (intent,) = await db[c.ACTION_INTENTS].find({"rule_id": rule.id}).to_list(None)
    assert intent["status"] == "done"
    (held,) = await schedules_of(sandbox, intent["entity_id"])
    assert intent["response"] == {"id": held["id"]}
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    rows = await records(db, rule_id=rule.id)
    assert sorted((r["outcome"], r["reason"]) for r in rows) == [
        ("applied", None),
        ("skipped", "schedule_overlap"),
    ]
    assert len(await schedules_of(sandbox, intent["entity_id"])) == 1
    assert [w["kind"] for w in await sandbox.writes()] == ["budget_schedule"]


async def test_an_approved_schedule_and_the_preview_say_its_window(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    data = schedule_rule({"multiplier": 1.4, "window": {"hours": 2, "start_in_hours": 1}})
    reading = open_preview(settings, db=db)
    try:
        preview = await preview_rule(
            reading, parse_rule(data), rule_id="r", version=1, now=datetime.now(UTC)
        )
    finally:
        await reading.close()
    (would,) = [r for r in preview.records if r["passed"]]
    assert (would["outcome"], would["before"], would["after"]) == ("would_apply", 20000, 28000)
    assert (would["schedule"]["budget_value_type"], would["schedule"]["budget_value"]) == (
        "MULTIPLIER",
        40,
    )
    assert await sandbox.writes() == []  # the preview wrote nothing

    data["tasks"][0]["approval"] = {"when": {"budget_change_pct_above": 30}}
    approval_id = await propose_and_approve(settings, db, data)
    doc = await approval(db, approval_id)
    assert (doc["field"], doc["schedule"]["budget_value"]) == ("budget_schedules", 40)
    await work(settings)  # the approved schedule is written
    assert (await approval(db, approval_id))["status"] == "applied"
    (held,) = await schedules_of(sandbox, doc["entity_id"])
    assert (held["budget_value"], held["time_start"]) == (
        40,
        datetime.fromtimestamp(doc["schedule"]["time_start"], UTC).strftime(
            "%Y-%m-%dT%H:%M:%S+0000"
        ),
    )


async def test_the_change_budget_holds_a_schedule_with_the_daily_budgets_moves(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    held = settings.model_copy(update={"max_daily_budget_change_pct": 30.0})
    raise_first = campaign_rule(
        {"type": "increase_budget", "percent": 10},
        [ALWAYS],
        name="raise",
        filters=[{"field": "name", "operator": "EQUAL", "value": PROSPECTING}],
    )
    await run_rule(held, db, raise_first)  # 200.00 → 220.00: 20.00 of the 60.00 allowed
    rule = await run_rule(held, db, schedule_rule({"multiplier": 1.5, "window": {"hours": 2}}))
    (row,) = await records(db, rule_id=rule.id, outcome="applied")
    # 40.00 left of 30 % of 200.00: 220.00 → 260.00 is +18 % in Meta's whole percents
    assert (row["before"], row["after"], row["schedule"]["budget_value"]) == (22000, 25960, 18)
    assert "change_budget" in row["clamped_by"]
