"""The duplicate action: copies Meta makes at once, and those it makes in the background."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from flow import (
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
from ruleengine.dispatching.payload import EvaluateJob, deserialize, evaluate_job_id
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.job import evaluate_account
from support import SANDBOX_TOKEN
from test_faults import queued_jobs

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
DEEP = {"type": "duplicate", "deep_copy": True, "rename_suffix": " - Copy"}


async def graph(sandbox: SandboxAdmin, path: str, **params: str) -> Any:
    """A Graph read from the sandbox, as any client makes it."""
    query = {"access_token": SANDBOX_TOKEN, "limit": "100", **params}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{sandbox.base_url}/v25.0/{path}", params=query) as response,
    ):
        return await response.json()


async def named(sandbox: SandboxAdmin, edge: str, name: str) -> str:
    """The id of the object of act_1001's ``edge`` called ``name``."""
    body = await graph(sandbox, f"act_1001/{edge}", fields="id,name")
    return next(o["id"] for o in body["data"] if o["name"] == name)


def only(entity_id: str, **extra: Any) -> dict[str, Any]:
    return campaign_rule(
        DEEP, [ALWAYS], filters=[{"field": "id", "operator": "EQUAL", "value": entity_id}], **extra
    )


async def test_a_deep_copy_too_big_to_make_at_once_goes_through_an_async_batch(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    campaign = await named(sandbox, "campaigns", "[AUTO] Prospecting US 1")
    source_ads = (await graph(sandbox, f"{campaign}/ads"))["data"]
    rule = await run_rule(settings, db, only(campaign))
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["reason"], record["field"]) == ("applied", None, "copies")
    response = record["response"]
    assert response["mode"] == "async"
    assert response["request_set_id"]
    kinds = Counter(o["ad_object_type"] for o in response["objects"])
    assert kinds == {"campaign": 1, "ad_set": 3, "ad": len(source_ads)}
    assert response["copied_ids"][0] == record["after"] == response["copied_id"]
    assert len(set(response["copied_ids"])) == 1 + 3 + len(source_ads)
    copy = await sandbox.object(record["after"])
    assert (copy["name"], copy["status"]) == (
        f"{(await sandbox.object(campaign))['name']} - Copy",
        "PAUSED",
    )
    copied_ads = (await graph(sandbox, f"{record['after']}/ads", fields="id"))["data"]
    assert {a["id"] for a in copied_ads} <= set(response["copied_ids"])
    log = [(w["kind"], w["ok"]) for w in await sandbox.writes()]
    # the synchronous copy was refused (nothing copied), the same copy went in the background
    assert log == [("copies", False), ("async_batch", True), ("copies", True)]
    intent = await db[c.ACTION_INTENTS].find_one({"field": "copies"})
    assert intent is not None
    assert (intent["status"], intent["response"]["copied_ids"]) == ("done", response["copied_ids"])
    assert await db[c.ERROR_LOG].count_documents({}) == 0  # an expected refusal is no error


