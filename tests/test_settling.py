"""Settling a write whose answer was lost: whoever settles it corrects what its batch says.

The sandbox applies the write and then loses the answer (a 502 from a proxy, a reset
connection): the intent stays pending and the record says ``write_unconfirmed``. The next
run that meets the field, or the reaper, settles the intent from the live value — and the
record of the batch that owns it, its counts, and a follow-up's document follow.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from flow import (
    aged,
    campaign_ids,
    campaign_rule,
    dispatch,
    engine_for,
    kill,
    reap,
    records,
    sandbox_quiet,
    save_rule,
    start_worker,
    wait_for,
    work,
    write_in_flight,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.devstack.embedded import free_port
from ruleengine.followups.running import run_followup
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.followups import followup_batch, followup_of_batch, followup_record_key
from ruleengine.store.intents import Intent, IntentStore
from ruleengine.store.records import record_key
from ruleengine.undo.run import preview
from ruleengine.worker.job import evaluate_account
from ruleengine.writes.settling import Settled, SettledBy, corrected, from_live, owning_record
from test_faults import ALWAYS, queued_job
from test_followups import each_activated_once, pause_then, paused_with_followups

PROSPECTING = "[AUTO] Prospecting US 1"


async def lose_the_answer(sandbox: SandboxAdmin, entity_id: str, answer: str) -> None:
    """The next write to ``entity_id`` lands at Meta and its answer is lost as ``answer``."""
    await sandbox.set_faults(
        lost_answers=[{"path_contains": entity_id, "method": "POST", "answer": answer, "times": 1}]
    )


async def writes_to(sandbox: SandboxAdmin, entity_id: str) -> list[dict[str, Any]]:
    return [w for w in await sandbox.writes() if w["id"] == entity_id and w["ok"]]


async def intent_of(db: Database, batch_id: str) -> dict[str, Any]:
    intent = await db[c.ACTION_INTENTS].find_one({"batch_id": batch_id})
    assert intent is not None
    return intent


async def raise_with_lost_answer(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    *,
    answer: str,
    action: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """A run two hours ago raised Prospecting US 1's budget by 10 %; Meta applied it and the
    answer was lost. The entity's id, and the run's record."""
    entity_id = (await campaign_ids(sandbox))[PROSPECTING]
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    past = datetime.now(UTC) - timedelta(hours=2)  # its job is provably over by now
    rule = await save_rule(
        db,
        campaign_rule(action or {"type": "increase_budget", "percent": 10}, [ALWAYS], filters=only),
        now=past,
    )
    await dispatch(settings, db, now=past)
    job = await queued_job(redis)
    await redis.delete(c.QUEUE_NAME)
    await lose_the_answer(sandbox, entity_id, answer)
    async with engine_for(settings, db) as engine:
        await evaluate_account(engine, job, now=past)
    await aged(db, job.batch_id, timedelta(hours=2))  # two hours ago by MongoDB's clock too
    await sandbox.clear_faults()
    (first,) = await records(db, rule_id=rule.id)
    assert (first["outcome"], first["reason"]) == ("failed", "write_unconfirmed")
    return entity_id, first


# ---------------------------------------------------------------- the next run settles it


@pytest.mark.parametrize(
    ("answer", "write_batch_size"),
    [("bad_gateway", 50), ("reset", 1)],
    ids=["batched-502", "alone-reset"],
)
async def test_the_next_run_that_settles_a_lost_answer_corrects_the_batch_that_wrote_it(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    answer: str,
    write_batch_size: int,
) -> None:
    settings = settings.model_copy(update={"write_batch_size": write_batch_size})
    entity_id, first = await raise_with_lost_answer(settings, db, redis, sandbox, answer=answer)
    (landed,) = await writes_to(sandbox, entity_id)
    target = int(landed["params"]["daily_budget"])
    row = await db[c.BATCHES].find_one({"_id": first["batch_id"]})
    assert row is not None and (row["applied_count"], row["failed_count"]) == (0, 1)
    # the next run, long before any reaper pass, meets the pending intent on the field
    await dispatch(settings, db)
    await work(settings)
    (second,) = [r for r in await records(db) if r["batch_id"] != first["batch_id"]]
    assert second["reason"] == "previous_write_reconciled"
    assert await writes_to(sandbox, entity_id) == [landed]  # nothing written twice
    intent = await intent_of(db, first["batch_id"])
    assert intent["status"] == "done" and "record_unconfirmed" not in intent
    (corrected,) = await records(db, batch_id=first["batch_id"])
    assert (corrected["outcome"], corrected["reason"], corrected["executed"]) == (
        "applied",
        None,
        True,
    )
    assert (corrected["before"], corrected["after"]) == (first["before"], target)
    assert (corrected["recovered_by"], corrected["settled_by"]) == ("later_run", second["batch_id"])
    row = await db[c.BATCHES].find_one({"_id": first["batch_id"]})
    assert row is not None and (row["applied_count"], row["failed_count"]) == (1, 0)
    async with engine_for(settings, db) as engine:
        plan = await preview(engine, first["batch_id"], now=datetime.now(UTC))
    (item,) = plan.items
    assert (item.entity_id, item.before, item.after, item.will_revert) == (
        entity_id,
        first["before"],
        target,
        True,
    )


async def test_a_lost_answer_found_landed_gets_its_follow_up_due_from_the_write(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    """ "+50 % for 3 hours, then restore" whose answer was lost: once a later run finds the
    write landed, the restore is scheduled as if the answer had come: due 3 h after the write
    (which was 2 h ago), not 3 h after it was found."""
    action = {
        "type": "increase_budget",
        "percent": 50,
        "then": {"after_minutes": 180, "do": "restore_budget"},
    }
    entity_id, first = await raise_with_lost_answer(
        settings, db, redis, sandbox, answer="bad_gateway", action=action
    )
    assert await db[c.FOLLOWUPS].count_documents({}) == 0  # nothing fired, as far as it knew
    await dispatch(settings, db)
    await work(settings)
    followup = await db[c.FOLLOWUPS].find_one({"entity_id": entity_id})
    assert followup is not None
    assert (followup["batch_id"], followup["do"]) == (first["batch_id"], "restore_budget")
    assert followup["previous"] == first["before"]
    written_at = (await intent_of(db, first["batch_id"]))["created_at"]
    assert abs(followup["due_at"] - (written_at + timedelta(minutes=180))) < timedelta(seconds=5)


async def test_a_lost_answer_whose_write_did_not_land_stays_failed_with_the_reason(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    entity_id, first = await raise_with_lost_answer(
        settings, db, redis, sandbox, answer="bad_gateway"
    )
    # someone set the budget back in Ads Manager: the live value is not the target
    await sandbox.ads_manager_change(entity_id, daily_budget=first["before"])
    await dispatch(settings, db)
    await work(settings)
    intent = await intent_of(db, first["batch_id"])
    assert (intent["status"], intent["reason"]) == ("failed", "not_applied")
    (kept,) = await records(db, batch_id=first["batch_id"])
    assert (kept["outcome"], kept["reason"], kept["after"]) == (
        "failed",
        "not_applied",
        first["before"],
    )
    assert kept["recovered_by"] == "later_run"


async def test_a_settler_killed_before_correcting_the_record_is_made_good_by_the_reaper(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    entity_id, first = await raise_with_lost_answer(
        settings, db, redis, sandbox, answer="bad_gateway"
    )
    intent = await intent_of(db, first["batch_id"])
    assert intent["record_unconfirmed"] is True
    # a settler's first step — the intent's compare-and-set — and then a SIGKILL
    await IntentStore(db).resolve(
        intent["_id"], status="done", now=datetime.now(UTC), changed=True, reconciled=True
    )
    await reap(settings, db, redis, now=datetime.now(UTC))
    (corrected,) = await records(db, batch_id=first["batch_id"])
    assert (corrected["outcome"], corrected["recovered_by"]) == ("applied", "reaper")
    row = await db[c.BATCHES].find_one({"_id": first["batch_id"]})
    assert row is not None and (row["applied_count"], row["failed_count"]) == (1, 0)
    assert "record_unconfirmed" not in await intent_of(db, first["batch_id"])
    assert len(await writes_to(sandbox, entity_id)) == 1


async def test_a_record_written_after_its_intent_was_settled_says_what_the_settler_found(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    """A worker paused past its lock writes its record late: by then another may have settled
    the intent (and found no record to correct). The record is corrected as it is written."""
    _, first = await raise_with_lost_answer(settings, db, redis, sandbox, answer="reset")
    intent = await intent_of(db, first["batch_id"])
    await IntentStore(db).resolve(
        intent["_id"], status="done", now=datetime.now(UTC), changed=True, reconciled=True
    )
    async with engine_for(settings, db) as engine:
        settlement = engine.executor.settler.settlement
        unrelated = first | {"task_id": "other", "reason": "no_change", "outcome": "no_change"}
        late = await settlement.settled_meanwhile(first["batch_id"], [dict(first), unrelated])
    assert (late[0]["outcome"], late[0]["after"]) == ("applied", intent["target"])
    assert late[0]["recovered_by"] == "settled_first"
    assert late[1] == unrelated


# ---------------------------------------------------------------- follow-ups


async def test_a_follow_up_whose_answer_was_lost_is_corrected_when_the_reaper_settles_it(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    await save_rule(db, pause_then({"after_minutes": 30, "do": "activate"}))
    await dispatch(settings, db)
    await work(settings)
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    entity_id = followup["entity_id"]
    await lose_the_answer(sandbox, entity_id, "reset")
    payload = {"key": followup["_id"], "generation": followup["generation"]}
    now = datetime.now(UTC)
    async with engine_for(settings, db) as engine:
        assert (await run_followup(engine, payload, now=now))["reason"] == "write_unconfirmed"
    await sandbox.clear_faults()
    (lost,) = await records(db, kind="followup")
    assert (lost["outcome"], lost["reason"]) == ("failed", "write_unconfirmed")
    assert (await sandbox.object(entity_id))["status"] == "ACTIVE"  # it landed
    await reap(settings, db, redis, now=now + timedelta(hours=1))
    (corrected,) = await records(db, kind="followup")
    assert corrected["key"] == lost["key"] == f"followup|{followup['_id']}|1"
    assert (corrected["outcome"], corrected["reason"], corrected["after"]) == (
        "applied",
        None,
        "ACTIVE",
    )
    assert corrected["recovered_by"] == "reaper"
    closed = await db[c.FOLLOWUPS].find_one({"_id": followup["_id"]})
    assert closed is not None and (closed["status"], closed["reason"]) == ("done", None)
    assert [w["params"]["status"] for w in await writes_to(sandbox, entity_id)] == [
        "PAUSED",
        "ACTIVE",
    ]


async def test_follow_ups_written_together_whose_call_went_unanswered_are_each_corrected(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    """A batch's follow-ups go out in one Batch API call; its answer is lost (the connection
    reset after Meta applied them): each is ``write_unconfirmed``, under its own intent. The
    reaper settles each from the live value and corrects each one's record and status."""
    followups = await paused_with_followups(settings, db, sandbox, 4)
    await lose_the_answer(sandbox, followups[0]["entity_id"], "reset")
    now = datetime.now(UTC)
    async with engine_for(settings, db) as engine:
        lead = await run_followup(engine, {"key": followups[0]["_id"], "generation": 1}, now=now)
    await sandbox.clear_faults()
    assert {(r["status"], r["reason"]) for r in [lead, *lead["together"]]} == {
        ("failed", "write_unconfirmed")
    }
    lost = await records(db, kind="followup")
    assert {(r["outcome"], r["reason"]) for r in lost} == {("failed", "write_unconfirmed")}
    pending = [i async for i in db[c.ACTION_INTENTS].find({"status": "pending"})]
    assert sorted(i["batch_id"] for i in pending) == sorted(
        followup_batch(f["_id"], 1) for f in followups
    )
    await reap(settings, db, redis, now=now + timedelta(hours=1))
    corrected = await records(db, kind="followup")
    assert sorted(r["key"] for r in corrected) == sorted(
        followup_record_key(f["_id"], 1) for f in followups
    )
    assert {(r["outcome"], r["reason"], r["after"], r["recovered_by"]) for r in corrected} == {
        ("applied", None, "ACTIVE", "reaper")
    }
    closed = [d async for d in db[c.FOLLOWUPS].find({})]
    assert {(d["status"], d["reason"]) for d in closed} == {("done", None)}
    each_activated_once(await sandbox.writes(), 4)


