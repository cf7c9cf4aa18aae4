"""Ads: their Insights add up to their ad set's, pauses, results, rankings, writes and copies."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_helpers import NOON_ISH, Sandbox

HOURLY = "hourly_stats_aggregated_by_advertiser_time_zone"
FIELDS = (
    "adset_id,ad_id,spend,impressions,clicks,unique_clicks,inline_link_clicks,actions,"
    "action_values,results"
)
RANKINGS = ("quality_ranking", "engagement_rate_ranking", "conversion_rate_ranking")


def additive(row: dict[str, Any]) -> Counter[str]:
    """A row's additive numbers: money in cents, counts, each action, results but reach."""
    numbers: Counter[str] = Counter(
        spend=round(float(row.get("spend", "0")) * 100),
        impressions=int(row.get("impressions", 0)),
        clicks=int(row.get("clicks", 0)),
        link_clicks=int(row.get("inline_link_clicks", 0)),
    )
    for item in row.get("actions", []):
        numbers[f"action:{item['action_type']}"] += int(item["value"])
    for item in row.get("action_values", []):
        numbers[f"value:{item['action_type']}"] += round(float(item["value"]) * 100)
    for result in row.get("results", []):
        if result["indicator"] != "reach":  # people are not added up (like reach)
            numbers[f"result:{result['indicator']}"] += int(
                result.get("values", [{"value": "0"}])[0]["value"]
            )
    return +numbers


def by_key(
    rows: list[dict[str, Any]], *, key: tuple[str, ...]
) -> dict[tuple[str, ...], Counter[str]]:
    """The rows' additive numbers summed by ``key`` (fields of the rows)."""
    out: dict[tuple[str, ...], Counter[str]] = {}
    for row in rows:
        out.setdefault(tuple(str(row.get(name)) for name in key), Counter()).update(additive(row))
    return out


