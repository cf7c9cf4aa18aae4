"""The duplicate action: copies Meta makes at once, and bigger ones made as a tree (new apps
may not use asynchronous batch requests)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import orjson
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
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.job import evaluate_account
from support import SANDBOX_NOW, SANDBOX_TOKEN
from test_faults import queued_jobs

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
DEEP = {"type": "duplicate", "deep_copy": True, "rename_suffix": " - Copy"}


async def graph(sandbox: SandboxAdmin, path: str, **params: str) -> Any:
    """A Graph read from the sandbox, as any client makes it."""
    query = {"access_token": SANDBOX_TOKEN, "limit": "100", **params}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{sandbox.base_url}/v27.0/{path}", params=query) as response,
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


async def test_a_deep_copy_too_big_to_make_at_once_is_made_as_a_tree_without_async_batches(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    await new_app(sandbox)
    campaign = await named(sandbox, "campaigns", "[AUTO] Prospecting US 1")
    source_adsets = (await graph(sandbox, f"{campaign}/adsets", fields="id,name"))["data"]
    source_ads = (await graph(sandbox, f"{campaign}/ads"))["data"]
    rule = await run_rule(settings, db, only(campaign))
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["reason"], record["field"]) == ("applied", None, "copies")
    response = record["response"]
    assert (response["mode"], response["complete"]) == ("tree", True)
    kinds = Counter(o["ad_object_type"] for o in response["objects"])
    assert kinds == {"campaign": 1, "ad_set": 3, "ad": len(source_ads)}
    assert response["copied_ids"][0] == record["after"] == response["copied_id"]
    assert len(set(response["copied_ids"])) == 1 + 3 + len(source_ads)
    copy = await sandbox.object(record["after"])
    assert (copy["name"], copy["status"]) == (
        f"{(await sandbox.object(campaign))['name']} - Copy",
        "PAUSED",
    )
    copied_adsets = (await graph(sandbox, f"{record['after']}/adsets", fields="id,name"))["data"]
    # the children keep their names, as a deep copy's do
    assert sorted(a["name"] for a in copied_adsets) == sorted(a["name"] for a in source_adsets)
    copied_ads = (await graph(sandbox, f"{record['after']}/ads", fields="id"))["data"]
    assert {a["id"] for a in copied_ads} == set(response["copied_ids"][4:])
    log = [(w["kind"], w["ok"]) for w in await sandbox.writes()]
    # the children read first, then: the campaign alone, its 3 ad sets, their ads
    assert log == [("copies", True)] * (1 + 3 + len(source_ads))
    intent = await db[c.ACTION_INTENTS].find_one({"field": "copies"})
    assert intent is not None
    assert (intent["status"], intent["response"]["copied_ids"]) == ("done", response["copied_ids"])
    assert await db[c.ERROR_LOG].count_documents({}) == 0
    assert (await sandbox.stats())["calls_by_kind"].get("async_batch", 0) == 0


async def new_app(sandbox: SandboxAdmin) -> None:
    """The sandbox as an app created since 2026-11-04: no asynchronous batches, no multi-ID."""
    await sandbox.reset(seed=1, scenario="demo", app="new")
    await sandbox.set_clock(SANDBOX_NOW)


async def ads_in(sandbox: SandboxAdmin, adset: str, count: int) -> list[str]:
    """``adset``'s ads, made ``count`` by copying its first ad into it (one Batch API call)."""
    ads = [a["id"] for a in (await graph(sandbox, f"{adset}/ads", fields="id"))["data"]]
    extra = [
        {"method": "POST", "relative_url": f"{ads[0]}/copies", "body": f"adset_id={adset}"}
        for _ in range(count - len(ads))
    ]
    async with aiohttp.ClientSession() as http:
        form = {"access_token": SANDBOX_TOKEN, "batch": orjson.dumps(extra).decode()}
        async with http.post(f"{sandbox.base_url}/v27.0/", data=form) as response:
            assert [item["code"] for item in await response.json()] == [200] * len(extra)
    return [a["id"] for a in (await graph(sandbox, f"{adset}/ads", fields="id"))["data"]]


