"""Approved changes written by workers: their `then` follow-ups run as a change written at once
would; a transient failure (the account's write lock, a live read, a write Meta did not
answer) keeps the change approved and it is tried again until it lands — once — or expires;
the approval's status follows what Meta holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from arq.utils import timestamp_ms
from hypothesis import given
from hypothesis import strategies as st

from flow import (
    LOSER,
    campaign_ids,
    campaign_rule,
    engine_for,
    reap,
    records,
    run_rule,
    successful_writes,
    wait_for,
    work,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.approvals.applying import apply_approval, next_step, retry_delay
from ruleengine.approvals.deciding import decide, requeue_approved
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.approvals import ApprovalStore, approval_of_batch, write_batch
from ruleengine.store.db import Database
from ruleengine.store.intents import IntentStore
from ruleengine.writes.lock import AccountLocks

IMPRESSIONS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}


def only(name: str) -> list[dict[str, Any]]:
    return [{"field": "name", "operator": "EQUAL", "value": name}]


def approved_pause(then: dict[str, Any]) -> dict[str, Any]:
    """Pause "[AUTO] Prospecting US 2" (a loser), then ``then``; every change waits for approval."""
    data = campaign_rule(
        {"type": "pause", "then": then},
        [LOSER],
        name="Pause losers, approved",
        filters=only("[AUTO] Prospecting US 2"),
    )
    data["tasks"][0]["approval"] = {"when": "always"}
    return data


def approved_raise(
    *, then: dict[str, Any] | None = None, expires_after_minutes: int = 120
) -> dict[str, Any]:
    """+50 % on "[AUTO] Prospecting US 1"'s budget, waiting for approval (above 30 %)."""
    action: dict[str, Any] = {"type": "increase_budget", "percent": 50}
    if then is not None:
        action["then"] = then
    data = campaign_rule(
        action, [IMPRESSIONS], name="Raise, approved", filters=only("[AUTO] Prospecting US 1")
    )
    data["tasks"][0]["approval"] = {
        "when": {"budget_change_pct_above": 30},
        "expires_after_minutes": expires_after_minutes,
    }
    return data


async def propose_and_approve(settings: Settings, db: Database, data: dict[str, Any]) -> str:
    """Run the rule once (it proposes one change) and approve the proposal; its id."""
    rule = await run_rule(settings, db, data)
    (waiting,) = await records(db, rule_id=rule.id, outcome="awaiting_approval")
    queue = connect_queue(settings)
    try:
        decision = await decide(
            ApprovalStore(db),
            queue,
            waiting["approval_id"],
            status="approved",
            by="ana",
            now=datetime.now(UTC),
        )
    finally:
        await queue.aclose()
    assert decision.changed
    return str(waiting["approval_id"])


async def approval(db: Database, approval_id: str) -> dict[str, Any]:
    doc = await db[c.APPROVALS].find_one({"_id": approval_id})
    assert doc is not None
    return doc


async def retry(settings: Settings, db: Database, *, now: datetime) -> int:
    """The reaper cron's requeue at ``now``; how many approved changes it enqueued."""
    queue = connect_queue(settings)
    try:
        return await requeue_approved(ApprovalStore(db), queue, now=now)
    finally:
        await queue.aclose()


async def fast_forward(redis: Any) -> int:
    """Make every delayed timer due now (the test controls time)."""
    timers = await redis.zrange(c.QUEUE_NAME, 0, -1)
    for job_id in timers:
        await redis.zadd(c.QUEUE_NAME, {job_id: timestamp_ms() - 1})  # arq skips a score of 0
    return len(timers)


async def writes_of(sandbox: SandboxAdmin, entity: str) -> list[dict[str, Any]]:
    return [w for w in await successful_writes(sandbox) if w["id"] == entity]


async def intents_of(db: Database, entity: str) -> list[dict[str, Any]]:
    return [d async for d in db[c.ACTION_INTENTS].find({"entity_id": entity}).sort("_id")]


async def budget_of(sandbox: SandboxAdmin, entity: str) -> int:
    return int((await sandbox.object(entity))["daily_budget"])


@pytest.fixture
async def wired(settings: Settings, db: Database, redis: Any, accounts: list[str]) -> Settings:
    # a busy write lock is given up after 0.3 s instead of the computed worst case
    return settings.model_copy(update={"account_lock_timeout_s": 0.3})


# ---------------------------------------------------------------- follow-ups


