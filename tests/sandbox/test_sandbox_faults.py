"""Fault injection: rules that fire exactly N times, random errors, revoked tokens, latency,
answers lost after the call ran."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
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
    batch = await sandbox.batch([{"method": "GET", "relative_url": "v27.0/act_1001/campaigns"}])
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
    for body in (
        {"error_rate": 2},
        {"colour": "red"},
        {"rules": [{"times": 0}]},
        {"lost_answers": [{"answer": "sometimes"}]},
        {"lost_answers": [{"code": 2}]},
    ):
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


# ---------------------------------------------------------------- answers lost after the call ran


async def _budgeted(sandbox: Sandbox) -> tuple[str, int]:
    """A campaign with a daily budget: its id and budget."""
    reply = await sandbox.get("/act_1001/campaigns", fields="id,daily_budget", limit="100")
    campaign = next(c for c in reply.body["data"] if "daily_budget" in c)
    return campaign["id"], int(campaign["daily_budget"])


async def _budget_of(sandbox: Sandbox, campaign: str) -> int:
    return int((await sandbox.get(f"/{campaign}", fields="daily_budget")).body["daily_budget"])


async def test_a_write_whose_answer_is_lost_as_a_bad_gateway_lands_once(sandbox: Sandbox) -> None:
    campaign, budget = await _budgeted(sandbox)
    await sandbox.admin.set_faults(
        lost_answers=[{"path_contains": campaign, "method": "POST", "times": 1}]
    )
    url = f"{sandbox.graph}/{campaign}"
    form = {"daily_budget": str(budget + 100), "access_token": TOKEN}
    async with sandbox.session.post(url, data=form) as response:
        assert response.status == 502
        assert response.content_type == "text/html"
        assert "502 Bad Gateway" in await response.text()
    assert await _budget_of(sandbox, campaign) == budget + 100  # the write landed
    assert [(w["id"], w["ok"]) for w in await sandbox.admin.writes()] == [(campaign, True)]
    assert (await sandbox.admin.faults())["lost_answers"][0]["remaining"] == 0
    assert (await sandbox.post(f"/{campaign}", daily_budget=str(budget))).status == 200


async def test_a_write_whose_connection_is_reset_lands_once(sandbox: Sandbox) -> None:
    campaign, budget = await _budgeted(sandbox)
    await sandbox.admin.set_faults(
        lost_answers=[{"path_contains": campaign, "answer": "reset", "times": 1}]
    )
    with pytest.raises(aiohttp.ClientConnectionError):
        await sandbox.post(f"/{campaign}", daily_budget=str(budget + 100))
    assert await _budget_of(sandbox, campaign) == budget + 100
    assert len(await sandbox.admin.writes()) == 1


async def test_a_batch_item_can_run_and_come_back_null(sandbox: Sandbox) -> None:
    campaign, budget = await _budgeted(sandbox)
    await sandbox.admin.set_faults(
        lost_answers=[{"path_contains": campaign, "method": "POST", "answer": "null"}]
    )
    # a null rule leaves a call sent alone as it is
    assert (await sandbox.post(f"/{campaign}", daily_budget=str(budget + 1))).status == 200
    write = {"method": "POST", "relative_url": campaign, "body": f"daily_budget={budget + 2}"}
    read = {"method": "GET", "relative_url": f"{campaign}?fields=daily_budget"}
    reply = await sandbox.batch([write, read])
    assert reply.body[0] is None and reply.body[1]["code"] == 200  # answered null …
    assert await _budget_of(sandbox, campaign) == budget + 2  # … but it ran
    assert [w["ok"] for w in await sandbox.admin.writes()] == [True, True]


async def test_a_batch_carrying_a_lost_item_loses_its_whole_answer(sandbox: Sandbox) -> None:
    campaign, budget = await _budgeted(sandbox)
    await sandbox.admin.set_faults(
        lost_answers=[{"path_contains": campaign, "method": "POST", "times": 1}]
    )
    write = {"method": "POST", "relative_url": campaign, "body": f"daily_budget={budget + 5}"}
    read = {"method": "GET", "relative_url": "act_1001?fields=name"}
    async with sandbox.session.post(
        f"{sandbox.graph}/",
        data={"batch": orjson.dumps([read, write]).decode(), "access_token": TOKEN},
    ) as response:
        assert response.status == 502
    assert await _budget_of(sandbox, campaign) == budget + 5
    assert (await sandbox.admin.stats())["calls_by_kind"]["write"] == 1