async def test_a_duplicate_of_an_ad_set_with_4_ads_works_for_a_new_app(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    await new_app(sandbox)
    adset = await named(sandbox, "adsets", "Retargeting US 2 - Lookalike 1%")
    ads = await ads_in(sandbox, adset, 4)
    before = len(await sandbox.writes())
    rule = await run_rule(settings, db, only(adset, level="adset"))
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["response"]["mode"]) == ("applied", "tree")
    assert [o["ad_object_type"] for o in record["response"]["objects"]] == ["ad_set"] + ["ad"] * 4
    assert sorted(o["source_id"] for o in record["response"]["objects"][1:]) == sorted(ads)
    copied = (await graph(sandbox, f"{record['after']}/ads", fields="id"))["data"]
    assert len(copied) == 4
    assert [(w["kind"], w["ok"]) for w in (await sandbox.writes())[before:]] == [
        ("copies", True)
    ] * 5
    stats = (await sandbox.stats())["calls_by_kind"]
    assert stats.get("async_batch", 0) == 0


async def test_a_copy_of_more_than_51_objects_is_refused_before_any_write(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    await new_app(sandbox)
    adset = await named(sandbox, "adsets", "Retargeting US 2 - Lookalike 1%")
    await ads_in(sandbox, adset, 51)
    before = len(await sandbox.writes())
    rule = await run_rule(settings, db, only(adset, level="adset"))
    (record,) = await records(db, rule_id=rule.id)
    assert (record["outcome"], record["reason"]) == ("failed", "copy_too_large")
    assert "52 objects" in record["error"]["message"]
    assert (await sandbox.writes())[before:] == []
    intent = await db[c.ACTION_INTENTS].find_one({"field": "copies"})
    assert intent is not None
    assert (intent["status"], intent["reason"]) == ("failed", "copy_too_large")


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


@pytest.mark.parametrize("settler", ["redelivery", "reaper"])
async def test_a_worker_killed_mid_tree_leaves_every_copy_recorded_and_nothing_sent_again(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    accounts: list[str],
    tmp_path: Any,
    settler: str,
) -> None:
    """A worker process is SIGKILLed while the ads' Batch API call is at Meta: the intent
    noted the campaign and its ad sets, not the ads that call makes. The job delivered again,
    or the reaper, settles the copy from what Meta holds under it — every ad of that last
    call recorded with its source, the copy whole — and sends nothing more."""
    await new_app(sandbox)
    campaign = await named(sandbox, "campaigns", "[AUTO] Prospecting US 1")
    source_ads = {a["id"] for a in (await graph(sandbox, f"{campaign}/ads"))["data"]}
    await save_rule(db, only(campaign))
    await dispatch(settings, db)
    (job,) = await queued_jobs(redis)
    await sandbox.set_faults(write_latency_ms=1500)

    async def ads_call_at_meta() -> bool:
        intent = await db[c.ACTION_INTENTS].find_one({"field": "copies"})
        objects = (intent or {}).get("response", {}).get("objects", [])
        adsets = sum(o["ad_object_type"] == "ad_set" for o in objects)
        return adsets == 3 and await write_in_flight(sandbox)

    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        await wait_for(ads_call_at_meta, timeout_s=60)
    finally:
        kill(worker)
    await wait_for(lambda: sandbox_quiet(sandbox))  # the ads' call lands at Meta all the same
    await sandbox.clear_faults()
    intent = await db[c.ACTION_INTENTS].find_one({"field": "copies"})
    assert intent is not None
    noted = intent["response"]
    assert (intent["status"], noted["complete"], len(noted["objects"])) == ("pending", False, 4)
    copy = noted["copied_id"]
    held = {a["id"] for a in (await graph(sandbox, f"{copy}/ads", fields="id"))["data"]}
    assert len(held) == len(source_ads)  # Meta made them; the intent does not say so yet
    sent = len(await sandbox.writes())
    await redis.delete(c.QUEUE_NAME)
    if settler == "redelivery":
        async with engine_for(settings, db) as engine:  # the same job, delivered again
            again = await evaluate_account(engine, job, now=datetime.now(UTC))
        assert again.applied == 0
    else:
        await db[c.BATCHES].update_one({"_id": job.batch_id}, {"$set": {"status": "ABANDONED"}})
        await reap(settings, db, redis, now=datetime.now(UTC))
    assert len(await sandbox.writes()) == sent  # nothing sent again
    settled = await db[c.ACTION_INTENTS].find_one({"_id": intent["_id"]})
    assert settled is not None and settled["status"] == "done"
    response = settled["response"]
    assert (response["copied_id"], response["complete"]) == (copy, True)
    ads = [o for o in response["objects"] if o["ad_object_type"] == "ad"]
    assert {o["copied_id"] for o in ads} == held
    assert {o["source_id"] for o in ads} == source_ads
    assert len(set(response["copied_ids"])) == 1 + 3 + len(source_ads)
    (record,) = await records(db, rule_id=job.rule_id)
    assert record["response"]["complete"] is True  # Rule Logs list the whole copy
    assert set(record["response"]["copied_ids"]) == set(response["copied_ids"])


@pytest.mark.parametrize("lost_level", ["ad", "ad_set"])
async def test_a_tree_copys_call_that_loses_its_answer_is_read_back_not_sent_again(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    accounts: list[str],
    lost_level: str,
) -> None:
    """A Batch API call of the tree lands at Meta and its answer is lost (a proxy's 502): its
    copies may or may not have been made, so nothing is sent again; what Meta holds under the
    copy is read back and recorded. The ads' answer lost: the copy is whole at Meta, and
    recorded whole. The ad sets' answer lost: they were made, their ads never asked for — the
    copy is recorded with its 3 ad sets, ``copy_incomplete``."""
    await new_app(sandbox)
    campaign = await named(sandbox, "campaigns", "[AUTO] Prospecting US 1")
    source_adsets = {a["id"] for a in (await graph(sandbox, f"{campaign}/adsets"))["data"]}
    source_ads = {a["id"] for a in (await graph(sandbox, f"{campaign}/ads"))["data"]}
    in_call = min(source_ads if lost_level == "ad" else source_adsets)
    lost = {"path_contains": f"{in_call}/copies", "method": "POST", "times": 1}
    await sandbox.set_faults(lost_answers=[lost])
    rule = await run_rule(settings, db, only(campaign))
    (record,) = await records(db, rule_id=rule.id)
    response = record["response"]
    made = Counter(o["ad_object_type"] for o in response["objects"])
    sources = {o["source_id"] for o in response["objects"][1:]}
    asked = [w for w in await sandbox.writes() if w["kind"] == "copies"]
    if lost_level == "ad":
        assert (record["outcome"], record["reason"]) == ("applied", None), record
        assert (made["ad_set"], made["ad"], response["complete"]) == (3, len(source_ads), True)
        assert sources == source_adsets | source_ads
        held = (await graph(sandbox, f"{record['after']}/ads", fields="id"))["data"]
        assert set(response["copied_ids"][4:]) == {a["id"] for a in held}
        assert len(asked) == 1 + 3 + len(source_ads)  # each object asked for once
    else:
        assert (record["outcome"], record["reason"]) == ("applied", "copy_incomplete"), record
        assert (made["ad_set"], made["ad"], response["complete"]) == (3, 0, False)
        assert sources == source_adsets
        assert len(asked) == 1 + 3  # the ads never asked for, nothing asked twice


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


async def test_a_copy_an_earlier_release_started_as_an_async_batch_is_still_read_back(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    """An app created before 2026-11-04 may still have such a copy pending after the upgrade:
    its intent is settled from the request set (the reaper's path), never sent again."""
    from ruleengine.meta.http import GraphSession
    from ruleengine.meta.reader import GraphReader
    from ruleengine.store.intents import IntentStore
    from ruleengine.writes.copies import answered, settle_copy

    await sandbox.reset(seed=1, scenario="demo", app="legacy")
    await sandbox.set_clock(SANDBOX_NOW)
    campaign = await named(sandbox, "campaigns", "[AUTO] Prospecting US 2")
    adbatch = [{"name": "copy", "relative_url": f"{campaign}/copies", "body": "deep_copy=true"}]
    async with aiohttp.ClientSession() as http:
        form = {
            "access_token": SANDBOX_TOKEN,
            "name": "old",
            "adbatch": orjson.dumps(adbatch).decode(),
        }
        async with http.post(
            f"{sandbox.base_url}/v27.0/act_1001/async_batch_requests", data=form
        ) as response:
            set_id = (await response.json())["id"]
    pending = {"mode": "async", "request_set_id": set_id}
    assert answered(pending)
    doc = {"status": "pending", "field": "copies", "account": "act_1001", "response": pending}
    inserted = await db[c.ACTION_INTENTS].insert_one(doc)
    session = GraphSession(settings)
    try:
        status = await settle_copy(
            IntentStore(db),
            {**doc, "_id": inserted.inserted_id},
            reader=GraphReader.from_settings(session),
            token=SANDBOX_TOKEN,
            now=datetime.now(UTC),
        )
    finally:
        await session.close()
    assert status == "done"
    settled = await db[c.ACTION_INTENTS].find_one({"_id": inserted.inserted_id})
    assert settled is not None
    assert settled["response"]["request_set_id"] == set_id
    assert len(settled["response"]["copied_ids"]) > 3


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
