"""Graph's parameter forms: list parameters as JSON arrays, every preset, time slicing, breakdowns,
effective statuses — and Meta's error for anything Graph would refuse."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sandbox_helpers import Sandbox

from graph_sandbox.periods import PRESETS

# The sandbox fixture's clock: Tuesday 1 December 2026, 10:00 in New York.
EXPECTED_PERIODS = {
    "today": ("2026-12-01", "2026-12-01"),
    "yesterday": ("2026-11-30", "2026-11-30"),
    "this_month": ("2026-12-01", "2026-12-01"),
    "last_month": ("2026-11-01", "2026-11-30"),
    "this_quarter": ("2026-10-01", "2026-12-01"),
    "last_quarter": ("2026-07-01", "2026-09-30"),
    "this_year": ("2026-01-01", "2026-12-01"),
    "last_year": None,  # 2025: nothing existed yet, so no row
    "last_3d": ("2026-11-28", "2026-11-30"),
    "last_7d": ("2026-11-24", "2026-11-30"),
    "last_14d": ("2026-11-17", "2026-11-30"),
    "last_28d": ("2026-11-03", "2026-11-30"),
    "last_30d": ("2026-11-01", "2026-11-30"),
    "last_90d": ("2026-09-02", "2026-11-30"),
    "this_week_mon_today": ("2026-11-30", "2026-12-01"),
    "this_week_sun_today": ("2026-11-29", "2026-12-01"),
    "last_week_mon_sun": ("2026-11-23", "2026-11-29"),
    "last_week_sun_sat": ("2026-11-22", "2026-11-28"),
}


def _cents(row: dict[str, Any]) -> int:
    return round(float(row["spend"]) * 100)


async def _campaign(box: Sandbox, name_part: str, account: str = "act_1001") -> str:
    reply = await box.get(f"/{account}/campaigns", fields="id,name", limit="100")
    return str(next(c["id"] for c in reply.body["data"] if name_part in c["name"]))


async def _refused(box: Sandbox, path: str, **params: Any) -> str:
    reply = await box.get(path, **params)
    assert reply.status == 400, reply.body
    assert (reply.error["code"], reply.error["type"]) == (100, "OAuthException")
    assert "error_subcode" not in reply.error
    return str(reply.error["message"])


async def test_list_parameters_take_json_arrays_and_comma_lists_alike(sandbox: Sandbox) -> None:
    common = {"level": "campaign", "date_preset": "last_7d", "use_unified_attribution_setting": "1"}
    as_json = await sandbox.get(
        "/act_1001/insights",
        fields=["campaign_id", "spend", "actions"],
        action_breakdowns=["action_type"],
        **common,
    )
    as_text = await sandbox.get(
        "/act_1001/insights",
        fields="campaign_id,spend,actions",
        action_breakdowns="action_type",
        **common,
    )
    assert as_json.status == 200, as_json.body
    assert as_json.body["data"] == as_text.body["data"]
    assert len(as_json.body["data"]) == 11  # every campaign with delivery

    listing = await sandbox.get(
        "/act_1001/campaigns", fields=["id", "name"], effective_status=["ACTIVE", "PAUSED"]
    )
    same = await sandbox.get(
        "/act_1001/campaigns", fields="id,name", effective_status="ACTIVE,PAUSED"
    )
    assert listing.body["data"] == same.body["data"]
    assert set(listing.body["data"][0]) == {"id", "name"}
    node = await sandbox.get(f"/{listing.body['data'][0]['id']}", fields=["name", "status"])
    assert set(node.body) == {"id", "name", "status"}  # Graph always adds the id


@pytest.mark.parametrize("preset", PRESETS)
async def test_every_date_preset_graph_lists(sandbox: Sandbox, preset: str) -> None:
    reply = await sandbox.get("/act_1001/insights", date_preset=preset, fields="spend")
    assert reply.status == 200, reply.body
    rows = reply.body["data"]
    if preset in ("maximum", "data_maximum"):
        (row,) = rows
        assert "2026-09-01" <= row["date_start"] <= "2026-10-15"
        assert row["date_stop"] == "2026-12-01"
        return
    expected = EXPECTED_PERIODS[preset]
    if expected is None:
        assert rows == []
    else:
        assert [(r["date_start"], r["date_stop"]) for r in rows] == [expected]


async def test_unknown_values_get_graphs_messages(sandbox: Sandbox) -> None:
    message = await _refused(sandbox, "/act_1001/insights", date_preset="last_8d")
    assert message == (
        "(#100) date_preset must be one of the following values: today, yesterday, this_month, "
        "last_month, this_quarter, maximum, data_maximum, last_3d, last_7d, last_14d, last_28d, "
        "last_30d, last_90d, last_week_mon_sun, last_week_sun_sat, last_quarter, last_year, "
        "this_week_mon_today, this_week_sun_today, this_year"
    )
    message = await _refused(sandbox, "/act_1001/insights", breakdowns=["hourly", "age"])
    assert message.startswith("(#100) breakdowns[0] must be one of the following values: ")
    assert "hourly_stats_aggregated_by_advertiser_time_zone" in message
    message = await _refused(
        sandbox, "/act_1001/insights", action_breakdowns=["action_type", "kind"]
    )
    assert message.startswith("(#100) action_breakdowns[1] must be one of the following values: ")
    message = await _refused(sandbox, "/act_1001/insights", level="creative")
    assert message == (
        "(#100) Param level must be one of {delivery_ad, politicalad, ad, adset, campaign, account}"
    )
    message = await _refused(sandbox, "/act_1001/insights", fields=["spend", "age", "gender"])
    assert message == (
        "(#100) age, gender are not valid for fields param. please check "
        "https://developers.facebook.com/docs/marketing-api/reference/ads-insights/ "
        "for all valid values"
    )
    message = await _refused(
        sandbox, "/act_1001/insights", time_range={"since": "2026-11-1", "until": "2026-11-30"}
    )
    assert message == "(#100) Must be a date representation in the format YYYY-MM-DD"
    message = await _refused(sandbox, "/act_1001/campaigns", effective_status=["ACTIVE", "LIVE"])
    assert message == (
        "(#100) Param effective_status[1] must be one of {ACTIVE, PAUSED, DELETED, "
        "PENDING_REVIEW, DISAPPROVED, PREAPPROVED, PENDING_BILLING_INFO, CAMPAIGN_PAUSED, "
        "ARCHIVED, ADSET_PAUSED, IN_PROCESS, WITH_ISSUES}"
    )
    for increment in ("0", "91", "weekly", "1.5"):
        await _refused(sandbox, "/act_1001/insights", time_increment=increment)


async def test_values_graph_knows_but_the_sandbox_cannot_compute_say_so(sandbox: Sandbox) -> None:
    for params in (
        {"breakdowns": ["country"]},
        {"action_breakdowns": ["action_device"]},
        {"level": "delivery_ad"},
    ):
        assert "not supported by the sandbox" in await _refused(
            sandbox, "/act_1001/insights", **params
        )


async def test_time_increment_cuts_the_period_into_days_months_or_n_days(sandbox: Sandbox) -> None:
    campaign = await _campaign(sandbox, "Prospecting US 1")
    whole = (await sandbox.get(f"/{campaign}/insights", date_preset="last_7d")).body["data"][0]
    daily = await sandbox.get(f"/{campaign}/insights", date_preset="last_7d", time_increment="1")
    days = daily.body["data"]
    assert [d["date_start"] for d in days] == [f"2026-11-{n}" for n in range(24, 31)]
    assert all(d["date_start"] == d["date_stop"] for d in days)
    assert sum(_cents(d) for d in days) == _cents(whole)

    weeks = await sandbox.get(f"/{campaign}/insights", date_preset="last_14d", time_increment="7")
    assert [(w["date_start"], w["date_stop"]) for w in weeks.body["data"]] == [
        ("2026-11-17", "2026-11-23"),
        ("2026-11-24", "2026-11-30"),
    ]
    months = await sandbox.get(
        f"/{campaign}/insights", date_preset="this_quarter", time_increment="monthly"
    )
    assert [(m["date_start"], m["date_stop"]) for m in months.body["data"]] == [
        ("2026-10-01", "2026-10-31"),
        ("2026-11-01", "2026-11-30"),
        ("2026-12-01", "2026-12-01"),
    ]
    everything = await sandbox.get(
        f"/{campaign}/insights", date_preset="last_7d", time_increment="all_days"
    )
    assert everything.body["data"] == [whole]


async def test_daily_rows_of_an_account_page_like_any_listing(sandbox: Sandbox) -> None:
    params = {"level": "campaign", "date_preset": "last_7d", "time_increment": "1"}
    everything = await sandbox.get("/act_1001/insights", **params, limit="500")
    assert len(everything.body["data"]) == 7 * 11
    seen, after = [], None
    while True:
        page = await sandbox.get(
            "/act_1001/insights", **params, limit="25", **({"after": after} if after else {})
        )
        seen += page.body["data"]
        if "next" not in page.body.get("paging", {}):
            break
        after = page.body["paging"]["cursors"]["after"]
    assert seen == everything.body["data"]


async def test_time_ranges_give_one_result_set_per_range(sandbox: Sandbox) -> None:
    ranges = [
        {"since": "2026-11-01", "until": "2026-11-30"},
        {"since": "2026-11-24", "until": "2026-11-30"},
    ]
    reply = await sandbox.get(
        "/act_1002/insights",
        time_ranges=ranges,
        time_increment="1",  # ignored with time_ranges, as Graph ignores it
        date_preset="yesterday",  # ignored too
    )
    rows = reply.body["data"]
    assert [(r["date_start"], r["date_stop"]) for r in rows] == [
        ("2026-11-01", "2026-11-30"),
        ("2026-11-24", "2026-11-30"),
    ]
    for row, time_range in zip(rows, ranges, strict=True):
        alone = await sandbox.get("/act_1002/insights", time_range=time_range)
        assert alone.body["data"] == [row]
    bad = await _refused(sandbox, "/act_1002/insights", time_ranges=[{"since": "2026-11-01"}])
    assert "time_ranges[0]" in bad


async def test_the_hourly_breakdown_shows_the_hours_before_a_pause(sandbox: Sandbox) -> None:
    campaign = await _campaign(sandbox, "Prospecting US 2")
    await sandbox.admin.set_clock(datetime(2026, 12, 1, 15, 30, tzinfo=UTC))  # 10:30 in New York
    breakdown = "hourly_stats_aggregated_by_advertiser_time_zone"
    params = {
        "date_preset": "today",
        "fields": "spend,impressions,reach",
        "breakdowns": [breakdown],
    }
    hours = (await sandbox.get(f"/{campaign}/insights", **params)).body["data"]
    assert [h[breakdown] for h in hours] == [f"{n:02d}:00:00 - {n:02d}:59:59" for n in range(11)]
    assert {h["reach"] for h in hours} == {"0"}
    assert _cents(hours[10]) < _cents(hours[9])  # half an hour so far
    today = (await sandbox.get(f"/{campaign}/insights", date_preset="today")).body["data"][0]
    # Each hour is what was delivered by its end less by its start: they add up to the day.
    assert sum(_cents(h) for h in hours) == _cents(today)

    await sandbox.post(f"/{campaign}", status="PAUSED")
    await sandbox.admin.advance_clock(4 * 3600)
    assert (await sandbox.get(f"/{campaign}/insights", **params)).body["data"] == hours

    week = await sandbox.get(f"/{campaign}/insights", **{**params, "date_preset": "last_7d"})
    assert len(week.body["data"]) == 24
    assert {(h["date_start"], h["date_stop"]) for h in week.body["data"]} == {
        ("2026-11-24", "2026-11-30")
    }


async def test_the_demo_world_has_metas_other_effective_statuses(sandbox: Sandbox) -> None:
    fields = "name,status,effective_status"
    default = await sandbox.get("/act_1003/campaigns", fields=fields, limit="100")
    statuses = {c["name"]: c["effective_status"] for c in default.body["data"]}
    assert statuses["Payment Hold ID"] == "WITH_ISSUES"
    assert statuses["New Launch ID"] == "IN_PROCESS"
    assert "Clearance ID" not in statuses  # archived: listed only when asked for
    assert len(statuses) == 17  # with the late-2026 campaigns (docs/sandbox.md)
    tagged = await sandbox.get(
        "/act_1003/campaigns",
        filtering=[{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}],
        limit="100",
    )
    assert len(tagged.body["data"]) == 10  # the new campaigns carry no [AUTO] tag

    archived = await sandbox.get(
        "/act_1003/campaigns", fields=fields, effective_status=["ARCHIVED"]
    )
    assert [(c["name"], c["status"]) for c in archived.body["data"]] == [
        ("Clearance ID", "ARCHIVED")
    ]
    by_filter = await sandbox.get(
        "/act_1003/campaigns",
        fields=fields,
        filtering=[{"field": "effective_status", "operator": "IN", "value": ["ARCHIVED"]}],
    )
    assert by_filter.body["data"] == archived.body["data"]

    adsets = await sandbox.get(
        "/act_1003/adsets",
        fields="name,status,effective_status",
        effective_status=["WITH_ISSUES", "IN_PROCESS", "ARCHIVED"],
    )
    assert {(a["status"], a["effective_status"]) for a in adsets.body["data"]} == {
        ("ACTIVE", "WITH_ISSUES"),
        ("ACTIVE", "IN_PROCESS"),
        ("ACTIVE", "ARCHIVED"),
    }
    ads_only = await sandbox.get("/act_1003/adsets", effective_status=["PENDING_REVIEW"])
    assert ads_only.status == 200
    assert ads_only.body == {"data": []}


async def test_the_view_windows_meta_stopped_returning_come_back_without_data(
    sandbox: Sandbox,
) -> None:
    """7d_view and 28d_view "will no longer be returned" since 2026-01-12 (Meta's blog
    2025-10-16): asked for, they are accepted and no action carries a value for them."""
    reply = await sandbox.get(
        "/act_1001/insights",
        level="campaign",
        date_preset="last_7d",
        fields="campaign_id,actions",
        action_attribution_windows=["7d_view", "28d_view"],
    )
    assert reply.status == 200
    actions = [a for row in reply.body["data"] for a in row.get("actions", [])]
    assert actions
    assert not any({"7d_view", "28d_view"} & a.keys() for a in actions)
