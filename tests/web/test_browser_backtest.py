"""The rule editor's Backtest panel in Debian's Chromium (fixtures of ``test_browser.py``).

Skipped, or failed with ``RULEENGINE_REQUIRE_BROWSER=1``, exactly as ``test_browser.py``
is. Every request the page makes must go to the app itself: the chart library is served
from the app's static files (no CDN). Screenshots land in ``test-output/web/``.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import pytest

# Importing it skips (or fails) this module as it does test_browser.py without a browser.
import test_browser
from test_browser import HOSTILE, Console, Seeded, _open, _shot
from web_helpers import API_TOKEN, AUTH, Client, rule_body

from flow import run_at
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from support import SANDBOX_NOW

pytestmark = pytest.mark.browser

#: Between the ROAS the sandbox's campaigns show as seen the next morning (×0.7–0.8) and
#: their matured ROAS: the as-seen view raises budgets the matured one does not.
ROAS_LINE = 3.8
RUN_TIMEOUT_MS = 90_000  # a cold backtest fetches its history from the sandbox first

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


async def _open_panel(
    page: Any, base: str, rule_id: str, task: str = "pause-spenders"
) -> tuple[Console, list[str]]:
    """The rule editor on ``rule_id``, its Backtest panel opened from the keyboard."""
    foreign = await _only_local(page, base)
    console = await _open(page, f"{base}/rules/{rule_id}#token={API_TOKEN}")
    await page.wait_for_function(
        "(task) => document.querySelector('#rule-editor').value.includes(task)", arg=task
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
        "budget_delta": {"USD": delta},
        "budget_total": {"USD": total},
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
    "currencies": {"act_1001": "USD"},
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
    console, foreign = await _open_panel(page, seeded.base, seeded.rule_id)
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
    # back to the view with fires, from the keyboard: a pointer click here raced Chromium's
    # focus scrolling (the page moved 43 px between mousedown and mouseup, so the click
    # landed beside the button) once the form above grew by the holdout row
    await page.focus("#bt-view-matured")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#bt-fires-chart canvas")
    assert await page.locator("#bt-entities tr.differs").count() == 1

    assert await page.evaluate("window.__xss") is None
    assert foreign == []
    assert console.errors == []


async def test_budgets_of_two_currencies_are_shown_apart_never_summed(
    page: Any, seeded: Seeded
) -> None:
    """A result over a USD and a JPY account: each currency has its own columns, summary
    figure and line; no number adds dollars to yen."""
    console, _ = await _open_panel(page, seeded.base, seeded.rule_id)
    yen = {
        **ENTITY,
        "account": "act_1004",
        "currency": "JPY",
        "entity_id": "9",
        "entity_name": "Campaign JP",
        "before": {"status": "ACTIVE", "daily_budget": 3000, "name": "Campaign JP"},
        "after": {"status": "ACTIVE", "daily_budget": 3300, "name": "Campaign JP"},
    }
    days = [
        _day("2026-11-26", {}, 50.0) | {"budget_total": {"JPY": 3000, "USD": 50.0}},
        _day("2026-11-27", {"scale": 2}, 55.0)
        | {"budget_delta": {"JPY": 300, "USD": 5.0}, "budget_total": {"JPY": 3300, "USD": 55.0}},
    ]
    view = {**MATURED, "per_day": days, "entities": [ENTITY | {"currency": "USD"}, yen]}
    both = RESULT | view | {"accounts": ["act_1001", "act_1004"], "views": {"matured": view}}
    both["currencies"] = {"act_1001": "USD", "act_1004": "JPY"}
    await page.evaluate("(r) => Backtest.show(r)", both)
    await page.wait_for_selector("#bt-budget-chart canvas")
    await page.click("#bt-per-day summary")  # the per-day table is folded away at first
    head = await page.inner_text("#bt-days-table thead")
    for column in ("Budget moved (JPY)", "Budget moved (USD)", "Budget at day end (JPY)"):
        assert column.upper() in head.upper()  # headers are shown in capitals
    moved = await page.inner_text('#bt-days-table tr[data-date="2026-11-27"]')
    assert "+¥300" in moved and "+$5.00" in moved and "¥3,300" in moved and "$55.00" in moved
    assert "305" not in moved and "3,355" not in moved  # never dollars plus yen
    summary = await page.inner_text("#bt-summary")
    assert "budget moved +$5.00 · +¥300" in summary or "budget moved +¥300 · +$5.00" in summary
    assert "¥3,000 → ¥3,300" in await page.inner_text("#bt-entities")
    assert "JPY" in await page.inner_text("#bt-budget-legend")
    await _shot(page, "rules-backtest-two-currencies")
    assert console.errors == []


async def test_a_bad_request_points_at_the_field(page: Any, seeded: Seeded) -> None:
    console, _ = await _open_panel(page, seeded.base, seeded.rule_id)
    await page.fill("#bt-days", "91")
    await page.click("#bt-run")
    await page.wait_for_selector('#bt-errors li[data-path="days"]')
    assert console.errors == []


# ---------------------------------------------------------------- against the real API


def _two_tasks() -> list[dict[str, Any]]:
    """A daily budget raise and a pause of the campaigns without purchases (two colours).

    With the paused campaigns listed too (the seeded batch paused some already), the raise
    fires every day: bars on each day and a rising budget line.
    """
    spend = {"metric": "spend", "period": "today", "operator": ">", "value": 1}
    return [
        {
            "id": "scale",
            "conditions": [spend],
            "action": {"type": "increase_budget", "percent": 10, "max_budget": 100000},
            "cooldown_minutes": 1440,
        },
        {
            "id": "pause-spenders",
            "conditions": [
                spend,
                {
                    "metric": "purchase_roas.omni_purchase",
                    "period": "last_7d",
                    "operator": "<",
                    "value": 0.5,
                },
            ],
            "action": {"type": "pause"},
            "cooldown_minutes": 60,
        },
    ]


async def test_a_backtest_runs_from_the_rule_editor_before_saving(
    page: Any, seeded: Seeded, client: Client, db: Database
) -> None:
    console, foreign = await _open_panel(page, seeded.base, seeded.rule_id)
    # an unsaved edit: the backtest runs on the editor's text, not on the stored rule
    await page.evaluate(
        """(tasks) => {
            const editor = document.querySelector('#rule-editor');
            const status = ['ACTIVE', 'PAUSED'];
            const filters = [{field: 'effective_status', operator: 'IN', value: status}];
            editor.value = JSON.stringify({...JSON.parse(editor.value), filters, tasks}, null, 2);
            const text = document.querySelector('#bt-progress-text');
            window.__progress = [];
            new MutationObserver(() => window.__progress.push(text.textContent))
                .observe(text, {childList: true, characterData: true, subtree: true});
        }""",
        _two_tasks(),
    )
    await page.fill("#bt-days", "7")
    await page.focus("#bt-run")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#bt-result:not(.hidden)", timeout=RUN_TIMEOUT_MS)
    assert await page.locator("#bt-failed").is_hidden(), await page.inner_text("#bt-failed")
    assert any("of 7 days" in text for text in await page.evaluate("window.__progress"))

    backtest_id = await page.get_attribute("#backtest-block", "data-backtest-id")
    job = await (await client.get(f"/api/backtests/{backtest_id}", headers=AUTH)).json()
    assert job["status"] == "done"
    assert job["request"]["days"] == 7
    result = job["result"]
    assert result["days"] == 7
    # the unsaved edit was what ran: both tasks, not the stored rule's one
    await page.wait_for_selector("#bt-fires-chart canvas")
    await page.wait_for_selector("#bt-budget-chart canvas")
    legend = page.locator("#bt-fires-legend .legend-item")
    assert [await legend.nth(i).get_attribute("data-task") for i in range(2)] == [
        "scale",
        "pause-spenders",
    ]
    view = result["views"][result["view"]]
    assert view["fires"], "the rule should fire on the sandbox's spending campaigns"
    rows = page.locator("#bt-entities tbody tr")
    await rows.first.wait_for()
    assert await rows.count() == len(view["entities"])
    first = view["entities"][0]
    assert first["entity_id"] in await rows.first.inner_text()
    summary = await page.inner_text("#bt-summary")
    assert f"{len(view['fires']):,} fire" in summary
    assert f"{result['graph_calls']:,} Graph call" in summary
    assert await page.locator("#bt-caveats li").count() == len(result["caveats"])
    # the charts' numbers, as a table (keyboard: the summary opens it)
    await page.focus("#bt-per-day summary")
    await page.keyboard.press("Enter")
    days = page.locator("#bt-days-table tbody tr")
    await days.first.wait_for()
    assert await days.count() == 7 == len(view["per_day"])
    for i, day in enumerate(view["per_day"]):
        cells = await days.nth(i).locator("td").all_inner_texts()
        assert cells[:2] == [day["date"], f"{day['fires']:,}"]
    await _shot(page, "rules-backtest")

    # the view toggle: the other view, or why there is none
    toggle = page.locator("#bt-view-as_seen")
    if result["views"]["as_seen"] is None:
        assert await toggle.is_disabled()
        assert "As seen is off" in await page.inner_text("#bt-view-why")
        await page.click("#bt-view-matured")
        assert await page.get_attribute("#bt-view-matured", "aria-pressed") == "true"
    else:
        other = "matured" if result["view"] == "as_seen" else "as_seen"
        await page.click(f"#bt-view-{other}")
        assert await page.get_attribute(f"#bt-view-{other}", "aria-pressed") == "true"
        other_fires = len(result["views"][other]["fires"])
        assert f"{other_fires:,} fire" in await page.inner_text("#bt-summary")
    stored = await db["backtests"].count_documents({})
    assert stored == 1  # one run, one backtest

    # closing the panel stops reading; reopening shows the last result again
    await page.keyboard.press("Escape")
    await page.wait_for_selector("#backtest-block.hidden", state="attached")
    assert await page.evaluate("document.activeElement.id") == "backtest-toggle"
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#bt-fires-chart canvas")
    assert foreign == []
    assert console.errors == []


async def test_an_invalid_rule_is_refused_with_its_json_paths(page: Any, seeded: Seeded) -> None:
    console, _ = await _open_panel(page, seeded.base, seeded.rule_id)
    await page.evaluate(
        """() => {
            const editor = document.querySelector('#rule-editor');
            const rule = JSON.parse(editor.value);
            rule.tasks[0].conditions[0].metric = 'no_such_metric';
            editor.value = JSON.stringify(rule, null, 2);
        }"""
    )
    await page.click("#bt-run")
    path = "rule.tasks[0].conditions[0].metric"
    error = page.locator(f'#bt-errors li[data-path="{path}"]')
    await error.wait_for()
    text = await error.inner_text()
    line = int(text.split("line ", 1)[1].split()[0])
    editor = await page.input_value("#rule-editor")
    assert '"no_such_metric"' in editor.splitlines()[line - 1]  # the line it names
    await error.focus()
    await page.keyboard.press("Enter")  # goes there
    assert await page.evaluate("document.activeElement.id") == "rule-editor"
    assert await page.locator("#bt-result").is_hidden()
    # the refused request is the only console line (the browser logs the 422)
    assert all("status of 422" in e for e in console.errors), console.errors


async def test_a_failed_backtest_shows_its_error(
    page: Any, seeded: Seeded, client: Client, db: Database, web_settings: Settings
) -> None:
    # registered (in the store: the API would ask Meta first), so the rule is valid, but
    # Graph refuses its token: nothing to backtest
    await CredentialStore(db, load_key(web_settings)).add(
        "act_4242", "EAAGnotarealtoken4242424242", now=SANDBOX_NOW
    )
    console, _ = await _open_panel(page, seeded.base, seeded.rule_id)
    await page.evaluate(
        """() => {
            const editor = document.querySelector('#rule-editor');
            editor.value = JSON.stringify({...JSON.parse(editor.value), ad_accounts: ['act_4242']});
        }"""
    )
    await page.click("#bt-run")
    failure = page.locator("#bt-failed")
    await failure.wait_for(timeout=RUN_TIMEOUT_MS)
    text = await failure.inner_text()
    assert text.startswith("The backtest failed: ") and "act_4242" in text, text
    backtest_id = await page.get_attribute("#backtest-block", "data-backtest-id")
    job = await (await client.get(f"/api/backtests/{backtest_id}", headers=AUTH)).json()
    assert (job["status"], job["error"]) == ("failed", text.removeprefix("The backtest failed: "))
    assert await page.locator("#bt-result").is_hidden()
    assert await page.locator("#bt-progress").is_hidden()
    assert await page.locator("#bt-run").is_enabled()  # ready to run again
    assert console.errors == []


# ---------------------------------------------------------------- as seen, against the real API


def _probe_instants(now: datetime) -> tuple[datetime, ...]:
    """03:00, 11:00 and 19:00 in New York on 4 days ending 9 days before ``now``."""
    zone = ZoneInfo("America/New_York")
    today = now.astimezone(zone).date()
    return tuple(
        datetime.combine(today - timedelta(days=back), time(hour), zone).astimezone(UTC)
        for back in (12, 11, 10, 9)
        for hour in (3, 11, 19)
    )


async def test_the_as_seen_view_toggles_and_shows_where_it_differs(
    page: Any,
    client: Client,
    web_settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
) -> None:
    # the engine's own records of act_1001, with conversions seen as they were then: enough
    # for the backtest to learn the account's lag curve
    await sandbox.set_insights(attribution_lag={"enabled": True})
    probes = [
        {"metric": metric, "period": period, "operator": ">", "value": 1e12}
        for metric in ("actions.omni_add_to_cart", "purchase_roas.omni_purchase")
        for period in ("yesterday", "last_3d", "last_7d")
    ]
    await run_at(web_settings, db, sandbox, probes, _probe_instants(datetime.now(UTC)))
    await sandbox.set_clock(SANDBOX_NOW)
    body = rule_body(
        "Scale the weak",
        filters=[],
        tasks=[
            {
                "id": "scale-weak",
                "conditions": [
                    {
                        "metric": "purchase_roas.omni_purchase",
                        "period": "last_3d",
                        "operator": "<",
                        "value": ROAS_LINE,
                    }
                ],
                "action": {"type": "increase_budget", "percent": 5, "max_budget": 100000},
                "cooldown_minutes": 1440,
            }
        ],
    )
    created = await (await client.post("/api/rules", json=body, headers=AUTH)).json()
    base = str(client.make_url("")).rstrip("/")
    console, foreign = await _open_panel(page, base, created["id"], "scale-weak")
    await page.fill("#bt-days", "14")
    await page.select_option("#bt-as-seen", "on")
    await page.click("#bt-run")
    await page.wait_for_selector("#bt-result:not(.hidden)", timeout=RUN_TIMEOUT_MS)
    backtest_id = await page.get_attribute("#backtest-block", "data-backtest-id")
    job = await (await client.get(f"/api/backtests/{backtest_id}", headers=AUTH)).json()
    result = job["result"]
    assert job["request"]["as_seen"] is True
    matured, as_seen = result["views"]["matured"], result["views"]["as_seen"]
    assert as_seen is not None, result["as_seen"]
    differs = result["differs_as_seen"]
    assert differs, "as-seen ROAS is below the line where the matured one is not"
    assert result["view"] == "as_seen"
    assert await page.get_attribute("#bt-view-as_seen", "aria-pressed") == "true"
    assert f"{len(as_seen['fires']):,} fire" in await page.inner_text("#bt-summary")
    await page.wait_for_selector("#bt-fires-chart canvas")
    # the fires in one view only: listed, and their entities highlighted
    assert await page.locator("#bt-differs tbody tr").count() == len(differs)
    odd = {d["entity_id"] for d in differs}
    shown = {e["entity_id"] for e in as_seen["entities"]} & odd
    assert await page.locator("#bt-entities tr.differs").count() == len(shown) > 0
    await _shot(page, "rules-backtest-as-seen")

    # toggled from the keyboard: the matured view's numbers
    await page.focus("#bt-view-matured")
    await page.keyboard.press("Enter")
    assert await page.get_attribute("#bt-view-matured", "aria-pressed") == "true"
    assert await page.get_attribute("#bt-view-as_seen", "aria-pressed") == "false"
    summary = await page.inner_text("#bt-summary")
    assert f"{len(matured['fires']):,} fire" in summary
    assert len(matured["fires"]) < len(as_seen["fires"])
    rows = page.locator("#bt-entities tbody tr")
    if matured["fires"]:
        await page.wait_for_selector("#bt-fires-chart canvas")
        assert await rows.count() == len(matured["entities"])
    else:
        assert "would not have fired" in await page.inner_text("#bt-empty")
    await _shot(page, "rules-backtest-matured")
    assert foreign == []
    assert console.errors == []


async def test_closing_the_panel_stops_reading_the_backtest(
    page: Any, seeded: Seeded, client: Client
) -> None:
    console, _ = await _open_panel(page, seeded.base, seeded.rule_id)
    await page.fill("#bt-days", "90")  # cold: the longest to fetch
    await page.click("#bt-run")
    await page.wait_for_selector("#backtest-block[data-backtest-id]")
    backtest_id = await page.get_attribute("#backtest-block", "data-backtest-id")
    reads = (
        f"performance.getEntriesByType('resource').filter(e => e.name.includes('{backtest_id}'))"
    )
    at_close = await page.evaluate(
        f"() => {{ document.querySelector('#bt-close').click(); return {reads}.length; }}"
    )
    # the backtest goes on in the web process …
    while (job := await (await client.get(f"/api/backtests/{backtest_id}", headers=AUTH)).json())[
        "status"
    ] not in ("done", "failed"):
        await page.wait_for_timeout(200)
    # … but the page stopped asking: at most the read in flight at the close completed
    assert await page.evaluate(f"() => {reads}.length") <= at_close + 1
    await page.keyboard.press("Enter")  # focus went back to the Backtest button: reopen
    await page.wait_for_selector("#backtest-block:not(.hidden)")
    assert await page.locator("#bt-result").is_hidden()
    assert await page.locator("#bt-progress").is_hidden()
    assert await page.locator("#bt-run").is_enabled()
    assert job["status"] == "done", job["error"]
    assert console.errors == []
