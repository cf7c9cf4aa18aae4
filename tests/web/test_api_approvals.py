"""Approvals against the sandbox: a +50 % budget change that needs approval waits (nothing
written), is announced with a link, approved through the API and written once by a worker
(approve twice: one write); rejected, it never lands; past its expiry, it is recorded
``approval_expired``; changed by someone else meanwhile, it is closed
``changed_by_someone_else`` with the live value."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from web_helpers import AUTH, Client, run_batch

from flow import (
    campaign_rule,
    dead_worker_forgotten,
    kill,
    point_cli_at,
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
from ruleengine.approvals.deciding import approval_job_id, requeue_approved
from ruleengine.cli import main
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.language.money import format_change
from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ApiTokenStore
from ruleengine.store.approvals import ApprovalStore
from ruleengine.store.db import Database
from ruleengine.store.intents import IntentStore
from ruleengine.writes.lock import AccountLocks

HUMAN_TOKEN = "EAAGapproverHUMANtoken0123456789"
SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1}


def gated_rule(name: str = "Scale with approval", **approval: Any) -> dict[str, Any]:
    """+50 % budgets on act_1001's campaigns that spent today, each waiting for approval."""
    data = campaign_rule({"type": "increase_budget", "percent": 50}, [SPENT], name=name)
    data["tasks"][0]["approval"] = {"when": {"budget_change_pct_above": 30}} | approval
    return data


async def propose(
    settings: Settings, db: Database, redis: Any, data: dict[str, Any], *, now: datetime
) -> str:
    """Save the rule and run one batch of it at ``now``; the batch id."""
    saved = await save_rule(db, data)
    return await run_batch(
        settings,
        db,
        redis,
        rule_id=saved.id,
        version=saved.version,
        rule=parse_rule(saved.definition | {"status": "ACTIVE"}),
        account="act_1001",
        now=now,
    )


async def pending(client: Client) -> list[dict[str, Any]]:
    listing = await (await client.get("/api/approvals?status=pending&limit=500")).json()
    assert listing["total"] == len(listing["items"])
    items: list[dict[str, Any]] = listing["items"]
    return items


async def budget_of(sandbox: SandboxAdmin, entity: str) -> int:
    return int((await sandbox.object(entity))["daily_budget"])


