"""Tokens: only issued ones work, each answers Meta's error when it stops working."""

from __future__ import annotations

import orjson
import pytest
from sandbox_helpers import TOKEN, Sandbox

from graph_sandbox.admin import SandboxAdminError


async def test_a_token_the_sandbox_never_issued_is_190_without_subcode(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/act_1001/campaigns", token="EAAGmadeUpByTheCaller0123456789")
    assert reply.status == 400
    assert reply.error["code"] == 190
    assert "error_subcode" not in reply.error
    assert reply.error["type"] == "OAuthException"
    assert reply.error["message"] == "Invalid OAuth access token - Cannot parse access token"


async def test_a_demo_token_sees_its_own_ad_account_only(sandbox: Sandbox) -> None:
    token = await sandbox.admin.demo_token("act_1002")
    assert token.startswith("EAA")
    accounts = await sandbox.get("/me/adaccounts", token=token)
    assert [a["id"] for a in accounts.body["data"]] == ["act_1002"]
    assert (await sandbox.get("/act_1002/campaigns", token=token)).status == 200
    other = await sandbox.get("/act_1001/campaigns", token=token)
    assert (other.status, other.error["code"]) == (403, 200)
    campaign = (await sandbox.get("/act_1001/campaigns")).body["data"][0]["id"]
    hidden = await sandbox.get(f"/{campaign}", token=token)
    assert (hidden.error["code"], hidden.error["error_subcode"]) == (100, 33)
    # Demo tokens derive from the seed: the same world always issues the same ones.
    assert await sandbox.admin.demo_token("act_1002") == token


async def test_an_issued_token_expires_with_error_463(sandbox: Sandbox) -> None:
    grant = await sandbox.admin.issue_token(expires_in_s=3600)
    token = grant["token"]
    assert grant["status"] == "valid"
    assert (await sandbox.get("/act_1001", token=token)).status == 200
    await sandbox.admin.advance_clock(3600)
    reply = await sandbox.get("/act_1001", token=token)
    assert (reply.error["code"], reply.error["error_subcode"]) == (190, 463)
    assert reply.error["message"].startswith(
        "Error validating access token: Session has expired on Tuesday, 01-Dec-26 08:00:00 PST."
    )
    await sandbox.admin.update_token(token, restore=True)
    assert (await sandbox.get("/act_1001", token=token)).status == 200
    await sandbox.admin.update_token(token, expire=True)
    assert (await sandbox.get("/act_1001", token=token)).error["error_subcode"] == 463


async def test_a_password_change_or_a_logout_ends_a_token(sandbox: Sandbox) -> None:
    token = (await sandbox.admin.issue_token(accounts=["act_1001"]))["token"]
    for reason, subcode, words in (
        ("password_changed", 460, "changed their password"),
        ("logged_out", 467, "the user logged out"),
    ):
        updated = await sandbox.admin.update_token(token, invalidate=reason)
        assert updated["status"] == reason
        reply = await sandbox.get("/act_1001/campaigns", token=token)
        assert (reply.error["code"], reply.error["error_subcode"]) == (190, subcode)
        assert words in reply.error["message"]
        failed_write = await sandbox.post("/act_1001/async_batch_requests", token=token)
        assert failed_write.error["code"] == 190
    assert [w["ok"] for w in await sandbox.admin.writes()] == [False, False]


async def test_permissions_decide_reads_and_writes(sandbox: Sandbox) -> None:
    token = (await sandbox.admin.issue_token(permissions=["ads_read"]))["token"]
    campaign = (await sandbox.get("/act_1001/campaigns", token=token)).body["data"][0]["id"]
    refused = await sandbox.post(f"/{campaign}", token=token, status="PAUSED")
    assert (refused.status, refused.error["code"]) == (403, 294)
    assert "ads_management" in refused.error["message"]
    copy = await sandbox.post(f"/{campaign}/copies", token=token)
    assert copy.error["code"] == 294
    await sandbox.admin.update_token(token, permissions=[])
    read = await sandbox.get(f"/{campaign}", token=token)
    assert (read.status, read.error["code"]) == (403, 200)
    await sandbox.admin.update_token(token, permissions=["ads_management"])
    assert (await sandbox.post(f"/{campaign}", token=token, status="PAUSED")).status == 200


async def test_the_admin_lists_tokens_without_echoing_the_callers_own(sandbox: Sandbox) -> None:
    await sandbox.admin.issue_token("EAAGchosenByTheTest0123456789", accounts=["act_1003"])
    grants = await sandbox.admin.tokens()
    by_origin = {g["origin"]: g for g in grants}
    assert {g["accounts"][0] for g in grants if g["origin"] == "demo"} == {
        "act_1001",
        "act_1002",
        "act_1003",
        "act_1004",
    }
    assert by_origin["operator"]["accounts"] is None
    text = orjson.dumps(grants).decode()
    assert TOKEN not in text
    assert "EAAGchosenByTheTest0123456789" not in text
    assert by_origin["admin"]["token"] == "…6789"
    with pytest.raises(SandboxAdminError, match="act_9 is not an ad account"):
        await sandbox.admin.issue_token(accounts=["act_9"])


async def test_a_reset_keeps_the_operators_tokens_and_forgets_issued_ones(
    sandbox: Sandbox,
) -> None:
    issued = (await sandbox.admin.issue_token())["token"]
    await sandbox.admin.reset(seed=2)
    assert (await sandbox.get("/act_1001", token=issued)).error["code"] == 190
    assert (await sandbox.get("/act_1001")).status == 200
    demo = await sandbox.admin.demo_token("act_1001")
    assert (await sandbox.get("/act_1001", token=demo)).status == 200
