"""The Approvals screen in the browser: a pending +50 % budget change is shown with its rule,
entity, before → after, age and expiry, approved with its button, written once by a worker,
and then listed as decided, with who decided.

Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_api_approvals import budget_of, gated_rule, pending, propose
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from web_helpers import API_TOKEN, Client

from flow import successful_writes, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine.rules.language.money import format_change
from ruleengine.settings import Settings
from ruleengine.store.db import Database

pytestmark = pytest.mark.browser


async def test_a_pending_change_is_approved_on_the_screen_and_lands_once(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    await propose(web_settings, db, redis, gated_rule(), now=datetime.now(UTC))
    first = (await pending(client))[0]
    entity, before, after = first["entity"]["id"], first["before"], first["after"]
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/approvals/{first['id']}#token={API_TOKEN}")
    row = page.locator(f'#pending-table tr[data-approval-id="{first["id"]}"]')
    await row.wait_for()
    text = await row.inner_text()
    change = format_change(before, after, "USD")  # $80.00 → $120.00 (+50 %)
    assert "Scale with approval" in text and change in text and "Demo Store US" in text
    assert await row.get_attribute("class") == "focused"  # the notification's link
    await _shot(page, "approvals-pending")
    name = first["entity"]["name"]
    await page.get_by_role("button", name=f"Approve {name}: daily budget {change}").click()
    decided = page.locator(f'#decided-table tr[data-approval-id="{first["id"]}"]')
    await decided.wait_for()
    assert "approved" in await decided.inner_text()
    assert await row.count() == 0
    await work(web_settings)
    assert await budget_of(sandbox, entity) == after
    assert [w["id"] for w in await successful_writes(sandbox)] == [entity]
    await page.reload()
    await decided.wait_for()
    decided_text = await decided.inner_text()
    assert "applied" in decided_text and "api" in decided_text
    await _shot(page, "approvals-decided")
    assert console.errors == []
