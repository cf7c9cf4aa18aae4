"""The worlds the sandbox builds: deterministic from the seed, shaped like Meta's objects."""

from __future__ import annotations

import re

from sandbox_helpers import NOON_ISH, Sandbox, running_sandbox

CAMPAIGN_FIELDS = "id,name,status,effective_status,daily_budget,lifetime_budget,created_time"
INSIGHT_FIELDS = "campaign_id,spend,impressions,actions,purchase_roas"


async def _snapshot(box: Sandbox) -> tuple[object, object]:
    await box.admin.set_clock(NOON_ISH)
    campaigns = await box.get("/act_1002/campaigns", fields=CAMPAIGN_FIELDS, limit="100")
    insights = await box.get(
        "/act_1002/insights", level="campaign", date_preset="last_7d", fields=INSIGHT_FIELDS
    )
    return campaigns.body, insights.body


async def test_same_seed_builds_the_same_world_and_numbers() -> None:
    async with running_sandbox(seed=7) as first, running_sandbox(seed=7) as second:
        assert await _snapshot(first) == await _snapshot(second)
    async with running_sandbox(seed=8) as other, running_sandbox(seed=7) as again:
        assert await _snapshot(other) != await _snapshot(again)


async def test_demo_world_has_four_varied_accounts(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/me/adaccounts", fields="id,account_id,name,currency,timezone_name")
    accounts = reply.body["data"]
    assert [a["id"] for a in accounts] == ["act_1001", "act_1002", "act_1003", "act_1004"]
    assert {a["timezone_name"] for a in accounts} == {
        "America/New_York",
        "Europe/Berlin",
        "Asia/Jakarta",
        "Asia/Tokyo",
    }
    assert [a["currency"] for a in accounts] == ["USD", "EUR", "USD", "JPY"]
    assert "next" not in reply.body["paging"]


async def test_the_yen_account_has_a_few_campaigns_in_whole_yen(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/act_1004/campaigns", fields="name,daily_budget", limit="100")
    budgets = {c["name"]: c.get("daily_budget") for c in reply.body["data"]}
    assert budgets == {
        "[AUTO] Prospecting JP 1": "30000",
        "[AUTO] Retargeting JP 1": None,
        "[AUTO] Creative Test JP 1": None,
        "Brand Awareness JP": "8000",
    }
    adsets = await sandbox.get("/act_1004/adsets", fields="name,daily_budget", limit="100")
    assert {a["name"]: a.get("daily_budget") for a in adsets.body["data"]} == {
        "Prospecting JP 1 - Lookalike 1%": None,
        "Prospecting JP 1 - Broad 18-65": None,
        "Retargeting JP 1 - Lookalike 1%": "5000",
        "Retargeting JP 1 - Broad 18-65": "5000",
        "Creative Test JP 1 - Lookalike 1%": "3000",
        "Creative Test JP 1 - Broad 18-65": "3000",
        "Brand Awareness JP - Lookalike 1%": None,
        "Brand Awareness JP - Broad 18-65": None,
    }


async def test_demo_campaigns_mix_budgets_statuses_and_tags(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/act_1001/campaigns", fields=CAMPAIGN_FIELDS, limit="100")
    campaigns = reply.body["data"]
    assert 10 <= len(campaigns) <= 14
    for campaign in campaigns:
        assert re.fullmatch(r"\d{15,}", campaign["id"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000", campaign["created_time"])
    daily = [c for c in campaigns if "daily_budget" in c]
    assert all(isinstance(c["daily_budget"], str) and c["daily_budget"].isdigit() for c in daily)
    assert any("lifetime_budget" in c for c in campaigns)
    assert any("daily_budget" not in c and "lifetime_budget" not in c for c in campaigns)
    assert {c["status"] for c in campaigns} == {"ACTIVE", "PAUSED"}
    tagged = [c for c in campaigns if "[AUTO]" in c["name"]]
    assert 0 < len(tagged) < len(campaigns)


async def test_ad_sets_carry_the_budget_of_ad_set_budget_campaigns(sandbox: Sandbox) -> None:
    campaigns = await sandbox.get("/act_1001/campaigns", fields="id,daily_budget,lifetime_budget")
    adsets = await sandbox.get(
        "/act_1001/adsets", fields="id,campaign_id,daily_budget", limit="200"
    )
    cbo = {c["id"] for c in campaigns.body["data"] if "daily_budget" in c or "lifetime_budget" in c}
    for adset in adsets.body["data"]:
        assert ("daily_budget" in adset) == (adset["campaign_id"] not in cbo)


async def test_bench_scenario_sizes_and_ids() -> None:
    async with running_sandbox(
        scenario="bench", accounts=2, campaigns_per_account=30, adsets_per_campaign=2
    ) as box:
        assert await box.admin.accounts() == ["act_2001", "act_2002"]
        campaigns = await box.get("/act_2002/campaigns", fields="name,daily_budget", limit="100")
        assert len(campaigns.body["data"]) == 30
        assert all("[AUTO]" in c["name"] and "daily_budget" in c for c in campaigns.body["data"])
        adsets = await box.get("/act_2002/adsets", limit="100")
        assert len(adsets.body["data"]) == 60
        world = await box.admin.world()
        assert (world["campaigns"], world["adsets"]) == (60, 120)


async def test_reset_rebuilds_the_world_and_clears_everything(sandbox: Sandbox) -> None:
    campaign = (await sandbox.get("/act_1001/campaigns")).body["data"][0]["id"]
    await sandbox.post(f"/{campaign}", name="renamed")
    await sandbox.admin.set_faults(latency_ms=5, rules=[{"path_contains": "/me", "code": 2}])
    await sandbox.admin.set_limits(account_calls_per_hour=5)

    summary = await sandbox.admin.reset()

    assert summary["accounts"] == ["act_1001", "act_1002", "act_1003", "act_1004"]
    assert (await sandbox.get(f"/{campaign}", fields="name")).body["name"] != "renamed"
    stats = await sandbox.admin.stats()
    assert stats["counted_calls"] == 1
    assert stats["http_requests"] == 1
    assert await sandbox.admin.writes() == []
    assert (await sandbox.admin.faults())["rules"] == []
    assert (await sandbox.admin.limits())["account_calls_per_hour"] > 5
    assert (await sandbox.admin.clock())["frozen"] is False


async def test_reset_can_switch_scenario_and_seed(sandbox: Sandbox) -> None:
    summary = await sandbox.admin.reset(scenario="bench", seed=3, campaigns_per_account=4)
    assert summary["scenario"] == "bench"
    assert summary["seed"] == 3
    assert summary["campaigns"] == 12
    reply = await sandbox.get("/act_1001/campaigns")
    assert reply.status == 403
    assert reply.error["code"] == 200


async def test_raw_objects_are_visible_without_a_token(sandbox: Sandbox) -> None:
    adset = (await sandbox.get("/act_1003/adsets")).body["data"][0]["id"]
    raw = await sandbox.admin.object(adset)
    assert raw["kind"] == "adset"
    assert raw["profile"]["spend_cents"] >= 0
    assert (await sandbox.admin.object("act_1003"))["timezone_name"] == "Asia/Jakarta"
