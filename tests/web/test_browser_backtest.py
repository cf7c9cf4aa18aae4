"""The rule editor's Backtest panel in Debian's Chromium (fixtures of ``test_browser.py``).

Skipped, or failed with ``RULEENGINE_REQUIRE_BROWSER=1``, exactly as ``test_browser.py``
is. Every request the page makes must go to the app itself: the chart library is served
from the app's static files (no CDN). Screenshots land in ``test-output/web/``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

# Importing it skips (or fails) this module as it does test_browser.py without a browser.
import test_browser
from test_browser import HOSTILE, Console, Seeded, _open, _shot
from web_helpers import API_TOKEN

pytestmark = pytest.mark.browser

# test_browser.py's fixtures, by their names here
page = test_browser.page
seeded = test_browser.seeded
_browser_required = test_browser._browser_required


async def _only_local(page: Any, base: str) -> list[str]:
    """The URLs the page asked for outside the app (collected, and never reached)."""
    foreign: list[str] = []
    host = urlsplit(base).netloc

    async def handle(route: Any) -> None:
        url = route.request.url
        if urlsplit(url).netloc == host or url.startswith("data:"):
            await route.continue_()
        else:
            foreign.append(url)
            await route.abort()

    await page.route("**/*", handle)
    return foreign


async def _open_panel(page: Any, seeded: Seeded) -> tuple[Console, list[str]]:
    foreign = await _only_local(page, seeded.base)
    console = await _open(page, f"{seeded.base}/rules/{seeded.rule_id}#token={API_TOKEN}")
    await page.wait_for_function(
        "() => document.querySelector('#rule-editor').value.includes('pause-spenders')"
    )
    await page.focus("#backtest-toggle")
    await page.keyboard.press("Enter")  # reachable from the keyboard
    await page.wait_for_selector("#backtest-block:not(.hidden)")
    assert await page.evaluate("document.activeElement.id") == "bt-days"
    return console, foreign


# ---------------------------------------------------------------- rendering (unit level)


def _day(date: str, by_task: dict[str, int], total: float, delta: float = 0.0) -> dict[str, Any]:
    return {
        "date": date,
        "fires": sum(by_task.values()),
        "by_task": by_task,
        "budget_delta": delta,
        "budget_total": total,
        "paused": by_task.get("pause-spenders", 0),
        "activated": 0,
    }


def _fire(day: str, task: str, entity: str) -> dict[str, Any]:
    return {
        "time": f"{day}T14:00:00Z",
        "account": "act_1001",
        "entity_id": entity,
        "entity_name": HOSTILE if entity == "1" else f"Campaign {entity}",
        "task": task,
        "action": "pause" if task == "pause-spenders" else "increase_budget",
        "field": "status" if task == "pause-spenders" else "daily_budget",
        "before": "ACTIVE" if task == "pause-spenders" else 50.0,
        "after": "PAUSED" if task == "pause-spenders" else 55.0,
        "seen": None,
        "matured": {"spend today": 12.5},
    }


ENTITY = {
    "account": "act_1001",
    "entity_id": "1",
    "entity_name": HOSTILE,
    "fires": 2,
    "before": {"status": "ACTIVE", "daily_budget": 50.0, "name": HOSTILE},
    "after": {"status": "PAUSED", "daily_budget": 55.0, "name": HOSTILE},
}
MATURED = {
    "runs": 288,
    "fires": [_fire("2026-11-27", "scale", "1"), _fire("2026-11-28", "pause-spenders", "1")],
    "per_day": [
        _day("2026-11-26", {}, 50.0),
        _day("2026-11-27", {"scale": 1}, 55.0, 5.0),
        _day("2026-11-28", {"pause-spenders": 1}, 55.0),
    ],
    "entities": [ENTITY],
}
EMPTY_VIEW = {
    "runs": 288,
    "fires": [],
    "per_day": [_day(d, {}, 50.0) for d in ("2026-11-26", "2026-11-27", "2026-11-28")],
    "entities": [],
}
WHY = "only 3 execution records of its own (at least 20 needed)"
# Hand-written after the contract, for the rendering alone: the real API is the next test's.
RESULT: dict[str, Any] = {
    "rule": {"name": "Pause spenders", "level": "campaign", "rule_id": None, "version": None},
    "since": "2026-11-26",
    "until": "2026-11-28",
    "days": 3,
    "accounts": ["act_1001"],
    "view": "matured",
    **MATURED,
    "views": {"matured": MATURED, "as_seen": None},
    "differs_as_seen": [],
    "as_seen": {
        "used": False,
        "accounts": {"act_1001": {"observations": 3, "enough": False, "curve": None, "why": WHY}},
    },
    "graph_calls": 1234,
    "cache_hits": 0,
    "caveats": ["Entities created or deleted in between are not seen."],
}


async def test_a_result_renders_as_charts_a_table_and_says_why_as_seen_is_off(
    page: Any, seeded: Seeded
) -> None:
    console, foreign = await _open_panel(page, seeded)
    await page.evaluate("(r) => Backtest.show(r)", RESULT)
    await page.wait_for_selector("#bt-fires-chart canvas")
    await page.wait_for_selector("#bt-budget-chart canvas")
    row = page.locator("#bt-entities tbody tr")
    assert await row.count() == 1
    text = await row.inner_text()
    assert HOSTILE in text  # a name reaches the page as text only
    assert "ACTIVE → PAUSED" in text
    assert "$50.00 → $55.00" in text  # act_1001's currency, formatted
    assert await page.locator("#bt-fires-legend .legend-item").count() == 2
    assert "1,234 Graph calls" in await page.inner_text("#bt-summary")  # numbers formatted
    # no as-seen view: the toggle is off and says why
    assert await page.locator("#bt-view-as_seen").is_disabled()
    assert WHY in await page.inner_text("#bt-view-why")
    assert "Entities created or deleted" in await page.inner_text("#bt-caveats")
    await _shot(page, "rules-backtest-rendered")

    # a view with no fires says so plainly, instead of empty charts
    empty = RESULT | {"view": "as_seen", **EMPTY_VIEW, "views": {**RESULT["views"]}}
    empty["views"]["as_seen"] = EMPTY_VIEW
    empty["differs_as_seen"] = [
        {
            "time": "2026-11-27T14:00:00Z",
            "account": "act_1001",
            "entity_id": "1",
            "entity_name": HOSTILE,
            "task": "scale",
            "action": "increase_budget",
            "only_in": "matured",
        }
    ]
    await page.evaluate("(r) => Backtest.show(r)", empty)
    await page.wait_for_selector("#bt-empty:not(.hidden)")
    assert "would not have fired in these 3 days" in await page.inner_text("#bt-empty")
    assert await page.locator("#bt-fires-chart canvas").count() == 0
    assert "matured only" in await page.inner_text("#bt-differs")
    await _shot(page, "rules-backtest-empty-view")
    await page.click("#bt-view-matured")  # back to the view with fires
    await page.wait_for_selector("#bt-fires-chart canvas")
    assert await page.locator("#bt-entities tr.differs").count() == 1

    assert await page.evaluate("window.__xss") is None
    assert foreign == []
    assert console.errors == []


async def test_a_bad_request_points_at_the_field(page: Any, seeded: Seeded) -> None:
    console, _ = await _open_panel(page, seeded)
    await page.fill("#bt-days", "91")
    await page.click("#bt-run")
    await page.wait_for_selector('#bt-errors li[data-path="days"]')
    assert console.errors == []