async def test_an_approved_pause_is_activated_again_by_its_follow_up(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    entity = (await campaign_ids(sandbox))["[AUTO] Prospecting US 2"]
    approval_id = await propose_and_approve(
        wired, db, approved_pause({"after_minutes": 1, "do": "activate"})
    )
    assert (await sandbox.object(entity))["status"] == "ACTIVE"  # it waited for the approval
    await work(wired)
    assert (await sandbox.object(entity))["status"] == "PAUSED"
    assert (await approval(db, approval_id))["status"] == "applied"
    followup = await db[c.FOLLOWUPS].find_one({"entity_id": entity})
    assert followup is not None
    assert (followup["status"], followup["do"], followup["batch_id"]) == (
        "scheduled",
        "activate",
        write_batch(approval_id),
    )
    (record,) = await records(db, batch_id=write_batch(approval_id))
    assert record["followup"]["key"] == followup["_id"]
    assert await fast_forward(redis) == 1
    await work(wired)
    assert (await sandbox.object(entity))["status"] == "ACTIVE"
    assert [w["params"]["status"] for w in await writes_of(sandbox, entity)] == [
        "PAUSED",
        "ACTIVE",
    ]
    (ran,) = await records(db, kind="followup")
    assert (ran["batch_id"], ran["outcome"]) == (write_batch(approval_id), "applied")


async def test_an_approved_raise_is_restored_by_its_follow_up(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    entity = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    before = await budget_of(sandbox, entity)
    data = approved_raise(then={"after_minutes": 120, "do": "restore_budget"})
    await propose_and_approve(wired, db, data)
    await work(wired)
    assert await budget_of(sandbox, entity) == before * 3 // 2
    assert await fast_forward(redis) == 1  # the restore's timer
    await work(wired)
    assert await budget_of(sandbox, entity) == before
    budgets = [int(w["params"]["daily_budget"]) for w in await writes_of(sandbox, entity)]
    assert budgets == [before * 3 // 2, before]


# ---------------------------------------------------------------- transient failures


async def test_an_approved_change_that_meets_a_busy_lock_lands_once_later(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    entity = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    before = await budget_of(sandbox, entity)
    approval_id = await propose_and_approve(wired, db, approved_raise())
    locks = AccountLocks(redis, intents=IntentStore(db), ttl_s=60, wait_s=1)
    async with locks.hold("act_1001"):  # another writer holds the account
        await work(wired)
    waiting = await approval(db, approval_id)
    assert (waiting["status"], waiting["attempts"]) == ("approved", 1)
    assert waiting["last_error"]["reason"] == "account_lock_timeout"
    assert waiting["retry_at"] <= waiting["expires_at"]
    assert await intents_of(db, entity) == [] and await writes_of(sandbox, entity) == []
    assert await retry(wired, db, now=waiting["retry_at"] - timedelta(seconds=1)) == 0
    assert await retry(wired, db, now=waiting["retry_at"]) == 1
    await work(wired)
    done = await approval(db, approval_id)
    assert (done["status"], done["attempts"], done["batch"]) == (
        "applied",
        2,
        write_batch(approval_id),
    )
    assert len(await intents_of(db, entity)) == 1
    assert len(await writes_of(sandbox, entity)) == 1
    assert await budget_of(sandbox, entity) == before * 3 // 2
    (record,) = await records(db, batch_id=write_batch(approval_id))
    assert (record["outcome"], record["attempt"]) == ("applied", 2)


async def test_an_approved_change_whose_live_read_failed_is_tried_again(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    entity = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    approval_id = await propose_and_approve(wired, db, approved_raise())
    await sandbox.set_faults(rules=[{"path_contains": entity, "method": "GET", "code": 2}])
    await work(wired)
    await sandbox.clear_faults()
    waiting = await approval(db, approval_id)
    assert (waiting["status"], waiting["last_error"]["reason"]) == ("approved", "live_read_failed")
    (failed,) = await records(db, batch_id=write_batch(approval_id))
    assert (failed["outcome"], failed["reason"]) == ("failed", "live_read_failed")
    assert await retry(wired, db, now=waiting["retry_at"]) == 1
    await work(wired)
    assert (await approval(db, approval_id))["status"] == "applied"
    assert len(await writes_of(sandbox, entity)) == 1
    (record,) = await records(db, batch_id=write_batch(approval_id))
    assert record["outcome"] == "applied"


async def unconfirmed_write(
    settings: Settings, db: Database, sandbox: SandboxAdmin, *, lands: bool
) -> tuple[str, str]:
    """Approve the raise and let its write go unanswered (the client gives up after 0.5 s,
    the sandbox answers after 1 s): it lands, or Meta refuses it. The approval's id and
    the entity."""
    entity = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    approval_id = await propose_and_approve(settings, db, approved_raise())
    refused = [] if lands else [{"path_contains": entity, "method": "POST", "code": 2}]
    await sandbox.set_faults(write_latency_ms=1000, rules=refused)
    await work(settings.model_copy(update={"graph_timeout_s": 0.5}))
    waiting = await approval(db, approval_id)
    assert (waiting["status"], waiting["last_error"]["reason"]) == ("approved", "write_unconfirmed")

    async def answered() -> bool:
        return any(w["id"] == entity for w in await sandbox.writes())

    await wait_for(answered)
    await sandbox.clear_faults()
    return approval_id, entity


async def test_an_unconfirmed_approved_write_that_landed_ends_applied_once_settled(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    approval_id, entity = await unconfirmed_write(wired, db, sandbox, lands=True)
    # a retry before the write is settled sends nothing again
    assert await retry(wired, db, now=(await approval(db, approval_id))["retry_at"]) == 1
    await work(wired)
    waiting = await approval(db, approval_id)
    assert (waiting["status"], waiting["last_error"]["reason"]) == ("approved", "write_pending")
    assert len(await writes_of(sandbox, entity)) == 1
    # the reaper settles it from the live value: landed; the approval's next attempt is due
    later = datetime.now(UTC) + timedelta(hours=1)
    await reap(wired, db, redis, now=later)
    settled = await approval(db, approval_id)
    assert settled["settled"]["status"] == "done" and settled["retry_at"] <= later
    assert await retry(wired, db, now=later) == 1
    await work(wired)
    done = await approval(db, approval_id)
    assert (done["status"], done["batch"]) == ("applied", write_batch(approval_id))
    (intent,) = await intents_of(db, entity)
    assert intent["status"] == "done"
    assert len(await writes_of(sandbox, entity)) == 1
    (record,) = await records(db, batch_id=write_batch(approval_id))
    assert record["outcome"] == "applied"


async def test_an_unconfirmed_approved_write_that_did_not_land_is_written_afresh(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    approval_id, entity = await unconfirmed_write(wired, db, sandbox, lands=False)
    before = await budget_of(sandbox, entity)
    assert await writes_of(sandbox, entity) == []
    later = datetime.now(UTC) + timedelta(hours=1)
    await reap(wired, db, redis, now=later)  # settled from the live value: not landed
    assert (await approval(db, approval_id))["settled"]["status"] == "failed"
    assert await retry(wired, db, now=later) == 1
    await work(wired)
    done = await approval(db, approval_id)
    second = write_batch(approval_id, 2)
    assert (done["status"], done["generation"], done["batch"]) == ("applied", 2, second)
    first, written = await intents_of(db, entity)
    assert (first["batch_id"], first["status"], first["reason"]) == (
        write_batch(approval_id),
        "failed",
        "not_applied",
    )
    assert (written["batch_id"], written["status"]) == (second, "done")
    assert len(await writes_of(sandbox, entity)) == 1
    assert await budget_of(sandbox, entity) == before * 3 // 2
    (record,) = await records(db, batch_id=second)
    assert record["outcome"] == "applied"


async def test_retrying_an_approved_change_stops_at_its_expiry(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    entity = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    approval_id = await propose_and_approve(wired, db, approved_raise(expires_after_minutes=1))
    async with AccountLocks(redis, intents=IntentStore(db), ttl_s=60, wait_s=1).hold("act_1001"):
        await work(wired)
    waiting = await approval(db, approval_id)
    assert waiting["status"] == "approved"
    assert waiting["retry_at"] <= waiting["expires_at"]  # the last retry comes at the expiry
    async with engine_for(wired, db) as engine:
        done = await apply_approval(engine, approval_id, now=waiting["expires_at"])
    assert done["status"] == "expired"
    expired = await approval(db, approval_id)
    assert (expired["status"], expired["reason"], expired["attempts"]) == (
        "expired",
        "approval_expired",
        2,
    )
    assert expired["last_error"]["reason"] == "account_lock_timeout"
    assert await retry(wired, db, now=waiting["expires_at"] + timedelta(hours=1)) == 0
    assert await writes_of(sandbox, entity) == [] and await intents_of(db, entity) == []


# ---------------------------------------------------------------- pure parts


def test_what_an_attempt_does_given_the_intent_its_write_left() -> None:
    def step(status: str | None, reason: str | None = None, **flags: bool) -> str:
        intent = None if status is None else {"status": status, "reason": reason}
        options = {"owner_gone": False, "past_expiry": False} | flags
        return next_step(intent, **options)

    assert step(None) == "write"
    assert step(None, past_expiry=True) == "expire"
    assert step("done") == step("done", past_expiry=True) == "landed"
    assert step("pending") == "wait"
    assert step("pending", owner_gone=True) == "write"  # reconciled from the live value
    assert step("pending", owner_gone=True, past_expiry=True) == "wait"  # the reaper settles it
    assert step("failed", "not_applied") == step("failed", "lock_lost") == "next_write"
    assert step("failed", "not_applied", past_expiry=True) == "expire"
    assert step("failed", "write_failed") == step("failed", "entity_gone") == "close"


def test_retries_are_spaced_out_up_to_ten_minutes() -> None:
    delays = [retry_delay(n) for n in range(1, 8)]
    assert [d.total_seconds() / 60 for d in delays] == [1, 2, 4, 8, 10, 10, 10]
    assert retry_delay(10**6) == timedelta(minutes=10)


NO_COLON = st.text(alphabet=st.characters(blacklist_characters=":"), min_size=1)


@given(NO_COLON, st.integers(min_value=1, max_value=10**9))
def test_a_write_batch_names_its_approval(approval_id: str, generation: int) -> None:
    assert approval_of_batch(write_batch(approval_id, generation)) == approval_id


@given(st.text())
def test_a_batch_id_names_an_approval_only_when_it_is_a_write_batch(batch_id: str) -> None:
    found = approval_of_batch(batch_id)
    if not batch_id.startswith("approval:"):
        assert found is None  # a rule's run, a follow-up, an undo
    elif found is not None:
        assert found and ":" not in found and batch_id.startswith(f"approval:{found}")
        rest = batch_id.removeprefix(f"approval:{found}")
        assert rest == "" or rest[1:].isdecimal()
