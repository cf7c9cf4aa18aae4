"""Writes matter, over HTTP: a pause stops everything, a budget write moves spend and
conversions from its instant, and the admin routes tell each entity's quality and what it
would have delivered without the API's writes (its counterfactual)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from sandbox_helpers import NOON_ISH, Sandbox

from graph_sandbox.admin import SandboxAdminError
from graph_sandbox.delivery import ELASTICITY

FIELDS = "spend,impressions,clicks,actions,action_values"
DAY_S = 24 * 3600
#: The account-local day of NOON_ISH in New York, and the days after it.
WRITE_DAY = date(2026, 12, 1)


async def _campaigns(box: Sandbox, account: str = "act_1001") -> dict[str, dict[str, Any]]:
    reply = await box.get(
        f"/{account}/campaigns", fields="id,name,daily_budget,effective_status", limit="100"
    )
    return {c["name"]: c for c in reply.body["data"]}


async def _adsets(box: Sandbox, campaign_id: str) -> list[dict[str, Any]]:
    reply = await box.get(f"/{campaign_id}/adsets", fields="id,name,daily_budget")
    return list(reply.body["data"])


async def _row(box: Sandbox, object_id: str, **period: Any) -> dict[str, Any] | None:
    reply = await box.get(
        f"/{object_id}/insights", fields=FIELDS, use_unified_attribution_setting="true", **period
    )
    assert reply.status == 200, reply.body
    rows = reply.body["data"]
    return rows[0] if rows else None


def _purchases(row: dict[str, Any]) -> int:
    return int(next(a["value"] for a in row["actions"] if a["action_type"] == "purchase"))


async def _day(box: Sandbox, object_id: str, day: date, **query: Any) -> dict[str, Any]:
    """The counterfactual route's row for one day."""
    answer = await box.admin.counterfactual(
        object_id, date_start=day, date_stop=day, increment="day", **query
    )
    [row] = answer["rows"]
    return dict(row)


async def test_a_campaign_pause_freezes_spend_conversions_and_value_of_every_ad_set(
    sandbox: Sandbox,
) -> None:
    campaign = (await _campaigns(sandbox))["[AUTO] Prospecting US 1"]["id"]
    adsets = [a["id"] for a in await _adsets(sandbox, campaign)]
    before = {a: await _row(sandbox, a, date_preset="today") for a in adsets}
    assert all(row is not None and _purchases(row) > 0 for row in before.values())

    assert (await sandbox.post(f"/{campaign}", status="PAUSED")).status == 200
    await sandbox.admin.advance_clock(6 * 3600)
    for adset in adsets:
        assert await _row(sandbox, adset, date_preset="today") == before[adset]
    await sandbox.admin.advance_clock(DAY_S)  # 16:00 on 2 December
    next_day = WRITE_DAY + timedelta(days=1)
    for adset in adsets:
        assert await _row(sandbox, adset, date_preset="today") is None
        row = await _day(sandbox, adset, next_day)
        assert all(value == 0 for value in row["actual"].values())
        assert row["counterfactual"]["spend_cents"] > 0
        assert row["counterfactual"]["purchase_value_cents"] > 0
        assert row["effect"]["purchases"] == -row["counterfactual"]["purchases"]


async def test_an_ad_set_budget_doubled_through_graph_doubles_spend_from_that_instant(
    sandbox: Sandbox,
) -> None:
    campaign = (await _campaigns(sandbox))["[AUTO] Retargeting US 2"]["id"]
    adset, other = await _adsets(sandbox, campaign)
    budget = int(adset["daily_budget"])
    reply = await sandbox.post(f"/{adset['id']}", daily_budget=str(budget * 2))
    assert reply.body == {"success": True}
    await sandbox.admin.advance_clock(2 * DAY_S)  # 10:00 on 3 December in New York

    day = WRITE_DAY + timedelta(days=1)
    row = await _day(sandbox, adset["id"], day)
    actual, unwritten = row["actual"], row["counterfactual"]
    assert abs(actual["spend_cents"] - 2 * unwritten["spend_cents"]) <= 2
    assert abs(actual["purchases"] - 2**ELASTICITY * unwritten["purchases"]) <= 1.5
    graph = await _row(sandbox, adset["id"], date_preset="yesterday")
    assert graph is not None
    assert round(float(graph["spend"]) * 100) == actual["spend_cents"]
    assert _purchases(graph) == actual["purchases"]
    # the ad set beside it, and the hours before the write, are as they would have been
    assert (await _day(sandbox, other["id"], day))["effect"] == dict.fromkeys(actual, 0)
    hours = (
        await sandbox.admin.counterfactual(
            adset["id"], date_start=WRITE_DAY, date_stop=WRITE_DAY, increment="hour"
        )
    )["rows"]
    assert [r["hour"] for r in hours] == list(range(24))
    assert all(r["actual"] == r["counterfactual"] for r in hours[:10])  # until 10:00
    assert all(r["effect"]["spend_cents"] > 0 for r in hours[10:])


