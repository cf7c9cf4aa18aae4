"""The Accounts screen in the browser: a sandbox account is registered with a token pasted once,
shown as "set" (never the token), and an account active rules use cannot be removed.

Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from web_helpers import API_TOKEN, AUTH, Client, rule_body

from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, TokenState, fingerprint, load_key
from ruleengine.store.db import Database
from support import SANDBOX_TOKEN

pytestmark = pytest.mark.browser


async def test_a_sandbox_account_is_registered_and_its_token_shown_only_as_set(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
) -> None:
    rule = await client.post("/api/rules", json=rule_body("Pause spenders"), headers=AUTH)
    assert rule.status == 201
    assert (await client.delete("/api/accounts/act_1004", headers=AUTH)).status == 204
    token = str((await sandbox.issue_token(accounts=["act_1004"]))["token"])
    stored = CredentialStore(db, load_key(web_settings))
    refused = TokenState(
        status="missing_permission",
        code=200,
        message="Requires ads_management permission",
        at=datetime.now(UTC),
        token_fingerprint=(await stored.get("act_1002")).token_fingerprint,
    )
    assert await stored.mark_token("act_1002", refused)
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/accounts#token={API_TOKEN}")
    await page.locator('#accounts-table tr[data-account-id="act_1001"]').wait_for()
    assert "Pause spenders" in await page.inner_text('tr[data-account-id="act_1001"]')
    health = await page.inner_text('tr[data-account-id="act_1002"] .token-health')
    assert "missing permission (code 200)" in health and "grant it" in health

    await page.locator('#sandbox-accounts button[data-sandbox-account="act_1004"]').click()
    assert await page.input_value("#account-id") == "act_1004"
    assert await page.input_value("#account-currency") == "JPY"  # the sandbox's, filled in
    await page.fill("#account-token", token)
    await page.click('#account-form button[type="submit"]')
    added = page.locator('#accounts-table tr[data-account-id="act_1004"]')
    await added.locator('[data-token="set"]').wait_for()
    assert fingerprint(token) in await added.inner_text()
    assert await page.input_value("#account-token") == ""
    await page.wait_for_load_state("networkidle")
    await _shot(page, "accounts")
    assert token not in await page.content()
    storage = await page.evaluate("JSON.stringify(Object.assign({}, localStorage))")
    assert token not in storage
    assert await stored.token("account:act_1004") == token

    # Rotate it: a second token, pasted once in the row's own password field.
    second = str((await sandbox.issue_token(accounts=["act_1004"]))["token"])
    await added.locator('button[data-action="rotate"]').click()
    await page.fill("#rotate-act_1004", second)
    await page.click('.rotate-form button[type="submit"]')
    await page.locator(
        f'tr[data-account-id="act_1004"]:has-text("{fingerprint(second)}")'
    ).wait_for()
    assert await stored.token("account:act_1004") == second
    assert token not in await page.content() and second not in await page.content()
    assert console.errors == [], console.errors

    page.on("dialog", lambda dialog: dialog.accept())
    used = page.locator('tr[data-account-id="act_1001"] button[data-action="remove"]')
    await used.click()
    note = page.locator('tr[data-account-id="act_1001"] .inline-note.error')  # beside the button
    await note.wait_for()
    assert "Pause spenders" in await note.inner_text()  # refused: the active rule is named
    assert await stored.get("act_1001")
    assert len(console.errors) == 1 and "409" in console.errors[0]  # the browser's own line


async def test_a_currency_not_metas_is_shown_and_re_read_from_meta(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
) -> None:
    stored = CredentialStore(db, load_key(web_settings))
    wrong = await stored.add("act_1004", SANDBOX_TOKEN, now=datetime.now(UTC), currency="USD")
    state = wrong.disagreement(currency="JPY", timezone="Asia/Tokyo", now=datetime.now(UTC))
    assert state is not None and await stored.mark_currency("act_1004", state)
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/accounts#token={API_TOKEN}")
    row = page.locator('#accounts-table tr[data-account-id="act_1004"]')
    cell = row.locator('[data-mismatch="currency"]')
    await cell.wait_for()
    assert "USD" in await cell.inner_text() and "Meta's: JPY" in await cell.inner_text()
    note = await row.locator("[data-currency-state]").inner_text()
    assert "no budget or bid change" in note
    assert await row.locator('[data-mismatch="timezone"]').count() == 0  # Tokyo is Meta's

    await row.locator('button[data-action="refresh"]').click()
    await page.locator('tr[data-account-id="act_1004"]:not(:has([data-currency-state]))').wait_for()
    assert "currency USD → JPY" in await row.locator(".inline-note.ok").inner_text()
    assert (await stored.get("act_1004")).currency_state is None
    assert console.errors == [], console.errors