# ---------------------------------------------------------------- pure: owners, corrections


def pending(batch_id: str, *, field: str = "daily_budget") -> Intent:
    return Intent(
        id=1,
        batch_id=batch_id,
        task_id="t",
        entity_id="e",
        field=field,
        before=1000,
        target=1100,
        status="pending",
        created=False,
    )


@given(key=st.text(min_size=1), generation=st.integers(min_value=0, max_value=10**12))
def test_a_follow_up_write_is_owned_by_its_follow_up_record(key: str, generation: int) -> None:
    batch_id = followup_batch(key, generation)
    assert followup_of_batch(batch_id) == (key, generation)
    assert owning_record(pending(batch_id)) == followup_record_key(key, generation)


@given(batch_id=st.text() | st.text().map(lambda rest: f"followup:{rest}"))
@example(batch_id="followup:r:t:e:²")  # a digit to str.isdigit, not to int()
def test_any_other_batch_owns_the_record_of_its_own_key(batch_id: str) -> None:
    followup = followup_of_batch(batch_id)  # never raises, whatever the text
    if followup is None:
        assert owning_record(pending(batch_id)) == record_key(batch_id, "t", "e")
    else:
        assert followup_batch(*followup) == batch_id


def test_a_settled_write_is_recorded_as_what_the_live_value_shows() -> None:
    intent = pending("b")
    landed, missed = from_live(intent, 1100), from_live(intent, 1000)
    assert (landed.status, missed.status, missed.reason) == ("done", "failed", "not_applied")
    assert from_live(pending("b", field="notify"), None).reason == "unverifiable"
    by = SettledBy("later_run", "b2")
    assert corrected(intent, landed, by) == {
        "outcome": "applied",
        "executed": True,
        "reason": None,
        "before": 1000,
        "after": 1100,
        "recovered_by": "later_run",
        "settled_by": "b2",
    }
    gone = corrected(intent, Settled("failed", {"reason": "entity_gone"}), SettledBy("reaper"))
    assert (gone["outcome"], gone["reason"], gone["after"]) == ("failed", "entity_gone", 1000)
    assert "settled_by" not in gone