async def test_a_campaign_budget_halved_halves_the_spend_of_each_of_its_ad_sets(
    sandbox: Sandbox,
) -> None:
    campaign = (await _campaigns(sandbox))["[AUTO] Prospecting US 1"]
    budget = int(campaign["daily_budget"])
    assert (await sandbox.post(f"/{campaign['id']}", daily_budget=str(budget // 2))).status == 200
    await sandbox.admin.advance_clock(2 * DAY_S)
    day = WRITE_DAY + timedelta(days=1)
    for adset in await _adsets(sandbox, campaign["id"]):
        row = await _day(sandbox, adset["id"], day)
        actual, unwritten = row["actual"], row["counterfactual"]
        assert abs(actual["spend_cents"] - unwritten["spend_cents"] / 2) <= 1
        expected = 0.5**ELASTICITY * unwritten["purchases"]
        assert abs(actual["purchases"] - expected) <= 0.51 + 0.5 * 0.5**ELASTICITY + 0.1
    quality = await sandbox.admin.quality(campaign["id"])
    assert {a["budget_ratio"] for a in quality["adsets"]} == {0.5}
    assert quality["true_roas_now"] == pytest.approx(quality["true_roas"] * 0.5 ** (-0.3))


async def test_quality_tells_each_entitys_true_roas_by_archetype(sandbox: Sandbox) -> None:
    campaigns = await _campaigns(sandbox)
    winner = await sandbox.admin.quality(campaigns["[AUTO] Prospecting US 1"]["id"])
    loser = await sandbox.admin.quality(campaigns["[AUTO] Prospecting US 2"]["id"])
    test = await sandbox.admin.quality(campaigns["[AUTO] Creative Test US 1"]["id"])
    assert (winner["archetype"], loser["archetype"]) == ("winner", "loser")
    assert winner["true_roas"] > 3 > 1 > loser["true_roas"] > 0
    assert test["true_roas"] == 0 and test["archetype"] == "no_purchase"
    assert winner["elasticity"] == ELASTICITY
    assert winner["true_roas_now"] == winner["true_roas"]  # no budget written yet
    adset = winner["adsets"][0]
    alone = await sandbox.admin.quality(adset["id"])
    assert alone["adsets"] == [adset]
    assert adset["budget_ratio"] == 1.0
    assert (alone["id"], alone["archetype"]) == (adset["id"], "winner")
    assert alone["typical_spend_cents"] == adset["typical_spend_cents"]
    assert alone["true_roas"] == pytest.approx(adset["true_roas"])
    account = await sandbox.admin.quality("act_1001")
    assert account["archetype"] == "mixed"
    listing = await sandbox.get("/act_1001/adsets", limit="100")
    assert len(account["adsets"]) == len(listing.body["data"])


async def test_the_counterfactual_route_takes_since_and_periods_and_refuses_bad_input(
    sandbox: Sandbox,
) -> None:
    campaigns = await _campaigns(sandbox)
    campaign = campaigns["[AUTO] Prospecting US 1"]
    budget = int(campaign["daily_budget"])
    await sandbox.post(f"/{campaign['id']}", daily_budget=str(budget * 2))
    await sandbox.admin.advance_clock(DAY_S)
    await sandbox.post(f"/{campaign['id']}", status="PAUSED")
    await sandbox.admin.advance_clock(DAY_S)  # 10:00 on 3 December

    answer = await sandbox.admin.counterfactual(campaign["id"], increment="day")
    assert answer["id"] == campaign["id"]
    assert (answer["account_id"], answer["currency"]) == ("act_1001", "USD")
    assert answer["timezone"] == "America/New_York"
    assert answer["since"] is None and answer["now"] == "2026-12-03T15:00:00+00:00"
    assert answer["rows"][0]["date_start"] < "2026-10-15"  # from the campaign's creation
    assert answer["rows"][-1]["date_start"] == "2026-12-03"
    last = answer["rows"][-1]
    assert last["actual"]["spend_cents"] == 0 < last["counterfactual"]["spend_cents"]

    # since the pause: the doubled budget is kept, only the pause is left out
    pause = NOON_ISH + timedelta(days=1)
    since_pause = await _day(sandbox, campaign["id"], date(2026, 12, 3), since=pause)
    ever = await _day(sandbox, campaign["id"], date(2026, 12, 3))
    assert since_pause["actual"] == ever["actual"]
    doubled = since_pause["counterfactual"]["spend_cents"]
    assert abs(doubled - 2 * ever["counterfactual"]["spend_cents"]) <= 3 * 3  # 3 ad sets
    whole = await sandbox.admin.counterfactual(campaign["id"], since=pause)
    [row] = whole["rows"]
    assert (row["date_start"], row["date_stop"]) == ("2026-12-02", "2026-12-03")
    assert whole["since"] == pause.isoformat()

    for query, message in (
        ({"increment": "week"}, "increment"),
        ({"date_start": date(2026, 12, 3), "date_stop": date(2026, 12, 1)}, "date_start"),
        ({"date_start": date(2020, 1, 1)}, "at most"),
    ):
        with pytest.raises(SandboxAdminError, match=message):
            await sandbox.admin.counterfactual(campaign["id"], **query)
    with pytest.raises(SandboxAdminError, match="404"):
        await sandbox.admin.counterfactual("120219999999999")
    ads = await sandbox.get(f"/{campaign['id']}/ads", fields="id")
    with pytest.raises(SandboxAdminError, match=r"400.*ad set"):
        await sandbox.admin.counterfactual(ads.body["data"][0]["id"])
    with pytest.raises(SandboxAdminError, match="404"):
        await sandbox.admin.quality("act_9999")
    reply = await sandbox.fetch(
        "GET", f"{sandbox.url}/_sandbox/counterfactual/{campaign['id']}?colour=red"
    )
    assert reply.status == 400


async def test_changes_made_in_ads_manager_stay_in_the_counterfactual(sandbox: Sandbox) -> None:
    campaign = (await _campaigns(sandbox))["[AUTO] Retargeting US 2"]["id"]
    adset, _ = await _adsets(sandbox, campaign)
    await sandbox.admin.ads_manager_change(adset["id"], daily_budget=int(adset["daily_budget"]) * 3)
    await sandbox.post(f"/{adset['id']}", status="PAUSED")
    await sandbox.admin.advance_clock(DAY_S)
    await sandbox.admin.ads_manager_change(adset["id"], status="ACTIVE")
    await sandbox.admin.advance_clock(DAY_S)
    day = WRITE_DAY + timedelta(days=2)
    row = await _day(sandbox, adset["id"], day, since=datetime(2026, 11, 1, tzinfo=UTC))
    # the pause (the API's) is left out; the tripled budget and the activation (a person's) stay
    assert row["actual"]["spend_cents"] > 0
    assert row["actual"] == row["counterfactual"]
    paused_day = await _day(sandbox, adset["id"], WRITE_DAY + timedelta(days=1))
    assert paused_day["actual"]["spend_cents"] < paused_day["counterfactual"]["spend_cents"]


async def test_pausing_the_true_losers_for_two_weeks_raises_profit_by_their_lost_loss(
    sandbox: Sandbox,
) -> None:
    """The use the engine's impact tests make of it: pause what truly loses money, move the
    clock two weeks, and read the true effect per campaign and in total."""
    campaigns = await _campaigns(sandbox)
    delivering = [c for c in campaigns.values() if c["effective_status"] == "ACTIVE"]
    truth = {c["id"]: await sandbox.admin.quality(c["id"]) for c in delivering}
    losers = [i for i, q in truth.items() if 0 < q["true_roas"] < 1]
    assert len(losers) == 2  # Prospecting US 2, Retargeting US 2
    for campaign in losers:
        assert (await sandbox.post(f"/{campaign}", status="PAUSED")).status == 200
    for _ in range(14):
        await sandbox.admin.advance_clock(DAY_S)
    period = {"date_start": WRITE_DAY, "date_stop": WRITE_DAY + timedelta(days=14)}

    def profit(totals: dict[str, int]) -> int:
        return totals["purchase_value_cents"] - totals["spend_cents"]

    effects = {}
    for campaign in truth:
        [row] = (await sandbox.admin.counterfactual(campaign, since=NOON_ISH, **period))["rows"]
        effects[campaign] = profit(row["effect"])
        if campaign not in losers:
            assert row["effect"] == dict.fromkeys(row["effect"], 0)
    assert all(effects[campaign] > 0 for campaign in losers)
    [account] = (await sandbox.admin.counterfactual("act_1001", since=NOON_ISH, **period))["rows"]
    assert profit(account["effect"]) == sum(effects.values())
    graph = await sandbox.get(
        "/act_1001/insights",
        fields="spend",
        time_range={"since": str(period["date_start"]), "until": str(period["date_stop"])},
    )
    spend = round(float(graph.body["data"][0]["spend"]) * 100)
    assert spend == account["actual"]["spend_cents"]
