"""The rule page's Impact panel and the Benchmark's ranking in Debian's Chromium (fixtures of
``test_browser.py``; skipped or failed as it is without a browser). Screenshots land in
``test-output/web/``: ``impact.png`` (the panel) and ``impact-benchmark.png``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

# Importing it skips (or fails) this module as it does test_browser.py without a browser.
import test_browser
from test_browser import _open, _shot
from web_helpers import API_TOKEN, Client

from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from test_holdout import simulate_losers

pytestmark = pytest.mark.browser

page = test_browser.page
_browser_required = test_browser._browser_required
MEASURE_TIMEOUT_MS = 60_000  # the first report fetches the entities' hours from the sandbox


async def test_the_impact_panel_shows_the_effect_its_interval_and_the_chart(
    page: Any, client: Client, web_settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    # three simulated days of decisions ending long enough ago for 72 h windows to be over
    now = datetime.now(UTC).replace(microsecond=0)
    measured, unmeasured = await simulate_losers(web_settings, db, sandbox, now - timedelta(days=8))
    await sandbox.set_clock(now)
    base = str(client.make_url("")).rstrip("/")
    console = await _open(page, f"{base}/rules/{measured.id}#token={API_TOKEN}")
    await page.wait_for_selector("#impact-toggle:not(.hidden)")
    await page.focus("#impact-toggle")
    await page.keyboard.press("Enter")  # reachable from the keyboard
    await page.wait_for_selector("#impact-block:not(.hidden)")
    task = await page.wait_for_selector(
        "#impact-tasks .impact-task[data-task='t']"
        " .impact-currency[data-currency='USD'] .impact-headline",
        timeout=MEASURE_TIMEOUT_MS,
    )
    headline = await task.inner_text()
    assert "profit per entity" in headline and "95 % interval" in headline
    assert "$" in headline  # act_1001 bills in dollars: shown as such, with cents
    assert await page.locator("#impact-tasks .impact-effects tr[data-metric='profit']").count() == 1
    await page.wait_for_selector("#impact-tasks .impact-chart .uplot canvas")
    await page.locator("#impact-block").scroll_into_view_if_needed()
    await _shot(page, "impact")
    await page.locator("#impact-block").screenshot(
        path=str(test_browser.SHOTS / "impact-panel.png")
    )

    # a rule without a holdout: counts, and "not measured", never a chart
    await page.goto(f"{base}/rules/{unmeasured.id}")
    await page.wait_for_selector("#impact-toggle:not(.hidden)")
    await page.click("#impact-toggle")
    note = await page.wait_for_selector(
        "#impact-tasks .impact-task .impact-note", timeout=MEASURE_TIMEOUT_MS
    )
    assert (await note.inner_text()).startswith("not measured")
    assert await page.locator("#impact-tasks .impact-chart").count() == 0

    # the Benchmark screen ranks the measured rule by its effect
    await page.goto(f"{base}/benchmark")
    row = await page.wait_for_selector(
        f"#impact-table tbody tr[data-rule-id='{measured.id}']", timeout=MEASURE_TIMEOUT_MS
    )
    assert "…" in await row.inner_text()
    await _shot(page, "impact-benchmark")
    assert console.errors == []
