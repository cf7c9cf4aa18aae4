"""The accounts API behind the Accounts screen: register, list (with rules and last batch),
rotate a token, remove (refused while active rules use the account) — never a token back."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_helpers import AUTH, Client, insert_batch, rule_body, start_client

from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.devstack.embedded import free_port
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, TokenState, fingerprint, load_key
from ruleengine.store.db import Database
from support import SANDBOX_TOKEN

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


class Calls:
    """Calls the API with the token and keeps every answer's text (to look for tokens in)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.texts: list[str] = []

    async def __call__(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        response = await self.client.request(method, path, headers=AUTH, **kwargs)
        text = await response.text()
        self.texts.append(text)
        return response.status, (await response.json() if text else None)


async def listed(call: Calls, account_id: str) -> dict[str, Any] | None:
    _, body = await call("GET", "/api/accounts")
    return next((a for a in body["items"] if a["id"] == account_id), None)


async def test_an_account_is_registered_rotated_refused_removal_while_used_then_removed(
    client: Client,
    db: Database,
    web_settings: Settings,
    sandbox: SandboxAdmin,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    call = Calls(client)
    assert (await call("DELETE", "/api/accounts/act_1004"))[0] == 204
    first = str((await sandbox.issue_token(accounts=["act_1004"]))["token"])
    rotated = str((await sandbox.issue_token(accounts=["act_1004"]))["token"])
    body = {"id": "act_1004", "token": first, "name": "Shop"}
    assert (await client.post("/api/accounts", json=body)).status == 401
    status, added = await call("POST", "/api/accounts", json=body)
    assert status == 201, added
    # the currency and timezone are Meta's, read with the token given
    assert (added["name"], added["currency"], added["timezone"]) == ("Shop", "JPY", "Asia/Tokyo")
    assert added["token_fingerprint"] == fingerprint(first)
    fresh = await listed(call, "act_1004")
    assert fresh is not None
    assert (fresh["rules"], fresh["last_batch"], fresh["token_state"]) == ([], None, None)
    assert fresh["currency_state"] is None

    # A rule on it, and a batch: the listing names both.
    uses = rule_body("Uses 1004", ad_accounts=["act_1001", "act_1004"])
    uses["tasks"][0]["conditions"][0]["value"] = {"USD": 1, "JPY": 150}  # dollars and yen
    status, rule = await call("POST", "/api/rules", json=uses)
    assert status == 201, rule
    await insert_batch(
        db,
        batch_id="b-1004",
        rule_id=rule["id"],
        rule_name="Uses 1004",
        account="act_1004",
        started_at=NOW,
        status="DONE",
    )
    used = await listed(call, "act_1004")
    assert used is not None
    assert used["rules"] == [{"id": rule["id"], "name": "Uses 1004", "status": "ACTIVE"}]
    last = used["last_batch"]
    assert (last["id"], last["status"], last["rule_name"]) == ("b-1004", "DONE", "Uses 1004")
    assert last["started_at"] == "2026-12-01T10:00:00Z"

    # Meta refused the token; rotating it clears the state and keeps the details.
    store = CredentialStore(db, load_key(web_settings))
    refused = TokenState(
        status="expired", code=190, subcode=463, at=NOW, token_fingerprint=fingerprint(first)
    )
    assert await store.mark_token("act_1004", refused)
    status, rotated_entry = await call(
        "PUT", "/api/accounts/act_1004/token", json={"token": rotated}
    )
    assert status == 200
    assert rotated_entry["token_fingerprint"] == fingerprint(rotated)
    assert rotated_entry["token_state"] is None
    assert (rotated_entry["name"], rotated_entry["currency"]) == ("Shop", "JPY")
    # Registering the same id again replaces the token and only the details given.
    status, again = await call("POST", "/api/accounts", json={"id": "act_1004", "token": rotated})
    assert status == 201
    assert (again["name"], again["currency"], again["timezone"]) == ("Shop", "JPY", "Asia/Tokyo")
    status, same = await call(
        "POST",
        "/api/accounts",
        json={"id": "act_1004", "token": rotated, "timezone": "Asia/Tokyo", "currency": "jpy"},
    )
    assert (status, same["currency"], same["timezone"]) == (201, "JPY", "Asia/Tokyo")
    assert await store.token("account:act_1004") == rotated
    status, missing = await call("PUT", "/api/accounts/act_9999/token", json={"token": rotated})
    assert status == 404 and "act_9999" in missing["error"]

    # Removal is refused while an active rule uses it, with the rules named.
    status, conflict = await call("DELETE", "/api/accounts/act_1004")
    assert status == 409
    assert conflict["rules"] == [{"id": rule["id"], "name": "Uses 1004", "status": "ACTIVE"}]
    assert "Uses 1004" in conflict["error"]
    assert await db[c.ACCOUNTS].count_documents({"_id": "act_1004"}) == 1
    assert (await call("POST", f"/api/rules/{rule['id']}/pause"))[0] == 200
    assert (await call("DELETE", "/api/accounts/act_1004"))[0] == 204
    assert await listed(call, "act_1004") is None
    assert (await call("DELETE", "/api/accounts/act_1004"))[0] == 404

    for text in call.texts:
        assert first not in text and rotated not in text
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert first not in logged and rotated not in logged


async def test_what_meta_contradicts_is_refused_naming_the_field_and_nothing_is_stored(
    client: Client, db: Database, sandbox: SandboxAdmin
) -> None:
    call = Calls(client)
    token = str((await sandbox.issue_token(accounts=["act_1004"]))["token"])
    before = await db[c.ACCOUNTS].find_one({"_id": "act_1004"})
    cases = [
        ({"id": "act_1004", "token": token, "currency": "USD"}, "currency", "JPY"),
        ({"id": "act_1004", "token": token, "timezone": "UTC"}, "timezone", "Asia/Tokyo"),
        ({"id": "act_9876", "token": SANDBOX_TOKEN}, "token", "not let this token read act_9876"),
        ({"id": "act_1001", "token": token}, "token", "not let this token read act_1001"),
        ({"id": "act_1004", "token": "EAAGneverIssued42"}, "token", "Meta refused the token"),
    ]
    for body, path, said in cases:
        status, answer = await call("POST", "/api/accounts", json=body)
        assert status == 422, answer
        (error,) = answer["errors"]
        assert error["path"] == path and said in error["message"]
    # Meta's "no such object" (100/33) is about the id.
    gone = {"path_contains": "act_1003", "method": "GET", "code": 100, "subcode": 33, "times": 1}
    await sandbox.set_faults(rules=[gone])
    body = {"id": "act_1003", "token": SANDBOX_TOKEN}
    status, answer = await call("POST", "/api/accounts", json=body)
    assert (status, [e["path"] for e in answer["errors"]]) == (422, ["id"])
    assert "Meta shows no ad account act_1003" in answer["errors"][0]["message"]
    assert await db[c.ACCOUNTS].find_one({"_id": "act_1004"}) == before
    assert await db[c.ACCOUNTS].find_one({"_id": "act_9876"}) is None
    assert (await db[c.ACCOUNTS].find_one({"_id": "act_1001"}) or {}).get(
        "token_fingerprint"
    ) == fingerprint(SANDBOX_TOKEN)
    assert all(token not in text for text in call.texts)


async def test_without_meta_an_account_needs_both_values_and_is_registered_unchecked(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    nobody = web_settings.model_copy(update={"graph_url": f"http://127.0.0.1:{free_port()}"})
    client = await start_client(nobody)
    try:
        call = Calls(client)
        body = {"id": "act_1004", "token": "EAAGsomeToken123", "currency": "JPY"}
        status, answer = await call("POST", "/api/accounts", json=body)
        assert status == 502, answer
        assert "could not read act_1004 from Meta" in answer["error"]
        assert "send both currency and timezone" in answer["error"]
        assert (await db[c.ACCOUNTS].find_one({"_id": "act_1004"}) or {}).get(
            "token_fingerprint"
        ) != fingerprint("EAAGsomeToken123")
        status, added = await call("POST", "/api/accounts", json=body | {"timezone": "Asia/Tokyo"})
        assert status == 201, added
        assert (added["currency"], added["timezone"]) == ("JPY", "Asia/Tokyo")
        assert "could not read act_1004 from Meta" in added["unchecked"]
    finally:
        await client.close()


async def test_refresh_registers_metas_currency_and_timezone_and_clears_the_state(
    client: Client, db: Database, web_settings: Settings
) -> None:
    store = CredentialStore(db, load_key(web_settings))
    wrong = await store.add("act_1004", SANDBOX_TOKEN, now=NOW, currency="usd", timezone="UTC")
    state = wrong.disagreement(currency="JPY", timezone="Asia/Tokyo", now=NOW)
    assert state is not None and await store.mark_currency("act_1004", state)
    call = Calls(client)
    assert (await client.post("/api/accounts/act_1004/refresh")).status == 401
    status, refreshed = await call("POST", "/api/accounts/act_1004/refresh")
    assert status == 200, refreshed
    assert (refreshed["currency"], refreshed["timezone"]) == ("JPY", "Asia/Tokyo")
    assert refreshed["changed"] == ["currency USD → JPY", "timezone UTC → Asia/Tokyo"]
    assert refreshed["currency_state"] is None
    status, again = await call("POST", "/api/accounts/act_1004/refresh")
    assert (status, again["changed"]) == (200, [])
    assert (await call("POST", "/api/accounts/act_9999/refresh"))[0] == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "paths"),
    [
        ("POST", "/api/accounts", {"id": "2001", "token": ""}, {"id", "token"}),
        ("POST", "/api/accounts", {"id": "act_1", "token": "a b", "x": 1}, {"token", "x"}),
        ("POST", "/api/accounts", {"id": "act_1", "token": "t", "currency": "€"}, {"currency"}),
        ("POST", "/api/accounts", {"id": "act_1", "token": "t" * 5000}, {"token"}),
        ("PUT", "/api/accounts/act_1001/token", {"token": "EAAG\nx"}, {"token"}),
        ("PUT", "/api/accounts/act_1001/token", {"token": 12, "id": "act_1"}, {"token", "id"}),
        ("PUT", "/api/accounts/act_1001/token", [], {""}),
    ],
)
async def test_invalid_bodies_are_422_with_the_json_path_of_each_problem(
    client: Client, db: Database, method: str, path: str, body: Any, paths: set[str]
) -> None:
    before = await db[c.ACCOUNTS].find_one({"_id": "act_1001"})
    response = await client.request(method, path, json=body, headers=AUTH)
    assert response.status == 422, await response.text()
    assert {e["path"] for e in (await response.json())["errors"]} == paths
    assert await db[c.ACCOUNTS].find_one({"_id": "act_1001"}) == before
    assert await db[c.ACCOUNTS].count_documents({}) == 4


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELD_VALUES = st.one_of(
    JSON,
    st.sampled_from(["act_1001\n", "act_١٠٠١", "x" * 5000, "\x00", "EAAG\u00e9", "Mars/Olympus"]),
)
BODIES = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={k: FIELD_VALUES for k in ("id", "token", "name", "timezone", "currency")},
    ),
)


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=BODIES, rotate=st.booleans())
async def test_hostile_account_bodies_never_answer_500(
    client: Client, body: Any, rotate: bool
) -> None:
    path = "/api/accounts/act_1004/token" if rotate else "/api/accounts"
    response = await client.request("PUT" if rotate else "POST", path, json=body, headers=AUTH)
    assert response.status in (200, 201, 422), await response.text()
    if response.status == 422:
        assert all("path" in e for e in (await response.json())["errors"])


async def test_the_sandbox_accounts_are_offered_only_where_graph_is_a_local_sandbox(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> None:
    offer = await (await client.get("/api/accounts/sandbox")).json()
    assert offer["sandbox"] is True
    assert [(a["id"], a["currency"], a["registered"]) for a in offer["items"]] == [
        ("act_1001", "USD", True),
        ("act_1002", "EUR", True),
        ("act_1003", "USD", True),
        ("act_1004", "JPY", True),
    ]
    assert offer["items"][3]["timezone"] == "Asia/Tokyo"
    assert (await client.delete("/api/accounts/act_1004", headers=AUTH)).status == 204
    again = await (await client.get("/api/accounts/sandbox")).json()
    assert [a["id"] for a in again["items"] if not a["registered"]] == ["act_1004"]

    # Meta (anything not on this machine) is never asked; a local port without a sandbox
    # is no sandbox either.
    for graph_url in ("https://graph.facebook.com", "http://127.0.0.1:9"):
        other = await start_client(web_settings.model_copy(update={"graph_url": graph_url}))
        try:
            answer = await other.get("/api/accounts/sandbox")
            assert (answer.status, await answer.json()) == (200, {"sandbox": False, "items": []})
        finally:
            await other.close()
