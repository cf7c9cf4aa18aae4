"""The Batch API: size limit, per-item answers, counting, headers, null items."""

from __future__ import annotations

from typing import Any

import orjson
from sandbox_helpers import TOKEN, Sandbox


def _insights_item(campaign_id: str) -> dict[str, Any]:
    return {
        "method": "GET",
        "relative_url": f"v27.0/{campaign_id}/insights?date_preset=last_7d&fields=spend",
    }


async def _campaign_ids(box: Sandbox) -> list[str]:
    reply = await box.get("/act_1001/campaigns", limit="100")
    return [c["id"] for c in reply.body["data"]]


async def test_fifty_items_run_and_fifty_one_are_refused(sandbox: Sandbox) -> None:
    ids = await _campaign_ids(sandbox)
    items = [{"method": "GET", "relative_url": f"{ids[i % len(ids)]}?fields=id"} for i in range(50)]
    ok = await sandbox.batch(items)
    assert ok.status == 200
    assert len(ok.body) == 50
    assert all(item["code"] == 200 for item in ok.body)
    assert orjson.loads(ok.body[7]["body"]) == {"id": ids[7 % len(ids)]}

    refused = await sandbox.batch([*items, items[0]])
    assert refused.status == 400
    assert refused.error["code"] == 100
    assert "Maximum batch size is 50" in refused.error["message"]


async def test_batch_of_ten_is_one_request_and_ten_calls(sandbox: Sandbox) -> None:
    ids = await _campaign_ids(sandbox)
    await sandbox.admin.clear_stats()
    reply = await sandbox.batch([_insights_item(i) for i in ids[:10]])
    assert reply.status == 200
    assert len(reply.body) == 10
    stats = await sandbox.admin.stats()
    assert stats["http_requests"] == 1
    assert stats["http_by_method"]["POST"] == 1
    assert stats["counted_calls"] == 10
    assert stats["calls_by_kind"]["insights"] == 10
    assert stats["calls_by_account"] == {"act_1001": 10}


async def test_items_fail_on_their_own(sandbox: Sandbox) -> None:
    ids = await _campaign_ids(sandbox)
    reply = await sandbox.batch(
        [
            _insights_item(ids[0]),
            {"method": "GET", "relative_url": "999999999999999?fields=id"},
            {"method": "POST", "relative_url": ids[1], "body": "daily_budget=5"},
            {"method": "POST", "relative_url": f"v27.0/{ids[0]}", "body": "name=Batch+renamed"},
        ]
    )
    codes = [item["code"] for item in reply.body]
    assert codes == [200, 400, 400, 200]
    assert orjson.loads(reply.body[1]["body"])["error"]["code"] == 100
    assert orjson.loads(reply.body[3]["body"]) == {"success": True}
    renamed = await sandbox.get(f"/{ids[0]}", fields="name")
    assert renamed.body["name"] == "Batch renamed"


async def test_items_carry_usage_headers_unless_told_not_to(sandbox: Sandbox) -> None:
    ids = await _campaign_ids(sandbox)
    reply = await sandbox.batch([_insights_item(ids[0])])
    names = {h["name"] for h in reply.body[0]["headers"]}
    assert {"X-App-Usage", "X-Ad-Account-Usage", "X-Business-Use-Case-Usage"} <= names
    assert "X-App-Usage" in reply.headers
    bare = await sandbox.batch([_insights_item(ids[0])], include_headers="false")
    assert "headers" not in bare.body[0]


async def test_item_paging_next_is_an_absolute_url(sandbox: Sandbox) -> None:
    reply = await sandbox.batch([{"method": "GET", "relative_url": "act_1001/campaigns?limit=2"}])
    body = orjson.loads(reply.body[0]["body"])
    link = body["paging"]["next"]
    assert link.startswith(f"{sandbox.graph}/act_1001/campaigns?")
    follow = await sandbox.fetch("GET", link)
    assert follow.status == 200
    assert len(follow.body["data"]) == 2


async def test_null_items_under_faults(sandbox: Sandbox) -> None:
    ids = await _campaign_ids(sandbox)
    await sandbox.admin.set_faults(null_item_rate=0.5)
    reply = await sandbox.batch([_insights_item(ids[i % len(ids)]) for i in range(40)])
    nulls = [item for item in reply.body if item is None]
    assert 0 < len(nulls) < 40
    assert all(item["code"] == 200 for item in reply.body if item is not None)


async def test_item_tokens_override_and_a_batch_without_any_token_fails_per_item(
    sandbox: Sandbox,
) -> None:
    await sandbox.admin.set_faults(revoked_tokens=[TOKEN])
    another = await sandbox.admin.demo_token("act_1001")
    item = {"method": "GET", "relative_url": f"act_1001?fields=id&access_token={another}"}
    reply = await sandbox.batch([item, {"method": "GET", "relative_url": "act_1001"}])
    assert [i["code"] for i in reply.body] == [200, 400]
    assert orjson.loads(reply.body[1]["body"])["error"]["code"] == 190
    nothing = await sandbox.batch([{"method": "GET", "relative_url": "act_1001"}], token=None)
    assert orjson.loads(nothing.body[0]["body"])["error"]["code"] == 104
