"""``learning_stage_info``: ad sets learn until ~50 optimisation events, and significant edits
restart it (Meta's documented rule, computed from the sandbox's delivery and clock)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sandbox_helpers import NOON_ISH, Sandbox

DAY_S = 24 * 3600


async def _adsets(box: Sandbox, account: str = "act_1001") -> list[dict[str, Any]]:
    reply = await box.get(
        f"/{account}/adsets",
        fields="name,daily_budget,effective_status,learning_stage_info",
        limit="200",
    )
    assert reply.status == 200, reply.body
    return list(reply.body["data"])


async def _adset(box: Sandbox, name: str) -> dict[str, Any]:
    return next(a for a in await _adsets(box) if a["name"] == name)


async def _campaign_id(box: Sandbox, name: str) -> str:
    reply = await box.get("/act_1001/campaigns", fields="id,name", limit="100")
    return str(next(c["id"] for c in reply.body["data"] if c["name"] == name))


async def _stage(box: Sandbox, adset_id: str) -> dict[str, Any]:
    reply = await box.get(f"/{adset_id}", fields="learning_stage_info")
    assert reply.status == 200, reply.body
    return dict(reply.body["learning_stage_info"])


async def test_the_demo_has_learning_exited_and_limited_ad_sets_and_paused_ones_report_none(
    sandbox: Sandbox,
) -> None:
    adsets = [
        a
        for account in ("act_1001", "act_1002", "act_1003")
        for a in await _adsets(sandbox, account)
    ]
    stages = {a["name"]: a.get("learning_stage_info", {}).get("status") for a in adsets}
    assert {"LEARNING", "SUCCESS", "FAIL"} <= set(stages.values())
    # Meta returns the field for delivering ad sets only
    for adset in adsets:
        assert ("learning_stage_info" in adset) == (adset["effective_status"] == "ACTIVE")
    learning = await _adset(sandbox, "Prospecting US 3 - Lookalike 1%")
    info = learning["learning_stage_info"]
    assert info["status"] == "LEARNING"
    assert set(info) == {"attribution_windows", "conversions", "last_sig_edit_ts", "status"}
    assert 0 < info["conversions"] < 50
    # the scenario's edit: the start of yesterday in the account's timezone
    yesterday = datetime(2026, 11, 30, tzinfo=ZoneInfo("America/New_York"))
    assert info["last_sig_edit_ts"] == int(yesterday.timestamp())
    exited = await _adset(sandbox, "Brand Awareness US - Lookalike 1%")
    assert exited["learning_stage_info"]["status"] == "SUCCESS"
    assert exited["learning_stage_info"]["conversions"] == 0  # Meta: 0 once exited
    limited = await _adset(sandbox, "Prospecting US 3 - Broad 18-65")
    assert limited["learning_stage_info"]["status"] == "FAIL"


async def test_a_budget_change_over_20_percent_restarts_learning_and_one_of_20_does_not(
    sandbox: Sandbox,
) -> None:
    adset = await _adset(sandbox, "Prospecting US 3 - Broad 18-65")
    before = await _stage(sandbox, adset["id"])
    assert before["status"] == "FAIL"
    budget = int(adset["daily_budget"])
    assert (await sandbox.post(f"/{adset['id']}", daily_budget=str(budget * 6 // 5))).status == 200
    assert await _stage(sandbox, adset["id"]) == before  # +20 %: not significant

    await sandbox.admin.advance_clock(3600)
    assert (await sandbox.post(f"/{adset['id']}", daily_budget=str(budget * 2))).status == 200
    after = await _stage(sandbox, adset["id"])
    now = NOON_ISH.timestamp() + 3600
    assert after == {**before, "status": "LEARNING", "conversions": 0, "last_sig_edit_ts": now}

    await sandbox.admin.advance_clock(2 * DAY_S)
    learning = await _stage(sandbox, adset["id"])
    assert learning["status"] == "LEARNING" and learning["conversions"] > 0
    await sandbox.admin.advance_clock(5 * DAY_S)  # 7 days without 50 purchases
    limited = await _stage(sandbox, adset["id"])
    assert limited["status"] == "FAIL"
    assert learning["conversions"] < limited["conversions"] < 50


async def test_a_campaign_budget_change_restarts_its_ad_sets_which_exit_after_50_events(
    sandbox: Sandbox,
) -> None:
    campaign = await _campaign_id(sandbox, "Brand Awareness US")
    reply = await sandbox.get(f"/{campaign}", fields="daily_budget")
    budget = int(reply.body["daily_budget"])
    adsets = [a for a in await _adsets(sandbox) if a["name"].startswith("Brand Awareness US")]
    assert {a["learning_stage_info"]["status"] for a in adsets} == {"SUCCESS"}

    assert (await sandbox.post(f"/{campaign}", daily_budget=str(budget // 2))).status == 200
    for adset in adsets:
        assert (await _stage(sandbox, adset["id"]))["status"] == "LEARNING"
    # an awareness ad set optimises for reach: at half its budget 50 people come within
    # two hours
    await sandbox.admin.advance_clock(2 * 3600)
    for adset in adsets:
        stage = await _stage(sandbox, adset["id"])
        assert stage["status"] == "SUCCESS"
        assert stage["last_sig_edit_ts"] == int(NOON_ISH.timestamp())


async def test_activating_after_a_pause_of_7_days_restarts_learning_and_a_shorter_one_does_not(
    sandbox: Sandbox,
) -> None:
    adset = await _adset(sandbox, "Prospecting US 3 - Broad 18-65")
    before = await _stage(sandbox, adset["id"])
    assert (await sandbox.post(f"/{adset['id']}", status="PAUSED")).status == 200
    await sandbox.admin.advance_clock(6 * DAY_S)
    assert (await sandbox.post(f"/{adset['id']}", status="ACTIVE")).status == 200
    assert (await _stage(sandbox, adset["id"]))["last_sig_edit_ts"] == before["last_sig_edit_ts"]

    assert (await sandbox.post(f"/{adset['id']}", status="PAUSED")).status == 200
    await sandbox.admin.advance_clock(7 * DAY_S)
    assert (await sandbox.post(f"/{adset['id']}", status="ACTIVE")).status == 200
    after = await _stage(sandbox, adset["id"])
    restarted = datetime.fromtimestamp(NOON_ISH.timestamp() + 13 * DAY_S, UTC)
    assert after["status"] == "LEARNING"
    assert after["last_sig_edit_ts"] == int(restarted.timestamp())
