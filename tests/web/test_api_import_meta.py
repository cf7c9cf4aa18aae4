"""``POST /api/import/meta`` against the Graph sandbox: an account's Meta rules read, converted,
reported and (with ``apply``) saved paused; rules given in the body; tokens never answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import SecretStr
from web_helpers import AUTH, start_client

from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_TOKEN

FIXTURES = Path(__file__).parents[1] / "fixtures" / "meta_rules"


async def test_an_accounts_rules_are_read_converted_and_applied_paused(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    hooks = {"meta-rules": SecretStr("http://127.0.0.1:9/hook")}
    client = await start_client(web_settings.model_copy(update={"webhooks": hooks}))
    try:
        answer = await client.post(
            "/api/import/meta", json={"account": "act_1001", "apply": True}, headers=AUTH
        )
        assert answer.status == 200, await answer.text()
        raw = await answer.read()
        body = orjson.loads(raw)
        assert SANDBOX_TOKEN.encode() not in raw
        assert b"access_token" not in raw
        assert (body["currency"], body["timezone"]) == ("USD", "America/New_York")
        assert body["summary"] == {"rules": 6, "converted": 2, "applied": 2}
        items = {item["name"]: item for item in body["items"]}
        spender = items["Tell me when a campaign spends over $250 today"]
        assert spender["mapped"] is True
        assert spender["rule"]["tasks"][0]["conditions"][0]["value"] == 250
        assert spender["saved"]["state"] == "created"
        assert any("Facebook users" in p["why"] for p in spender["problems"])
        winners = items["Scale winners +20% (ROAS over 3)"]
        assert winners["saved"]["state"] == "created"
        assert winners["rule"]["tasks"][0]["execution_count_limit"] == 5
        rotate = items["Rotate the creative test's ads daily"]
        assert rotate["mapped"] is False
        assert rotate["saved"] is None
        assert {p["path"] for p in rotate["problems"]} >= {"execution_spec.execution_type"}

        stored = await client.get(f"/api/rules/{spender['saved']['rule_id']}", headers=AUTH)
        rule = await stored.json()
        assert rule["status"] == "PAUSED"
        assert rule["definition"]["format"] == 2
    finally:
        await client.close()


async def test_rules_in_the_body_are_converted_for_the_account_without_saving(
    client: Any, sandbox: SandboxAdmin
) -> None:
    page = orjson.loads((FIXTURES / "readback_library_page.json").read_bytes())
    for rule in page["data"]:
        rule["account_id"] = "1004"
    answer = await client.post(
        "/api/import/meta",
        json={"account": "act_1004", "rules": page, "level": "adset"},
        headers=AUTH,
    )
    assert answer.status == 200, await answer.text()
    body = await answer.json()
    assert body["currency"] == "JPY"
    first, second = body["items"]
    assert first["rule"]["timezone"] == "Asia/Tokyo"
    assert "saved" not in first
    assert second["mapped"] is False
    assert await (await client.get("/api/rules", headers=AUTH)).json() == {
        "items": [],
        "total": 0,
        "limit": 100,
        "skip": 0,
    }


async def test_bad_requests_say_what_is_wrong(client: Any) -> None:
    no_account = await client.post("/api/import/meta", json={"rules": []}, headers=AUTH)
    assert no_account.status == 422
    assert (await no_account.json())["errors"][0]["path"] == "account"
    unknown = await client.post(
        "/api/import/meta", json={"account": "act_1001", "token": "x"}, headers=AUTH
    )
    assert unknown.status == 422
    unregistered = await client.post("/api/import/meta", json={"account": "act_999"}, headers=AUTH)
    assert unregistered.status == 404
    assert "not registered" in (await unregistered.json())["error"]
