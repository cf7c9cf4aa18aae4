"""Ad set bids: ``bid_strategy`` and ``bid_amount`` read, ``POST /{adset_id}`` with
``bid_amount`` written, refused as Meta refuses it, and logged."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_helpers import Sandbox

FIELDS = "id,name,bid_strategy,bid_amount,daily_budget"


async def adsets(box: Sandbox, account: str = "act_1001") -> list[dict[str, Any]]:
    reply = await box.get(f"/{account}/adsets", fields=FIELDS, limit="200")
    return list(reply.body["data"])


async def capped(box: Sandbox, account: str = "act_1001") -> dict[str, Any]:
    return next(a for a in await adsets(box, account) if "bid_amount" in a)


async def test_some_demo_ad_sets_bid_with_a_cap_the_others_without(sandbox: Sandbox) -> None:
    found = await adsets(sandbox)
    strategies = {a["bid_strategy"] for a in found}
    assert strategies == {"LOWEST_COST_WITHOUT_CAP", "LOWEST_COST_WITH_BID_CAP", "COST_CAP"}
    for adset in found:
        has_bid = adset["bid_strategy"] != "LOWEST_COST_WITHOUT_CAP"
        assert ("bid_amount" in adset) == has_bid
    bid = await capped(sandbox)
    assert isinstance(bid["bid_amount"], int)  # a JSON number, not a string like budgets
    yen = await capped(sandbox, "act_1004")
    assert (yen["bid_strategy"], yen["bid_amount"]) == ("LOWEST_COST_WITH_BID_CAP", 600)


async def test_a_bid_write_changes_the_bid_and_is_logged(sandbox: Sandbox) -> None:
    adset = await capped(sandbox)
    reply = await sandbox.post(f"/{adset['id']}", bid_amount="525")
    assert reply.body == {"success": True}
    after = await sandbox.get(f"/{adset['id']}", fields="bid_amount,bid_strategy")
    assert after.body["bid_amount"] == 525
    assert after.body["bid_strategy"] == adset["bid_strategy"]
    (write,) = await sandbox.admin.writes()
    assert (write["id"], write["params"], write["ok"]) == (
        adset["id"],
        {"bid_amount": "525"},
        True,
    )
    log = await sandbox.get(f"/{adset['id']}/activities", fields="event_type,extra_data")
    (event,) = log.body["data"]
    assert event["event_type"] == "update_ad_set_bidding"
    extra = orjson.loads(event["extra_data"])
    assert (extra["old_value"], extra["new_value"], extra["type"]) == (
        adset["bid_amount"],
        525,
        "bid_amount",
    )


async def test_a_bid_on_an_ad_set_without_a_cap_is_refused_and_changes_nothing(
    sandbox: Sandbox,
) -> None:
    free = next(a for a in await adsets(sandbox) if "bid_amount" not in a)
    reply = await sandbox.post(f"/{free['id']}", bid_amount="500")
    assert reply.status == 400 and reply.error["code"] == 100
    assert "LOWEST_COST_WITHOUT_CAP" in reply.error["message"]
    after = await sandbox.get(f"/{free['id']}", fields="bid_amount,bid_strategy")
    assert "bid_amount" not in after.body
    campaigns = await sandbox.get("/act_1001/campaigns", fields="id", limit="1")
    campaign = campaigns.body["data"][0]["id"]
    assert (await sandbox.post(f"/{campaign}", bid_amount="500")).error["code"] == 100


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.one_of(st.integers(-(2**40), 2**40).map(str), st.text(max_size=8)))
async def test_any_bid_amount_is_a_positive_int32_or_error_100(sandbox: Sandbox, raw: str) -> None:
    adset = await capped(sandbox)
    before = (await sandbox.get(f"/{adset['id']}", fields="bid_amount")).body["bid_amount"]
    reply = await sandbox.post(f"/{adset['id']}", bid_amount=raw)
    after = (await sandbox.get(f"/{adset['id']}", fields="bid_amount")).body["bid_amount"]
    try:
        valid = 0 < int(raw) <= 2**31 - 1
    except ValueError:
        valid = False
    if valid:
        assert reply.body == {"success": True} and after == int(raw)
    else:
        assert reply.error["code"] == 100 and after == before
