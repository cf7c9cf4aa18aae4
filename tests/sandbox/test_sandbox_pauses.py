"""A pause stops delivery from that instant: what was delivered before it stays in every period."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sandbox_helpers import Sandbox

FIELDS = "spend,impressions,clicks,actions,action_values,purchase_roas"


async def _campaign(box: Sandbox, name_part: str) -> str:
    reply = await box.get("/act_1001/campaigns", fields="id,name", limit="100")
    return str(next(c["id"] for c in reply.body["data"] if name_part in c["name"]))


async def _row(box: Sandbox, object_id: str, preset: str) -> dict[str, Any] | None:
    reply = await box.get(
        f"/{object_id}/insights",
        date_preset=preset,
        fields=FIELDS,
        use_unified_attribution_setting="true",
    )
    assert reply.status == 200, reply.body
    rows = reply.body["data"]
    return rows[0] if rows else None


async def test_todays_numbers_survive_a_pause_and_grow_again_after_activation(
    sandbox: Sandbox,
) -> None:
    campaign = await _campaign(sandbox, "Prospecting US 1")
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 15, 0, tzinfo=UTC))  # 10:00 in New York
    before_pause = await _row(sandbox, campaign, "today")
    month_before_pause = await _row(sandbox, campaign, "this_month")
    assert before_pause is not None
    assert float(before_pause["spend"]) > 0

    assert (await sandbox.post(f"/{campaign}", status="PAUSED")).body == {"success": True}
    await sandbox.admin.advance_clock(4 * 3600)  # 14:00

    # Nothing accrues while paused, and nothing delivered before the pause is lost.
    assert await _row(sandbox, campaign, "today") == before_pause
    assert await _row(sandbox, campaign, "this_month") == month_before_pause
    adsets = await sandbox.get(
        "/act_1001/insights",
        level="adset",
        date_preset="today",
        fields="spend",
        filtering=[{"field": "campaign.id", "operator": "EQUAL", "value": campaign}],
    )
    spend_cents = sum(round(float(r["spend"]) * 100) for r in adsets.body["data"])
    assert spend_cents == round(float(before_pause["spend"]) * 100)

    await sandbox.admin.advance_clock(19 * 3600)  # 09:00 on 2 December
    assert await _row(sandbox, campaign, "yesterday") == {
        **before_pause,
        "date_start": "2026-12-01",
        "date_stop": "2026-12-01",
    }
    assert await _row(sandbox, campaign, "today") is None  # paused all day so far

    await sandbox.post(f"/{campaign}", status="ACTIVE")
    await sandbox.admin.advance_clock(3 * 3600)  # 12:00
    resumed = await _row(sandbox, campaign, "today")
    assert resumed is not None
    assert 0 < float(resumed["spend"]) < float(before_pause["spend"])  # 3 hours against 10


async def test_an_ad_set_paused_alone_keeps_its_hours_and_its_campaign_counts_them(
    sandbox: Sandbox,
) -> None:
    campaign = await _campaign(sandbox, "Retargeting US 2")
    adsets = await sandbox.get(f"/{campaign}/adsets", fields="id")
    paused, running = (a["id"] for a in adsets.body["data"])
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 17, 0, tzinfo=UTC))  # 12:00 in New York
    paused_row = await _row(sandbox, paused, "today")
    assert paused_row is not None
    await sandbox.post(f"/{paused}", status="PAUSED")
    await sandbox.admin.advance_clock(6 * 3600)

    assert await _row(sandbox, paused, "today") == paused_row
    running_row = await _row(sandbox, running, "today")
    campaign_row = await _row(sandbox, campaign, "today")
    assert running_row is not None
    assert campaign_row is not None
    assert int(campaign_row["impressions"]) == int(paused_row["impressions"]) + int(
        running_row["impressions"]
    )
    budget = await sandbox.get(f"/{paused}", fields="daily_budget,budget_remaining")
    spent = round(float(paused_row["spend"]) * 100)
    assert int(budget.body["budget_remaining"]) == int(budget.body["daily_budget"]) - spent


async def test_a_campaign_built_paused_keeps_its_history_and_delivers_from_its_activation(
    sandbox: Sandbox,
) -> None:
    campaign = await _campaign(sandbox, "Catalog Sales")
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 15, 0, tzinfo=UTC))
    assert await _row(sandbox, campaign, "today") is None
    history = await _row(sandbox, campaign, "last_7d")
    assert history is not None

    await sandbox.post(f"/{campaign}", status="ACTIVE")
    await sandbox.admin.advance_clock(2 * 3600)
    assert await _row(sandbox, campaign, "today") is not None
    assert await _row(sandbox, campaign, "last_7d") == history
