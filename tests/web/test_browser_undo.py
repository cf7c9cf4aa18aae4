"""Rule Logs: undo a batch from the screen after reading its plan; the two batches link each other.

Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from typing import Any

import pytest
from test_accessibility import _audit, audit_page  # noqa: F401  (a fixture)
from test_browser import (  # noqa: F401  (the autouse check is a fixture)
    MISSING,
    _browser_required,
    _open,
    _shot,
)
from web_helpers import API_TOKEN, Client

from flow import campaign_ids, wait_for, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from undo_helpers import adset_budgets, limit_used_up, misfire, state

if MISSING is not None:
    pytest.skip(f"browser tests need a browser: {MISSING}", allow_module_level=True)

pytestmark = pytest.mark.browser


async def test_undoing_a_batch_from_rule_logs_after_seeing_its_plan(
    audit_page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    page = audit_page  # the app's CSP is bypassed for the injected axe only
    batch_id, before = await misfire(web_settings, db, sandbox)
    touched = (await campaign_ids(sandbox))["[AUTO] Lead Gen US 1"]
    await sandbox.ads_manager_change(touched, daily_budget=8888)
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/#token={API_TOKEN}")
    await page.goto(f"{base}/logs")
    await page.locator(f'tr.batch-row[data-batch-id="{batch_id}"]').click()
    await page.get_by_role("button", name="Undo…").click()
    plan = page.get_by_role("region", name=f"Undo plan of batch {batch_id}")
    await plan.get_by_role("table").wait_for()
    text = await plan.inner_text()
    assert "7 change(s) will be set back; 1 will not." in text
    skipped = plan.locator("tr.will-skip")
    assert await skipped.count() == 1
    row = await skipped.inner_text()
    assert "Lead Gen US 1" in row and "$88.88" in row and "changed by someone else" in row
    assert await plan.locator("tr.will-revert").count() == 7
    await _shot(page, "logs-undo-plan")
    assert await _audit(page, "rule logs, an undo plan") == []

    await page.get_by_role("button", name="Confirm undo (7 to set back)").click()
    await plan.get_by_role("status").wait_for()
    await work(web_settings)  # the worker carries out the queued undo
    await plan.get_by_text("Undo done").wait_for(timeout=15_000)
    detail = page.locator("tr.detail-row")
    await detail.get_by_text("Undone by").wait_for()
    assert await detail.get_by_role("button", name="Undo…").count() == 0
    await wait_for(lambda: _restored(sandbox, before))

    await detail.get_by_role("link", name=f"undo:{batch_id}").first.click()
    await page.locator(f'tr.batch-row[data-batch-id="undo:{batch_id}"]').click()
    back = page.locator("tr.detail-row .undo-link")
    await back.wait_for()
    assert f"Undo by api of batch {batch_id}" in await back.inner_text()
    await back.get_by_role("link", name=batch_id).click()
    await page.locator(f'tr.batch-row[data-batch-id="{batch_id}"]').click()
    await page.locator("tr.detail-row .undo-link").wait_for()
    assert console.errors == []


async def _restored(sandbox: SandboxAdmin, before: dict[str, Any]) -> bool:
    expected = before | {"[AUTO] Lead Gen US 1": ("ACTIVE", 8888)}
    return await state(sandbox) == expected


async def test_an_undo_that_could_not_set_everything_back_says_so_and_offers_the_rest(
    audit_page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    page = audit_page
    batch = await limit_used_up(web_settings, db, sandbox)
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/#token={API_TOKEN}")
    await page.goto(f"{base}/logs")
    await page.locator(f'tr.batch-row[data-batch-id="{batch.batch_id}"]').click()
    await page.get_by_role("button", name="Undo…").click()
    plan = page.get_by_role("region", name=f"Undo plan of batch {batch.batch_id}")
    await plan.get_by_role("table").wait_for()
    await page.get_by_role("button", name="Confirm undo (3 to set back)").click()
    await plan.get_by_role("status").wait_for()
    await work(web_settings)
    done = plan.get_by_text("Undo done, incomplete: 2 set back. 1 could not be set back")
    await done.wait_for(timeout=15_000)
    detail = page.locator("tr.detail-row")
    await detail.get_by_text("1 change(s) could not be set back").wait_for()
    rest = detail.get_by_role("button", name="Undo what is left…")
    await rest.wait_for()
    await _shot(page, "logs-undo-incomplete")
    assert await _audit(page, "rule logs, an incomplete undo") == []
    budgets = await adset_budgets(sandbox, list(batch.execution))
    assert budgets[batch.limited] != batch.before[batch.limited]

    await rest.click()  # a second undo of just that execution: Meta still refuses this hour
    await plan.get_by_role("table").wait_for()
    assert await plan.locator("tr.will-revert").count() == 1
    await page.get_by_role("button", name="Confirm undo (1 to set back)").click()
    await plan.get_by_role("status").wait_for()
    await work(web_settings)
    await plan.get_by_text("Undo done, incomplete: 0 set back.").wait_for(timeout=15_000)
    assert await detail.locator(".undo-link").count() == 2

    await page.goto(f"{base}/logs")
    original = page.locator(f'tr.batch-row[data-batch-id="{batch.batch_id}"]')
    await original.get_by_text("undo incomplete: 1 change(s) not set back").wait_for()
    undo = page.locator(f'tr.batch-row[data-batch-id="undo:{batch.batch_id}"]')
    await undo.get_by_text("incomplete: 1 change(s) not set back").wait_for()
    assert console.errors == []
