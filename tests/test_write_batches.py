"""The batched write path: a job's writes on one ad account in Batch API calls of ≤ 50.

Each intent is resolved from its own sub-response; a worker SIGKILLed between two calls
leaves nothing applied twice and nothing unrecorded; ``null`` sub-responses are read back
before anything is sent again.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flow import (
    campaign_ids,
    campaign_rule,
    dispatch,
    kill,
    reap,
    records,
    sandbox_quiet,
    save_rule,
    start_worker,
    successful_writes,
    wait_for,
    work,
    write_in_flight,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.acting.results import ActKey, Target, reads_the_account
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.writes.batched import FieldChange, rounds
from support import BENCH_ZONE, SANDBOX_NOW, SANDBOX_TOKEN
from test_meta_budget_limits import ADSET, adset_id, adset_rule
from test_rebalance import ACTION as REBALANCE

HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}


async def big_account(sandbox: SandboxAdmin, db: Database, settings: Settings, n: int) -> None:
    """The sandbox as one ad account (act_2001) of ``n`` campaigns, registered."""
    await sandbox.reset(scenario="bench", accounts=1, campaigns_per_account=n)
    await sandbox.set_clock(SANDBOX_NOW)
    await CredentialStore(db, load_key(settings)).add(  # as Meta (the sandbox) holds it
        "act_2001", SANDBOX_TOKEN, now=datetime.now(UTC), timezone=BENCH_ZONE, currency="USD"
    )


def budget_rule(account: str, *, percent: float = 10, **extra: Any) -> dict[str, Any]:
    data = campaign_rule({"type": "increase_budget", "percent": percent}, [HAS_BUDGET], **extra)
    data["ad_accounts"] = [account]
    return data


async def intents(db: Database, **query: Any) -> list[dict[str, Any]]:
    return [d async for d in db[c.ACTION_INTENTS].find(query)]


def each_write_recorded_once(
    writes: list[dict[str, Any]], done: list[dict[str, Any]], applied: list[dict[str, Any]]
) -> None:
    """Every write Meta received has exactly one done intent and one applied record."""
    sent = Counter((w["id"], int(w["params"]["daily_budget"])) for w in writes)
    assert max(Counter(w["id"] for w in writes).values()) == 1, "an entity changed twice"
    assert Counter((i["entity_id"], i["target"]) for i in done) == sent
    assert Counter((r["entity_id"], r["after"]) for r in applied) == sent


# ---------------------------------------------------------------- a SIGKILL between two calls


async def test_a_worker_killed_between_two_write_batches_applies_nothing_twice(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, tmp_path: Path
) -> None:
    await big_account(sandbox, db, settings, 120)  # 120 writes: calls of 50, 50 and 20
    rule = await save_rule(db, budget_rule("act_2001", cooldown_minutes=60))
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    # each call of writes is held at the sandbox for 5 s, then its writes land and its answer
    # leaves at once. The worker is killed while the first call is held and the second
    # call's intents are recorded: it can send the second only once the first is answered.
    # (Killing once the first 50 had landed raced with that answer: the worker sometimes
    # had the second call out already.)
    await sandbox.set_faults(write_latency_ms=5000)

    async def second_recorded_while_first_held() -> bool:
        return (
            not await successful_writes(sandbox)
            and await write_in_flight(sandbox)
            and len(await intents(db, rule_id=rule.id)) >= 100
        )

    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        await wait_for(second_recorded_while_first_held, timeout_s=60)
    finally:
        kill(worker)
    # a call the dead worker had sent still lands: wait until the sandbox has answered it
    await wait_for(lambda: sandbox_quiet(sandbox))
    landed = len(await successful_writes(sandbox))
    assert landed == 50  # killed between the first call and the second
    await sandbox.clear_faults()
    first_batch = (await db[c.BATCHES].find_one({"rule_id": rule.id}) or {})["_id"]
    recorded = await intents(db, batch_id=first_batch)
    landed_ids = {w["id"] for w in await sandbox.writes()}  # the calls it sent, all landed
    # the worst moment: the next call's intents were recorded while a call was in flight,
    # and it died before sending them
    assert len(recorded) > len(landed_ids)
    assert {i["status"] for i in recorded} >= {"pending"}
    await redis.delete(c.QUEUE_NAME)  # the dead worker's job would block an in-process burst
    await reap(settings, db, redis, now=start + timedelta(hours=1))
    # settled from the live values: what was sent landed, what was recorded and never sent
    # did not
    settled_by_reaper = {i["entity_id"]: i for i in await intents(db, batch_id=first_batch)}
    assert {e for e, i in settled_by_reaper.items() if i["status"] == "done"} == landed_ids
    unsent = [i for e, i in settled_by_reaper.items() if e not in landed_ids]
    assert {(i["status"], i["reason"]) for i in unsent} == {("failed", "not_applied")}
    # the next run writes what the dead one did not, and nothing it did (its cooldown)
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    writes = await successful_writes(sandbox)
    assert len(writes) == 120
    each_write_recorded_once(
        writes,
        await intents(db, status="done"),
        await records(db, outcome="applied"),
    )
    assert await intents(db, status="pending") == []
    batch = await db[c.BATCHES].find_one({"_id": first_batch})
    assert batch is not None and batch["status"] == "ABANDONED"


# ---------------------------------------------------------------- the pipeline


async def test_the_next_call_is_read_and_recorded_while_a_call_is_in_flight(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await big_account(sandbox, db, settings, 150)  # calls of 50: three of them
    await save_rule(db, budget_rule("act_2001"))
    await dispatch(settings, db)
    await sandbox.set_faults(write_latency_ms=3000)  # each call of writes lands after 3 s
    await sandbox.clear_stats()

    async def second_slice_recorded_with_a_call_in_flight() -> bool:
        # the worker sends a call and records the next slice at once: the sandbox may see the
        # call a moment after the slice is recorded, so both are waited for
        recorded = await db[c.ACTION_INTENTS].count_documents({}) >= 100
        return recorded and (await sandbox.stats())["writes_in_flight"] == 1

    running = asyncio.create_task(work(settings))
    try:
        await wait_for(second_slice_recorded_with_a_call_in_flight, timeout_s=30)
        # the second call's writes were read, planned and recorded while the first call
        # was in flight: none of its writes has landed yet (the call in flight is the first;
        # one at a time, the second would have waited for the first to land)
        assert await sandbox.writes() == []
    finally:
        await running
    stats = await sandbox.stats()
    await sandbox.clear_faults()
    assert stats["write_calls_peak"] == 1  # the account's writes went out one call at a time
    writes = await successful_writes(sandbox)
    assert len(writes) == 150
    done = await intents(db, status="done")
    each_write_recorded_once(writes, done, await records(db, outcome="applied"))
    # each planned from the value read just before it: +10 % of the budget it had
    before = {i["entity_id"]: i["before"] for i in done}
    assert all(int(w["params"]["daily_budget"]) == round(before[w["id"]] * 1.1) for w in writes)


def test_only_actions_that_need_the_ad_account_read_it_ahead() -> None:
    """A budget or bid action reads the ad account (currency, minimum): during the fetch
    stage, so the act stage does not wait for it; other actions never read it."""
    actions = {
        "increase_budget": ({"type": "increase_budget", "percent": 10}, True),
        "set_budget": ({"type": "set_budget", "amount": 50}, True),
        "rebalance_budget": (REBALANCE, True),
        "pause": ({"type": "pause"}, False),
        "rename": ({"type": "rename", "template": "{name} x"}, False),
    }
    for name, (action, reads) in actions.items():
        rule = parse_rule(campaign_rule(action, [HAS_BUDGET]))
        assert reads_the_account(rule.tasks[0].action) is reads, name


# ---------------------------------------------------------------- one sub-response each


async def test_a_refused_sub_request_fails_alone_and_its_neighbours_are_applied(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    refused = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    message = "Invalid parameter: the budget is not allowed"
    await sandbox.set_faults(
        rules=[{"path_contains": refused, "method": "POST", "code": 100, "message": message}]
    )
    await save_rule(db, budget_rule("act_1001"))
    await dispatch(settings, db)
    await work(settings)
    writes = await sandbox.writes()
    assert len(writes) > 3
    assert [w["ok"] for w in writes if w["id"] == refused] == [False]
    (failed,) = await records(db, outcome="failed")
    assert (failed["entity_id"], failed["reason"]) == (refused, "write_failed")
    assert (failed["error"]["code"], failed["error"]["message"]) == (100, message)
    assert failed["after"] == failed["before"]
    (intent,) = await intents(db, entity_id=refused)
    assert (intent["status"], intent["error"]["code"]) == ("failed", 100)
    applied = await records(db, outcome="applied")
    assert {r["entity_id"] for r in applied} == {w["id"] for w in writes if w["ok"]}
    each_write_recorded_once(
        await successful_writes(sandbox), await intents(db, status="done"), applied
    )
    group = await db[c.ERROR_LOG].find_one({"function": "meta.writer.set_budget"})
    assert group is not None and group["samples"][0]["params"]["path"] == refused
    assert SANDBOX_TOKEN not in str(group)


async def test_code_17_on_one_ad_set_in_a_batch_blocks_only_that_ad_set(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    await sandbox.set_clock(now)  # the engine and Meta agree on the hour
    limited = await adset_id(sandbox, "act_1001", ADSET)
    await sandbox.set_faults(
        rules=[{"path_contains": limited, "method": "POST", "code": 17, "times": 1}]
    )
    await save_rule(
        db, adset_rule({"type": "increase_budget", "percent": 10}, account="act_1001", adsets="US")
    )
    await dispatch(settings, db, now=now)
    await work(settings)
    (blocked,) = await records(db, outcome="failed")
    assert (blocked["entity_id"], blocked["reason"]) == (limited, "meta_budget_change_limit")
    assert blocked["error"]["code"] == 17 and "allowed_at" in blocked["error"]
    applied = await records(db, outcome="applied")
    assert len(applied) >= 5 and limited not in {r["entity_id"] for r in applied}
    (intent,) = await intents(db, entity_id=limited)
    assert intent["reason"] == "meta_budget_change_limit" and intent["allowed_at"] > now
    # the next run leaves that ad set alone for the hour; the others may change again
    await dispatch(settings, db, now=now + timedelta(minutes=15))
    await work(settings)
    later = [r for r in await records(db) if r["batch_id"] != blocked["batch_id"]]
    reasons = {r["entity_id"]: r["reason"] for r in later}
    assert reasons[limited] == "meta_budget_change_limit"
    changed = {r["entity_id"] for r in applied}
    assert [r["outcome"] for r in later if r["entity_id"] in changed] == ["applied"] * len(changed)


# ---------------------------------------------------------------- null sub-responses


async def test_unprocessed_sub_requests_are_read_back_before_anything_is_sent_again(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await big_account(sandbox, db, settings, 40)
    await save_rule(db, budget_rule("act_2001"))
    await dispatch(settings, db)
    await sandbox.set_faults(null_item_rate=0.4)  # reads and writes: items left unprocessed
    await work(settings)
    await sandbox.clear_faults()
    # a write whose read-back also came back empty stays pending: the reaper settles it
    unconfirmed = len(await records(db, reason="write_unconfirmed"))
    assert len(await intents(db, status="pending")) == unconfirmed
    await reap(settings, db, redis, now=datetime.now(UTC) + timedelta(hours=1))
    writes = await successful_writes(sandbox)
    done = await intents(db, status="done")
    each_write_recorded_once(writes, done, await records(db, outcome="applied"))
    assert await intents(db, status="pending") == []
    failed = await intents(db, status="failed")
    assert {i["reason"] for i in failed} <= {"not_processed", "not_applied"}
    assert len(done) + len(failed) + len(await records(db, reason="live_read_failed")) == 40


async def test_a_write_answered_null_that_landed_is_settled_from_its_live_value_not_resent(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    entity_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    # Meta runs the write, then answers its item null (as if it had not processed it)
    await sandbox.set_faults(
        lost_answers=[{"path_contains": entity_id, "method": "POST", "answer": "null", "times": 1}]
    )
    await save_rule(db, budget_rule("act_1001"))
    await dispatch(settings, db)
    await work(settings)
    assert (await sandbox.faults())["lost_answers"][0]["remaining"] == 0  # the fault fired
    (landed,) = [w for w in await successful_writes(sandbox) if w["id"] == entity_id]
    (intent,) = await intents(db, entity_id=entity_id)
    assert (intent["status"], intent["reconciled"]) == ("done", True)
    assert intent["target"] == int(landed["params"]["daily_budget"])
    (record,) = await records(db, entity_id=entity_id)
    assert (record["outcome"], record["after"]) == ("applied", intent["target"])


# ---------------------------------------------------------------- rounds


def test_a_second_change_of_one_field_goes_in_a_later_round() -> None:
    def change(entity: str, field: str) -> FieldChange:
        from ruleengine.rules.entity import Entity

        target = Target(field, [field], lambda live: live)  # type: ignore[arg-type,return-value]
        return FieldChange(Entity(id=entity, name=entity), ActKey("t", "x"), target)

    changes = [
        change("a", "daily_budget"),
        change("a", "status"),
        change("a", "daily_budget"),
        change("b", "daily_budget"),
        change("a", "daily_budget"),
    ]
    assert rounds(changes) == [[0, 1, 3], [2], [4]]
