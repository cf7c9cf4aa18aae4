"""Follow-ups: delayed second steps, replaced on reschedule, re-checked, never lost or doubled."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix
from arq.utils import timestamp_ms
from pydantic import SecretStr
from pymongo import monitoring
from redis.asyncio import Connection as RedisConnection
from redis.asyncio import ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError

from flow import (
    LOSER,
    campaign_ids,
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
from ruleengine.devstack.embedded import ProcessGroup, start_redis
from ruleengine.dispatching.payload import EvaluateJob, deserialize
from ruleengine.followups.running import RUN_TOGETHER, run_followup
from ruleengine.followups.scheduling import FollowupScheduler, due_time
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.language.action_types import FollowUp
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.language.schedule import next_local_time
from ruleengine.settings import Settings
from ruleengine.store.db import Database, create_client, database
from ruleengine.store.fences import FenceStore
from ruleengine.store.followups import followup_job_id
from ruleengine.worker.job import evaluate_account
from ruleengine.writes.lock import turn
from support import SANDBOX_TOKEN
from test_write_batches import HAS_BUDGET, big_account

HUMAN_TOKEN = "EAAGhumanTOKEN0123456789abcdef"
ONE_LOSER = [{"field": "name", "operator": "EQUAL", "value": "[AUTO] Prospecting US 2"}]


def pause_then(then: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A rule pausing "[AUTO] Prospecting US 2" (a loser), then ``then``."""
    data = campaign_rule(
        extra.pop("action", {"type": "pause"}) | {"then": then},
        [LOSER],
        name=extra.pop("name", "Pause losers for a while"),
        filters=extra.pop("filters", ONE_LOSER),
    )
    data["tasks"][0]["id"] = "cool-off"
    return data


