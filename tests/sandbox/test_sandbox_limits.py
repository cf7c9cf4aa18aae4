"""The usage model: headers that rise with calls, throttling per ad account and per app."""

from __future__ import annotations

from sandbox_helpers import Sandbox


async def test_usage_headers_rise_with_calls(sandbox: Sandbox) -> None:
    await sandbox.admin.set_limits(account_calls_per_hour=50, app_calls_per_hour=200)
    first = await sandbox.get("/act_1001/campaigns")
    second = await sandbox.get("/act_1001/campaigns")
    assert first.usage("X-App-Usage")["call_count"] < second.usage("X-App-Usage")["call_count"]
    account = second.usage("X-Ad-Account-Usage")
    assert account["acc_id_util_pct"] == 4
    assert account["ads_api_access_tier"] == "standard_access"
    assert 0 < account["reset_time_duration"] <= 3600
    buc = second.usage("X-Business-Use-Case-Usage")
    (entry,) = buc["1001"]
    assert entry["type"] == "ads_management"
    assert entry["call_count"] == 4
    assert entry["estimated_time_to_regain_access"] == 0

    insights = await sandbox.get("/act_1001/insights")
    types = {e["type"]: e for e in insights.usage("X-Business-Use-Case-Usage")["1001"]}
    assert types["ads_insights"]["call_count"] == 2
    assert types["ads_management"]["call_count"] == 4


async def test_unscoped_calls_only_carry_the_app_header(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/me/adaccounts")
    assert "X-App-Usage" in reply.headers
    assert "X-Ad-Account-Usage" not in reply.headers


async def test_an_account_over_capacity_gets_80004_until_the_hour_rolls(sandbox: Sandbox) -> None:
    await sandbox.admin.set_limits(account_calls_per_hour=3)
    for _ in range(3):
        assert (await sandbox.get("/act_1001/campaigns")).status == 200
    refused = await sandbox.get("/act_1001/campaigns")
    assert refused.status == 400
    assert refused.error["code"] == 80004
    assert refused.error["error_subcode"] == 2446079
    (entry,) = refused.usage("X-Business-Use-Case-Usage")["1001"]
    assert entry["call_count"] == 100
    assert entry["estimated_time_to_regain_access"] == 60
    assert (await sandbox.get("/act_1002/campaigns")).status == 200

    await sandbox.admin.advance_clock(3601)
    assert (await sandbox.get("/act_1001/campaigns")).status == 200


async def test_insights_over_capacity_get_80000(sandbox: Sandbox) -> None:
    await sandbox.admin.set_limits(account_calls_per_hour=2)
    for _ in range(2):
        assert (await sandbox.get("/act_1003/insights")).status == 200
    refused = await sandbox.get("/act_1003/insights")
    assert refused.error["code"] == 80000
    stats = await sandbox.admin.stats()
    assert stats["errors_by_code"] == {"80000": 1}


async def test_batch_items_count_against_the_account(sandbox: Sandbox) -> None:
    await sandbox.admin.set_limits(account_calls_per_hour=5)
    items = [{"method": "GET", "relative_url": "act_1002/campaigns"}] * 7
    reply = await sandbox.batch(items)
    assert [item["code"] for item in reply.body] == [200] * 5 + [400] * 2


async def test_the_app_over_capacity_gets_error_4(sandbox: Sandbox) -> None:
    await sandbox.admin.set_limits(app_calls_per_hour=2)
    await sandbox.get("/me/adaccounts")
    await sandbox.get("/act_1001")
    refused = await sandbox.get("/me/adaccounts")
    assert refused.error["code"] == 4
    assert refused.usage("X-App-Usage")["call_count"] == 100
