"""A budget schedule in Chromium: built in the rule builder's form (a multiplier and a window,
no "then"), its window said in Rule Logs and the undo plan, shaded and listed on the entity's
timeline. Skipped like ``test_browser.py`` where its browser is absent."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from test_browser_builder import _at, _valid
from web_helpers import API_TOKEN, AUTH, Client, evening_push

from flow import campaign_ids, dispatch, records, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database

pytestmark = pytest.mark.browser

ONE = "[AUTO] Prospecting US 1"


async def test_the_builder_asks_for_a_multiplier_and_a_window(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    await page.click("#new-rule")
    await page.locator(_at("name")).wait_for()
    await page.fill(_at("name"), "Evening push")
    await page.select_option(_at("tasks[0].action.type"), "schedule_budget")
    await page.fill(_at("tasks[0].action.multiplier"), "1.5")
    await page.fill(_at("tasks[0].action.window.start"), "18:00")
    await page.fill(_at("tasks[0].action.window.end"), "22:00")
    await _valid(page)
    action = json.loads(await page.input_value("#rule-editor"))["tasks"][0]["action"]
    assert action == {
        "type": "schedule_budget",
        "multiplier": 1.5,
        "window": {"start": "18:00", "end": "22:00"},
    }
    assert await page.get_by_label("Then, later: a second step").count() == 0
    await _shot(page, "builder-schedule-budget")
    assert console.errors == []


async def test_rule_logs_the_undo_plan_and_the_timeline_show_the_window(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    campaign = (await campaign_ids(sandbox))[ONE]
    assert (await client.post("/api/rules", json=evening_push(ONE), headers=AUTH)).status == 201
    await dispatch(web_settings, db, now=datetime.now(UTC))
    await work(web_settings)
    (record,) = await records(db, outcome="applied")
    base = str(client.make_url("")).rstrip("/")

    console = await _open(page, f"{base}/logs#token={API_TOKEN}")
    batch = page.locator(f'tr.batch-row[data-batch-id="{record["batch_id"]}"]')
    await batch.click()
    detail = page.locator(f'tr.detail-row[data-batch-id="{record["batch_id"]}"]')
    change = await detail.locator(f'tr[data-entity-id="{campaign}"] td.change').inner_text()
    assert change.startswith("scheduled daily budget: $200.00 → $300.00 (+50 %) in the window ")
    await detail.locator("button.undo-open").click()
    plan = detail.locator("section.undo-plan table.undo-changes")
    await plan.wait_for()
    assert "in the window" in await plan.locator("td.change").inner_text()
    await _shot(page, "logs-schedule")

    await page.goto(f"{base}/entities/{campaign}#token={API_TOKEN}")
    await page.locator("#schedules-table tr.schedule-row").wait_for()
    row = await page.locator("#schedules-table tr.schedule-row").inner_text()
    assert "$200.00 → $300.00" in row and "Evening push v1" in row
    assert "scheduled budget" in await page.inner_text("#entity-legend")
    await _shot(page, "timeline-schedule")
    assert console.errors == []
