"""Money as a person reads it, on every screen where people decide and audit: Approvals,
Rule Logs, the undo plan and the entity timeline show a 10 % cut of a 12000 budget as
``$120.00 → $108.00 (−10 %)`` on a USD account and ``¥12,000 → ¥10,800 (−10 %)`` on a JPY
one, each beside the account's name — changes the real engine made (or proposed) in the
Graph sandbox. Screenshots land in ``test-output/web/``.

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
from web_helpers import API_TOKEN, AUTH, Client

from flow import campaign_ids, dispatch, records, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database

pytestmark = pytest.mark.browser

USD = {"change": "$120.00 → $108.00 (−10 %)", "account": "Demo Store US (act_1001)"}
JPY = {"change": "¥12,000 → ¥10,800 (−10 %)", "account": "Demo Store JP (act_1004)"}
# an amount of money on a USD and a JPY account is given per currency (docs/rules.md)
HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": {"USD": 0, "JPY": 0}}
# per account: the campaign a rule cuts at once, and the one whose cut waits for approval
CUT = {"act_1001": "[AUTO] Retargeting US 1", "act_1004": "[AUTO] Prospecting JP 1"}
GATED = {"act_1001": "[AUTO] Prospecting US 1", "act_1004": "Brand Awareness JP"}


def trim_rule(name: str, campaigns: dict[str, str], **task: Any) -> dict[str, Any]:
    """-10 % of the daily budget of ``campaigns`` on the USD and the JPY account."""
    return {
        "name": name,
        "format": 2,
        "level": "campaign",
        "ad_accounts": sorted(campaigns),
        "filters": [{"field": "name", "operator": "IN", "value": sorted(campaigns.values())}],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "UTC",
        "tasks": [
            {
                "id": "trim",
                "conditions": [HAS_BUDGET],
                "action": {"type": "decrease_budget", "percent": 10},
                "cooldown_minutes": 0,
                **task,
            }
        ],
    }


@dataclass
class Trimmed:
    """The real engine cut a 12000 budget by 10 % on each account, and proposed another cut."""

    base: str
    campaigns: dict[str, str]  # account → the id of the campaign cut at once
    batches: dict[str, str]  # account → the batch that cut it


@pytest.fixture
async def trimmed(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> Trimmed:
    ids: dict[str, str] = {}
    for account in CUT:
        names = await campaign_ids(sandbox, account)
        for campaign in (CUT[account], GATED[account]):
            await sandbox.ads_manager_change(names[campaign], daily_budget=12000)
        ids[account] = names[CUT[account]]
    for body in (
        trim_rule("Trim 10 %", CUT),
        trim_rule("Trim with approval", GATED, approval={"when": "always"}),
    ):
        answer = await client.post("/api/rules", json=body | {"status": "ACTIVE"}, headers=AUTH)
        assert answer.status == 201, await answer.text()
    await dispatch(web_settings, db, now=datetime.now(UTC))
    await work(web_settings)
    batches = {}
    for account, campaign in ids.items():
        (record,) = await records(db, entity_id=campaign, outcome="applied")
        assert (record["before"], record["after"]) == (12000, 10800)
        batches[account] = record["batch_id"]
    return Trimmed(str(client.make_url("")).rstrip("/"), ids, batches)


async def test_approvals_show_the_change_in_the_accounts_currency_with_its_name(
    page: Any,  # noqa: F811
    trimmed: Trimmed,
) -> None:
    console = await _open(page, f"{trimmed.base}/approvals#token={API_TOKEN}")
    rows = page.locator("#pending-table tbody tr")
    await page.wait_for_function(
        "() => document.querySelectorAll('#pending-table tbody tr').length === 2"
    )
    texts = await rows.all_inner_texts()
    for shown in (USD, JPY):
        (row,) = [t for t in texts if shown["account"] in t]
        assert shown["change"] in row
    assert not [t for t in texts if "12000" in t or "10800" in t]  # no minor units
    await _shot(page, "approvals-money")
    assert console.errors == []


async def test_rule_logs_and_the_undo_plan_show_money_and_account_names(
    page: Any,  # noqa: F811
    trimmed: Trimmed,
) -> None:
    console = await _open(page, f"{trimmed.base}/logs#token={API_TOKEN}")
    for account, shown in (("act_1001", USD), ("act_1004", JPY)):
        batch = page.locator(f'tr.batch-row[data-batch-id="{trimmed.batches[account]}"]')
        assert shown["account"] in await batch.locator("td.account").inner_text()
        assert await batch.locator("td.level").inner_text() == "campaigns"
        await batch.click()
        detail = page.locator(f'tr.detail-row[data-batch-id="{trimmed.batches[account]}"]')
        change = detail.locator(f'tr[data-entity-id="{trimmed.campaigns[account]}"] td.change')
        assert await change.inner_text() == "daily budget: " + shown["change"]
        await detail.locator("button.undo-open").click()
        plan = detail.locator("section.undo-plan table.undo-changes")
        await plan.wait_for()
        assert shown["change"] in await plan.locator("td.change").inner_text()
        assert shown["account"] in await detail.locator(".undo-account").inner_text()
        await _shot(page, f"logs-money-{account}")
    assert console.errors == []


async def test_the_timeline_shows_money_and_the_account_name(
    page: Any,  # noqa: F811
    trimmed: Trimmed,
) -> None:
    for account, shown in (("act_1001", USD), ("act_1004", JPY)):
        campaign = trimmed.campaigns[account]
        console = await _open(page, f"{trimmed.base}/entities/{campaign}#token={API_TOKEN}")
        await page.locator("#entity-executions tbody tr").first.wait_for()
        executions = await page.locator("#entity-executions td.change").all_inner_texts()
        assert "daily budget: " + shown["change"] in executions
        changes = await page.locator("#changes-table td.change").all_inner_texts()
        assert shown["change"] in changes
        assert shown["account"] in await page.inner_text("#entity-summary")
        await _shot(page, f"timeline-money-{account}")
        assert console.errors == []
