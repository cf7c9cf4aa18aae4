"""Breakdowns by placement and by people: rows that add up, Meta's values, Meta's refusals."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_helpers import Sandbox
from test_sandbox_ads import FIELDS, by_key, rows_of

#: Every combination the sandbox computes, as Meta's SDK sends it (a JSON array).
COMBINATIONS = (
    ["publisher_platform"],
    ["publisher_platform", "platform_position"],
    ["age"],
    ["gender"],
    ["age", "gender"],
)
LEVELS = {"account": "account_id", "campaign": "campaign_id", "adset": "adset_id", "ad": "ad_id"}
PLATFORMS = {"facebook", "instagram", "audience_network", "messenger"}
AGES = {"18-24", "25-34", "35-44", "45-54", "55-64", "65+"}
GENDERS = {"female", "male", "unknown"}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(1, 500),
    account=st.sampled_from(["act_1001", "act_1002", "act_1004"]),
    clock=st.datetimes(datetime(2026, 10, 5), datetime(2027, 1, 20)),
    days_back=st.integers(0, 40),
    length=st.integers(0, 14),
    increment=st.sampled_from(["all_days", "1"]),
    breakdowns=st.sampled_from(COMBINATIONS),
    level=st.sampled_from(list(LEVELS)),
)
async def test_the_rows_of_a_breakdown_add_up_to_the_row_without_it(
    sandbox: Sandbox,
    seed: int,
    account: str,
    clock: datetime,
    days_back: int,
    length: int,
    increment: str,
    breakdowns: list[str],
    level: str,
) -> None:
    await sandbox.admin.reset(seed=seed)
    await sandbox.admin.set_clock(clock.replace(tzinfo=UTC))
    until = clock.date() - timedelta(days=days_back)
    params: dict[str, Any] = {
        "time_range": {"since": (until - timedelta(days=length)).isoformat(), "until": str(until)},
        "time_increment": increment,
        "level": level,
        "fields": f"{FIELDS},account_id,campaign_id",
    }
    whole = await rows_of(sandbox, f"/{account}/insights", **params)
    broken = await rows_of(sandbox, f"/{account}/insights", breakdowns=breakdowns, **params)

    key = (LEVELS[level], "date_start")
    assert by_key(broken, key=key) == by_key(whole, key=key)
    # one row per object, day and cell
    cells = {(*(row[name] for name in breakdowns), *(row[k] for k in key)) for row in broken}
    assert len(cells) == len(broken)


async def test_a_coarser_breakdown_adds_up_its_finer_cells(sandbox: Sandbox) -> None:
    params = {"level": "campaign", "date_preset": "last_7d", "fields": f"{FIELDS},campaign_id"}
    for fine, coarse in (
        (["publisher_platform", "platform_position"], "publisher_platform"),
        (["age", "gender"], "age"),
        (["age", "gender"], "gender"),
    ):
        fine_rows = await rows_of(sandbox, "/act_1001/insights", breakdowns=fine, **params)
        coarse_rows = await rows_of(sandbox, "/act_1001/insights", breakdowns=[coarse], **params)
        key = ("campaign_id", coarse)
        assert by_key(fine_rows, key=key) == by_key(coarse_rows, key=key)


async def test_a_campaigns_cells_add_up_its_ad_sets_cells(sandbox: Sandbox) -> None:
    params = {
        "date_preset": "last_14d",
        "breakdowns": "age,gender",
        "fields": f"campaign_id,{FIELDS}",
    }
    campaigns = await rows_of(sandbox, "/act_1002/insights", level="campaign", **params)
    adsets = await rows_of(sandbox, "/act_1002/insights", level="adset", **params)
    key = ("campaign_id", "age", "gender")
    assert by_key(adsets, key=key) == by_key(campaigns, key=key)


async def test_breakdown_values_are_metas(sandbox: Sandbox) -> None:
    placements = await rows_of(
        sandbox,
        "/act_1001/insights",
        breakdowns="publisher_platform,platform_position",
        date_preset="last_30d",
        fields="impressions",
    )
    assert {row["publisher_platform"] for row in placements} == PLATFORMS
    positions = {(row["publisher_platform"], row["platform_position"]) for row in placements}
    assert ("instagram", "instagram_stories") in positions
    assert ("instagram", "feed") in positions and ("facebook", "feed") in positions
    people = await rows_of(
        sandbox,
        "/act_1001/insights",
        breakdowns=["age", "gender"],
        date_preset="last_30d",
        fields="impressions,reach",
    )
    assert {row["age"] for row in people} == AGES
    assert {row["gender"] for row in people} == GENDERS
    row = people[0]
    assert list(row)[-4:] == ["date_start", "date_stop", "age", "gender"]
    assert Counter(type(row["reach"]) for row in people) == Counter({str: len(people)})


async def test_combinations_meta_refuses_get_metas_error(sandbox: Sandbox) -> None:
    for breakdowns, fields, columns in (
        (["publisher_platform", "age"], "impressions", "age, publisher_platform"),
        (["platform_position"], "impressions,actions", "action_type, platform_position"),
        (["age", "gender", "publisher_platform"], "spend", "age, gender, publisher_platform"),
        (
            ["hourly_stats_aggregated_by_advertiser_time_zone", "age"],
            "spend,cost_per_action_type",
            "action_type, age, hourly_stats_aggregated_by_advertiser_time_zone",
        ),
    ):
        reply = await sandbox.get("/act_1001/insights", breakdowns=breakdowns, fields=fields)
        assert (reply.status, reply.error["code"]) == (400, 100)
        assert reply.error["message"] == (
            f"(#100) Current combination of data breakdown columns ({columns}) is invalid"
        )
    explicit = await sandbox.get(
        "/act_1001/insights",
        breakdowns=["gender", "publisher_platform"],
        action_breakdowns=["action_type"],
        fields="spend",
    )
    assert "(action_type, gender, publisher_platform)" in explicit.error["message"]
    unsupported = await sandbox.get("/act_1001/insights", breakdowns=["country"])
    assert "not supported by the sandbox" in unsupported.error["message"]


_FILTER_FIELDS = st.sampled_from(
    [
        "id",
        "ad.id",
        "adset.id",
        "campaign.id",
        "adset_id",
        "objective",
        "campaign.objective",
        "ad.effective_status",
        "effective_status",
        "name",
        "colour",
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    level=st.sampled_from(["account", "campaign", "adset", "ad", "delivery_ad", "creative"]),
    node=st.sampled_from(["act_1001", "campaign", "adset", "ad"]),
    breakdowns=st.lists(
        st.sampled_from(
            [
                "age",
                "gender",
                "publisher_platform",
                "platform_position",
                "country",
                "hourly_stats_aggregated_by_advertiser_time_zone",
                "colour",
            ]
        ),
        max_size=3,
    ),
    fields=st.lists(
        st.sampled_from(
            [
                "spend",
                "actions",
                "results",
                "cost_per_result",
                "quality_ranking",
                "ad_id",
                "optimization_goal",
                "age",
                "ad_name{x}",
            ]
        ),
        max_size=4,
    ),
    filters=st.lists(
        st.tuples(_FILTER_FIELDS, st.sampled_from(["IN", "EQUAL", "CONTAIN", "NOPE"])),
        max_size=2,
    ),
)
async def test_any_insights_request_is_rows_or_graphs_error_100(
    sandbox: Sandbox,
    level: str,
    node: str,
    breakdowns: list[str],
    fields: list[str],
    filters: list[tuple[str, str]],
) -> None:
    if node != "act_1001":
        ads = await sandbox.get("/act_1001/ads", fields="id,adset_id,campaign_id", limit="1")
        (ad,) = ads.body["data"]
        node = {"campaign": ad["campaign_id"], "adset": ad["adset_id"], "ad": ad["id"]}[node]
    filtering = [{"field": f, "operator": op, "value": ["1"]} for f, op in filters]
    reply = await sandbox.get(
        f"/{node}/insights",
        level=level,
        breakdowns=breakdowns,
        fields=fields,
        filtering=filtering,
        date_preset="last_3d",
    )
    if reply.status == 200:
        assert isinstance(reply.body["data"], list)
    else:
        assert (reply.status, reply.error["code"]) == (400, 100), reply.body