# ---------------------------------------------------------------- a holder fenced out


async def fenced_out_after_its_write(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> dict[str, Any]:
    """A run raises Prospecting US 1's budget; while its write is at Meta, a newer holder takes
    the account's fence (the run was paused past its lock): Meta applies the write, and the
    run records it ``write_unconfirmed``. Its record."""
    entity_id = (await campaign_ids(sandbox))[PROSPECTING]
    only = [{"field": "id", "operator": "EQUAL", "value": entity_id}]
    action = {"type": "increase_budget", "percent": 10}
    rule = await save_rule(db, campaign_rule(action, [ALWAYS], filters=only))
    await dispatch(settings, db)
    job = await queued_job(redis)
    await redis.delete(c.QUEUE_NAME)
    await sandbox.set_faults(write_latency_ms=1500)
    async with engine_for(settings, db) as engine:
        running = asyncio.create_task(evaluate_account(engine, job, now=datetime.now(UTC)))
        await wait_for(lambda: write_in_flight(sandbox))
        await IntentStore(db).take_fence("act_1001")  # the newer holder
        await running
    await wait_for(lambda: sandbox_quiet(sandbox))
    await sandbox.clear_faults()
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["reason"]) == ("failed", "write_unconfirmed")
    assert len(await writes_to(sandbox, entity_id)) == 1  # it landed
    return record