async def test_a_small_deep_copy_is_made_at_once_with_every_new_id(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    adset = await named(sandbox, "adsets", "Retargeting US 2 - Lookalike 1%")
    ads = (await graph(sandbox, f"{adset}/ads"))["data"]
    assert 1 + len(ads) <= 3
    rule = await run_rule(settings, db, only(adset, level="adset"))
    (record,) = await records(db, rule_id=rule.id)
    assert record["outcome"] == "applied"
    response = record["response"]
    assert (response["mode"], response["request_set_id"]) == ("sync", None)
    assert [o["ad_object_type"] for o in response["objects"]] == ["ad_set"] + ["ad"] * len(ads)
    assert [(w["kind"], w["ok"]) for w in await sandbox.writes()] == [("copies", True)]


async def test_a_background_copy_still_running_is_read_back_never_sent_again(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    waiting = settings.model_copy(update={"copy_wait_s": 0.0})  # one look, then move on
    await sandbox.set_faults(async_batch_delay_s=600)
    campaign = await named(sandbox, "campaigns", "[AUTO] Prospecting US 2")
    rule = await save_rule(db, only(campaign))
    await dispatch(waiting, db)
    raw = await redis.get(b"arq:job:" + (await redis.zrange(c.QUEUE_NAME, 0, 0))[0])
    payload = EvaluateJob.model_validate(deserialize(raw)["a"][0])
    await work(waiting)
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["reason"], record["after"]) == (
        "applied",
        "copy_in_progress",
        None,
    )
    intent = await db[c.ACTION_INTENTS].find_one({"field": "copies"})
    assert intent is not None
    set_id = intent["response"]["request_set_id"]
    assert intent["status"] == "pending"

    queue = connect_queue(waiting)  # the same job delivered again: it reads, it sends nothing
    await queue.enqueue_job(
        c.EVALUATE_JOB, payload.to_job(), _job_id=evaluate_job_id(payload.batch_id) + ":again"
    )
    await queue.aclose()
    await work(waiting)
    assert [w["kind"] for w in await sandbox.writes()] == ["copies", "async_batch"]
    assert (await db[c.ACTION_INTENTS].find_one({"_id": intent["_id"]}))["status"] == "pending"

    await sandbox.advance_clock(600)  # Meta finishes; the reaper reads the copy back
    await reap(settings, db, redis, now=datetime.now(UTC) + timedelta(hours=2))
    settled = await db[c.ACTION_INTENTS].find_one({"_id": intent["_id"]})
    assert settled is not None
    assert settled["status"] == "done"
    assert settled["response"]["request_set_id"] == set_id
    assert len(settled["response"]["copied_ids"]) > 3
    assert [w["kind"] for w in await sandbox.writes()] == ["copies", "async_batch", "copies"]


# ---------------------------------------------------------------- overlapping runs


@pytest.mark.parametrize(
    ("limit", "reason"),
    [
        ({"cooldown_minutes": 60}, "next_execute_not_reached"),
        ({"execution_count_limit": 1}, "execution_count_limit"),
    ],
)
async def test_two_overlapping_runs_of_a_duplicate_rule_copy_the_entity_once(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    accounts: list[str],
    limit: dict[str, int],
    reason: str,
) -> None:
    # Both runs pass the cooldown stage before either has copied; the second acts only once
    # the first has: under the account's write lock it must find the first run's copy.
    campaign = await named(sandbox, "campaigns", "[AUTO] Prospecting US 1")
    data = campaign_rule(
        {"type": "duplicate"},
        [ALWAYS],
        filters=[{"field": "id", "operator": "EQUAL", "value": campaign}],
        schedule={"mode": "interval", "every_minutes": 1},
    )
    data["tasks"][0] |= limit
    await save_rule(db, data)
    start = datetime.now(UTC).replace(microsecond=0)
    await dispatch(settings, db, now=start)
    await dispatch(settings, db, now=start + timedelta(minutes=1))
    first, second = sorted(await queued_jobs(redis), key=lambda job: job.scheduled_at)
    async with engine_for(settings, db) as late, engine_for(settings, db) as early:
        at_act, first_done = asyncio.Event(), asyncio.Event()
        act = late.executor.act  # a copy is one action at a time, never in a Batch API call

        async def act_after_the_first(*args: Any) -> Any:
            at_act.set()
            await first_done.wait()
            return await act(*args)

        late.executor.act = act_after_the_first  # type: ignore[method-assign]
        overlapping = asyncio.create_task(evaluate_account(late, second, now=datetime.now(UTC)))
        await asyncio.wait_for(at_act.wait(), timeout=20)
        copied = await evaluate_account(early, first, now=datetime.now(UTC))
        first_done.set()
        skipped = await overlapping
    assert (copied.applied, skipped.applied) == (1, 0)
    assert [(w["kind"], w["ok"]) for w in await sandbox.writes()] == [("copies", True)]
    (record,) = await records(db, batch_id=second.batch_id)
    assert (record["outcome"], record["reason"]) == ("skipped", reason)
    assert await db[c.ACTION_INTENTS].count_documents({"batch_id": second.batch_id}) == 0


async def test_a_copy_the_reaper_finds_in_flight_is_made_once(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    accounts: list[str],
    tmp_path: Any,
) -> None:
    """A worker dies while its copy is still being made at Meta, and the reaper takes the
    owner for gone (a batch abandoned while the request runs): it settles the copy only under
    the account's lock, from the copies Meta holds of the source — never as failed while the
    copy may still be made — and the next run, in the copy's cooldown, makes no second one."""
    adset = await named(sandbox, "adsets", "Creative Test US 1 - Lookalike 1%")
    action = {"type": "duplicate", "rename_suffix": " - Copy"}
    data = campaign_rule(
        action,
        [ALWAYS],
        level="adset",
        filters=[{"field": "id", "operator": "EQUAL", "value": adset}],
        cooldown_minutes=60,
    )
    await save_rule(db, data)
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    (job,) = await queued_jobs(redis)
    await sandbox.set_faults(write_latency_ms=3000)  # the copy takes 3 s at Meta
    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        await wait_for(lambda: write_in_flight(sandbox), timeout_s=60)
    finally:
        kill(worker)
    await redis.delete(c.QUEUE_NAME)  # the dead worker's job would block an in-process burst
    await db[c.BATCHES].update_one({"_id": job.batch_id}, {"$set": {"status": "ABANDONED"}})
    await reap(settings, db, redis, now=datetime.now(UTC))  # while the copy is still on its way
    await wait_for(lambda: sandbox_quiet(sandbox))
    await sandbox.clear_faults()
    await reap(settings, db, redis, now=datetime.now(UTC))
    intent = await db[c.ACTION_INTENTS].find_one({"field": "copies"})
    assert intent is not None and intent["status"] == "done"
    copies = [w for w in await sandbox.writes() if w["kind"] == "copies" and w["ok"]]
    assert len(copies) == 1
    assert (
        intent["response"]["copied_id"]
        == (await graph(sandbox, f"{adset}/copies"))["data"][0]["id"]
    )
    # the next run finds the copy's cooldown in force: no second copy
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    copies = [w for w in await sandbox.writes() if w["kind"] == "copies" and w["ok"]]
    assert len(copies) == 1
    (recovered,) = await records(db, batch_id=job.batch_id)
    assert (recovered["outcome"], recovered["after"]) == (
        "applied",
        intent["response"]["copied_id"],
    )
