"""Sparklines in the browser: fires per day on Rules, p95 per day on Benchmark, occurrences
per hour on Errors — a uPlot canvas each, with the numbers in its text alternative.

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
from web_helpers import API_TOKEN, AUTH, Client, insert_batch, rule_body, run_batch

from ruleengine import constants as c
from ruleengine.errors import ErrorReport
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog

pytestmark = pytest.mark.browser


async def _label(tab: Any, selector: str) -> str:
    spark = tab.locator(selector)
    await spark.wait_for()
    assert await spark.locator("canvas").count() >= 1
    assert await spark.get_attribute("role") == "img"
    return str(await spark.get_attribute("aria-label"))


async def test_rules_benchmark_and_errors_draw_their_sparklines(
    page: Any,  # noqa: F811
    client: Client,
    web_settings: Settings,
    db: Database,
    redis: Any,
) -> None:
    body = rule_body()
    created = await (await client.post("/api/rules", json=body, headers=AUTH)).json()
    rule_id = created["id"]
    batch_id = await run_batch(
        web_settings,
        db,
        redis,
        rule_id=rule_id,
        version=1,
        rule=parse_rule(body),
        account="act_1001",
    )
    ran = await db[c.BATCHES].find_one({"_id": batch_id})
    assert ran is not None and ran["applied_count"] > 0
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    await insert_batch(
        db,
        batch_id="two-days-ago",
        rule_id=rule_id,
        rule_name=body["name"],
        started_at=today - timedelta(days=2),
        duration_s=2.5,
    )
    log = ErrorLog(db)
    now = datetime.now(UTC)
    for hours_ago in (1, 1, 0):
        await log.record(
            ErrorReport(function="writer.update", message="campaign 1202000111 failed"),
            now=now - timedelta(hours=hours_ago),
        )
    base = str(client.make_url("")).rstrip("/")

    console = await _open(page, f"{base}/#token={API_TOKEN}")
    label = await _label(page, f'#rules-table td.fires-cell[data-rule-id="{rule_id}"] .sparkline')
    earlier = await db[c.BATCHES].find_one({"_id": "two-days-ago"})
    assert earlier is not None
    fires = [0] * 11 + [earlier["applied_count"], 0, ran["applied_count"]]
    assert label == "fires per day, last 14 days: " + ", ".join(map(str, fires))
    await _shot(page, "rules-sparklines")

    await page.goto(f"{base}/benchmark")
    label = await _label(page, f'#slow-table td.p95-cell[data-rule-id="{rule_id}"] .sparkline')
    head, values = label.split(": ")
    assert head == "p95 batch duration per day, last 14 days"
    p95 = values.split(", ")
    assert p95[:11] == ["none"] * 11 and p95[12] == "none"
    assert p95[11] == "2.50 s"  # the batch inserted two days ago
    assert p95[13] != "none"  # today's engine batch
    await _shot(page, "benchmark-sparklines")

    await page.goto(f"{base}/errors")
    label = await _label(page, "#errors-table td.hourly-cell .sparkline")
    head, values = label.split(": ")
    assert head == "occurrences per hour, last 48 hours"
    assert values.split(", ") == ["0"] * 46 + ["2", "1"]
    await _shot(page, "errors-sparklines")
    assert console.errors == []
