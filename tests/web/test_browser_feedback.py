"""What a person is told, and where: a viewer's header names its token and role, and no
enabled button ends in a 403; Rule Logs print no stray ``null``; a held-out decision reads
"held out (not written)" in Rule Logs and the preview, which lists what would apply first;
an ad's timeline is not titled "Budget"; the Rules list names the zone of its times and
says "due now", not "1 s ago"; the live validation waits for a pause in typing.

Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from test_browser_money import Trimmed, trimmed  # noqa: F401  (a fixture)
from web_helpers import API_TOKEN, AUTH, Client, rule_body

from flow import dispatch, records, work
from ruleengine.errors import ErrorReport
from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ApiTokenStore
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog

pytestmark = pytest.mark.browser

#: Text nodes that read "null": a value the page inserted without looking at it.
NULL_TEXT = """() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const found = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.nodeValue.trim() === "null") found.push(node.parentElement.outerHTML.slice(0, 120));
  }
  return found;
}"""
#: The preview's order: what would change first, then what holds it back.
PREVIEW_ORDER = [
    "would_apply",
    "awaiting_approval",
    "held_out",
    "failed",
    "skipped",
    "no_change",
    "not_matched",
]
#: The most buttons one screen's sweep clicks (each may reveal more: a panel, a row).
MAX_CLICKS = 80


async def _click_every_enabled_button(screen: Any) -> list[str]:
    """Click every enabled, visible button of the page's main part, a few passes over (a
    click may reveal more); the labels clicked."""
    clicked: list[str] = []
    for _ in range(3):
        for button in await screen.locator("main button:enabled:visible").element_handles():
            if len(clicked) >= MAX_CLICKS:
                return clicked
            if not (await button.is_visible() and await button.is_enabled()):
                continue  # a previous click replaced or disabled it
            clicked.append((await button.inner_text()).strip())
            await button.click()
            await screen.wait_for_load_state("networkidle")
    return clicked


async def test_a_viewer_sees_who_it_is_and_no_button_that_ends_in_403(
    page: Any,  # noqa: F811
    trimmed: Trimmed,  # noqa: F811
    client: Client,
    db: Database,
) -> None:
    _, wall = await ApiTokenStore(db).add("wall-screen", "viewer", now=datetime.now(UTC))
    await ErrorLog(db).record(
        ErrorReport(function="writer.update", message="campaign 1 failed"), now=datetime.now(UTC)
    )
    rule = (await (await client.get("/api/rules")).json())["items"][0]
    refused: list[str] = []
    page.on("response", lambda r: refused.append(r.url) if r.status == 403 else None)
    page.on("dialog", lambda dialog: dialog.accept())  # a confirm asked must not hide a 403
    screens = [
        f"/rules/{rule['id']}",
        "/logs",
        "/approvals",
        "/accounts",
        "/errors",
        "/benchmark",
        f"/entities/{trimmed.campaigns['act_1001']}",
    ]
    await _open(page, f"{trimmed.base}/rules#token={wall}")
    for path in screens:
        await page.goto(trimmed.base + path)
        await page.wait_for_selector('#token-state[data-role="viewer"]')
        assert await page.inner_text("#token-state") == "wall-screen · viewer"
        await page.wait_for_load_state("networkidle")
        if path == "/logs":  # a batch that changed something: its Undo… is there, disabled
            batch = trimmed.batches["act_1001"]
            await page.locator(f'tr.batch-row[data-batch-id="{batch}"]').click()
            await page.locator("button.undo-open").wait_for()
        disabled = page.locator("main button[data-needs]:disabled")
        for why in await disabled.evaluate_all("(nodes) => nodes.map((n) => n.title)"):
            assert "the token 'wall-screen' is a viewer token" in why
        if path == "/approvals":
            assert await disabled.count() == 4  # approve and reject, twice
            await _shot(page, "approvals-viewer")
        clicked = await _click_every_enabled_button(page)
        assert refused == [], f"{path}: {clicked}"


async def test_rule_logs_print_no_null_and_label_held_out_changes(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
) -> None:
    held = await _held_rule(client, web_settings, db)
    console = await _open(page, f"{held.base}/logs#token={API_TOKEN}")
    await page.locator(f'tr.batch-row[data-batch-id="{held.batch_id}"]').click()
    row = page.locator("tr.detail-row tr.outcome-held_out").first
    await row.wait_for()
    assert await page.evaluate(NULL_TEXT) == []  # the expanded batch printed no "null"
    change = await row.locator("td").nth(3).inner_text()  # "Before → after"
    assert change == "held out (not written): status: ACTIVE → PAUSED"
    applied = await page.locator("tr.detail-row tr.outcome-applied td.change").first.inner_text()
    assert applied == "status: ACTIVE → PAUSED"
    await _shot(page, "logs-held-out")
    assert console.errors == []


async def test_the_preview_lists_what_would_apply_first_in_words(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
) -> None:
    held = await _held_rule(client, web_settings, db, run=False)  # nothing cooling down
    console = await _open(page, f"{held.base}/rules/{held.rule_id}#token={API_TOKEN}")
    await page.wait_for_selector("#validity.ok")
    await page.click("#preview-rule")
    note = page.locator("#preview-rule + .inline-note.ok")  # said beside the button
    await note.wait_for()
    outcomes = await page.locator("#preview-table tbody tr").evaluate_all(
        "(rows) => rows.map((r) => r.dataset.outcome)"
    )
    assert "would_apply" in outcomes and "held_out" in outcomes and "not_matched" in outcomes
    assert outcomes == sorted(outcomes, key=PREVIEW_ORDER.index)
    assert f"{outcomes.count('would_apply')} would apply" in await note.inner_text()
    held_row = page.locator('#preview-table tr[data-outcome="held_out"]').first
    assert (await held_row.locator("td.change").inner_text()).startswith("held out (not written)")
    unmatched = page.locator('#preview-table tr[data-outcome="not_matched"]').first
    assert "conditions not met" in await unmatched.inner_text()  # words, not codes
    assert "not_matched" not in await page.inner_text("#preview-table")
    await _shot(page, "rules-preview-sorted")
    assert console.errors == []


async def test_an_ads_timeline_is_not_titled_budget(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
) -> None:
    held = await _held_rule(client, web_settings, db, level="ad")
    (record, *_) = await records(db, batch_id=held.batch_id, outcome="applied")
    console = await _open(page, f"{held.base}/entities/{record['entity_id']}#token={API_TOKEN}")
    await page.locator("#entity-executions tbody tr").first.wait_for()
    caption = await page.inner_text("#entity-caption")
    assert not caption.startswith("Budget") and "an ad has no budget of its own" in caption
    legend = await page.inner_text("#entity-legend")
    assert "budget" not in legend and "main metric" not in legend
    assert "current_hour" in legend  # the acting rule's metric, by name
    assert await page.inner_text("#entity-insights-note") == ""  # Insights were read
    await _shot(page, "timeline-ad")
    assert console.errors == []


async def test_the_rules_list_names_the_zone_of_its_times(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    body = rule_body("Just saved", status="ACTIVE")
    created = await client.post("/api/rules", json=body, headers=AUTH)
    assert created.status == 201, await created.text()
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    row = page.locator("#rules-table tbody tr").first
    await row.wait_for()
    next_run = await row.locator("td").nth(3).inner_text()
    assert "America/New_York" in next_run  # the rule's zone, named beside its time
    assert "due now" in next_run and "ago" not in next_run  # not "1 s ago"
    await row.click()
    await page.wait_for_selector("#validity.ok")
    assert "next run due now" in await page.inner_text("#detail-version")
    assert console.errors == []


async def test_the_live_validation_waits_for_a_pause_in_typing(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    created = await client.post("/api/rules", json=rule_body("Typed"), headers=AUTH)
    rule_id = (await created.json())["id"]
    await _open(page, f"{client.make_url('/rules/' + rule_id)}#token={API_TOKEN}")
    await page.wait_for_selector("#validity.ok")
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/rules/validate" in r.url else None)
    metric = page.locator('#builder-form input[data-path="tasks[0].conditions[0].metric"]')
    await metric.fill("")
    # a key every half second: slower than a keystroke, quicker than a pause
    await metric.press_sequentially("cost_per_result", delay=500)
    while_typing = len(asked)
    await page.wait_for_function("() => document.querySelector('#validity').textContent !== ''")
    await page.wait_for_timeout(1500)  # the pause: now it asks, once
    assert while_typing <= 2, asked
    assert 1 <= len(asked) <= 3, asked


@dataclass
class Held:
    base: str
    rule_id: str
    batch_id: str


async def _held_rule(
    client: Client,
    settings: Settings,
    db: Database,
    *,
    level: str = "campaign",
    run: bool = True,
) -> Held:
    """A rule pausing act_1001's entities of ``level`` with a 50 % holdout, run once for real
    unless not ``run`` (the draw depends on the rule's id: both groups are never empty but
    once in thousands)."""
    body = rule_body("Held back", level=level, status="ACTIVE", filters=[])
    body["tasks"][0] |= {
        "conditions": [{"metric": "current_hour", "operator": ">=", "value": 0}],
        "holdout": {"percent": 50},
    }
    # a second task that matches nothing: the preview has rows of each kind
    never = {"metric": "current_hour", "operator": ">", "value": 24}
    body["tasks"].append(body["tasks"][0] | {"id": "never", "conditions": [never], "holdout": None})
    created = await client.post("/api/rules", json=body, headers=AUTH)
    assert created.status == 201, await created.text()
    rule_id = (await created.json())["id"]
    if not run:
        return Held(str(client.make_url("")).rstrip("/"), rule_id, "")
    await dispatch(settings, db, now=datetime.now(UTC))
    await work(settings)
    rows = await records(db, rule_id=rule_id)
    assert {"held_out", "applied"} <= {r["outcome"] for r in rows}
    return Held(str(client.make_url("")).rstrip("/"), rule_id, rows[0]["batch_id"])
