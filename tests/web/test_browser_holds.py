"""Rules that fight in the browser: Rule Logs marks the change that completed an oscillation,
and the Errors screen lists the hold it placed and clears it.

Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from web_helpers import API_TOKEN, Client

from flow import campaign_ids, wait_for
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.records import ExecutionStore
from test_rules_that_fight import ONE, run_all, save_fighting_pair

pytestmark = pytest.mark.browser


async def test_rule_logs_mark_the_oscillation_and_the_errors_screen_clears_its_hold(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
) -> None:
    campaign = (await campaign_ids(sandbox))[ONE]
    await save_fighting_pair(db)
    start = datetime.now(UTC)
    for run in range(3):
        await run_all(web_settings, db, start + timedelta(minutes=15 * run))
    executions = ExecutionStore(db)
    held = [
        r
        async for batch in db[c.BATCHES].find({}, {"_id": 1})
        for r in await executions.for_batch(batch["_id"])
        if r.get("oscillation") is not None
    ]
    assert held
    record = held[0]
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/logs#token={API_TOKEN}")
    await page.locator(f'tr.batch-row[data-batch-id="{record["batch_id"]}"]').click()
    mark = page.locator("tr.detail-row .oscillation")
    await mark.wait_for()
    assert "oscillation" in await mark.inner_text() and "held" in await mark.inner_text()
    await _shot(page, "logs-oscillation")

    await page.goto(f"{base}/errors")
    held = page.locator(f'#holds-table tr[data-hold-id="{campaign}:daily_budget"]')
    await held.wait_for()
    assert "daily_budget" in await held.inner_text()
    await page.wait_for_selector("#errors-table tbody tr .message-cell")
    assert "oscillation" in await page.inner_text("#errors-table")
    await held.locator('button[data-action="clear-hold"]').click()
    await page.locator("#holds-empty:not(.hidden)").wait_for()

    async def cleared() -> bool:
        hold = await db[c.HOLDS].find_one({})
        return hold is not None and hold["status"] == "cleared"

    await wait_for(cleared)
    assert console.errors == []