@pytest.mark.parametrize("write_batch_size", [50, 1], ids=["batched", "alone"])
async def test_a_fenced_out_write_whose_settler_dies_before_its_record_is_corrected_next_pass(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    write_batch_size: int,
) -> None:
    settings = settings.model_copy(update={"write_batch_size": write_batch_size})
    record = await fenced_out_after_its_write(settings, db, redis, sandbox)
    intent = await intent_of(db, record["batch_id"])
    assert intent["record_unconfirmed"] is True
    # a settler's first step — the intent's compare-and-set — and then a SIGKILL
    await IntentStore(db).resolve(
        intent["_id"], status="done", now=datetime.now(UTC), changed=True, reconciled=True
    )
    await reap(settings, db, redis, now=datetime.now(UTC))
    (corrected,) = await records(db, batch_id=record["batch_id"])
    assert (corrected["outcome"], corrected["after"], corrected["recovered_by"]) == (
        "applied",
        intent["target"],
        "reaper",
    )
    assert "record_unconfirmed" not in await intent_of(db, record["batch_id"])
    async with engine_for(settings, db) as engine:  # and the undo now sees it
        plan = await preview(engine, record["batch_id"], now=datetime.now(UTC))
    assert [item.will_revert for item in plan.items] == [True]


# ---------------------------------------------------------------- two deliveries of a batch


