"""The error log and account APIs, and that no token ever leaves the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import SecretStr
from web_helpers import AUTH, Client, insert_batch, rule_body, run_batch, start_client

from graph_sandbox.admin import SandboxAdmin
from ruleengine.errors import ErrorReport
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog

NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)


async def _report(log: ErrorLog, message: str, *, at: datetime, **extra: Any) -> str:
    return await log.record(
        ErrorReport(
            function="writer.update",
            message=message,
            params={"path": "/1202000111", "body": {"status": "PAUSED"}},
            response={"error": {"code": 100, "message": "Invalid parameter"}},
            **extra,
        ),
        now=at,
    )


async def test_errors_are_listed_newest_first_and_resolved_groups_reopen(
    client: Client, db: Database
) -> None:
    log = ErrorLog(db)
    older = await _report(log, "campaign 1202000111 failed", at=NOW)
    await _report(log, "campaign 1202000222 failed", at=NOW + timedelta(seconds=5))
    newer = await log.record(
        ErrorReport(function="engine.evaluate_account", message="KeyError: 'spend'"),
        now=NOW + timedelta(minutes=1),
    )
    page = await (await client.get("/api/errors")).json()
    assert [g["id"] for g in page["items"]] == [newer, older]
    assert page["total"] == 2
    group = page["items"][1]
    assert (group["count"], group["status"]) == (2, "active")
    assert group["message"] == "campaign <id> failed"
    assert group["samples"][0]["response"]["error"]["code"] == 100
    assert group["first_seen"] == "2026-12-01T18:00:00Z"

    resolved = await client.patch(f"/api/errors/{older}", json={"status": "resolved"}, headers=AUTH)
    assert (resolved.status, (await resolved.json())["status"]) == (200, "resolved")
    only_resolved = await (await client.get("/api/errors?status=resolved")).json()
    assert [g["id"] for g in only_resolved["items"]] == [older]
    stored = await db["error_log"].find_one({"status": "resolved"})
    assert stored is not None

    await _report(log, "campaign 1202000333 failed", at=NOW + timedelta(minutes=2))
    again = await (await client.get("/api/errors?status=active")).json()
    assert {g["id"] for g in again["items"]} == {older, newer}  # the regression reopened it


async def test_patch_error_validates_status_and_needs_the_token(
    client: Client, db: Database
) -> None:
    group = await _report(ErrorLog(db), "boom 1234567", at=NOW)
    assert (await client.patch(f"/api/errors/{group}", json={"status": "resolved"})).status == 401
    bad = await client.patch(f"/api/errors/{group}", json={"status": "fixed"}, headers=AUTH)
    assert bad.status == 422
    assert (await bad.json())["errors"][0]["path"] == "status"
    missing = await client.patch("/api/errors/abc", json={"status": "ignored"}, headers=AUTH)
    assert missing.status == 404
    ignored = await client.patch(f"/api/errors/{group}", json={"status": "ignored"}, headers=AUTH)
    assert (await ignored.json())["status"] == "ignored"


async def test_accounts_are_listed_and_added_without_tokens(
    client: Client, db: Database, web_settings: Settings, sandbox: SandboxAdmin
) -> None:
    listing = await (await client.get("/api/accounts")).json()
    assert [a["id"] for a in listing["items"]] == ["act_1001", "act_1002", "act_1003", "act_1004"]
    assert set(listing["items"][0]) == {
        "id",
        "name",
        "timezone",
        "currency",
        "token_fingerprint",
        "created_at",
        "updated_at",
        "updated_by",
        "token_state",
        "currency_state",
        "rules",
        "last_batch",
    }
    assert listing["items"][0]["token_state"] is None
    token = str((await sandbox.issue_token(accounts=["act_1003"]))["token"])
    body = {"id": "act_1003", "token": token, "name": "Shop", "timezone": "Asia/Jakarta"}
    assert (await client.post("/api/accounts", json=body)).status == 401
    response = await client.post("/api/accounts", json=body, headers=AUTH)
    assert response.status == 201
    added = await response.json()
    assert (added["id"], added["currency"], added["timezone"]) == (
        "act_1003",
        "USD",  # Meta's
        "Asia/Jakarta",
    )
    assert token not in await response.text()
    stored = CredentialStore(db, load_key(web_settings))
    assert await stored.token("account:act_1003") == token
    bad = await client.post(
        "/api/accounts", json={"id": "2001", "token": " ", "timezone": "Nowhere"}, headers=AUTH
    )
    assert bad.status == 422
    assert {e["path"] for e in (await bad.json())["errors"]} == {"id", "token", "timezone"}


AD_TOKEN = "EAAGm0PS4ZCpsBAK" + "x9Rq2Lw7Tz4Nv8Bc3Hd6Jf1Gk5" * 2
API_TOKEN_LIKE_META = "EAAGapiTOKENq8Wz3Lr5Tn7Vb2Hs4Jd6Fg9Pm1Cy0Xk"


class Recorder:
    """Calls the API with the token and keeps every answer's text."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.texts: list[str] = []

    async def __call__(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {API_TOKEN_LIKE_META}"}
        response = await self.client.request(method, path, headers=headers, **kwargs)
        self.texts.append(await response.text())
        return response


async def _seed_token_bearing_data(
    call: Recorder, settings: Settings, db: Database, redis: Any
) -> tuple[str, str]:
    """An account, rule, preview, real batch, error and batch row that all met the tokens."""
    # The ad token replaces the sandbox token of act_1001 (the test registers it at the sandbox).
    added = await call("POST", "/api/accounts", json={"id": "act_1001", "token": AD_TOKEN})
    assert added.status == 201
    rule_id = (await (await call("POST", "/api/rules", json=rule_body())).json())["id"]
    assert (await call("POST", f"/api/rules/{rule_id}/preview")).status == 200
    batch_id = await run_batch(
        settings,
        db,
        redis,
        rule_id=rule_id,
        version=1,
        rule=parse_rule(rule_body()),
        account="act_1001",
    )
    # A failure whose sample carries both tokens, as a careless caller might report it.
    await ErrorLog(db).record(
        ErrorReport(
            function="writer.update",
            message=f"failed with access_token={AD_TOKEN} and {API_TOKEN_LIKE_META}",
            params={"url": f"/v27.0/1?access_token={AD_TOKEN}", "token": API_TOKEN_LIKE_META},
            response={"echo": AD_TOKEN},
        ),
        now=NOW,
    )
    await insert_batch(
        db, batch_id="b2", rule_id=rule_id, rule_name=AD_TOKEN, started_at=datetime.now(UTC)
    )
    return rule_id, batch_id


async def test_no_token_ever_appears_in_an_api_response(
    web_settings: Settings, db: Database, redis: Any, sandbox: Any, accounts: list[str]
) -> None:
    settings = web_settings.model_copy(update={"api_token": SecretStr(API_TOKEN_LIKE_META)})
    await sandbox.issue_token(AD_TOKEN, accounts=["act_1001"])  # a token Meta issued
    client = await start_client(settings)
    call = Recorder(client)
    try:
        rule_id, batch_id = await _seed_token_bearing_data(call, settings, db, redis)
        errors = await (await call("GET", "/api/errors")).json()
        for path in (
            "/api/rules",
            f"/api/rules/{rule_id}",
            f"/api/rules/{rule_id}/versions",
            "/api/accounts",
            "/api/batches",
            f"/api/batches/{batch_id}",
            f"/api/batches/{batch_id}/executions",
            "/api/benchmark/slow-rules",
            "/health",
            "/health/ready",
            "/metrics",
        ):
            await call("GET", path)
        await call("PATCH", f"/api/errors/{errors['items'][0]['id']}", json={"status": "resolved"})
        await call("POST", "/api/rules", json={"name": AD_TOKEN})  # a 422 about that input
        await call("POST", "/api/rules/validate", json=rule_body(name=API_TOKEN_LIKE_META))
    finally:
        await client.close()
    assert len(call.texts) > 15
    assert any("[REDACTED]" in text for text in call.texts)  # the tokens did reach the answers
    for text in call.texts:
        assert AD_TOKEN not in text
        assert API_TOKEN_LIKE_META not in text
