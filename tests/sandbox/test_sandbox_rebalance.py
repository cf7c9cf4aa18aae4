"""Moving budget between ad sets: many writes in a row land, and delivery can follow them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sandbox_helpers import Sandbox

#: 10:00 in New York.
MORNING = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)


async def _adsets(box: Sandbox, campaign_name: str) -> list[dict[str, Any]]:
    campaigns = await box.get("/act_1001/campaigns", fields="id,name", limit="100")
    campaign = next(c["id"] for c in campaigns.body["data"] if campaign_name in c["name"])
    reply = await box.get(f"/{campaign}/adsets", fields="id,daily_budget,effective_status")
    return [a for a in reply.body["data"] if a["effective_status"] == "ACTIVE"]


async def _spend_cents(box: Sandbox, object_id: str) -> int:
    reply = await box.get(f"/{object_id}/insights", date_preset="today", fields="spend")
    (row,) = reply.body["data"]
    return round(float(row["spend"]) * 100)


async def test_budget_moved_back_and_forth_between_ad_sets_lands_every_write(
    sandbox: Sandbox,
) -> None:
    await sandbox.admin.set_clock(MORNING)
    first, second = (await _adsets(sandbox, "Creative Test US 1"))[:2]
    budgets = {first["id"]: int(first["daily_budget"]), second["id"]: int(second["daily_budget"])}
    for step in range(4):  # 4 moves of 5.00 each way: 8 writes, 4 per ad set within the hour
        giver, taker = (first, second) if step % 2 == 0 else (second, first)
        budgets[giver["id"]] -= 500
        budgets[taker["id"]] += 500
        for adset in (giver, taker):
            reply = await sandbox.post(f"/{adset['id']}", daily_budget=budgets[adset["id"]])
            assert reply.body == {"success": True}
        await sandbox.admin.advance_clock(60)
    for adset in (first, second):
        read = await sandbox.get(f"/{adset['id']}", fields="daily_budget")
        assert int(read.body["daily_budget"]) == budgets[adset["id"]]
    assert len([w for w in await sandbox.admin.writes() if w["ok"]]) == 8
    # a 5th change of one ad set within the hour is Meta's 17; the hour after, it lands
    refused = await sandbox.post(f"/{first['id']}", daily_budget=budgets[first["id"]] + 100)
    assert refused.error["code"] == 17
    await sandbox.admin.advance_clock(2 * 3600)
    assert (await sandbox.post(f"/{second['id']}", daily_budget=9000)).body == {"success": True}


async def test_spend_follows_budget_changes_from_the_instant_they_are_written(
    sandbox: Sandbox,
) -> None:
    await sandbox.admin.set_clock(MORNING)
    first, second = (await _adsets(sandbox, "Creative Test US 1"))[:2]
    yesterday = await sandbox.get(f"/{first['id']}/insights", date_preset="yesterday")
    morning = {a["id"]: await _spend_cents(sandbox, a["id"]) for a in (first, second)}
    await sandbox.admin.advance_clock(6 * 3600)  # 16:00, budgets as built
    as_built = {a["id"]: await _spend_cents(sandbox, a["id"]) for a in (first, second)}
    await sandbox.admin.set_clock(MORNING)

    double = int(first["daily_budget"]) * 2
    half = int(second["daily_budget"]) // 2
    await sandbox.post(f"/{first['id']}", daily_budget=double)
    await sandbox.post(f"/{second['id']}", daily_budget=half)
    await sandbox.admin.advance_clock(6 * 3600)
    paced = {a["id"]: await _spend_cents(sandbox, a["id"]) for a in (first, second)}
    for adset, rate in ((first, 2.0), (second, half / int(second["daily_budget"]))):
        gained = as_built[adset["id"]] - morning[adset["id"]]
        expected = morning[adset["id"]] + gained * rate
        assert paced[adset["id"]] == pytest.approx(expected, abs=3)  # cents lost to rounding
    # what was spent before the change stays: yesterday is as it was
    assert (await sandbox.get(f"/{first['id']}/insights", date_preset="yesterday")).body == (
        yesterday.body
    )


async def test_a_campaign_budget_change_paces_every_ad_set_of_the_campaign(
    sandbox: Sandbox,
) -> None:
    await sandbox.admin.set_clock(MORNING)
    campaigns = await sandbox.get("/act_1001/campaigns", fields="id,name,daily_budget")
    cbo = next(c for c in campaigns.body["data"] if "Prospecting US 1" in c["name"])
    morning = await _spend_cents(sandbox, cbo["id"])
    await sandbox.admin.advance_clock(4 * 3600)
    unchanged = await _spend_cents(sandbox, cbo["id"])
    await sandbox.admin.set_clock(MORNING)
    await sandbox.post(f"/{cbo['id']}", daily_budget=int(cbo["daily_budget"]) * 3 // 2)
    await sandbox.admin.advance_clock(4 * 3600)
    raised = await _spend_cents(sandbox, cbo["id"])
    assert raised == pytest.approx(morning + (unchanged - morning) * 1.5, abs=5)
    adsets = await sandbox.get(
        "/act_1001/insights",
        level="adset",
        date_preset="today",
        fields="spend",
        filtering=[{"field": "campaign.id", "operator": "EQUAL", "value": cbo["id"]}],
    )
    assert sum(round(float(r["spend"]) * 100) for r in adsets.body["data"]) == raised