async def test_a_change_one_delivery_failed_and_a_dead_later_one_made_is_recorded_applied(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Any,
) -> None:
    """Redis restarts without its markers, the dispatcher enqueues a run again: the first
    delivery met Redis down at the account's lock and recorded every change ``failed``
    (``lock_unavailable``); the second made them and was SIGKILLed before recording. Once
    the batch is over, each change Meta received is recorded applied, from its intent."""
    ids = await campaign_ids(sandbox)
    names = ["[AUTO] Prospecting US 1", "[AUTO] Prospecting US 2", "[AUTO] Retargeting US 1"]
    only = [{"field": "name", "operator": "IN", "value": names}]
    action = {"type": "increase_budget", "percent": 10}
    rule = await save_rule(db, campaign_rule(action, [ALWAYS], filters=only))
    await dispatch(settings, db)
    job = await queued_job(redis)
    down = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    async with engine_for(down, db) as engine:  # delivery 1: Redis does not answer
        first = await evaluate_account(engine, job, now=datetime.now(UTC))
    assert first.status == "DONE" and first.failed == len(names)
    assert {r["reason"] for r in await records(db, rule_id=rule.id)} == {"lock_unavailable"}
    await sandbox.set_faults(write_latency_ms=3000)
    worker = start_worker(settings, tmp_path / "worker.log")  # delivery 2 takes the job
    try:
        await wait_for(lambda: write_in_flight(sandbox), timeout_s=60)
    finally:
        kill(worker)  # its writes are at Meta; nothing of them is recorded
    await wait_for(lambda: sandbox_quiet(sandbox))
    await sandbox.clear_faults()
    landed = {w["id"]: int(w["params"]["daily_budget"]) for w in await sandbox.writes()}
    assert set(landed) == {ids[n] for n in names}
    await reap(settings, db, redis, now=datetime.now(UTC) + timedelta(hours=1))
    for record in await records(db, rule_id=rule.id):
        intent = await db[c.ACTION_INTENTS].find_one(
            {"batch_id": record["batch_id"], "entity_id": record["entity_id"]}
        )
        assert intent is not None and intent["status"] == "done"
        assert (record["outcome"], record["after"]) == ("applied", landed[record["entity_id"]])
    row = await db[c.BATCHES].find_one({"_id": job.batch_id})
    assert row is not None and (row["applied_count"], row["failed_count"]) == (len(names), 0)
