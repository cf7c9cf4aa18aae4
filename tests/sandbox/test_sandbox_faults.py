"""Fault injection: rules that fire exactly N times, random errors, revoked tokens, latency."""

from __future__ import annotations

import orjson
from sandbox_helpers import TOKEN, Sandbox


async def test_a_rule_fails_exactly_n_matching_calls(sandbox: Sandbox) -> None:
    await sandbox.admin.set_faults(
        rules=[{"path_contains": "/act_1001/campaigns", "method": "GET", "code": 2, "times": 2}]
    )
    other = await sandbox.get("/act_1002/campaigns")
    assert other.status == 200
    first = await sandbox.get("/act_1001/campaigns")
    assert first.status == 503
    assert first.error["code"] == 2
    assert first.error["is_transient"] is True
    batch = await sandbox.batch([{"method": "GET", "relative_url": "v25.0/act_1001/campaigns"}])
    assert orjson.loads(batch.body[0]["body"])["error"]["code"] == 2
    assert (await sandbox.get("/act_1001/campaigns")).status == 200
    assert (await sandbox.admin.faults())["rules"][0]["remaining"] == 0
    assert (await sandbox.admin.stats())["errors_by_code"] == {"2": 2}


async def test_a_rule_without_times_fails_until_cleared(sandbox: Sandbox) -> None:
    await sandbox.admin.set_faults(
        rules=[{"path_contains": "/insights", "code": 613}, {"path_contains": "x", "code": 1}]
    )
    for _ in range(3):
        assert (await sandbox.get("/act_1001/insights")).error["code"] == 613
    await sandbox.admin.clear_faults()
    assert (await sandbox.get("/act_1001/insights")).status == 200


async def test_error_rate_fails_some_calls_with_the_chosen_code(sandbox: Sandbox) -> None:
    await sandbox.admin.set_faults(error_rate=0.5, error_code=1)
    statuses = [(await sandbox.get("/act_1001")).status for _ in range(30)]
    assert 200 in statuses
    assert 500 in statuses


async def test_bad_fault_settings_are_refused(sandbox: Sandbox) -> None:
    for body in ({"error_rate": 2}, {"colour": "red"}, {"rules": [{"times": 0}]}):
        reply = await sandbox.fetch("POST", f"{sandbox.url}/_sandbox/faults", json=body)
        assert reply.status == 400
        assert "error" in reply.body


async def test_latency_still_answers(sandbox: Sandbox) -> None:
    await sandbox.admin.set_faults(latency_ms=20)
    assert (await sandbox.get("/act_1001")).status == 200
    assert (await sandbox.admin.faults())["latency_ms"] == 20


async def test_revoked_token_is_190_and_tokens_never_come_back(sandbox: Sandbox) -> None:
    await sandbox.admin.set_faults(revoked_tokens=[TOKEN])
    reply = await sandbox.get("/act_1001/campaigns")
    assert reply.status == 400
    error = reply.error
    assert (error["code"], error["error_subcode"], error["type"]) == (190, 463, "OAuthException")
    texts = [reply.text, orjson.dumps(await sandbox.admin.faults()).decode()]

    await sandbox.admin.clear_faults()
    campaign = (await sandbox.get("/act_1001/campaigns")).body["data"][0]["id"]
    for path, params in (
        ("/me/adaccounts", {}),
        ("/act_1001/campaigns", {"limit": "2"}),
        (f"/{campaign}", {"fields": "id,name"}),
        ("/act_1001/insights", {"level": "campaign", "limit": "2"}),
        ("/999999999999999", {}),
        ("/act_1001/campaigns", {"filtering": "broken"}),
    ):
        reply = await sandbox.get(path, **params)
        body = dict(reply.body)
        body.pop("paging", None)  # paging.next carries the token, as Meta's does
        texts.append(orjson.dumps(body).decode())
    await sandbox.post(f"/{campaign}", daily_budget="1")
    batch = await sandbox.batch([{"method": "GET", "relative_url": f"{campaign}?fields=id"}])
    texts += [batch.text, orjson.dumps(await sandbox.admin.writes()).decode()]
    texts.append(orjson.dumps(await sandbox.admin.stats()).decode())
    assert all(TOKEN not in text for text in texts)
