"""The entity timeline in the browser: opened from a Rule Logs execution after the engine
changed the entity, it marks each change with who made it.

Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from typing import Any

import pytest
from test_api_entities import make_history, make_one_tick_of_three_rules
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from web_helpers import API_TOKEN, Client

from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database

pytestmark = pytest.mark.browser


async def test_the_timeline_opened_from_rule_logs_marks_the_rules_changes(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    history = await make_history(client, web_settings, db, redis, sandbox)
    first = await db[c.EXECUTIONS].find_one({"entity_id": history.campaign}, sort=[("_id", 1)])
    assert first is not None
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/logs#token={API_TOKEN}")
    await page.locator(f'tr.batch-row[data-batch-id="{first["batch_id"]}"]').click()
    execution = page.locator(f'tr.detail-row tr[data-entity-id="{history.campaign}"]').first
    await execution.locator("a.timeline-link").click()
    await page.wait_for_url(f"**/entities/{history.campaign}")
    markers = page.locator("#entity-chart .change-marker")
    await page.wait_for_function(
        "() => document.querySelectorAll('#entity-chart .change-marker').length === 5"
    )
    labels = await markers.locator(".change-label").all_inner_texts()
    assert sorted(labels) == sorted(
        [
            "Scale up v1",
            "outside the engine",
            "Scale up v1",
            "Scale up v2",
            "Scale up v2 (follow-up)",
        ]
    )
    kinds = [await m.get_attribute("data-kind") for m in await markers.all()]
    assert sorted(kinds) == ["followup", "outside", "rule", "rule", "rule"]
    assert await page.locator("#changes-table tbody tr.change-row").count() == 5
    assert await page.locator("#entity-executions tbody tr").count() == 4
    await page.wait_for_load_state("networkidle")
    await _shot(page, "entity-timeline")
    assert console.errors == []


async def test_the_timeline_of_a_change_two_other_rules_saw_coming_shows_one_change(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
) -> None:
    campaign, _ = await make_one_tick_of_three_rules(client, web_settings, db, sandbox)
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/entities/{campaign}#token={API_TOKEN}")
    await page.wait_for_selector("#changes-table tbody tr.change-row")
    await page.wait_for_load_state("networkidle")
    markers = page.locator("#entity-chart .change-marker")
    assert await markers.count() == 1
    assert await markers.locator(".change-label").all_inner_texts() == ["Margin guard v1"]
    assert await page.locator("#changes-table tbody tr.change-row").count() == 1
    assert "outside the engine" not in await page.inner_text("#changes-table")
    await _shot(page, "entity-timeline-one-tick")
    assert console.errors == []
