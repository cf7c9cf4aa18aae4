"""The 4 screens in Debian's Chromium, driven by Playwright against the real app and servers.

Skipped where ``/usr/bin/chromium`` or the playwright package is absent
(``apt-get install -y chromium``), unless ``RULEENGINE_REQUIRE_BROWSER=1``: then each
test fails saying what is missing (``.ci/run`` sets it, so CI cannot pass without a
browser). ``playwright install`` is never needed. Screenshots land in ``test-output/web/``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from web_helpers import (
    API_TOKEN,
    AUTH,
    Client,
    fire_followup,
    insert_batch,
    rule_body,
    run_batch,
    run_followup_rule,
)

from ruleengine import constants as c
from ruleengine.errors import ErrorReport
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.records import BatchStore
from ruleengine.store.rollups import RollupStore

CHROMIUM = Path("/usr/bin/chromium")
# Read at import: the autouse fixture of tests/conftest.py clears RULEENGINE_* for each test.
REQUIRE_BROWSER = os.environ.get("RULEENGINE_REQUIRE_BROWSER", "0") not in ("", "0")


def _missing() -> str | None:
    """What the browser tests lack on this machine, or None."""
    if not CHROMIUM.exists():
        return f"Debian's Chromium is not at {CHROMIUM} (apt-get install -y chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


MISSING = _missing()
if MISSING is not None and not REQUIRE_BROWSER:
    pytest.skip(f"browser tests need a browser: {MISSING}", allow_module_level=True)

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _browser_required() -> None:
    """With RULEENGINE_REQUIRE_BROWSER=1 a missing browser fails every test, loudly."""
    if MISSING is not None:
        pytest.fail(
            f"RULEENGINE_REQUIRE_BROWSER=1 but {MISSING}; install it, or unset the variable"
            " to skip the browser tests",
            pytrace=False,
        )


ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = Path(__file__).resolve().parents[2] / "test-output" / "web"
HOSTILE = '<img src=x onerror="window.__xss=1">Evil'
TIMEOUT_MS = 10_000
BROWSER_ZONE = "Asia/Jakarta"  # the page shows times in the browser's zone, not UTC


@dataclass
class Seeded:
    """What the screens show: a rule, its real batch, a running batch and an error group."""

    base: str
    rule_id: str
    batch_id: str
    error_id: str


@dataclass
class Console:
    """Console errors and uncaught exceptions of a page."""

    errors: list[str] = field(default_factory=list)

    def watch(self, page: Any) -> None:
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))


@pytest.fixture
async def seeded(client: Client, web_settings: Settings, db: Database, redis: Any) -> Seeded:
    body = rule_body(name=f"Pause spenders {HOSTILE}")
    created = await (await client.post("/api/rules", json=body, headers=AUTH)).json()
    batch_id = await run_batch(
        web_settings,
        db,
        redis,
        rule_id=created["id"],
        version=1,
        rule=parse_rule(body),
        account="act_1001",
    )
    await insert_batch(
        db,
        batch_id="running-1",
        rule_id=created["id"],
        rule_name=body["name"],
        started_at=datetime.now(UTC),
        status="RUNNING",
        total=8,
    )
    error_id = await ErrorLog(db).record(
        ErrorReport(
            function="writer.update",
            message=f"campaign 1202000111 {HOSTILE} failed",
            params={"path": "/1202000111", "body": {"name": HOSTILE}},
            response={"error": {"code": 100, "message": "Invalid parameter"}},
        ),
        now=datetime.now(UTC),
    )
    return Seeded(str(client.make_url("")).rstrip("/"), created["id"], batch_id, error_id)


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            context = await browser.new_context(
                viewport={"width": 1280, "height": 900}, timezone_id=BROWSER_ZONE
            )
            page = await context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            yield page
        finally:
            await browser.close()


async def _open(page: Any, url: str) -> Console:
    console = Console()
    console.watch(page)
    await page.goto(url)
    await page.wait_for_load_state("networkidle")
    return console


async def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def test_every_screen_loads_without_console_errors(page: Any, seeded: Seeded) -> None:
    console = await _open(page, f"{seeded.base}/#token={API_TOKEN}")
    assert page.url.endswith("/")  # the token left the address bar …
    assert await page.evaluate("localStorage.getItem('ruleengine.apiToken')") == API_TOKEN
    await page.wait_for_selector("#rules-table tbody tr")
    # … and a hostile name is shown as text, never run as HTML.
    assert HOSTILE in await page.inner_text("#rules-table")
    assert await page.evaluate("window.__xss") is None
    await _shot(page, "rules")
    for path, ready, name in (
        ("/logs", "#batches-table tbody tr", "logs"),
        ("/benchmark", "#slow-table tbody tr", "benchmark"),
        ("/errors", "#errors-table tbody tr", "errors"),
    ):
        await page.goto(seeded.base + path)
        await page.wait_for_selector(ready)
        await page.wait_for_load_state("networkidle")
        await _shot(page, name)
    await page.wait_for_selector("#errors-table tbody tr .message-cell")
    assert HOSTILE in await page.inner_text("#errors-table")
    assert await page.evaluate("window.__xss") is None
    assert console.errors == []


async def test_the_benchmark_screen_shows_daily_rollups_of_all_rules_or_one(
    page: Any, seeded: Seeded, db: Database
) -> None:
    yesterday = datetime.now(UTC).replace(hour=1, minute=0) - timedelta(days=1)
    for rule_id, name in ((seeded.rule_id, "Pause spenders"), ("other", HOSTILE)):
        for n in range(2):
            await insert_batch(
                db,
                batch_id=f"{rule_id}-day-{n}",
                rule_id=rule_id,
                rule_name=name,
                started_at=yesterday + timedelta(hours=n),
                duration_s=1.5 + n,
            )
    await RollupStore(db).roll_up(yesterday.date(), now=datetime.now(UTC))
    console = await _open(page, f"{seeded.base}/benchmark#token={API_TOKEN}")  # a costly read
    rows = page.locator("#daily-table tbody tr")
    await page.wait_for_function(
        "() => document.querySelectorAll('#daily-table tbody tr').length === 2"
    )
    assert HOSTILE in await page.inner_text("#daily-table")
    await page.locator(f'#slow-table button[data-daily="{seeded.rule_id}"]').click()
    await page.wait_for_function(
        "() => document.querySelectorAll('#daily-table tbody tr').length === 1"
    )
    assert await rows.first.get_attribute("data-rule-id") == seeded.rule_id
    assert await rows.first.get_attribute("data-day") == yesterday.date().isoformat()
    cells = await rows.first.locator("td").all_inner_texts()
    assert cells[2] == "2" and cells[-2] == "2.50 s"  # 2 batches; max 2.5 s
    await _shot(page, "benchmark-daily")
    await page.click("#daily-all")
    await page.wait_for_function(
        "() => document.querySelectorAll('#daily-table tbody tr').length === 2"
    )
    assert await page.evaluate("window.__xss") is None
    assert console.errors == []


async def test_expanding_a_batch_shows_its_conditions(page: Any, seeded: Seeded) -> None:
    console = await _open(page, f"{seeded.base}/logs")
    running = page.locator('tr.batch-row[data-batch-id="running-1"]')
    await running.locator(".progress").wait_for()
    row = page.locator(f'tr.batch-row[data-batch-id="{seeded.batch_id}"]')
    await row.click()
    detail = page.locator("tr.detail-row table.executions")
    await detail.wait_for()
    first = detail.locator("ul.conditions").first
    text = await first.inner_text()
    assert "spend (today) > $1.00" in text  # money in the account's currency
    assert "seen" in text
    assert "✓" in text or "✗" in text
    assert "ACTIVE → PAUSED" in await detail.inner_text()
    await _shot(page, "logs-expanded")
    await page.select_option("#filter-status", "RUNNING")
    await page.wait_for_function(
        "() => document.querySelectorAll('#batches-table tbody tr.batch-row').length === 1"
    )
    assert console.errors == []


async def test_a_batch_fetching_big_account_insights_shows_the_reports_percent(
    page: Any, seeded: Seeded, db: Database
) -> None:
    await BatchStore(db).progress("running-1", done=0, total=10, phase="fetch", percent=40.0)
    console = await _open(page, f"{seeded.base}/logs")
    running = page.locator('tr.batch-row[data-batch-id="running-1"]')
    await running.locator(".progress").wait_for()
    assert "fetching Insights 40%" in await running.inner_text()
    assert await running.locator(".progress").get_attribute("aria-valuenow") == "40"
    assert console.errors == []


async def test_an_invalid_edit_shows_the_error_at_its_path(page: Any, seeded: Seeded) -> None:
    console = await _open(page, f"{seeded.base}/rules/{seeded.rule_id}#token={API_TOKEN}")
    editor = page.locator("#rule-editor")
    await page.wait_for_function("() => document.querySelector('#rule-editor').value.length > 0")
    await page.wait_for_selector("#validity.ok")
    definition = await editor.input_value()
    broken = definition.replace('"cooldown_minutes": 60', '"cooldown_minutes": -5')
    assert broken != definition
    await editor.fill(broken)
    error = page.locator('li.field-error[data-path="tasks[0].cooldown_minutes"]')
    await error.wait_for()
    assert "greater than or equal to 0" in await error.inner_text()
    assert "line" in await error.locator(".line").inner_text()
    await _shot(page, "rules-invalid-edit")
    await page.click("#save-rule")  # refused with the same error, said beside the button
    note = page.locator("#save-rule + .inline-note.error")
    await note.wait_for()
    assert "not saved: 1 problem(s)" in await note.inner_text()
    versions = page.locator("#versions-table tbody tr")
    assert await versions.count() == 1
    # 422 answers show up as failed resource loads; anything else is a real error.
    assert [e for e in console.errors if "422" not in e] == []


async def test_preview_renders_would_be_records(page: Any, seeded: Seeded) -> None:
    await _open(page, f"{seeded.base}/rules/{seeded.rule_id}#token={API_TOKEN}")
    await page.wait_for_selector("#validity.ok")
    await page.click("#preview-rule")
    table = page.locator("#preview-table tbody tr")
    await table.first.wait_for()
    assert "nothing was written" in await page.inner_text("#preview-meta")
    assert "seen" in await table.first.locator("ul.conditions").inner_text()
    await _shot(page, "rules-preview")


async def test_resolving_an_error_group_changes_its_status(
    page: Any, seeded: Seeded, db: Database
) -> None:
    console = await _open(page, f"{seeded.base}/errors#token={API_TOKEN}")
    row = page.locator(f'tr.group-row[data-group-id="{seeded.error_id}"]')
    await row.locator('button[data-action="resolved"]').click()
    await page.wait_for_selector(
        f'tr.group-row[data-group-id="{seeded.error_id}"][data-status="resolved"]'
    )
    assert "resolved" in await row.locator(".group-status").inner_text()
    assert "by api" in await row.locator(".group-status").inner_text()  # who resolved it
    stored = await db["error_log"].find_one({})
    assert stored is not None
    assert stored["status"] == "resolved"
    await row.get_by_role("button", name="Samples (1)").click()
    sample = page.locator("tr.detail-row .sample")
    await sample.wait_for()
    assert "Invalid parameter" in await sample.inner_text()
    await _shot(page, "errors-resolved")
    assert console.errors == []


async def test_create_edit_pause_and_roll_back_from_the_editor(
    page: Any, client: Client, db: Database
) -> None:
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    await page.click("#new-rule")
    await page.wait_for_selector("#validity.ok")
    await page.click("#save-rule")  # "Create"
    await page.wait_for_selector("#versions-table tbody tr")
    rule = await db["rules"].find_one({"name": "New rule"})
    assert rule is not None
    assert (rule["status"], rule["version"]) == ("PAUSED", 1)

    editor = page.locator("#rule-editor")
    await editor.fill((await editor.input_value()).replace('"value": 50', '"value": 75'))
    await page.wait_for_selector("#validity.ok")
    await page.click("#save-rule")
    await page.wait_for_selector("#versions-table tbody tr:nth-child(2)")
    await page.click("#activate-rule")
    await page.wait_for_selector("#detail-status .status-active")
    await page.click('#versions-table button[data-version="1"]')
    await page.wait_for_function(
        "() => document.querySelector('#detail-version').textContent.startsWith('version 1 of 2')"
    )
    rule = await db["rules"].find_one({"_id": rule["_id"]})
    assert rule is not None
    assert (rule["status"], rule["version"], rule["latest_version"]) == ("ACTIVE", 1, 2)
    assert rule["definition"]["tasks"][0]["conditions"][0]["value"] == 50
    await _shot(page, "rules-rolled-back")
    assert console.errors == []


@dataclass
class FollowupBatch:
    """A real run that paused two campaigns: one follow-up already ran, one still waits."""

    base: str
    batch_id: str
    done: dict[str, Any]
    waiting: dict[str, Any]


@pytest.fixture
async def followup_batch(
    client: Client, web_settings: Settings, db: Database, redis: Any
) -> FollowupBatch:
    _, batch_id = await run_followup_rule(web_settings, db)
    done, waiting = [d async for d in db[c.FOLLOWUPS].find({}).sort("_id")]
    await fire_followup(web_settings, redis, done["_id"])
    # whatever a reason holds reaches the page as text only
    await db[c.FOLLOWUPS].update_one({"_id": waiting["_id"]}, {"$set": {"reason": HOSTILE}})
    return FollowupBatch(str(client.make_url("")).rstrip("/"), batch_id, done, waiting)


def _local(when: datetime) -> str:
    return when.astimezone(ZoneInfo(BROWSER_ZONE)).strftime("%Y-%m-%d %H:%M:%S")


async def test_an_expanded_batch_shows_each_follow_up_under_its_execution(
    page: Any, followup_batch: FollowupBatch
) -> None:
    seeded = followup_batch
    console = await _open(page, f"{seeded.base}/logs")
    await page.locator(f'tr.batch-row[data-batch-id="{seeded.batch_id}"]').click()
    waiting = page.locator(f'tr.followup-row[data-followup-key="{seeded.waiting["_id"]}"]')
    await waiting.wait_for()
    # right under the execution of the same campaign
    above = waiting.locator("xpath=preceding-sibling::tr[1]")
    assert await above.get_attribute("data-entity-id") == seeded.waiting["entity_id"]
    text = await waiting.inner_text()
    assert "then: activate" in text
    assert _local(seeded.waiting["due_at"]) in text  # local browser time
    assert re.search(r"\(in (\d+ min|1 h)\)", text), text  # relative to the browser's clock
    assert HOSTILE in text  # the live reason, shown as text
    assert await waiting.locator(".badge").inner_text() == "scheduled"
    assert await waiting.locator(".followup-run").count() == 0

    done = page.locator(f'tr.followup-row[data-followup-key="{seeded.done["_id"]}"]')
    # the live status, not the "scheduled" of the record's snapshot
    assert await done.locator(".followup-plan .badge").inner_text() == "done"
    run = await done.locator(".followup-run").inner_text()
    assert "then: activate — done, ran on time" in run
    assert "status: PAUSED → ACTIVE" in run
    await _shot(page, "logs-followups")
    assert await page.evaluate("window.__xss") is None
    assert console.errors == []


async def test_a_rule_with_issues_shows_its_status_and_message(
    page: Any, client: Client, db: Database
) -> None:
    for name in ("Good", "Bad"):
        assert (await client.post("/api/rules", json=rule_body(name), headers=AUTH)).status == 201
    bad = await db[c.RULES].find_one({"name": "Bad"})
    assert bad is not None
    issue = {"message": "timezone: unknown timezone 'Mars/Olympus'", "at": datetime.now(UTC)}
    await db[c.RULES].update_one(
        {"_id": bad["_id"]},
        {"$set": {"definition.timezone": "Mars/Olympus", "status": "HAS_ISSUES", "issue": issue}},
    )
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    row = page.locator(f'#rules-table tr[data-rule-id="{bad["_id"]}"]')
    await row.locator(".status-has_issues").wait_for()
    assert "Mars/Olympus" in await row.locator(".issue").inner_text()
    assert await page.locator("#rules-table tbody tr").count() == 2
    await row.click()
    await page.wait_for_selector("#detail-issue:not(.hidden)")
    assert "Mars/Olympus" in await page.inner_text("#detail-issue")
    assert await page.locator("#activate-rule").is_visible()
    # the editor's live validation points at the field (its 422 is the only console line)
    await page.wait_for_selector('#field-errors li[data-path="timezone"]')
    await _shot(page, "rules-has-issues")
    assert all("status of 422" in e for e in console.errors), console.errors
