"""Insights: growth through the day, consistency across levels, gaps where Meta leaves gaps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sandbox_helpers import Sandbox

METRICS = "spend,impressions,clicks,actions,action_values,cost_per_action_type,purchase_roas"


async def _campaign(box: Sandbox, account: str, name_part: str) -> str:
    reply = await box.get(f"/{account}/campaigns", fields="id,name", limit="100")
    return str(next(c["id"] for c in reply.body["data"] if name_part in c["name"]))


async def _row(box: Sandbox, object_id: str, **params: Any) -> dict[str, Any] | None:
    reply = await box.get(f"/{object_id}/insights", **params)
    assert reply.status == 200, reply.body
    rows = reply.body["data"]
    assert len(rows) <= 1
    return rows[0] if rows else None


def _action(row: dict[str, Any], field: str, action_type: str) -> str | None:
    return next((a["value"] for a in row.get(field, []) if a["action_type"] == action_type), None)


async def test_today_grows_through_a_frozen_then_advanced_day(sandbox: Sandbox) -> None:
    campaign = await _campaign(sandbox, "act_1001", "Prospecting US 1")
    # 01:00 in New York.
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 6, 0, tzinfo=UTC))
    early = await _row(sandbox, campaign, date_preset="today", fields="spend,impressions")
    yesterday = await _row(sandbox, campaign, date_preset="yesterday", fields="spend")
    assert early is not None
    assert yesterday is not None
    await sandbox.admin.advance_clock(6 * 3600)
    midday = await _row(sandbox, campaign, date_preset="today", fields="spend,impressions")
    await sandbox.admin.advance_clock(10 * 3600)
    late = await _row(sandbox, campaign, date_preset="today", fields="spend,impressions")
    assert midday is not None
    assert late is not None
    assert float(early["spend"]) < float(midday["spend"]) < float(late["spend"])
    assert int(early["impressions"]) < int(midday["impressions"]) < int(late["impressions"])
    assert early["date_start"] == late["date_start"] == "2026-12-01"
    assert await _row(sandbox, campaign, date_preset="yesterday", fields="spend") == yesterday

    await sandbox.admin.advance_clock(8 * 3600)  # 09:00 on 2 December in New York
    new_day = await _row(sandbox, campaign, date_preset="today", fields="spend")
    full_day = await _row(sandbox, campaign, date_preset="yesterday", fields="spend")
    assert new_day is not None
    assert full_day is not None
    assert new_day["date_start"] == "2026-12-02"
    assert float(full_day["spend"]) > float(late["spend"])


async def test_today_is_a_calendar_day_in_each_accounts_timezone(sandbox: Sandbox) -> None:
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 20, 0, tzinfo=UTC))
    new_york = await sandbox.get("/act_1001/insights", date_preset="today")
    jakarta = await sandbox.get("/act_1003/insights", date_preset="today")
    assert new_york.body["data"][0]["date_start"] == "2026-12-01"
    assert jakarta.body["data"][0]["date_start"] == "2026-12-02"


async def test_last_7d_ends_yesterday_and_unknown_presets_fail(sandbox: Sandbox) -> None:
    row = (await sandbox.get("/act_1001/insights", date_preset="last_7d")).body["data"][0]
    assert (row["date_start"], row["date_stop"]) == ("2026-11-24", "2026-11-30")
    month = (await sandbox.get("/act_1001/insights", date_preset="last_month")).body["data"][0]
    assert (month["date_start"], month["date_stop"]) == ("2026-11-01", "2026-11-30")
    ranged = await sandbox.get(
        "/act_1001/insights", time_range={"since": "2026-11-24", "until": "2026-11-30"}
    )
    assert ranged.body["data"][0]["spend"] == row["spend"]
    bad = await sandbox.get("/act_1001/insights", date_preset="last_8d")
    assert bad.status == 400
    assert bad.error["code"] == 100


@pytest.mark.parametrize("level", ["campaign", "adset"])
async def test_account_level_rows_match_per_object_rows(sandbox: Sandbox, level: str) -> None:
    edge = "campaigns" if level == "campaign" else "adsets"
    ids = [o["id"] for o in (await sandbox.get(f"/act_1002/{edge}", limit="12")).body["data"]]
    fields = f"{level}_id,{METRICS},reach,frequency,ctr,cpc,cpm"
    account_rows = await sandbox.get(
        "/act_1002/insights",
        level=level,
        date_preset="last_7d",
        fields=fields,
        filtering=[{"field": f"{level}.id", "operator": "IN", "value": ids}],
        use_unified_attribution_setting="true",
        action_breakdowns="action_type",
        limit="500",
    )
    by_id = {row[f"{level}_id"]: row for row in account_rows.body["data"]}
    assert by_id
    assert set(by_id) <= set(ids)
    for object_id in ids:
        row = await _row(
            sandbox,
            object_id,
            date_preset="last_7d",
            fields=fields,
            use_unified_attribution_setting="true",
        )
        assert row == by_id.get(object_id)


async def test_a_campaign_is_the_sum_of_its_ad_sets(sandbox: Sandbox) -> None:
    campaign = await _campaign(sandbox, "act_1001", "Prospecting US 2")
    total = await _row(sandbox, campaign, date_preset="last_14d", fields="spend,impressions")
    adsets = await sandbox.get(
        "/act_1001/insights",
        level="adset",
        date_preset="last_14d",
        fields="spend,impressions",
        filtering=[{"field": "campaign.id", "operator": "EQUAL", "value": campaign}],
    )
    assert total is not None
    assert len(adsets.body["data"]) == 3
    spend_cents = sum(round(float(r["spend"]) * 100) for r in adsets.body["data"])
    assert spend_cents == round(float(total["spend"]) * 100)
    assert sum(int(r["impressions"]) for r in adsets.body["data"]) == int(total["impressions"])


async def test_no_delivery_means_no_row_at_all(sandbox: Sandbox) -> None:
    silent = await _campaign(sandbox, "act_1001", "Seasonal Promo")
    assert await _row(sandbox, silent, date_preset="last_30d", fields="spend") is None
    rows = await sandbox.get(
        "/act_1001/insights", level="campaign", date_preset="last_30d", fields="campaign_id"
    )
    ids = {row["campaign_id"] for row in rows.body["data"]}
    assert silent not in ids
    assert len(ids) == 11


async def test_a_paused_campaign_has_history_but_nothing_today(sandbox: Sandbox) -> None:
    paused = await _campaign(sandbox, "act_1001", "Catalog Sales")
    assert await _row(sandbox, paused, date_preset="today") is None
    assert await _row(sandbox, paused, date_preset="last_7d") is not None


async def test_spend_without_purchases_leaves_purchase_metrics_out(sandbox: Sandbox) -> None:
    campaign = await _campaign(sandbox, "act_1001", "Creative Test")
    row = await _row(sandbox, campaign, date_preset="last_7d", fields=METRICS)
    assert row is not None
    assert float(row["spend"]) > 0
    assert "purchase_roas" not in row
    assert "action_values" not in row
    assert _action(row, "cost_per_action_type", "purchase") is None
    assert _action(row, "actions", "add_to_cart") is not None


async def test_lead_campaigns_report_leads(sandbox: Sandbox) -> None:
    campaign = await _campaign(sandbox, "act_1002", "Lead Gen")
    row = await _row(sandbox, campaign, date_preset="last_7d", fields=METRICS)
    assert row is not None
    assert int(_action(row, "actions", "lead") or 0) > 0
    assert float(_action(row, "cost_per_action_type", "lead") or 0) > 0


async def test_winners_and_losers_are_clear_at_midday(sandbox: Sandbox) -> None:
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 17, 0, tzinfo=UTC))  # noon in New York
    rows = await sandbox.get(
        "/act_1001/insights",
        level="campaign",
        date_preset="last_7d",
        fields="campaign_name,purchase_roas",
        use_unified_attribution_setting="true",
        limit="100",
    )
    roas = {
        r["campaign_name"]: float(_action(r, "purchase_roas", "omni_purchase") or 0)
        for r in rows.body["data"]
    }
    assert roas["[AUTO] Prospecting US 1"] > 3
    assert roas["[AUTO] Prospecting US 2"] < 1.2
    loser = await _campaign(sandbox, "act_1001", "Prospecting US 2")
    today = await _row(sandbox, loser, date_preset="today", fields="spend")
    assert today is not None
    assert float(today["spend"]) > 50


async def test_unified_attribution_changes_purchases_and_roas(sandbox: Sandbox) -> None:
    campaign = await _campaign(sandbox, "act_1001", "Prospecting US 1")
    unified = await _row(
        sandbox,
        campaign,
        date_preset="last_7d",
        fields=METRICS,
        use_unified_attribution_setting="true",
    )
    legacy = await _row(sandbox, campaign, date_preset="last_7d", fields=METRICS)
    assert unified is not None
    assert legacy is not None
    assert unified["spend"] == legacy["spend"]
    roas_unified = float(_action(unified, "purchase_roas", "omni_purchase") or 0)
    roas_legacy = float(_action(legacy, "purchase_roas", "omni_purchase") or 0)
    assert roas_legacy == pytest.approx(roas_unified * 1.3, rel=0.01)
    assert _action(unified, "actions", "purchase") != _action(legacy, "actions", "purchase")


async def test_only_requested_fields_come_back(sandbox: Sandbox) -> None:
    row = (await sandbox.get("/act_1001/insights", fields="spend,ctr")).body["data"][0]
    assert set(row) == {"spend", "ctr", "date_start", "date_stop"}
    bad = await sandbox.get("/act_1001/insights", fields="spend,happiness")
    assert bad.error["code"] == 100
    breakdown = await sandbox.get("/act_1001/insights", action_breakdowns="action_device")
    assert breakdown.error["code"] == 100
