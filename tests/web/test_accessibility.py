"""An automated accessibility audit of every screen: axe-core (vendored under
``tests/web/vendor/axe-core/``, test-only) finds no serious or critical violation.

axe is injected with ``add_script_tag``; the audit's own browser context bypasses the app's
Content Security Policy so that the injected script may run (the app's CSP is unchanged).
Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_api_approvals import gated_rule, pending, propose
from test_api_entities import make_history
from test_browser import (  # noqa: F401  (seeded and the autouse check are fixtures)
    ARGS,
    BROWSER_ZONE,
    CHROMIUM,
    TIMEOUT_MS,
    Seeded,
    _browser_required,
    seeded,
)
from web_helpers import API_TOKEN, Client

from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database

pytestmark = pytest.mark.browser

AXE = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")


@pytest.fixture
async def audit_page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            context = await browser.new_context(
                viewport={"width": 1280, "height": 900},
                timezone_id=BROWSER_ZONE,
                bypass_csp=True,  # for the injected axe only: the app's CSP is not changed
            )
            page = await context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            yield page
        finally:
            await browser.close()


async def _audit(page: Any, screen: str) -> list[str]:
    """The serious and critical violations axe finds on the page as it is, one line each."""
    await page.wait_for_load_state("networkidle")
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.add_script_tag(path=str(AXE))
    result = await page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']})"
        ".then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)})))"
    )
    return [
        f"{screen}: [{v['impact']}] {v['id']} — {v['help']} — {v['nodes']}"
        for v in result
        if v["impact"] in BLOCKING
    ]


async def test_the_screens_have_no_serious_or_critical_violations(
    audit_page: Any,
    seeded: Seeded,  # noqa: F811
) -> None:
    page, base = audit_page, seeded.base
    found: list[str] = []

    await page.goto(f"{base}/#token={API_TOKEN}")
    await page.wait_for_selector("#rules-table tbody tr")
    found += await _audit(page, "rules")

    await page.goto(f"{base}/rules/{seeded.rule_id}")
    await page.wait_for_function("() => document.querySelector('#rule-editor').value.length > 0")
    await page.locator('#builder-form [data-path="tasks[0].conditions[0].metric"]').wait_for()
    found += await _audit(page, "rule editor (form and JSON views)")
    await page.locator('#builder-form [data-path="tasks[0].conditions[0].metric"]').fill("roas")
    await page.locator('#builder-form [role="option"]').first.wait_for()
    found += await _audit(page, "rule builder, the metric picker open")
    await page.keyboard.press("Escape")
    await page.get_by_label("At set times each week").check()
    await page.locator("#builder-form table.timetable").wait_for()
    await page.fill('#builder-form [data-path="tasks[0].cooldown_minutes"]', "-1")
    await page.locator("#builder-form .form-error").first.wait_for()
    found += await _audit(page, "rule builder, a timetable and errors at the fields")
    await page.click("#backtest-toggle")
    await page.wait_for_selector("#backtest-block:not(.hidden)")
    found += await _audit(page, "rule editor with the backtest panel")

    await page.goto(f"{base}/logs")
    await page.locator(f'tr.batch-row[data-batch-id="{seeded.batch_id}"]').click()
    await page.locator("tr.detail-row table.executions").wait_for()
    found += await _audit(page, "rule logs, a batch expanded")

    for path, ready, screen in (
        ("/benchmark", "#slow-table tbody tr", "benchmark"),
        ("/errors", "#errors-table tbody tr", "errors"),
        ("/accounts", "#accounts-table tbody tr", "accounts"),
    ):
        await page.goto(base + path)
        await page.wait_for_selector(ready)
        found += await _audit(page, screen)
    await page.locator('tr[data-account-id="act_1001"] button[data-action="rotate"]').click()
    await page.locator("#rotate-act_1001").wait_for()
    found += await _audit(page, "accounts, a token being rotated")
    assert found == [], "\n".join(found)


async def test_the_entity_timeline_has_no_serious_or_critical_violations(
    audit_page: Any,
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
) -> None:
    history = await make_history(client, web_settings, db, redis, sandbox)
    assert await db[c.EXECUTIONS].find_one({"entity_id": history.campaign})
    base = str(client.make_url("")).rstrip("/")
    await audit_page.goto(f"{base}/entities/{history.campaign}#token={API_TOKEN}")
    await audit_page.wait_for_function(
        "() => document.querySelectorAll('#entity-chart .change-marker').length === 5"
    )
    found = await _audit(audit_page, "entity timeline")
    assert found == [], "\n".join(found)


async def test_the_approvals_screen_has_no_serious_or_critical_violations(
    audit_page: Any, client: Client, web_settings: Settings, db: Database, redis: Any
) -> None:
    await propose(web_settings, db, redis, gated_rule(), now=datetime.now(UTC))
    waiting = await pending(client)
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    await client.post(f"/api/approvals/{waiting[0]['id']}/reject", headers=headers)
    base = str(client.make_url("")).rstrip("/")
    await audit_page.goto(f"{base}/approvals/{waiting[1]['id']}#token={API_TOKEN}")
    await audit_page.wait_for_selector("#pending-table tbody tr")
    await audit_page.wait_for_selector("#decided-table tbody tr")
    found = await _audit(audit_page, "approvals, pending and decided")
    assert found == [], "\n".join(found)
