"""Writes: status, budgets, names, Meta's validations, the budget-change limit, copies, the log."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_helpers import TOKEN, Sandbox, running_sandbox

from graph_sandbox.admin import SandboxAdminError
from graph_sandbox.currencies import min_daily_budget
from graph_sandbox.currencies import offset as currency_offset


async def _objects(box: Sandbox, edge: str, fields: str) -> list[dict[str, Any]]:
    reply = await box.get(f"/act_1001/{edge}", fields=fields, limit="100")
    return list(reply.body["data"])


async def _cbo_campaign(box: Sandbox) -> dict[str, Any]:
    campaigns = await _objects(box, "campaigns", "id,daily_budget,updated_time")
    return next(c for c in campaigns if "daily_budget" in c)


async def _abo_adset(box: Sandbox) -> dict[str, Any]:
    adsets = await _objects(box, "adsets", "id,daily_budget")
    return next(a for a in adsets if "daily_budget" in a)


async def test_pause_a_campaign_and_its_ad_sets_follow(sandbox: Sandbox) -> None:
    campaign = await _cbo_campaign(sandbox)
    reply = await sandbox.post(f"/{campaign['id']}", status="PAUSED")
    assert reply.status == 200
    assert reply.body == {"success": True}
    after = await sandbox.get(f"/{campaign['id']}", fields="status,effective_status,updated_time")
    assert after.body["status"] == "PAUSED"
    assert after.body["updated_time"] == "2026-12-01T15:00:00+0000"
    adsets = await sandbox.get(f"/{campaign['id']}/adsets", fields="effective_status")
    assert {a["effective_status"] for a in adsets.body["data"]} == {"CAMPAIGN_PAUSED"}


async def test_budget_write_updates_budget_and_remaining(sandbox: Sandbox) -> None:
    campaign = await _cbo_campaign(sandbox)
    before = await sandbox.get(f"/{campaign['id']}", fields="daily_budget,budget_remaining")
    new_budget = int(before.body["daily_budget"]) + 5000
    reply = await sandbox.post(f"/{campaign['id']}", daily_budget=str(new_budget))
    assert reply.body == {"success": True}
    after = await sandbox.get(f"/{campaign['id']}", fields="daily_budget,budget_remaining")
    assert after.body["daily_budget"] == str(new_budget)
    remaining_delta = int(after.body["budget_remaining"]) - int(before.body["budget_remaining"])
    assert remaining_delta == 5000


async def test_json_bodies_are_accepted_too(sandbox: Sandbox) -> None:
    campaign = await _cbo_campaign(sandbox)
    reply = await sandbox.fetch(
        "POST",
        f"{sandbox.graph}/{campaign['id']}",
        json={"name": "Renamed by JSON", "access_token": TOKEN},
    )
    assert reply.body == {"success": True}
    assert (await sandbox.get(f"/{campaign['id']}", fields="name")).body["name"] == (
        "Renamed by JSON"
    )


async def test_budget_on_an_object_without_that_budget_is_error_100(sandbox: Sandbox) -> None:
    campaigns = await _objects(sandbox, "campaigns", "id,daily_budget,lifetime_budget")
    abo = next(c for c in campaigns if "daily_budget" not in c and "lifetime_budget" not in c)
    reply = await sandbox.post(f"/{abo['id']}", daily_budget="10000")
    assert reply.status == 400
    assert reply.error["code"] == 100
    cbo_adsets = await _objects(sandbox, "adsets", "id,daily_budget")
    under_cbo = next(a for a in cbo_adsets if "daily_budget" not in a)
    reply = await sandbox.post(f"/{under_cbo['id']}", daily_budget="10000")
    assert reply.error["code"] == 100
    lifetime = next(c for c in campaigns if "lifetime_budget" in c)
    assert (await sandbox.post(f"/{lifetime['id']}", daily_budget="10000")).error["code"] == 100


async def test_invalid_values_are_error_100_and_change_nothing(sandbox: Sandbox) -> None:
    campaign = await _cbo_campaign(sandbox)
    for form in (
        {"daily_budget": "99"},
        {"daily_budget": "12.5"},
        {"status": "SLEEPING"},
        {"name": " "},
        {"colour": "red"},
        {},
        {"daily_budget": "20000", "status": "WRONG"},
    ):
        reply = await sandbox.post(f"/{campaign['id']}", **form)
        assert (reply.status, reply.error["code"]) == (400, 100), form
    after = await sandbox.get(f"/{campaign['id']}", fields="daily_budget,updated_time")
    assert after.body["daily_budget"] == campaign["daily_budget"]
    assert after.body["updated_time"] == campaign["updated_time"]


async def test_fifth_ad_set_budget_change_in_an_hour_is_plain_error_17(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    for step in range(4):
        reply = await sandbox.post(f"/{adset['id']}", daily_budget=str(5000 + step * 100))
        assert reply.body == {"success": True}
        await sandbox.admin.advance_clock(60)
    refused = await sandbox.post(f"/{adset['id']}", daily_budget="9000")
    assert refused.status == 400
    # Meta's answer is the generic code 17 (no subcode, no user title): only the call that
    # met it — an ad set's budget write — says which limit it is.
    assert set(refused.error) == {"message", "type", "code", "is_transient", "fbtrace_id"}
    assert refused.error["code"] == 17
    assert refused.error["message"] == "(#17) User request limit reached"
    assert (await sandbox.post(f"/{adset['id']}", status="PAUSED")).body == {"success": True}
    # blocked for an hour from the refusal (at minute 4), although the changes of minutes
    # 0–2 have left the rolling hour by minute 63
    await sandbox.admin.advance_clock(3600 - 60)
    assert (await sandbox.post(f"/{adset['id']}", daily_budget="9000")).error["code"] == 17
    await sandbox.admin.advance_clock(60)
    assert (await sandbox.post(f"/{adset['id']}", daily_budget="9000")).body == {"success": True}
    stats = await sandbox.admin.stats()
    assert stats["errors_by_code"] == {"17": 2}


async def test_changes_made_in_ads_manager_count_toward_the_limit(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    for step in range(3):
        await sandbox.admin.ads_manager_change(adset["id"], daily_budget=6000 + step)
    assert (await sandbox.post(f"/{adset['id']}", daily_budget="7000")).body == {"success": True}
    assert (await sandbox.post(f"/{adset['id']}", daily_budget="7100")).error["code"] == 17
    with pytest.raises(SandboxAdminError, match="User request limit reached"):
        await sandbox.admin.ads_manager_change(adset["id"], daily_budget=7200)
    live = await sandbox.get(f"/{adset['id']}", fields="daily_budget")
    assert live.body["daily_budget"] == "7000"
    # the write log holds Graph writes only; Ads Manager's changes are in the activity log
    assert [w["params"] for w in await sandbox.admin.writes()] == [
        {"daily_budget": "7000"},
        {"daily_budget": "7100"},
    ]


async def test_a_budget_below_the_currency_minimum_is_budget_too_low(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    refused = await sandbox.post(f"/{adset['id']}", daily_budget="99")
    assert refused.status == 400
    assert (refused.error["code"], refused.error["error_subcode"]) == (100, 1885272)
    assert refused.error["error_user_title"] == "Your Budget Is Too Low"
    assert "1.00 USD" in refused.error["error_user_msg"]
    assert (await sandbox.post(f"/{adset['id']}", daily_budget="100")).body == {"success": True}
    yen = await sandbox.get("/act_1004/adsets", fields="id,daily_budget", limit="100")
    yen_adset = next(a for a in yen.body["data"] if "daily_budget" in a)
    refused = await sandbox.post(f"/{yen_adset['id']}", daily_budget="149")
    assert refused.error["error_subcode"] == 1885272
    assert "150 JPY" in refused.error["error_user_msg"]
    assert (await sandbox.post(f"/{yen_adset['id']}", daily_budget="150")).body == {"success": True}


async def test_ad_accounts_serve_their_minimum_daily_budget(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/me/adaccounts", fields="id,currency,min_daily_budget")
    minimums = {a["id"]: (a["currency"], a["min_daily_budget"]) for a in reply.body["data"]}
    assert minimums == {
        "act_1001": ("USD", 100),
        "act_1002": ("EUR", 100),
        "act_1003": ("USD", 100),
        "act_1004": ("JPY", 150),
    }
    one = await sandbox.get("/act_1002", fields="min_daily_budget")
    assert one.body == {"id": "act_1002", "min_daily_budget": 100}


def test_minimum_budgets_per_currency() -> None:
    assert [min_daily_budget(c) for c in ("USD", "EUR", "JPY", "IDR", "idr")] == [
        100,
        100,
        150,
        10_000,
        10_000,
    ]
    assert [currency_offset(c) for c in ("USD", "EUR", "JPY", "IDR", "UGX")] == [
        100,
        100,
        1,
        1,
        100,
    ]


async def test_ads_live_under_ad_sets_and_follow_their_status(sandbox: Sandbox) -> None:
    before = await sandbox.admin.world()
    adset = await _abo_adset(sandbox)
    ads = await sandbox.get(
        f"/{adset['id']}/ads", fields="id,adset_id,campaign_id,effective_status"
    )
    assert ads.body["data"]
    assert {a["adset_id"] for a in ads.body["data"]} == {adset["id"]}
    assert {a["effective_status"] for a in ads.body["data"]} == {"ACTIVE"}
    await sandbox.post(f"/{adset['id']}", status="PAUSED")
    paused = await sandbox.get(f"/{adset['id']}/ads", fields="effective_status")
    assert {a["effective_status"] for a in paused.body["data"]} == {"ADSET_PAUSED"}
    world = await sandbox.admin.world()
    assert (world["campaigns"], world["adsets"]) == (before["campaigns"], before["adsets"])
    assert world["ads"] > world["adsets"]


async def test_a_synchronous_deep_copy_holds_at_most_three_objects(sandbox: Sandbox) -> None:
    campaign = await _cbo_campaign(sandbox)
    before = await sandbox.admin.world()
    refused = await sandbox.post(f"/{campaign['id']}/copies", deep_copy="true")
    assert refused.status == 400
    assert (refused.error["code"], refused.error["error_subcode"]) == (100, 1885194)
    assert "asynchronous" in refused.error["message"]
    assert await sandbox.admin.world() == before  # nothing was copied
    shallow = await sandbox.post(f"/{campaign['id']}/copies")
    assert [o["ad_object_type"] for o in shallow.body["ad_object_ids"]] == ["campaign"]


async def test_copy_an_ad_set_deeply_with_its_ads(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    ads = (await sandbox.get(f"/{adset['id']}/ads")).body["data"]
    assert 1 + len(ads) <= 3
    reply = await sandbox.post(f"/{adset['id']}/copies", deep_copy="true")
    copied = reply.body["copied_adset_id"]
    kinds = [o["ad_object_type"] for o in reply.body["ad_object_ids"]]
    assert kinds == ["ad_set"] + ["ad"] * len(ads)
    copies = await sandbox.get(f"/{copied}/ads", fields="adset_id,status")
    assert {a["adset_id"] for a in copies.body["data"]} == {copied}
    assert len(copies.body["data"]) == len(ads)


async def _async_copy(box: Sandbox, object_id: str, **body: Any) -> str:
    adbatch = [{"name": "copy", "relative_url": f"{object_id}/copies", "body": body}]
    reply = await box.post("/act_1001/async_batch_requests", name="deep copy", adbatch=adbatch)
    assert reply.status == 200, reply.body
    return str(reply.body["id"])


async def test_copy_a_campaign_deeply_through_an_async_batch(legacy_sandbox: Sandbox) -> None:
    sandbox = legacy_sandbox
    campaign = await _cbo_campaign(sandbox)
    source = await sandbox.get(f"/{campaign['id']}", fields="name,status")
    body = {
        "deep_copy": "true",
        "status_option": "ACTIVE",
        "rename_options": '{"rename_suffix": " - Copy 2"}',
    }
    set_id = await _async_copy(sandbox, campaign["id"], **body)
    request_set = await sandbox.get(f"/{set_id}", fields="is_completed,success_count,owner_id")
    assert request_set.body == {"is_completed": True, "success_count": 1, "owner_id": "1001"}
    requests = await sandbox.get(f"/{set_id}/requests", fields="status,result")
    (request,) = requests.body["data"]
    assert request["status"] == "SUCCESS"
    result = request["result"]
    copied_id = result["copied_campaign_id"]
    kinds = [o["ad_object_type"] for o in result["ad_object_ids"]]
    assert kinds[0] == "campaign"
    assert {"ad_set", "ad"} <= set(kinds)
    copy = await sandbox.get(f"/{copied_id}", fields="name,status,daily_budget,created_time")
    assert copy.body["name"] == source.body["name"] + " - Copy 2"
    assert copy.body["status"] == "ACTIVE"
    assert copy.body["daily_budget"] == campaign["daily_budget"]
    assert copy.body["created_time"] == "2026-12-01T15:00:00+0000"
    adsets = await sandbox.get(f"/{copied_id}/adsets")
    assert len(adsets.body["data"]) == kinds.count("ad_set")
    ads = await sandbox.get(f"/{copied_id}/ads")
    assert len(ads.body["data"]) == kinds.count("ad")
    assert (await sandbox.get(f"/{copied_id}/insights", date_preset="last_7d")).body == {"data": []}
    await sandbox.admin.advance_clock(3600)
    assert (await sandbox.get(f"/{copied_id}/insights", date_preset="today")).body["data"]
    log = await sandbox.admin.writes()
    assert [(w["kind"], w["ok"]) for w in log] == [("async_batch", True), ("copies", True)]


async def test_an_async_batch_runs_once_its_delay_has_passed(legacy_sandbox: Sandbox) -> None:
    sandbox = legacy_sandbox
    campaign = await _cbo_campaign(sandbox)
    await sandbox.admin.set_faults(async_batch_delay_s=60)
    set_id = await _async_copy(sandbox, campaign["id"], deep_copy="true")
    pending = await sandbox.get(f"/{set_id}/requests", fields="status,result")
    assert [r["status"] for r in pending.body["data"]] == ["IN_PROGRESS"]
    assert (await sandbox.get(f"/{set_id}")).body["is_completed"] is False
    before = await sandbox.admin.world()
    await sandbox.admin.advance_clock(60)
    done = await sandbox.get(f"/{set_id}/requests", fields="status,result")
    assert [r["status"] for r in done.body["data"]] == ["SUCCESS"]
    assert (await sandbox.admin.world())["campaigns"] == before["campaigns"] + 1


async def test_an_asynchronous_copy_holds_at_most_51_objects() -> None:
    async with running_sandbox(
        scenario="bench", accounts=1, campaigns_per_account=1, adsets_per_campaign=30, app="legacy"
    ) as box:
        campaigns = await box.get("/act_2001/campaigns")
        (campaign,) = campaigns.body["data"]
        adbatch = [{"relative_url": f"{campaign['id']}/copies", "body": "deep_copy=true"}]
        reply = await box.post("/act_2001/async_batch_requests", name="big", adbatch=adbatch)
        requests = await box.get(f"/{reply.body['id']}/requests", fields="status,result")
        (request,) = requests.body["data"]
        assert request["status"] == "ERROR"
        error = request["result"]["error"]
        assert (error["code"], error["error_subcode"]) == (100, 1885194)
        assert (await box.admin.world())["campaigns"] == 1


async def test_copy_an_ad_set_paused_by_default(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    reply = await sandbox.post(f"/{adset['id']}/copies")
    copied = reply.body["copied_adset_id"]
    copy = await sandbox.get(f"/{copied}", fields="name,status,campaign_id,daily_budget")
    assert copy.body["status"] == "PAUSED"
    assert copy.body["name"].endswith(" - Copy")
    assert copy.body["daily_budget"] == adset["daily_budget"]


async def test_write_log_records_every_post_without_the_token(sandbox: Sandbox) -> None:
    campaign = await _cbo_campaign(sandbox)
    await sandbox.post(f"/{campaign['id']}", status="PAUSED")
    await sandbox.post(f"/{campaign['id']}", daily_budget="1")
    await sandbox.post(f"/{campaign['id']}/copies")
    log = await sandbox.admin.writes()
    assert [(w["id"], w["kind"], w["ok"]) for w in log] == [
        (campaign["id"], "update", True),
        (campaign["id"], "update", False),
        (campaign["id"], "copies", True),
    ]
    assert log[0]["params"] == {"status": "PAUSED"}
    assert log[1]["error"]["code"] == 100
    assert log[0]["error"] is None
    assert log[0]["at"].startswith("2026-12-01T15:00:00")
    assert TOKEN not in str(log)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_ITEM = st.fixed_dictionaries(
    {},
    optional={
        "relative_url": st.one_of(st.text(max_size=30), st.just("act_1001/copies"), _JSON),
        "method": st.sampled_from(["POST", "GET", "post", "DELETE"]) | _JSON,
        "body": st.one_of(st.text(max_size=30), st.dictionaries(st.text(max_size=8), _JSON), _JSON),
        "name": _JSON,
    },
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(adbatch=st.one_of(st.lists(_ITEM | _JSON, max_size=4), _JSON), name=st.text(max_size=10))
async def test_any_adbatch_is_a_request_set_or_error_100(
    legacy_sandbox: Sandbox, adbatch: Any, name: str
) -> None:
    sandbox = legacy_sandbox
    reply = await sandbox.post("/act_1001/async_batch_requests", name=name, adbatch=adbatch)
    if reply.status == 200:
        requests = await sandbox.get(f"/{reply.body['id']}/requests", fields="status,result")
        assert {r["status"] for r in requests.body["data"]} <= {"SUCCESS", "ERROR"}
    else:
        assert (reply.status, reply.error["code"]) == (400, 100)