async def test_a_gated_raise_waits_is_approved_and_lands_once(
    client: Client,
    webhook: tuple[Settings, list[dict[str, Any]]],
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    hooked, received = webhook
    hooked = hooked.model_copy(update={"web_public_url": "https://ads.example.com/"})
    data = gated_rule(webhook="ops")
    batch = await propose(hooked, db, redis, data, now=datetime.now(UTC))
    assert await successful_writes(sandbox) == []  # nothing written: every raise waits
    waiting = await records(db, batch_id=batch, outcome="awaiting_approval")
    assert waiting and all(r["reason"] == "approval_required" for r in waiting)
    assert all(r["after"] == r["before"] * 3 // 2 for r in waiting)
    items = await pending(client)
    assert len(items) == len(waiting)
    first = items[0]
    entity, before = first["entity"]["id"], first["before"]
    assert first["after"] == before * 3 // 2 and first["field"] == "daily_budget"
    assert await budget_of(sandbox, entity) == before
    # announced once per proposal, with a link to the screen
    assert len(received) == len(items)
    (text,) = [m["text"] for m in received if f"/approvals/{first['id']}" in m["text"]]
    assert text.endswith(f"https://ads.example.com/approvals/{first['id']}")
    # the money as a person reads it: the account's currency, the percentage, its name
    money = format_change(before, first["after"], "USD")
    assert f"on Demo Store US (act_1001): daily budget {money} waits" in text
    # readiness and the metrics show them waiting
    ready = (await (await client.get("/health/ready")).json())["checks"]["approvals"]
    assert ready["ok"] and ready["pending"] == len(items) and ready["oldest_age_s"] >= 0
    metrics = await (await client.get("/metrics")).text()
    assert f"ruleengine_approvals_pending {float(len(items))}" in metrics
    assert "ruleengine_approvals_oldest_pending_age_seconds" in metrics
    # a second run while they wait proposes nothing again
    again = await propose(hooked, db, redis, data, now=datetime.now(UTC) + timedelta(minutes=15))
    second = await records(db, batch_id=again)
    assert not [r for r in second if r["outcome"] == "awaiting_approval"]
    assert len([r for r in second if r["reason"] == "approval_pending"]) == len(items)
    assert len(await pending(client)) == len(items) and len(received) == len(items)
    # approve twice at once: one decision, one write
    url = f"/api/approvals/{first['id']}/approve"
    answers = await asyncio.gather(client.post(url, headers=AUTH), client.post(url, headers=AUTH))
    assert sorted(a.status for a in answers) == [200, 409]
    assert (await client.post(url)).status == 401
    await work(web_settings)
    await work(web_settings)
    assert await budget_of(sandbox, entity) == before * 3 // 2
    writes = [w for w in await successful_writes(sandbox) if w["id"] == entity]
    assert len(writes) == 1
    assert len(await successful_writes(sandbox)) == 1  # the others still wait
    done = await (await client.get(f"/api/approvals/{first['id']}")).json()
    assert (done["status"], done["decided_by"]) == ("applied", "api")
    assert done["write_batch"] == f"approval:{first['id']}"
    (record,) = await records(db, batch_id=f"approval:{first['id']}")
    assert (record["outcome"], record["before"], record["after"]) == (
        "applied",
        before,
        before * 3 // 2,
    )
    again = await client.post(url, headers=AUTH)
    assert again.status == 409 and (await again.json())["reason"] == "already_applied"


async def test_a_redelivered_job_finds_its_own_proposals(
    client: Client,
    webhook: tuple[Settings, list[dict[str, Any]]],
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    hooked, received = webhook
    data = gated_rule(webhook="ops")
    now = datetime.now(UTC)
    batch = await propose(hooked, db, redis, data, now=now)
    items = await pending(client)
    again = await propose(hooked, db, redis, data, now=now)  # the same run, delivered twice
    assert again == batch
    assert [i["id"] for i in await pending(client)] == [i["id"] for i in items]
    assert len(received) == len(items)  # announced once
    waiting = await records(db, batch_id=batch, outcome="awaiting_approval")
    assert sorted(r["approval_id"] for r in waiting) == sorted(i["id"] for i in items)
    assert await successful_writes(sandbox) == []


async def test_a_rejected_change_never_lands(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await propose(web_settings, db, redis, gated_rule(), now=datetime.now(UTC))
    first = (await pending(client))[0]
    rejected = await client.post(f"/api/approvals/{first['id']}/reject", headers=AUTH)
    assert rejected.status == 200
    assert (await rejected.json())["status"] == "rejected"
    late = await client.post(f"/api/approvals/{first['id']}/approve", headers=AUTH)
    assert late.status == 409 and (await late.json())["reason"] == "already_rejected"
    await work(web_settings)
    assert await successful_writes(sandbox) == []
    assert await budget_of(sandbox, first["entity"]["id"]) == first["before"]
    decided = await (await client.get("/api/approvals?status=rejected")).json()
    assert [i["decided_by"] for i in decided["items"]] == ["api"]


async def test_an_expired_proposal_is_recorded_approval_expired(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    three_hours_ago = datetime.now(UTC) - timedelta(hours=3)
    await propose(web_settings, db, redis, gated_rule(), now=three_hours_ago)  # 120 min expiry
    # proposed three hours ago by MongoDB's clock too, which an approval's expiry is by
    await db[c.APPROVALS].update_many(
        {}, [{"$set": {"expires_at": {"$subtract": ["$expires_at", 3 * 3600 * 1000]}}}]
    )
    doc = await db[c.APPROVALS].find_one({})
    assert doc is not None and doc["status"] == "pending"
    answer = await client.post(f"/api/approvals/{doc['_id']}/approve", headers=AUTH)
    assert answer.status == 409
    body = await answer.json()
    assert body["reason"] == "approval_expired" and body["approval"]["status"] == "expired"
    assert await pending(client) == []  # the rest expire when listed
    await work(web_settings)
    assert await successful_writes(sandbox) == []


async def test_the_reaper_expires_undecided_proposals(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> None:
    now = datetime.now(UTC)
    await propose(web_settings, db, redis, gated_rule(expires_after_minutes=30), now=now)
    waiting = await db[c.APPROVALS].count_documents({"status": "pending"})
    assert waiting > 0
    await reap(web_settings, db, redis, now=now + timedelta(minutes=29))
    assert await db[c.APPROVALS].count_documents({"status": "pending"}) == waiting
    await reap(web_settings, db, redis, now=now + timedelta(minutes=31))
    expired = [d async for d in db[c.APPROVALS].find({})]
    assert {(d["status"], d["reason"]) for d in expired} == {("expired", "approval_expired")}
    assert len(expired) == waiting


async def test_a_value_changed_before_approval_is_left_alone(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await propose(web_settings, db, redis, gated_rule(), now=datetime.now(UTC))
    first = (await pending(client))[0]
    entity = first["entity"]["id"]
    await sandbox.issue_token(HUMAN_TOKEN)
    async with aiohttp.ClientSession() as http:  # a colleague in Ads Manager
        url = f"{sandbox.base_url}/v27.0/{entity}"
        await http.post(url, data={"daily_budget": "4321", "access_token": HUMAN_TOKEN})
    assert (await client.post(f"/api/approvals/{first['id']}/approve", headers=AUTH)).status == 200
    await work(web_settings)
    closed = await (await client.get(f"/api/approvals/{first['id']}")).json()
    assert (closed["status"], closed["live"]) == ("changed_by_someone_else", 4321)
    assert await budget_of(sandbox, entity) == 4321
    (record,) = await records(db, batch_id=f"approval:{first['id']}")
    assert (record["outcome"], record["reason"]) == ("skipped", "changed_by_someone_else")


async def test_the_cli_lists_approves_and_rejects(
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await propose(web_settings, db, redis, gated_rule(), now=datetime.now(UTC))
    first, second = (await pending(client))[:2]
    point_cli_at(web_settings, monkeypatch)
    monkeypatch.setenv("RULEENGINE_REDIS_URL", web_settings.redis_url)
    assert await asyncio.to_thread(main, ["approvals", "list"]) == 0
    listed = capsys.readouterr().out
    assert first["id"] in listed
    # in the account's currency, with the percentage and the account's name
    assert (first["account_name"], first["currency"]) == ("Demo Store US", "USD")
    change = format_change(first["before"], first["after"], "USD")
    assert f"on Demo Store US (act_1001): daily budget {change}" in listed
    assert change.startswith("$") and change.endswith("(+50 %)")
    assert await asyncio.to_thread(main, ["approvals", "approve", first["id"], "--by", "ana"]) == 0
    assert await asyncio.to_thread(main, ["approvals", "approve", first["id"]]) == 1
    assert "already_approved" in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["approvals", "reject", second["id"]]) == 0
    assert await asyncio.to_thread(main, ["approvals", "approve", "nope"]) == 1
    await work(web_settings)
    writes = await successful_writes(sandbox)
    assert [w["id"] for w in writes] == [first["entity"]["id"]]
    assert await asyncio.to_thread(main, ["approvals", "list", "--status", "applied"]) == 0
    assert "by ana" in capsys.readouterr().out


async def test_an_approved_change_starts_the_tasks_cooldown(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    data = gated_rule()
    data["tasks"][0]["cooldown_minutes"] = 60
    now = datetime.now(UTC)
    await propose(web_settings, db, redis, data, now=now)
    first = (await pending(client))[0]
    entity = first["entity"]["id"]
    assert (await client.post(f"/api/approvals/{first['id']}/approve", headers=AUTH)).status == 200
    await work(web_settings)
    assert await budget_of(sandbox, entity) == first["after"]
    later = await propose(web_settings, db, redis, data, now=now + timedelta(minutes=15))
    (record,) = await records(db, batch_id=later, entity_id=entity)
    assert (record["outcome"], record["reason"]) == ("skipped", "next_execute_not_reached")


async def test_only_an_approver_or_admin_token_decides_and_its_name_is_recorded(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await propose(web_settings, db, redis, gated_rule(), now=datetime.now(UTC))
    first = (await pending(client))[0]
    store = ApiTokenStore(db)
    tokens = {
        role: (await store.add(f"{role}-1", role, now=datetime.now(UTC)))[1]
        for role in ("viewer", "editor", "approver")
    }
    for role in ("viewer", "editor"):
        bearer = {"Authorization": f"Bearer {tokens[role]}"}
        for verb in ("approve", "reject"):
            refused = await client.post(f"/api/approvals/{first['id']}/{verb}", headers=bearer)
            assert refused.status == 403, (role, verb)
            assert "approver" in (await refused.json())["error"]
    assert first["id"] in [i["id"] for i in await pending(client)]  # still undecided
    assert await successful_writes(sandbox) == []
    bearer = {"Authorization": f"Bearer {tokens['approver']}"}
    approved = await client.post(f"/api/approvals/{first['id']}/approve", headers=bearer)
    assert approved.status == 200
    await work(web_settings)
    decided = await (await client.get(f"/api/approvals/{first['id']}")).json()
    assert decided["decided_by"] == "approver-1"
    assert decided["status"] == "applied"
    assert [w["id"] for w in await successful_writes(sandbox)] == [first["entity"]["id"]]


async def test_a_preview_says_a_gated_change_would_wait_and_proposes_nothing(
    client: Client, db: Database, sandbox: SandboxAdmin
) -> None:
    preview = await client.post("/api/rules/preview", json=gated_rule(), headers=AUTH)
    assert preview.status == 200
    body = await preview.json()
    waiting = [r for r in body["records"] if r["outcome"] == "awaiting_approval"]
    assert waiting and all(r["reason"] == "approval_required" for r in waiting)
    assert all(r["after"] == r["before"] * 3 // 2 for r in waiting)
    assert body["summary"]["would_await_approval"] == len(waiting)
    assert body["summary"]["would_apply"] == 0
    assert await db[c.APPROVALS].count_documents({}) == 0  # a preview proposes nothing
    assert await successful_writes(sandbox) == []


async def test_a_proposal_left_unannounced_by_a_crash_is_announced_by_the_next_run_once(
    client: Client,
    webhook: tuple[Settings, list[dict[str, Any]]],
    db: Database,
    redis: Any,
) -> None:
    hooked, received = webhook
    data = gated_rule(webhook="ops")
    now = datetime.now(UTC)
    await propose(hooked, db, redis, data, now=now)
    items = await pending(client)
    assert len(received) == len(items)
    # what a worker killed after storing its proposals, before posting them, leaves behind
    killed = items[0]["id"]
    unset = {"$unset": {"notified": "", "announcing_at": ""}}
    await db[c.APPROVALS].update_one({"_id": killed}, unset)
    del received[:]
    later = now + timedelta(minutes=15)
    await propose(hooked, db, redis, data, now=later)  # the next run finds it open
    assert len(received) == 1 and killed in str(received[0])
    await propose(hooked, db, redis, data, now=later + timedelta(minutes=15))
    assert len(received) == 1  # announced once, not at every run
    assert [i["id"] for i in await pending(client)] == [i["id"] for i in items]


async def test_a_worker_killed_while_writing_an_approved_change_leaves_it_landed_once(
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC)
    await propose(web_settings, db, redis, gated_rule(), now=now)
    first = (await pending(client))[0]
    entity = first["entity"]["id"]
    await sandbox.set_faults(write_latency_ms=4000)  # room to kill inside the write
    approved = await client.post(f"/api/approvals/{first['id']}/approve", headers=AUTH)
    assert approved.status == 200
    worker = start_worker(web_settings, tmp_path / "worker.log")

    async def write_on_its_way() -> bool:
        query = {"status": "pending", "entity_id": entity}
        if not await db[c.ACTION_INTENTS].count_documents(query):
            return False
        return await write_in_flight(sandbox)

    try:  # the intent is recorded and the 4 s write is on its way: the worst moment
        await wait_for(write_on_its_way, timeout_s=60)
    finally:
        kill(worker)
    await wait_for(lambda: sandbox_quiet(sandbox))  # the write the dead worker sent lands
    await sandbox.clear_faults()
    # the dead worker's job: once its in-progress mark expires (after the job timeout), arq
    # gives it up (it may run once, max_tries=1) and the change is still only approved
    # — and so do the marks of whatever else it had started (its start-up reaper and retention
    # passes, on a busy machine): each would stay due and unclaimable until its mark expired
    assert f"arq:in-progress:{approval_job_id(first['id'])}" in await dead_worker_forgotten(redis)
    await work(web_settings)
    assert (await (await client.get(f"/api/approvals/{first['id']}")).json())["status"] == (
        "approved"
    )
    # the reaper's pass once the dead worker is provably gone: the dead write's intent is
    # settled, the approved change enqueued again (no attempt sends it while it may land)
    later = datetime.now(UTC) + timedelta(hours=1)
    await reap(web_settings, db, redis, now=later)
    queue = connect_queue(web_settings)
    try:
        assert await requeue_approved(ApprovalStore(db), queue, now=later) == 1
    finally:
        await queue.aclose()
    assert (await work(web_settings)).jobs_complete == 1
    done = await (await client.get(f"/api/approvals/{first['id']}")).json()
    assert done["status"] == "applied"
    writes = [w for w in await successful_writes(sandbox) if w["id"] == entity]
    assert len(writes) == 1  # the dead worker's write, never repeated
    assert await budget_of(sandbox, entity) == first["after"]


async def test_an_approved_change_being_retried_shows_its_attempts_and_next_try(
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await propose(web_settings, db, redis, gated_rule(), now=datetime.now(UTC))
    first = (await pending(client))[0]
    assert (first["attempts"], first["last_error"], first["retry_at"]) == (0, None, None)
    assert (await client.post(f"/api/approvals/{first['id']}/approve", headers=AUTH)).status == 200
    impatient = web_settings.model_copy(update={"account_lock_timeout_s": 0.3})
    async with AccountLocks(redis, intents=IntentStore(db), ttl_s=60, wait_s=1).hold("act_1001"):
        await work(impatient)
    retrying = await (await client.get(f"/api/approvals/{first['id']}")).json()
    assert (retrying["status"], retrying["attempts"]) == ("approved", 1)
    assert retrying["last_error"]["reason"] == "account_lock_timeout"
    assert retrying["retry_at"] is not None and retrying["retry_at"] <= retrying["expires_at"]
    point_cli_at(web_settings, monkeypatch)
    assert await asyncio.to_thread(main, ["approvals", "list", "--status", "approved"]) == 0
    assert "attempt 1: account_lock_timeout, tried again" in capsys.readouterr().out