def raise_then(then: dict[str, Any], *, percent: int) -> dict[str, Any]:
    """A rule raising the budget of "[AUTO] Prospecting US 1" by ``percent``, then ``then``."""
    winner = [{"field": "name", "operator": "EQUAL", "value": "[AUTO] Prospecting US 1"}]
    data = pause_then(then, filters=winner, action={"type": "increase_budget", "percent": percent})
    data["tasks"][0]["conditions"] = [
        {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
    ]
    return data


async def fast_forward(redis: Any) -> int:
    """Make every delayed timer due now (the test controls time)."""
    timers = await redis.zrange(c.QUEUE_NAME, 0, -1)
    for job_id in timers:
        await redis.zadd(c.QUEUE_NAME, {job_id: timestamp_ms() - 1})  # arq skips a score of 0
    return len(timers)


async def engine_writes(sandbox: SandboxAdmin, entity_id: str) -> list[dict[str, Any]]:
    return [w for w in await sandbox.writes() if w["id"] == entity_id and w["ok"]]


@pytest.fixture
async def wired(settings: Settings, db: Database, redis: Any, accounts: list[str]) -> Settings:
    return settings


async def test_pause_now_activate_later_happens_once(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    rule = await run_rule(wired, db, pause_then({"after_minutes": 120, "do": "activate"}))
    (paused,) = await records(db, rule_id=rule.id, outcome="applied")
    entity = paused["entity_id"]
    assert (await sandbox.object(entity))["status"] == "PAUSED"
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    assert (followup["status"], followup["do"], followup["generation"]) == (
        "scheduled",
        "activate",
        1,
    )
    assert (followup["field"], followup["set_value"], followup["previous"]) == (
        "status",
        "PAUSED",
        "ACTIVE",
    )
    assert abs((followup["due_at"] - paused["created_at"]).total_seconds() - 7200) < 1
    assert paused["followup"]["key"] == followup["_id"]
    job_id = followup_job_id(followup["_id"], 1).encode()
    due_ms = await redis.zscore(c.QUEUE_NAME, job_id)
    assert due_ms == pytest.approx(followup["due_at"].timestamp() * 1000, abs=2)
    raw = await redis.get(job_key_prefix.encode() + job_id)
    assert SANDBOX_TOKEN.encode() not in raw

    await work(wired)  # not due yet: nothing happens
    assert (await sandbox.object(entity))["status"] == "PAUSED"
    assert await fast_forward(redis) == 1
    await work(wired)
    assert (await sandbox.object(entity))["status"] == "ACTIVE"
    done = await db[c.FOLLOWUPS].find_one({"_id": followup["_id"]})
    assert done is not None and done["status"] == "done"
    (record,) = await records(db, kind="followup")
    assert record["batch_id"] == paused["batch_id"]  # linked to the execution that created it
    assert (record["outcome"], record["before"], record["after"]) == ("applied", "PAUSED", "ACTIVE")
    await fast_forward(redis)
    await work(wired)
    assert [w["params"].get("status") for w in await engine_writes(sandbox, entity)] == [
        "PAUSED",
        "ACTIVE",
    ]


async def test_a_follow_up_delivered_twice_acts_once(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await run_rule(wired, db, pause_then({"after_minutes": 30, "do": "activate"}))
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    payload = {"key": followup["_id"], "generation": followup["generation"]}
    async with engine_for(wired, db) as engine:
        now = datetime.now(UTC)
        first = await run_followup(engine, payload, now=now)
        second = await run_followup(engine, payload, now=now)
    assert (first["status"], second["status"]) == ("done", "already_handled")
    writes = await engine_writes(sandbox, followup["entity_id"])
    assert [w["params"].get("status") for w in writes] == ["PAUSED", "ACTIVE"]


async def test_a_worker_lost_mid_follow_up_does_not_double_it(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await run_rule(wired, db, pause_then({"after_minutes": 30, "do": "activate"}))
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    async with engine_for(wired, db) as engine:
        payload = {"key": followup["_id"], "generation": 1}
        assert (await run_followup(engine, payload, now=datetime.now(UTC)))["status"] == "done"
        # as if the worker died after the write, before closing the follow-up
        await db[c.FOLLOWUPS].update_one({}, {"$set": {"status": "running"}})
        assert engine.followups is not None
        later = datetime.now(UTC) + timedelta(hours=1)
        assert await engine.followups.store.release_stale(older_than=later, now=later) == 1
        assert await engine.followups.rearm(now=later) == 1
        again = await run_followup(engine, payload, now=later)
    assert again["reason"] == "already_applied"
    writes = await engine_writes(sandbox, followup["entity_id"])
    assert [w["params"].get("status") for w in writes] == ["PAUSED", "ACTIVE"]


async def test_someone_reactivating_by_hand_makes_the_follow_up_step_aside(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await run_rule(wired, db, pause_then({"after_minutes": 60, "do": "activate"}))
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    entity = followup["entity_id"]
    await sandbox.issue_token(HUMAN_TOKEN)  # an ad-ops colleague's own token
    async with aiohttp.ClientSession() as http:  # ... in Ads Manager
        url = f"{sandbox.base_url}/v27.0/{entity}"
        await http.post(url, data={"status": "ACTIVE", "access_token": HUMAN_TOKEN})
    await fast_forward(redis)
    await work(wired)
    skipped = await db[c.FOLLOWUPS].find_one({})
    assert skipped is not None
    assert (skipped["status"], skipped["reason"]) == ("skipped", "changed_by_someone_else")
    (record,) = await records(db, kind="followup")
    assert (record["outcome"], record["reason"]) == ("skipped", "changed_by_someone_else")
    statuses = [w["params"].get("status") for w in await sandbox.writes() if w["id"] == entity]
    assert statuses == ["PAUSED", "ACTIVE"]  # the rule's pause, the colleague's activation


async def test_a_budget_changed_by_hand_is_not_restored(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    data = raise_then({"after_minutes": 60, "do": "restore_budget"}, percent=20)
    await run_rule(wired, db, data)
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    assert followup["field"] == "daily_budget"
    await sandbox.issue_token(HUMAN_TOKEN)
    async with aiohttp.ClientSession() as http:
        url = f"{sandbox.base_url}/v27.0/{followup['entity_id']}"
        await http.post(url, data={"daily_budget": "31000", "access_token": HUMAN_TOKEN})
    await fast_forward(redis)
    await work(wired)
    done = await db[c.FOLLOWUPS].find_one({})
    assert done is not None
    assert (done["status"], done["reason"]) == ("skipped", "changed_by_someone_else")
    assert int((await sandbox.object(followup["entity_id"]))["daily_budget"]) == 31000


async def test_a_restored_budget_returns_to_the_value_before(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    data = raise_then({"at_time": "23:00", "do": "restore_budget"}, percent=20)
    await run_rule(wired, db, data)
    followup = await db[c.FOLLOWUPS].find_one({})
    assert followup is not None
    local_due = followup["due_at"].astimezone(ZoneInfo("America/New_York"))
    assert (local_due.hour, local_due.minute) == (23, 0)
    await fast_forward(redis)
    await work(wired)
    assert (
        int((await sandbox.object(followup["entity_id"]))["daily_budget"]) == followup["previous"]
    )


async def test_rescheduling_the_same_key_replaces_the_earlier_follow_up(
    wired: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    data = raise_then({"after_minutes": 60, "do": "restore_budget"}, percent=10)
    rule = await save_rule(db, data)
    start = datetime.now(UTC)
    for run in range(2):
        await dispatch(wired, db, now=start + timedelta(minutes=15 * run))
        await work(wired)
    followups = [d async for d in db[c.FOLLOWUPS].find({})]
    assert len(followups) == 1  # never two follow-ups for one key
    assert followups[0]["generation"] == 2
    timers = await redis.zrange(c.QUEUE_NAME, 0, -1)
    assert timers == [followup_job_id(followups[0]["_id"], 2).encode()]  # the old timer is gone
    async with engine_for(wired, db) as engine:
        old = await run_followup(
            engine, {"key": followups[0]["_id"], "generation": 1}, now=datetime.now(UTC)
        )
    assert old["status"] == "superseded"
    await fast_forward(redis)
    await work(wired)
    restores = [r for r in await records(db, rule_id=rule.id, kind="followup")]
    assert len(restores) == 1
    assert restores[0]["outcome"] == "applied"


async def test_redis_down_while_scheduling_keeps_the_follow_up_pending_then_runs_it_late_once(
    wired: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    own_redis: tuple[ProcessGroup, int],
) -> None:
    group, port = own_redis
    # PAUSED: the test evaluates it itself; the dispatcher below must only re-arm timers
    rule_doc = await save_rule(
        db, pause_then({"after_minutes": 5, "do": "activate"}) | {"status": "PAUSED"}
    )
    rule = parse_rule({**rule_doc.definition, "status": "ACTIVE"})
    timer_redis = wired.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"})
    dead_timer = connect_queue(timer_redis)
    group.stop_all()  # Redis, as the timer, is gone
    then = datetime.now(UTC)
    async with engine_for(wired, db) as engine:
        engine.followups = FollowupScheduler(db, queue=dead_timer)
        reader = GraphReader.from_settings(engine.session)
        job = EvaluateJob.of(
            rule,
            batch_id="b-outage",
            rule_id=rule_doc.id,
            version=1,
            account="act_1001",
            entities=await reader.list_for_rule(rule, "act_1001", token=SANDBOX_TOKEN),
            scheduled_at=then,
            dispatched_at=then,
        )
        summary = await evaluate_account(engine, job, now=then)
    await dead_timer.aclose()
    assert (summary.status, summary.applied) == ("DONE", 1)  # the action completed
    pending = await db[c.FOLLOWUPS].find_one({})
    assert pending is not None
    assert (pending["status"], pending["reason"]) == ("pending", "redis_unavailable")
    (record,) = await records(db, batch_id="b-outage")
    assert record["followup"]["status"] == "pending"
    # Redis stays down for half an hour: the follow-up (due by MongoDB's clock) falls due
    await db[c.FOLLOWUPS].update_one({}, {"$set": {"due_at": then - timedelta(minutes=25)}})
    # Redis is back: the dispatcher's next tick re-arms it; it was due 25 minutes ago
    start_redis(group, port=port, data_dir=None)
    report = await dispatch(timer_redis, db)
    assert report is not None and report.degraded is None
    armed = await db[c.FOLLOWUPS].find_one({})
    assert armed is not None and armed["status"] == "scheduled"
    await work(timer_redis)
    await work(timer_redis)
    done = await db[c.FOLLOWUPS].find_one({})
    assert done is not None and done["status"] == "done"
    assert done["late_s"] >= 24 * 60
    (late,) = await records(db, kind="followup")
    assert late["late_s"] >= 24 * 60
    writes = await engine_writes(sandbox, pending["entity_id"])
    assert [w["params"].get("status") for w in writes] == ["PAUSED", "ACTIVE"]


async def test_a_notify_follow_up_posts_the_rendered_text(
    webhook: tuple[Settings, list[dict[str, Any]]],
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
) -> None:
    settings, received = webhook
    then = {
        "after_minutes": 10,
        "do": "notify",
        "webhook": "ops",
        "template": "{rule}: {entity_name} was {after} since {before}",
    }
    await run_rule(settings, db, pause_then(then))
    await fast_forward(redis)
    await work(settings)
    assert received == [
        {"text": "Pause losers for a while: [AUTO] Prospecting US 2 was PAUSED since ACTIVE"}
    ]


async def test_a_notify_follow_up_of_a_budget_change_shows_money_and_the_account(
    webhook: tuple[Settings, list[dict[str, Any]]],
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
) -> None:
    """``{before}``/``{after}`` of a budget are money in the account's currency (never minor
    units), and ``{account_name}`` names the account: on the yen account, ¥12,000 → ¥10,800."""
    settings, received = webhook
    campaign = "[AUTO] Prospecting JP 1"
    await sandbox.ads_manager_change(
        (await campaign_ids(sandbox, "act_1004"))[campaign], daily_budget=12000
    )
    then = {
        "after_minutes": 10,
        "do": "notify",
        "webhook": "ops",
        "template": "{account_name}: {entity_name} {before} → {after}",
    }
    data = campaign_rule(
        {"type": "decrease_budget", "percent": 10, "then": then},
        [{"metric": "daily_budget", "operator": ">", "value": 0}],
        name="Trim",
        ad_accounts=["act_1004"],
        filters=[{"field": "name", "operator": "IN", "value": [campaign]}],
    )
    await run_rule(settings, db, data)
    await fast_forward(redis)
    await work(settings)
    assert received == [{"text": f"Demo Store JP: {campaign} ¥12,000 → ¥10,800"}]


async def test_a_failing_webhook_goes_to_the_error_log_not_a_crash(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    dead = settings.model_copy(update={"webhooks": {"ops": SecretStr("http://127.0.0.1:1/hook")}})
    rule = await run_rule(
        dead, db, pause_then({"after_minutes": 10, "do": "notify", "webhook": "ops"})
    )
    await fast_forward(redis)
    await work(dead)
    done = await db[c.FOLLOWUPS].find_one({})
    assert done is not None and (done["status"], done["reason"]) == ("failed", "notify_failed")
    assert await db[c.ERROR_LOG].find_one({"function": "notify.send"})
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None and batch["status"] == "DONE"


def test_due_times() -> None:
    now = datetime(2026, 12, 1, 22, 30, tzinfo=UTC)
    rule = parse_rule(pause_then({"after_minutes": 120, "do": "activate"}))
    assert due_time(
        FollowUp(after_minutes=120, do="activate"), now=now, rule=rule
    ) == now + timedelta(hours=2)
    # 23:00 in New York (UTC-5) after 17:30 local: the same evening
    assert due_time(FollowUp(at_time="23:00", do="activate"), now=now, rule=rule) == datetime(
        2026, 12, 2, 4, tzinfo=UTC
    )
    assert next_local_time("07:00", after=now, tz=ZoneInfo("UTC")) == datetime(
        2026, 12, 2, 7, tzinfo=UTC
    )


def _scheduled(n: int, *, now: datetime) -> dict[str, Any]:
    """A scheduled follow-up document as the scheduler stores it."""
    return {
        "_id": f"rule-1:cool-off:{n}",
        "rule_id": "rule-1",
        "rule_name": "Pause losers for a while",
        "rule_version": 1,
        "task_id": "cool-off",
        "entity_id": str(n),
        "entity_name": f"Campaign {n}",
        "account": "act_1001",
        "level": "campaign",
        "batch_id": "batch-1",
        "do": "activate",
        "due_at": now + timedelta(hours=1),
        "generation": 1,
        "status": "scheduled",
        "reason": None,
        "created_at": now,
        "updated_at": now,
    }


def _counting_queue(settings: Settings) -> tuple[ArqRedis, list[int]]:
    """An arq Redis client that counts its round trips (each packed send is one)."""
    sends: list[int] = []

    class Counted(RedisConnection):
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            sends.append(1)
            await super().send_packed_command(command, check_health)

    pool = ConnectionPool.from_url(settings.redis_url, connection_class=Counted)
    return ArqRedis(connection_pool=pool), sends


async def test_checking_many_scheduled_timers_takes_one_redis_round_trip_per_chunk(
    settings: Settings, db: Database, redis: Any
) -> None:
    now = datetime.now(UTC)
    docs = [_scheduled(n, now=now) for n in range(1200)]
    await db[c.FOLLOWUPS].insert_many(docs)
    await redis.mset({job_key_prefix + followup_job_id(d["_id"], 1): b"timer" for d in docs})
    queue, sends = _counting_queue(settings)
    await queue.ping()  # the connection's own handshake is not what is counted
    sends.clear()
    try:
        assert await FollowupScheduler(db, queue=queue).rearm(now=now) == 0
    finally:
        await queue.aclose(close_connection_pool=True)
    assert len(sends) <= 3  # 1,200 follow-ups in chunks of 500; it used to be 1,200


async def test_only_the_timers_redis_lost_are_re_armed(
    settings: Settings, db: Database, redis: Any
) -> None:
    now = datetime.now(UTC)
    docs = [_scheduled(n, now=now) for n in range(30)]
    await db[c.FOLLOWUPS].insert_many(docs)
    lost = {d["_id"] for d in docs[3::4]}
    kept = [d["_id"] for d in docs if d["_id"] not in lost]
    await redis.mset({job_key_prefix + followup_job_id(key, 1): b"timer" for key in kept})
    queue = connect_queue(settings)
    try:
        assert await FollowupScheduler(db, queue=queue).rearm(now=now) == len(lost)
    finally:
        await queue.aclose()
    for key in lost:
        assert await redis.zscore(c.QUEUE_NAME, followup_job_id(key, 1)) is not None, key
    for key in kept:
        assert await redis.get(job_key_prefix + followup_job_id(key, 1)) == b"timer", key


# ---------------------------------------------------------------- a batch's follow-ups together


async def paused_with_followups(
    settings: Settings, db: Database, sandbox: SandboxAdmin, count: int
) -> list[dict[str, Any]]:
    """``count`` campaigns of act_2001 paused by one batch, each with a follow-up to activate
    it, all due now (by MongoDB's clock)."""
    await big_account(sandbox, db, settings, count)
    data = campaign_rule(
        {"type": "pause", "then": {"after_minutes": 30, "do": "activate"}}, [HAS_BUDGET]
    )
    data["ad_accounts"] = ["act_2001"]
    await save_rule(db, data)
    await dispatch(settings, db)
    await work(settings)
    await db[c.FOLLOWUPS].update_many({}, {"$set": {"due_at": datetime.now(UTC)}})
    followups = [d async for d in db[c.FOLLOWUPS].find({}).sort("_id", 1)]
    assert len(followups) == count
    assert {f["status"] for f in followups} == {"scheduled"}
    return followups


def each_activated_once(writes: list[dict[str, Any]], count: int) -> None:
    statuses: dict[str, list[str]] = {}
    for write in writes:
        if write["ok"]:
            statuses.setdefault(write["id"], []).append(write["params"].get("status"))
    assert len(statuses) == count
    assert {tuple(s) for s in statuses.values()} == {("PAUSED", "ACTIVE")}


async def test_a_batch_s_follow_ups_due_together_run_in_one_job(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    count = RUN_TOGETHER + 5
    followups = await paused_with_followups(settings, db, sandbox, count)
    lead, sibling = followups[0], followups[1]
    fence_before = await FenceStore(db).current("act_2001")
    await sandbox.clear_stats()
    async with engine_for(settings, db) as engine:
        result = await run_followup(engine, {"key": lead["_id"], "generation": 1}, now=now())
        assert result["status"] == "done"
        assert [r["status"] for r in result["together"]] == ["done"] * (RUN_TOGETHER - 1)
        # their writes went out together: one hold of the account's lock, the live values
        # read in one Batch API call and the writes sent in one (one at a time, each took
        # the lock and made two requests of its own)
        assert await FenceStore(db).current("act_2001") == fence_before + 1
        stats = await sandbox.stats()
        assert stats["http_requests"] <= 3, stats
        assert stats["counted_calls"] >= 2 * RUN_TOGETHER
        # the timers of those it ran with it are dropped (the lead's, run here by hand, is
        # not); one that fires all the same does nothing
        timers = await redis.zrange(c.QUEUE_NAME, 0, -1)
        assert len(timers) == count - RUN_TOGETHER + 1
        assert followup_job_id(lead["_id"], 1).encode() in timers
        again = await run_followup(engine, {"key": sibling["_id"], "generation": 1}, now=now())
        assert again["status"] == "already_handled"
    await fast_forward(redis)  # the rest: their own timers (the first runs the others)
    await work(settings)
    done = [d async for d in db[c.FOLLOWUPS].find({})]
    assert {d["status"] for d in done} == {"done"}
    each_activated_once(await sandbox.writes(), count)
    # each has its own intent (its generation's batch) and its own record
    intents = [i async for i in db[c.ACTION_INTENTS].find({"batch_id": {"$regex": "^followup:"}})]
    assert sorted(i["batch_id"] for i in intents) == sorted(
        followup_job_id(d["_id"], 1) for d in done
    )
    assert {i["status"] for i in intents} == {"done"}
    assert len(await records(db, kind="followup", outcome="applied")) == count


class _Writes(monitoring.CommandListener):
    """The write commands a client sends, by collection."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("insert", "update", "delete", "findAndModify"):
            self.sent.append((event.command_name, str(event.command.get(event.command_name))))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_a_timer_whose_follow_up_was_taken_writes_nothing(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    """A batch's timers fire together: those whose follow-up the first took only read it
    (their claim, a compare-and-set, would match nothing). Without the read first, each
    sent a write to the follow-ups collection (tried)."""
    followups = await paused_with_followups(settings, db, sandbox, 3)
    async with engine_for(settings, db) as engine:
        lead = await run_followup(engine, {"key": followups[0]["_id"], "generation": 1}, now=now())
    assert [r["status"] for r in lead["together"]] == ["done", "done"]
    listener = _Writes()
    client = create_client(settings, event_listeners=[listener])
    try:
        async with engine_for(settings, database(client, settings)) as engine:
            payload = {"key": followups[1]["_id"], "generation": 1}
            assert (await run_followup(engine, payload, now=now()))["status"] == "already_handled"
            stale = {"key": followups[2]["_id"], "generation": 0}  # a replaced generation's
            assert (await run_followup(engine, stale, now=now()))["status"] == "superseded"
    finally:
        await client.close()
    assert listener.sent == []


async def test_a_follow_up_whose_entity_is_gone_steps_aside_and_the_others_of_its_job_act(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    """Run together, one follow-up whose campaign Meta no longer knows (its live read
    answered "no such object") is skipped as ``entity_gone``; the others are written."""
    followups = await paused_with_followups(settings, db, sandbox, 4)
    gone = followups[2]
    await db[c.FOLLOWUPS].update_one({"_id": gone["_id"]}, {"$set": {"entity_id": "2399999"}})
    async with engine_for(settings, db) as engine:
        lead = await run_followup(engine, {"key": followups[0]["_id"], "generation": 1}, now=now())
    outcomes = {r["key"]: (r["status"], r["reason"]) for r in [lead, *lead["together"]]}
    assert outcomes.pop(gone["_id"]) == ("skipped", "entity_gone")
    assert set(outcomes.values()) == {("done", None)}
    (record,) = await records(db, kind="followup", outcome="skipped")
    assert (record["followup_key"], record["reason"]) == (gone["_id"], "entity_gone")
    assert record["error"]["code"] == 100
    activated = [w["id"] for w in await sandbox.writes() if w["params"].get("status") == "ACTIVE"]
    assert sorted(activated) == sorted(f["entity_id"] for f in followups if f is not gone)
    # the gone one recorded no intent; each other its own, done
    intents = [i async for i in db[c.ACTION_INTENTS].find({"batch_id": {"$regex": "^followup:"}})]
    assert sorted(i["batch_id"] for i in intents) == sorted(
        followup_job_id(f["_id"], 1) for f in followups if f is not gone
    )
    assert {i["status"] for i in intents} == {"done"}


async def test_follow_ups_written_one_at_a_time_when_writes_are_not_batched(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    """``RULEENGINE_WRITE_BATCH_SIZE=1``: each follow-up takes the account's lock and writes
    on its own, as before writes were batched."""
    followups = await paused_with_followups(settings, db, sandbox, 3)
    fence_before = await FenceStore(db).current("act_2001")
    alone = settings.model_copy(update={"write_batch_size": 1})
    async with engine_for(alone, db) as engine:
        lead = await run_followup(engine, {"key": followups[0]["_id"], "generation": 1}, now=now())
    assert [r["status"] for r in [lead, *lead["together"]]] == ["done"] * 3
    assert await FenceStore(db).current("act_2001") == fence_before + 3
    each_activated_once(await sandbox.writes(), 3)


async def test_a_batch_s_timers_firing_at_once_run_its_follow_ups_in_one_job(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    """Workers take many due timers at once: the timers of one batch take turns to claim, so
    the first runs the batch's follow-ups and the others find theirs taken (without turns,
    each claimed its own first and the batch ran as many jobs contending for one account)."""
    count = 10
    followups = await paused_with_followups(settings, db, sandbox, count)
    armed = await redis.zrange(c.QUEUE_NAME, 0, -1)
    payloads = [
        deserialize(await redis.get(job_key_prefix + job_id.decode()))["a"][0] for job_id in armed
    ]
    assert {p["batch_id"] for p in payloads} == {followups[0]["batch_id"]}
    async with engine_for(settings, db) as engine:
        results = await asyncio.gather(*(run_followup(engine, p, now=now()) for p in payloads))
    leads = [r for r in results if r["status"] == "done"]
    assert len(leads) == 1
    assert [r["status"] for r in leads[0]["together"]] == ["done"] * (count - 1)
    assert sorted(r["status"] for r in results if r not in leads) == ["already_handled"] * (
        count - 1
    )
    each_activated_once(await sandbox.writes(), count)
    assert await redis.keys(c.FOLLOWUP_CLAIM_PREFIX + "*") == []  # every turn given back


async def test_a_worker_killed_among_a_batch_s_follow_ups_activates_each_once(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, tmp_path: Path
) -> None:
    count = 8
    followups = await paused_with_followups(settings, db, sandbox, count)
    await fast_forward(redis)
    await sandbox.set_faults(write_latency_ms=1500)  # a call of writes lands after 1.5 s
    worker = start_worker(settings, tmp_path / "worker.log")
    try:  # the worst moment: the group's writes recorded and sent, landing after the kill
        await wait_for(lambda: write_in_flight(sandbox), timeout_s=60)
    finally:
        kill(worker)
    await wait_for(lambda: sandbox_quiet(sandbox))
    assert await _activations_at_least(sandbox, 1)  # they landed, and nobody heard Meta's answer
    await sandbox.clear_faults()
    statuses = {d["status"] async for d in db[c.FOLLOWUPS].find({})}
    assert "running" in statuses  # taken together, left running by the dead worker
    # the dead worker's jobs stay queued; what marked them in progress goes with it
    for key in await redis.keys(in_progress_key_prefix + "*"):
        await redis.delete(key)
    later = now() + timedelta(hours=1)
    async with engine_for(settings, db) as engine:
        assert engine.followups is not None
        assert await engine.followups.store.release_stale(older_than=later, now=later) >= 1
        for _pass in range(2):  # as the dispatcher re-arms: pending ones, and lost timers
            await engine.followups.rearm(now=later, check_timers=True)
            await fast_forward(redis)
            await work(settings)
    await reap(settings, db, redis, now=later)
    done = [d async for d in db[c.FOLLOWUPS].find({})]
    assert {d["_id"] for d in done} == {f["_id"] for f in followups}
    assert {d["status"] for d in done} == {"done"}
    each_activated_once(await sandbox.writes(), count)
    assert [i async for i in db[c.ACTION_INTENTS].find({"status": "pending"})] == []


async def _activations_at_least(sandbox: SandboxAdmin, count: int) -> bool:
    writes = await sandbox.writes()
    return sum(w["params"].get("status") == "ACTIVE" for w in writes) >= count


def now() -> datetime:
    return datetime.now(UTC)


async def test_the_claiming_turn_waits_for_its_holder_and_never_for_a_redis_that_is_down(
    redis: Any,
) -> None:
    """The first to come takes the turn; a second waits until it is given back and goes on
    without taking it; with Redis not answering nobody waits."""
    order: list[str] = []
    looked = asyncio.Event()

    class Watched:
        """The real Redis; notes when the second looks whether the turn is still taken."""

        def __getattr__(self, name: str) -> Any:
            return getattr(redis, name)

        async def exists(self, *keys: str) -> Any:
            looked.set()
            return await redis.exists(*keys)

    async def second() -> None:
        async with turn(Watched(), "t:batch", ttl_s=10, wait_s=10) as taken:
            order.append(f"second {taken}")

    async with turn(redis, "t:batch", ttl_s=10, wait_s=10) as taken:
        waiting = asyncio.create_task(second())
        await asyncio.wait_for(looked.wait(), timeout=10)  # it found the turn taken
        order.append(f"first {taken}")
    await waiting
    assert order == ["first True", "second False"]
    assert await redis.exists("t:batch") == 0

    class Down:
        async def set(self, *args: Any, **kwargs: Any) -> Any:
            raise RedisConnectionError("down")

    started = asyncio.get_running_loop().time()
    async with turn(Down(), "t:batch", ttl_s=10, wait_s=10) as taken:
        assert taken is False
    assert asyncio.get_running_loop().time() - started < 1
