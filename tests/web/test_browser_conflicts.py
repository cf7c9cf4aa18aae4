"""Rules that fight, in Debian's Chromium: the badge in the Rules list, the findings in the editor.

Runs like ``test_browser.py`` (whose browser fixture and helpers it uses): skipped where
Chromium or playwright is absent, unless ``RULEENGINE_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_browser import _open, _shot, page  # noqa: F401  (the browser fixture)
from web_helpers import API_TOKEN, AUTH, Client, rule_body

from ruleengine.store.db import Database

pytestmark = pytest.mark.browser

AUTO = [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}]


def budget_rule(name: str, action: dict[str, Any]) -> dict[str, Any]:
    body = rule_body(name, filters=AUTO)
    body["tasks"] = [
        {
            "id": "budget",
            "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
            "action": action,
        }
    ]
    return body


async def test_a_save_shows_its_conflicts_and_the_list_badges_both_rules(
    page: Any,  # noqa: F811
    client: Client,
    db: Database,
) -> None:
    up = budget_rule("Scale up", {"type": "increase_budget", "percent": 20})
    created = await (await client.post("/api/rules", json=up, headers=AUTH)).json()
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    await page.wait_for_selector("#rules-table tbody tr")
    assert await page.locator("#rules-table .badge.conflict").count() == 0

    await page.click("#new-rule")
    await page.wait_for_selector("#validity.ok")
    down = budget_rule("Cut down", {"type": "decrease_budget", "percent": 20})
    await page.locator("#rule-editor").fill(json.dumps(down, indent=2))
    await page.wait_for_selector("#validity.ok")
    await page.click("#save-rule")  # "Create": saved, and its conflict shown
    finding = page.locator('#conflicts-list li[data-field="daily_budget"]')
    await finding.wait_for()
    text = await finding.inner_text()
    assert "Scale up" in text and "Cut down" in text and "opposing" in text
    assert "found when saving" in await page.inner_text("#conflicts-meta")
    saved = await db["rules"].find_one({"name": "Cut down"})
    assert saved is not None

    for rule_id in (created["id"], saved["_id"]):
        badge = page.locator(f'#rules-table tr[data-rule-id="{rule_id}"] .badge.conflict')
        await badge.wait_for()
        assert await badge.inner_text() == "conflict"
    await _shot(page, "rules-conflicts")

    await page.click("#check-conflicts")  # the live check names campaigns in both scopes
    await page.wait_for_function(
        "() => document.querySelector('#conflicts-meta').textContent.includes('live entities')"
    )
    assert "now in both scopes: [AUTO]" in await page.inner_text("#conflicts-list")
    assert console.errors == []


async def test_the_rules_list_badges_from_the_counts_without_a_token(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    """Reads are open by default: the badges come from the counts, never the whole findings."""
    ids = []
    for name, action in (("Up", {"type": "increase_budget", "percent": 20}), ("Down", DOWN)):
        response = await client.post("/api/rules", json=budget_rule(name, action), headers=AUTH)
        ids.append((await response.json())["id"])
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    console = await _open(page, client.make_url("/rules").human_repr())  # no token at all
    for rule_id in ids:
        badge = page.locator(f'#rules-table tr[data-rule-id="{rule_id}"] .badge.conflict')
        await badge.wait_for()
    conflicts = [url for url in asked if "/api/rules/conflicts" in url]
    assert conflicts and all(url.endswith("/api/rules/conflicts/counts") for url in conflicts)
    assert console.errors == []


DOWN = {"type": "decrease_budget", "percent": 20}
