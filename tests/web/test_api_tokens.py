"""Named API tokens on the web app: who a request is, what its role may do, what is recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from web_helpers import AUTH, Client, rule_body, start_client

from ruleengine import constants as c
from ruleengine.errors import ErrorReport
from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ApiTokenStore
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.web.app import create_app
from ruleengine.web.auth import ROUTE_ROLES, WRITE_METHODS, bearer_token
from support import SANDBOX_TOKEN


async def token(db: Database, name: str, role: str) -> dict[str, str]:
    """A new named token's Authorization header."""
    _, text = await ApiTokenStore(db).add(name, role, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {text}"}


async def error_message(response: Any) -> str:
    body = await response.json()
    return str(body["error"])


async def test_a_rule_saved_with_an_editor_token_records_its_name(
    client: Client, db: Database
) -> None:
    alice = await token(db, "alice", "editor")
    created = await client.post("/api/rules", json=rule_body(), headers=alice)
    assert created.status == 201, await created.text()
    rule = await created.json()
    assert rule["updated_by"] == "alice"
    changed = rule_body(tasks=[rule_body()["tasks"][0] | {"cooldown_minutes": 90}])
    updated = await client.put(f"/api/rules/{rule['id']}", json=changed, headers=AUTH)
    assert updated.status == 200, await updated.text()
    versions = await (await client.get(f"/api/rules/{rule['id']}/versions")).json()
    assert [v["author"] for v in versions["items"]] == ["api", "alice"]  # newest first

    bob = await token(db, "bob", "editor")
    paused = await client.post(f"/api/rules/{rule['id']}/pause", headers=bob)
    assert (await paused.json())["updated_by"] == "bob"
    rolled = await client.post(
        f"/api/rules/{rule['id']}/rollback", json={"version": 1}, headers=alice
    )
    assert (await rolled.json())["updated_by"] == "alice"


async def test_a_viewer_token_reads_but_cannot_write(
    web_settings: Settings, db: Database, accounts: list[str]
) -> None:
    closed = await start_client(web_settings.model_copy(update={"api_reads_require_token": True}))
    try:
        viewer = await token(db, "wall-screen", "viewer")
        assert (await closed.get("/api/rules")).status == 401
        assert (await closed.get("/api/rules", headers=viewer)).status == 200
        refused = await closed.post("/api/rules", json=rule_body(), headers=viewer)
        assert refused.status == 403
        message = await error_message(refused)
        assert "'wall-screen' is a viewer token" in message
        assert "needs the editor role" in message
        assert await db[c.RULES].count_documents({}) == 0
    finally:
        await closed.close()


async def test_an_editor_cannot_manage_accounts_and_an_admin_can(
    client: Client, db: Database
) -> None:
    editor = await token(db, "alice", "editor")
    admin = await token(db, "ops", "admin")
    body = {"id": "act_1004", "token": SANDBOX_TOKEN}
    refused = await client.post("/api/accounts", json=body, headers=editor)
    assert refused.status == 403
    assert "needs the admin role" in await error_message(refused)
    assert (await client.delete("/api/accounts/act_1004", headers=editor)).status == 403
    added = await client.post("/api/accounts", json=body, headers=admin)
    assert added.status == 201, await added.text()
    assert (await added.json())["updated_by"] == "ops"


async def test_the_configured_token_is_still_the_admin_named_api(client: Client) -> None:
    body = {"id": "act_1004", "token": SANDBOX_TOKEN}
    added = await client.post("/api/accounts", json=body, headers=AUTH)
    assert added.status == 201, await added.text()
    assert (await added.json())["updated_by"] == "api"
    created = await client.post("/api/rules", json=rule_body(), headers=AUTH)
    assert (await created.json())["updated_by"] == "api"


async def test_a_revoked_or_unknown_token_is_refused(client: Client, db: Database) -> None:
    store = ApiTokenStore(db)
    _, text = await store.add("carol", "admin", now=datetime.now(UTC))
    carol = {"Authorization": f"Bearer {text}"}
    assert (await client.post("/api/rules", json=rule_body(), headers=carol)).status == 201
    await store.revoke("carol", now=datetime.now(UTC))
    revoked = await client.post("/api/rules", json=rule_body("Another"), headers=carol)
    assert revoked.status == 401
    assert "the API token 'carol' was revoked" in await error_message(revoked)
    assert 'error="invalid_token"' in revoked.headers["WWW-Authenticate"]
    unknown = {"Authorization": f"Bearer {text}x"}
    refused = await client.post("/api/rules", json=rule_body("Another"), headers=unknown)
    assert refused.status == 401
    assert "wrong API token" in await error_message(refused)


async def test_named_tokens_work_without_a_configured_token(
    settings: Settings, db: Database, accounts: list[str]
) -> None:
    assert settings.api_token is None
    app = await start_client(settings)
    try:
        nobody = await app.post("/api/rules", json=rule_body())
        assert "set RULEENGINE_API_TOKEN" in await error_message(nobody)  # as before tokens
        editor = await token(db, "alice", "editor")
        assert (await app.post("/api/rules", json=rule_body(), headers=editor)).status == 201
        missing = await app.post("/api/rules", json=rule_body("Another"))
        assert missing.status == 401
        assert "missing API token" in await error_message(missing)
    finally:
        await app.close()


async def test_the_token_text_is_nowhere_in_mongodb(client: Client, db: Database) -> None:
    _, text = await ApiTokenStore(db).add("alice", "editor", now=datetime.now(UTC))
    headers = {"Authorization": f"Bearer {text}"}
    assert (await client.post("/api/rules", json=rule_body(), headers=headers)).status == 201
    for name in await db.list_collection_names():
        async for doc in db[name].find({}):
            assert text not in repr(doc), name
            assert text[4:] not in repr(doc), name


async def test_last_used_at_moves_at_most_once_a_minute(client: Client, db: Database) -> None:
    alice = await token(db, "alice", "editor")
    tokens = db[c.API_TOKENS]
    assert (await tokens.find_one({"_id": "alice"}) or {})["last_used_at"] is None
    assert (
        await client.post("/api/rules/conflicts", json=rule_body(), headers=alice)
    ).status == 200
    first = (await tokens.find_one({"_id": "alice"}) or {})["last_used_at"]
    assert first is not None
    assert (
        await client.post("/api/rules/conflicts", json=rule_body(), headers=alice)
    ).status == 200
    assert (await tokens.find_one({"_id": "alice"}) or {})["last_used_at"] == first
    earlier = first - timedelta(minutes=2)
    await tokens.update_one({"_id": "alice"}, {"$set": {"last_used_at": earlier}})
    assert (
        await client.post("/api/rules/conflicts", json=rule_body(), headers=alice)
    ).status == 200
    assert (await tokens.find_one({"_id": "alice"}) or {})["last_used_at"] > earlier


async def test_resolving_an_error_and_clearing_a_hold_record_who(
    client: Client, db: Database
) -> None:
    alice = await token(db, "alice", "editor")
    group = await ErrorLog(db).record(
        ErrorReport(function="writer.update", message="boom 1234567", params={}),
        now=datetime.now(UTC),
    )
    resolved = await client.patch(
        f"/api/errors/{group}", json={"status": "resolved"}, headers=alice
    )
    assert (await resolved.json())["status_changed_by"] == "alice"
    await db[c.HOLDS].insert_one(
        {"_id": "1202:daily_budget", "entity_id": "1202", "field": "daily_budget"}
        | {"status": "active", "placed_at": datetime.now(UTC)}
    )
    cleared = await client.delete("/api/holds/1202:daily_budget", headers=alice)
    assert (await cleared.json())["cleared_by"] == "alice"


def test_every_write_route_has_a_least_role(settings: Settings) -> None:
    """A write route added without a row in ROUTE_ROLES fails here (it would need admin)."""
    app = create_app(settings)
    missing = [
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method in WRITE_METHODS
        and route.resource is not None
        and route.resource.canonical.startswith("/api/")
        and (route.method, route.resource.canonical) not in ROUTE_ROLES
    ]
    assert missing == []


@given(st.text(max_size=60))
def test_bearer_token_parsing(header: str) -> None:
    found = bearer_token(header)
    if found is not None:
        assert found == found.strip() and found
        assert header.lower().startswith("bearer ")
        assert found in header
    scheme = header.split(" ", 1)[0]
    if scheme.lower() == "bearer" and header[len(scheme) + 1 :].strip():
        assert found == header[len(scheme) + 1 :].strip()


@given(
    st.sampled_from(["Bearer", "bearer", "BEARER"]), st.from_regex(r"[!-~]{1,40}", fullmatch=True)
)
def test_a_bearer_header_gives_its_token(scheme: str, value: str) -> None:
    assert bearer_token(f"{scheme} {value}") == value
    assert bearer_token(f"{scheme}  {value}  ") == value
    assert bearer_token(f"Basic {value}") is None
