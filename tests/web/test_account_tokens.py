"""Tokens Meta refuses: the account is marked, skipped, shown — until its token is replaced."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from web_helpers import AUTH, Client

from flow import campaign_rule, dispatch, records, save_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import deserialize
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.heartbeats import Heartbeats

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
EVERY_ACCOUNT = ["act_1001", "act_1002", "act_1003"]
SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1}


async def queued_accounts(redis: Any) -> list[str]:
    """The ad account of every job in the queue, sorted."""
    accounts = []
    for job_id in await redis.zrange(c.QUEUE_NAME, 0, -1):
        accounts.append(deserialize(await redis.get(b"arq:job:" + job_id))["a"][0]["account"])
    return sorted(accounts)


async def account_entry(client: Client, account_id: str) -> dict[str, Any]:
    answer = await (await client.get("/api/accounts", headers=AUTH)).json()
    return next(a for a in answer["items"] if a["id"] == account_id)


async def own_token(
    sandbox: SandboxAdmin, db: Database, settings: Settings, account: str, **grant: Any
) -> str:
    """A token of ``account``'s own (issued by the sandbox), registered for it."""
    token = str((await sandbox.issue_token(accounts=[account], **grant))["token"])
    await CredentialStore(db, load_key(settings)).add(account, token, now=T0)
    return token


async def test_a_revoked_token_stops_its_account_until_the_token_is_replaced(
    client: Client, settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    token = await own_token(sandbox, db, settings, "act_1002")
    data = campaign_rule({"type": "pause"}, [SPENT], ad_accounts=EVERY_ACCOUNT)
    await save_rule(db, data, now=T0)
    await sandbox.update_token(token, invalidate="logged_out")  # the user logged out

    await dispatch(settings, db, now=T0)
    assert await queued_accounts(redis) == ["act_1001", "act_1003"]
    refused = (await account_entry(client, "act_1002"))["token_state"]
    assert (refused["status"], refused["code"], refused["subcode"]) == ("invalid", 190, 467)
    assert "logged out" in refused["message"]
    assert token not in str(refused)
    assert (await account_entry(client, "act_1001"))["token_state"] is None

    beats = Heartbeats(db)  # everything else healthy: readiness stays 200, degraded
    await beats.beat("worker:host:1", now=datetime.now(UTC))
    await beats.beat("dispatcher", now=datetime.now(UTC), role="leader")
    response = await client.get("/health/ready")
    ready = await response.json()
    assert response.status == 200, ready
    assert (ready["status"], ready["failing"], ready["degraded"]) == ("degraded", [], ["tokens"])
    (named,) = ready["checks"]["tokens"]["refused"]
    assert (named["account"], named["status"]) == ("act_1002", "invalid")
    assert "act_1002" in ready["checks"]["tokens"]["error"]

    await redis.delete(c.QUEUE_NAME)
    await sandbox.clear_stats()
    await dispatch(settings, db, now=T0 + timedelta(minutes=15))
    assert await queued_accounts(redis) == ["act_1001", "act_1003"]
    assert "act_1002" not in (await sandbox.stats())["calls_by_account"]  # not even listed

    replacement = (await sandbox.issue_token(accounts=["act_1002"]))["token"]
    added = await client.post(
        "/api/accounts", json={"id": "act_1002", "token": replacement}, headers=AUTH
    )
    assert added.status == 201
    assert (await added.json())["token_state"] is None
    await dispatch(settings, db, now=T0 + timedelta(minutes=30))
    assert "act_1002" in await queued_accounts(redis)
    assert (await (await client.get("/health/ready")).json())["degraded"] == []


async def test_the_worker_marks_a_token_that_stops_working_under_it(
    client: Client, settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    token = await own_token(sandbox, db, settings, "act_1001")
    await save_rule(db, campaign_rule({"type": "pause"}, [SPENT]))
    await dispatch(settings, db)
    assert await queued_accounts(redis) == ["act_1001"]
    await sandbox.update_token(token, invalidate="password_changed")  # after the dispatch
    await sandbox.clear_stats()
    await work(settings)
    refused = (await account_entry(client, "act_1001"))["token_state"]
    assert (refused["status"], refused["subcode"]) == ("invalid", 460)
    failed = await records(db)
    assert failed
    assert {r["reason"] for r in failed} == {"fetch_failed"}
    assert (await sandbox.stats())["errors_by_code"] == {"190": 1}  # one batch call, no retry


@pytest.mark.parametrize("batch_size", [1, 2])
async def test_a_write_without_ads_management_marks_the_account_and_stops_writing(
    client: Client,
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    batch_size: int,
) -> None:
    await own_token(sandbox, db, settings, "act_1001", permissions=["ads_read"])
    await save_rule(db, campaign_rule({"type": "pause"}, [SPENT]))
    await dispatch(settings, db)
    await work(settings.model_copy(update={"write_batch_size": batch_size}))
    refused = (await account_entry(client, "act_1001"))["token_state"]
    assert (refused["status"], refused["code"]) == ("missing_permission", 294)
    results = [(r["outcome"], r["reason"]) for r in await records(db) if r["passed"]]
    # the first call's writes (one, or a Batch API call of two) met the refusal …
    assert set(results[:batch_size]) == {("failed", "write_failed")}
    assert len(results) > batch_size
    assert set(results[batch_size:]) == {("failed", "token_refused")}  # … nothing more was sent
    attempted = [w for w in await sandbox.writes() if w["kind"] == "update"]
    assert len(attempted) == batch_size
