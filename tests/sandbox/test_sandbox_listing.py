"""Reads: edges, cursors, filtering, single and multi-id reads, tokens and paths."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_helpers import TOKEN, Sandbox, running_sandbox


async def _all_pages(box: Sandbox, path: str, **params: Any) -> list[dict[str, Any]]:
    """Follow ``paging.next`` to the end (the last page has no ``next``)."""
    reply = await box.get(path, **params)
    items = list(reply.body["data"])
    while "next" in reply.body.get("paging", {}):
        reply = await box.fetch("GET", reply.body["paging"]["next"])
        items += reply.body["data"]
    return items


async def test_cursor_pages_are_complete_and_disjoint() -> None:
    async with running_sandbox(scenario="bench", accounts=1, campaigns_per_account=53) as box:
        everything = await box.get("/act_2001/campaigns", limit="100")
        paged = await _all_pages(box, "/act_2001/campaigns", limit="10")
        ids = [c["id"] for c in paged]
        assert len(ids) == len(set(ids)) == 53
        assert ids == [c["id"] for c in everything.body["data"]]
        stats = await box.admin.stats()
        assert stats["calls_by_kind"]["list"] == 1 + 6


async def test_next_link_carries_the_token_and_the_query() -> None:
    async with running_sandbox(scenario="bench", accounts=1, campaigns_per_account=3) as box:
        first = await box.get("/act_2001/campaigns", limit="2", fields="id,name")
        link = first.body["paging"]["next"]
        assert link.startswith(f"{box.graph}/act_2001/campaigns?")
        assert f"access_token={TOKEN}" in link
        assert "fields=id%2Cname" in link
        last = await box.fetch("GET", link)
        assert len(last.body["data"]) == 1
        assert "next" not in last.body["paging"]
        assert set(last.body["data"][0]) == {"id", "name"}


async def test_before_cursor_walks_back(sandbox: Sandbox) -> None:
    first = await sandbox.get("/act_1001/campaigns", limit="4")
    second = await sandbox.get(
        "/act_1001/campaigns", limit="4", after=first.body["paging"]["cursors"]["after"]
    )
    back = await sandbox.get(
        "/act_1001/campaigns", limit="4", before=second.body["paging"]["cursors"]["before"]
    )
    assert back.body["data"] == first.body["data"]


async def test_filtering_by_name_and_effective_status(sandbox: Sandbox) -> None:
    tagged = await sandbox.get(
        "/act_1001/campaigns",
        fields="name,effective_status",
        filtering=[{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}],
        effective_status=["ACTIVE"],
        limit="100",
    )
    names = [c["name"] for c in tagged.body["data"]]
    assert names
    assert all("[AUTO]" in name for name in names)
    assert {c["effective_status"] for c in tagged.body["data"]} == {"ACTIVE"}
    paused = await sandbox.get("/act_1001/campaigns", effective_status=["PAUSED"], fields="status")
    assert [c["status"] for c in paused.body["data"]] == ["PAUSED"]


async def test_ad_sets_under_a_paused_campaign_are_campaign_paused(sandbox: Sandbox) -> None:
    paused = await sandbox.get("/act_1002/campaigns", effective_status=["PAUSED"])
    campaign_id = paused.body["data"][0]["id"]
    adsets = await sandbox.get(
        "/act_1002/adsets",
        fields="effective_status,status",
        filtering=[{"field": "campaign.id", "operator": "EQUAL", "value": campaign_id}],
    )
    assert adsets.body["data"]
    assert {a["effective_status"] for a in adsets.body["data"]} == {"CAMPAIGN_PAUSED"}
    assert {a["status"] for a in adsets.body["data"]} == {"ACTIVE"}
    edge = await sandbox.get(f"/{campaign_id}/adsets", fields="effective_status")
    assert len(edge.body["data"]) == len(adsets.body["data"])


async def test_filtering_numbers_and_lists(sandbox: Sandbox) -> None:
    big = await sandbox.get(
        "/act_1001/campaigns",
        fields="daily_budget",
        filtering=[{"field": "daily_budget", "operator": "GREATER_THAN", "value": 15000}],
    )
    assert big.body["data"]
    assert all(int(c["daily_budget"]) > 15000 for c in big.body["data"])
    ids = [c["id"] for c in (await sandbox.get("/act_1001/campaigns", limit="3")).body["data"]]
    chosen = await sandbox.get(
        "/act_1001/campaigns",
        filtering=[{"field": "campaign.id", "operator": "IN", "value": ids[1:]}],
    )
    assert [c["id"] for c in chosen.body["data"]] == ids[1:]
    budgets = await sandbox.get(
        "/act_1001/adsets",
        fields="daily_budget",
        filtering=[
            {"field": "adset.daily_budget", "operator": "LESS_THAN_OR_EQUAL", "value": 5000}
        ],
    )
    assert all(int(a["daily_budget"]) <= 5000 for a in budgets.body["data"])


async def test_unknown_filter_field_operator_or_field_is_error_100(sandbox: Sandbox) -> None:
    for params in (
        {"filtering": [{"field": "colour", "operator": "EQUAL", "value": "red"}]},
        {"filtering": [{"field": "name", "operator": "LIKE", "value": "x"}]},
        {"filtering": "not json"},
        {"fields": "id,colour"},
        {"effective_status": ["SLEEPING"]},
    ):
        reply = await sandbox.get("/act_1001/campaigns", **params)
        assert (reply.status, reply.error["code"]) == (400, 100), params


async def test_reads_by_id_and_by_ids(legacy_sandbox: Sandbox) -> None:
    sandbox = legacy_sandbox
    ids = [c["id"] for c in (await sandbox.get("/act_1001/campaigns", limit="2")).body["data"]]
    adset = (await sandbox.get("/act_1001/adsets", limit="1")).body["data"][0]["id"]
    one = await sandbox.get(f"/{ids[0]}", fields="id,name,objective")
    assert one.body["id"] == ids[0]
    assert one.body["objective"].startswith("OUTCOME_")
    many = await sandbox.get("/", ids=",".join([*ids, adset]), fields="id,name")
    assert set(many.body) == {*ids, adset}
    assert many.body[adset]["id"] == adset
    missing = await sandbox.get("/", ids=f"{ids[0]},999999999999999", fields="id")
    assert missing.error["code"] == 803
    assert "999999999999999" in missing.error["message"]
    unknown = await sandbox.get("/999999999999999", fields="id")
    assert unknown.error["code"] == 100
    assert unknown.error["error_subcode"] == 33


async def test_an_ad_account_outside_the_world_is_a_permission_error(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/act_4242/campaigns")
    assert reply.status == 403
    assert reply.error["code"] == 200


async def test_the_served_versions_or_none_and_header_tokens(sandbox: Sandbox) -> None:
    for prefix in ("/v25.0", "/v26.0", "/v27.0", ""):
        async with sandbox.session.get(
            f"{sandbox.url}{prefix}/act_1001", headers={"Authorization": f"OAuth {TOKEN}"}
        ) as response:
            assert response.status == 200
            assert (await response.json())["id"] == "act_1001"
    async with sandbox.session.get(
        f"{sandbox.url}/act_1001", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as response:
        assert response.status == 200


async def test_a_missing_token_is_error_104(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/act_1001/campaigns", token=None)
    assert reply.status == 400
    assert reply.error["code"] == 104
    assert reply.error["type"] == "OAuthException"
    assert reply.error["fbtrace_id"]


async def test_unknown_paths_are_error_100(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/act_1001/adcreatives")
    assert reply.error["code"] == 100
    assert (await sandbox.get("/", fields="id")).error["code"] == 100


async def test_a_cursor_whose_item_left_the_listing_is_error_2642(sandbox: Sandbox) -> None:
    active = [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]
    first = await sandbox.get("/act_1001/campaigns", limit="3", filtering=active)
    last_on_page = first.body["data"][-1]["id"]
    await sandbox.post(f"/{last_on_page}", status="PAUSED")  # it leaves the filtered listing
    after = first.body["paging"]["cursors"]["after"]
    reply = await sandbox.get("/act_1001/campaigns", limit="3", filtering=active, after=after)
    assert reply.status == 400
    assert (reply.error["code"], reply.error["message"]) == (2642, "(#2642) Invalid cursors values")
    before = await sandbox.get(
        "/act_1001/campaigns", filtering=active, before=first.body["paging"]["cursors"]["before"]
    )
    assert before.body["data"] == []  # the first item is still listed: nothing before it


async def test_a_page_follows_on_when_another_item_left_the_listing(sandbox: Sandbox) -> None:
    active = [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]
    everything = await _all_pages(sandbox, "/act_1001/campaigns", filtering=active)
    first = await sandbox.get("/act_1001/campaigns", limit="3", filtering=active)
    await sandbox.post(f"/{first.body['data'][0]['id']}", status="PAUSED")
    after = first.body["paging"]["cursors"]["after"]
    rest = await sandbox.get("/act_1001/campaigns", limit="100", filtering=active, after=after)
    assert [c["id"] for c in first.body["data"] + rest.body["data"]] == [
        c["id"] for c in everything
    ]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cursor=st.one_of(
        st.text(max_size=40),
        st.binary(max_size=30).map(lambda raw: base64.urlsafe_b64encode(raw).decode()),
        st.tuples(st.integers(-5, 10**6), st.text(max_size=20)).map(
            lambda pair: base64.urlsafe_b64encode(f"{pair[0]}:{pair[1]}".encode()).decode()
        ),
    ),
    direction=st.sampled_from(["after", "before"]),
)
async def test_any_cursor_is_a_page_or_a_graph_error(
    sandbox: Sandbox, cursor: str, direction: str
) -> None:
    reply = await sandbox.get("/act_1001/campaigns", limit="2", **{direction: cursor})
    if reply.status == 200:
        assert isinstance(reply.body["data"], list)
    else:
        assert reply.status == 400
        assert reply.error["code"] in (100, 2642)


async def test_an_expired_version_gets_metas_2635(sandbox: Sandbox) -> None:
    """v24.0 expired on 2026-11-10; v25.0 expires on 2027-02-23 (Meta's version history)."""
    for prefix in ("/v19.0", "/v24.0"):
        async with sandbox.session.get(
            f"{sandbox.url}{prefix}/act_1001", params={"access_token": TOKEN}
        ) as response:
            body = await response.json()
        assert response.status == 400
        assert body["error"]["code"] == 2635
        assert body["error"]["type"] == "OAuthException"
        assert body["error"]["message"].startswith(
            "(#2635) You are calling a deprecated version of the Ads API."
        )
    batch = [{"method": "GET", "relative_url": "v24.0/act_1001"}, {"relative_url": "act_1001"}]
    first, second = (await sandbox.batch(batch)).body
    assert (first["code"], second["code"]) == (400, 200)
    assert '"code":2635' in first["body"]
    await sandbox.admin.set_clock(datetime(2027, 2, 23, 0, 0, tzinfo=UTC))
    async with sandbox.session.get(
        f"{sandbox.url}/v25.0/act_1001", params={"access_token": TOKEN}
    ) as response:
        assert (await response.json())["error"]["code"] == 2635
    async with sandbox.session.get(
        f"{sandbox.url}/v28.0/act_1001", params={"access_token": TOKEN}
    ) as response:
        assert (await response.json())["error"]["code"] == 100