async def rows_of(box: Sandbox, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every row of an Insights request (page after page), unified attribution."""
    rows: list[dict[str, Any]] = []
    after: dict[str, str] = {}
    while True:
        reply = await box.get(
            path, limit="5000", use_unified_attribution_setting="true", **params, **after
        )
        assert reply.status == 200, reply.body
        rows += reply.body["data"]
        if "next" not in reply.body.get("paging", {}):
            return rows
        after = {"after": reply.body["paging"]["cursors"]["after"]}


async def _ads(box: Sandbox, node: str = "act_1001", **params: Any) -> list[dict[str, Any]]:
    fields = "id,name,status,effective_status,adset_id,campaign_id"
    reply = await box.get(f"/{node}/ads", fields=fields, limit="500", **params)
    assert reply.status == 200, reply.body
    return list(reply.body["data"])


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(1, 500),
    account=st.sampled_from(["act_1001", "act_1003", "act_1004"]),
    clock=st.datetimes(datetime(2026, 10, 5), datetime(2027, 1, 20)),
    days_back=st.integers(0, 60),
    length=st.integers(0, 20),
    increment=st.sampled_from(["all_days", "1", "7", "hourly"]),
    pause=st.one_of(st.none(), st.tuples(st.integers(0, 200), st.integers(1, 40 * 3600))),
)
async def test_ads_add_up_to_their_ad_set_for_every_period_and_hour(
    sandbox: Sandbox,
    seed: int,
    account: str,
    clock: datetime,
    days_back: int,
    length: int,
    increment: str,
    pause: tuple[int, int] | None,
) -> None:
    await sandbox.admin.reset(seed=seed)
    await sandbox.admin.set_clock(clock.replace(tzinfo=UTC))
    if pause is not None:  # an ad paused some hours ago, whatever it does to its ad set
        ads = await _ads(sandbox, account)
        await sandbox.admin.advance_clock(-pause[1])
        await sandbox.post(f"/{ads[pause[0] % len(ads)]['id']}", status="PAUSED")
        await sandbox.admin.advance_clock(pause[1])
    until = clock.date() - timedelta(days=days_back)
    since = until - timedelta(days=min(length, 3) if increment == "hourly" else length)
    params: dict[str, Any] = {
        "time_range": {"since": since.isoformat(), "until": until.isoformat()},
        "fields": FIELDS,
    }
    if increment == "hourly":
        params["breakdowns"] = HOURLY
    else:
        params["time_increment"] = increment
    ads = await rows_of(sandbox, f"/{account}/insights", level="ad", **params)
    adsets = await rows_of(sandbox, f"/{account}/insights", level="adset", **params)

    key = ("adset_id", "date_start", HOURLY)
    assert by_key(ads, key=key) == by_key(adsets, key=key)
    assert all(additive(row) for row in ads)  # an ad's row says it delivered something


async def test_pausing_an_ad_stops_it_at_that_instant_and_its_siblings_take_the_ad_set(
    sandbox: Sandbox,
) -> None:
    adset = await _adset_with_ads(sandbox, 2)
    first, second = (ad["id"] for ad in await _ads(sandbox, adset))
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 15, 0, tzinfo=UTC))  # 10:00 New York
    before = await _today_by_ad(sandbox, adset)
    adset_before = await _today(sandbox, adset)

    assert (await sandbox.post(f"/{first}", status="PAUSED")).body == {"success": True}
    await sandbox.admin.advance_clock(4 * 3600)
    after = await _today_by_ad(sandbox, adset)
    assert after[first] == before[first]  # nothing accrues while paused, nothing is lost
    assert after[second]["spend"] > before[second]["spend"]
    # The ad set spends on: its other ad takes what it delivers.
    adset_after = await _today(sandbox, adset)
    assert adset_after["spend"] > adset_before["spend"]
    assert after[first] + after[second] == adset_after

    hours = await rows_of(
        sandbox,
        f"/{adset}/insights",
        level="ad",
        date_preset="today",
        breakdowns=HOURLY,
        fields="ad_id,impressions",
    )
    paused_hours = {row[HOURLY][:2] for row in hours if row["ad_id"] == first}
    assert paused_hours == {f"{hour:02d}" for hour in range(10)}  # 00:00–09:59, not after
    listed = {ad["id"]: ad for ad in await _ads(sandbox, adset)}
    assert (listed[first]["status"], listed[first]["effective_status"]) == ("PAUSED", "PAUSED")

    await sandbox.post(f"/{first}", status="ACTIVE")
    await sandbox.admin.advance_clock(2 * 3600)
    resumed = await _today_by_ad(sandbox, adset)
    assert resumed[first]["spend"] > before[first]["spend"]


async def test_an_ad_set_whose_ads_are_all_paused_delivers_nothing(sandbox: Sandbox) -> None:
    adset = await _adset_with_ads(sandbox, 2)
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 15, 0, tzinfo=UTC))
    before = await _today(sandbox, adset)
    for ad in await _ads(sandbox, adset):
        await sandbox.post(f"/{ad['id']}", status="PAUSED")
    await sandbox.admin.advance_clock(5 * 3600)
    assert await _today(sandbox, adset) == before
    await sandbox.admin.advance_clock(24 * 3600)
    assert await rows_of(sandbox, f"/{adset}/insights", date_preset="today") == []
    learning = await sandbox.get(f"/{adset}", fields="effective_status")
    assert learning.body["effective_status"] == "ACTIVE"  # the ad set itself is not paused


async def _adset_with_ads(box: Sandbox, count: int, account: str = "act_1001") -> str:
    ads = Counter(ad["adset_id"] for ad in await _ads(box, account, effective_status=["ACTIVE"]))
    delivering = {
        row["adset_id"]
        for row in await rows_of(
            box, f"/{account}/insights", level="adset", date_preset="yesterday", fields="adset_id"
        )
    }
    return next(adset for adset, n in ads.items() if n == count and adset in delivering)


async def _today(box: Sandbox, object_id: str) -> Counter[str]:
    rows = await rows_of(box, f"/{object_id}/insights", date_preset="today", fields=FIELDS)
    (row,) = rows
    return additive(row)


async def _today_by_ad(box: Sandbox, adset: str) -> dict[str, Counter[str]]:
    rows = await rows_of(box, f"/{adset}/insights", level="ad", date_preset="today", fields=FIELDS)
    return {row["ad_id"]: additive(row) for row in rows}


async def test_an_ads_own_insights_and_the_accounts_filtered_by_ad_id_agree(
    sandbox: Sandbox,
) -> None:
    ads = [ad["id"] for ad in await _ads(sandbox)][:4]
    fields = (
        f"{FIELDS},ad_name,adset_name,campaign_id,campaign_name,account_id,{','.join(RANKINGS)}"
    )
    filtering = [{"field": "ad.id", "operator": "IN", "value": ads}]
    params = {"level": "ad", "date_preset": "last_7d", "fields": fields, "filtering": filtering}
    filtered = await rows_of(sandbox, "/act_1001/insights", **params)
    assert [row["ad_id"] for row in filtered] == ads
    for row in filtered:
        own = await rows_of(
            sandbox, f"/{row['ad_id']}/insights", date_preset="last_7d", fields=fields
        )
        assert own == [row]
        assert row["account_id"] == "1001"
        assert {row[name] for name in RANKINGS} <= {
            "BELOW_AVERAGE_10",
            "BELOW_AVERAGE_20",
            "BELOW_AVERAGE_35",
            "AVERAGE",
            "ABOVE_AVERAGE",
        }

    # Asynchronous report runs answer the same rows.
    run = await sandbox.post("/act_1001/insights", use_unified_attribution_setting="true", **params)
    run_id = run.body["report_run_id"]
    for _ in range(3):
        await sandbox.get(f"/{run_id}")
    assert (await sandbox.get(f"/{run_id}/insights", limit="100")).body["data"] == filtered


async def test_rankings_are_at_ad_level_only_and_unknown_for_few_impressions(
    sandbox: Sandbox,
) -> None:
    fields = ",".join(("impressions", "ad_id", *RANKINGS))
    for level in ("account", "campaign", "adset"):
        for row in await rows_of(sandbox, "/act_1001/insights", level=level, fields=fields):
            assert not set(RANKINGS) & set(row)  # Meta leaves them out above ads
    hours = await rows_of(
        sandbox,
        "/act_1001/insights",
        level="ad",
        date_preset="yesterday",
        fields=fields,
        breakdowns=HOURLY,
    )
    for row in hours:
        expected = int(row["impressions"]) < 500
        assert (row["quality_ranking"] == "UNKNOWN") == expected
    assert any(int(row["impressions"]) < 500 for row in hours)


async def test_set_ad_factors_moves_its_share_and_rankings_not_its_ad_sets(
    sandbox: Sandbox,
) -> None:
    adset = await _adset_with_ads(sandbox, 2)
    first, second = (ad["id"] for ad in await _ads(sandbox, adset))
    fields = f"{FIELDS},{','.join(RANKINGS)}"
    before = await rows_of(sandbox, f"/{adset}/insights", date_preset="last_7d", fields=FIELDS)
    factors = await sandbox.admin.set_ad_factors(
        first, delivery=160, clicks=130, conversions=140, quality=0.9
    )
    assert factors == {"delivery": 160, "clicks": 130, "conversions": 140, "quality": 0.9}
    assert (await sandbox.admin.object(first))["factors"] == factors
    await sandbox.admin.set_ad_factors(second, delivery=40, clicks=70, conversions=60, quality=0)
    ads = {
        row["ad_id"]: row
        for row in await rows_of(
            sandbox, f"/{adset}/insights", level="ad", date_preset="last_7d", fields=fields
        )
    }
    assert {ads[first][name] for name in RANKINGS} == {"ABOVE_AVERAGE"}
    assert {ads[second][name] for name in RANKINGS} == {"BELOW_AVERAGE_10"}
    assert additive(ads[first])["spend"] > 3 * additive(ads[second])["spend"]
    after = await rows_of(sandbox, f"/{adset}/insights", date_preset="last_7d", fields=FIELDS)
    assert after == before
    refused = await sandbox.fetch(
        "POST", f"{sandbox.url}/_sandbox/ads/{first}/factors", json={"clicks": 500}
    )
    assert refused.status == 400


async def test_results_name_each_ad_sets_optimisation_goal(sandbox: Sandbox) -> None:
    fields = "campaign_name,adset_id,optimization_goal,spend,actions,results,cost_per_result"
    rows = await rows_of(
        sandbox, "/act_1001/insights", level="adset", date_preset="last_7d", fields=fields
    )
    indicators = {}
    for row in rows:
        (result,) = row["results"]
        (cost,) = row["cost_per_result"]
        indicators[row["optimization_goal"]] = result["indicator"]
        assert cost["indicator"] == result["indicator"]
        if "values" not in result:  # no result: Meta leaves the values out, and the cost's
            assert "values" not in cost
            continue
        (value,) = result["values"]
        assert value["attribution_windows"] == ["default"]
        count = int(value["value"])
        assert float(cost["values"][0]["value"]) == pytest.approx(
            float(row["spend"]) / count, abs=1e-6
        )
        if result["indicator"].startswith("actions:"):
            action = result["indicator"].removeprefix("actions:")
            actions = {a["action_type"]: int(a["value"]) for a in row["actions"]}
            assert actions[action] == count
    assert indicators == {
        "OFFSITE_CONVERSIONS": "actions:offsite_conversion.fb_pixel_purchase",
        "LEAD_GENERATION": "actions:onsite_conversion.lead_grouped",
        "REACH": "reach",
    }
    creative_test = [row for row in rows if "Creative Test" in row["campaign_name"]]
    assert creative_test
    assert all("values" not in row["results"][0] for row in creative_test)  # never purchases

    account = await rows_of(sandbox, "/act_1001/insights", date_preset="last_7d", fields=fields)
    assert [r["indicator"] for r in account[0]["results"]] == [
        "actions:offsite_conversion.fb_pixel_purchase",
        "actions:onsite_conversion.lead_grouped",
        "reach",
    ]


async def test_an_ad_sets_optimisation_goal_can_change_and_its_results_follow(
    sandbox: Sandbox,
) -> None:
    adset = await _adset_with_ads(sandbox, 2)
    reply = await sandbox.post(f"/{adset}", optimization_goal="LINK_CLICKS")
    assert reply.body == {"success": True}
    assert (await sandbox.get(f"/{adset}", fields="optimization_goal")).body[
        "optimization_goal"
    ] == "LINK_CLICKS"
    (row,) = await rows_of(
        sandbox, f"/{adset}/insights", date_preset="yesterday", fields="inline_link_clicks,results"
    )
    assert row["results"] == [
        {
            "indicator": "actions:link_click",
            "values": [{"value": row["inline_link_clicks"], "attribution_windows": ["default"]}],
        }
    ]
    stage = (await sandbox.get(f"/{adset}", fields="learning_stage_info")).body
    assert stage["learning_stage_info"]["status"] == "LEARNING"  # a new goal: learning again
    activity = await sandbox.get(f"/{adset}/activities", fields="event_type")
    assert activity.body["data"][0]["event_type"] == "update_ad_set_optimization_goal"

    unknown = await sandbox.post(f"/{adset}", optimization_goal="SALES")
    assert unknown.error["message"].startswith("(#100) Param optimization_goal must be one of {")
    unsupported = await sandbox.post(f"/{adset}", optimization_goal="THRUPLAY")
    assert "not supported by the sandbox" in unsupported.error["message"]
    campaign = (await sandbox.get(f"/{adset}", fields="campaign_id")).body["campaign_id"]
    on_campaign = await sandbox.post(f"/{campaign}", optimization_goal="REACH")
    assert on_campaign.error["code"] == 100


async def test_an_ad_takes_status_and_name_writes_and_logs_them(sandbox: Sandbox) -> None:
    ad = (await _ads(sandbox))[0]
    assert (await sandbox.post(f"/{ad['id']}", name="Renamed ad")).body == {"success": True}
    assert (await sandbox.post(f"/{ad['id']}", status="PAUSED")).body == {"success": True}
    read = await sandbox.get(f"/{ad['id']}", fields="name,status")
    assert (read.body["name"], read.body["status"]) == ("Renamed ad", "PAUSED")
    log = await sandbox.get(
        f"/{ad['id']}/activities", fields="event_type,object_type,extra_data,translated_event_type"
    )
    assert [(e["event_type"], e["object_type"]) for e in log.body["data"]] == [
        ("update_ad_run_status", "AD"),
        ("update_ad_friendly_name", "AD"),
    ]
    for param, value in (("daily_budget", "5000"), ("bid_amount", "300"), ("objective", "X")):
        refused = await sandbox.post(f"/{ad['id']}", **{param: value})
        assert (refused.status, refused.error["code"]) == (400, 100)
        assert param in refused.error["message"]
    changed = await sandbox.admin.ads_manager_change(ad["id"], status="ACTIVE")
    assert changed == {"success": True}
    assert [w["params"] for w in await sandbox.admin.writes() if w["ok"]] == [
        {"name": "Renamed ad"},
        {"status": "PAUSED"},
    ]


async def test_copying_an_ad_makes_a_new_ad_that_delivers_from_its_creation(
    sandbox: Sandbox,
) -> None:
    adset = await _adset_with_ads(sandbox, 2)
    source = (await _ads(sandbox, adset))[0]
    other = await _adset_with_ads(sandbox, 1)
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 15, 0, tzinfo=UTC))

    default = await sandbox.post(f"/{source['id']}/copies")
    copied = await sandbox.get(
        f"/{default.body['copied_ad_id']}", fields="name,status,adset_id,created_time"
    )
    assert copied.body == {
        "id": default.body["copied_ad_id"],
        "name": f"{source['name']} - Copy",
        "status": "PAUSED",
        "adset_id": adset,
        "created_time": "2026-12-01T15:00:00+0000",
    }
    assert set(default.body) == {"copied_ad_id"}

    moved = await sandbox.post(
        f"/{source['id']}/copies",
        adset_id=other,
        status_option="ACTIVE",
        rename_options={"rename_prefix": "New: ", "rename_strategy": "DEEP_RENAME"},
    )
    new_ad = moved.body["copied_ad_id"]
    read = await sandbox.get(f"/{new_ad}", fields="name,status,adset{id,name},campaign_id")
    assert read.body["name"] == f"New: {source['name']}"
    assert (read.body["status"], read.body["adset"]["id"]) == ("ACTIVE", other)
    assert await rows_of(sandbox, f"/{new_ad}/insights", date_preset="last_7d") == []
    await sandbox.admin.advance_clock(2 * 3600)
    (today,) = await rows_of(sandbox, f"/{new_ad}/insights", date_preset="today", fields=FIELDS)
    assert additive(today)["impressions"] > 0
    log = await sandbox.admin.writes()
    assert [(w["kind"], w["ok"]) for w in log] == [("copies", True), ("copies", True)]

    for params, message in (
        ({"creative_parameters": "{}"}, "creative_parameters is not supported by the sandbox"),
        ({"deep_copy": "true"}, "deep_copy is not supported"),
        ({"adset_id": "120229999999999"}, "adset_id must be an ad set of act_1001"),
        ({"status_option": "ARCHIVED"}, "status_option must be one of"),
    ):
        refused = await sandbox.post(f"/{source['id']}/copies", **params)
        assert refused.error["code"] == 100
        assert message in refused.error["message"]
    in_jp = await _adset_with_ads(sandbox, 2, "act_1004")
    refused = await sandbox.post(f"/{source['id']}/copies", adset_id=in_jp)
    assert "adset_id must be an ad set of act_1001" in refused.error["message"]


async def test_ads_list_with_their_parents_and_metas_effective_statuses(sandbox: Sandbox) -> None:
    reply = await sandbox.get(
        "/act_1001/ads",
        fields="id,name,status,effective_status,adset_id,adset{id,name},campaign_id,campaign{id,name}",
        limit="500",
    )
    ads = reply.body["data"]
    assert ads
    for ad in ads:
        assert ad["adset"]["id"] == ad["adset_id"]
        assert ad["campaign"]["id"] == ad["campaign_id"]
        assert set(ad["adset"]) == {"id", "name"}
        assert ad["adset"]["name"] in ad["name"]
    statuses = Counter(ad["effective_status"] for ad in ads)
    assert statuses["ADSET_PAUSED"] > 0  # under the paused ad set of Prospecting US 3
    assert statuses["CAMPAIGN_PAUSED"] > 0  # under the paused Catalog Sales US 1
    for status in ("ADSET_PAUSED", "CAMPAIGN_PAUSED", "ACTIVE"):
        listed = await _ads(sandbox, effective_status=[status])
        assert len(listed) == statuses[status]
        assert {ad["effective_status"] for ad in listed} == {status}

    for fields in ("adset{id,bid_amount{x}}", "creative{id}", "adset{colour}", "adset.limit(2)"):
        refused = await sandbox.get("/act_1001/ads", fields=fields)
        assert refused.error["code"] == 100, fields
    one = ads[0]
    read = await sandbox.get(f"/{one['id']}", fields="name,campaign{name,objective}")
    assert set(read.body["campaign"]) == {"id", "name", "objective"}
    adset = await sandbox.get(f"/{one['adset_id']}", fields="campaign{id,name}")
    assert adset.body["campaign"]["id"] == one["campaign_id"]


async def test_a_shallow_copy_of_an_ad_set_has_no_ads_and_no_delivery(sandbox: Sandbox) -> None:
    adset = await _adset_with_ads(sandbox, 2)
    copied = await sandbox.post(f"/{adset}/copies", status_option="ACTIVE")
    new = copied.body["copied_adset_id"]
    assert (await sandbox.get(f"/{new}/ads")).body == {"data": []}
    await sandbox.admin.advance_clock(3 * 3600)
    assert await rows_of(sandbox, f"/{new}/insights", date_preset="today") == []


def test_the_hypothesis_clock_range_covers_days_before_and_after_the_scenario() -> None:
    # The property above draws clocks from early October (objects still being created) to
    # late January (every day of last_90d a full day), so both edges are exercised.
    assert date(2026, 10, 5) < date(2026, 10, 11) < NOON_ISH.date() < date(2027, 1, 10)
