"""Rules at ``"level": "ad"`` against the sandbox's ads: listing, Insights at level ad,
``results`` / ``cost_per_result`` per ad (its ad set's indicator), rankings, pausing ads."""

from __future__ import annotations

from typing import Any

import aiohttp

from flow import campaign_rule, records, run_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_TOKEN

CAMPAIGN = "Prospecting US 3"
PURCHASES = "actions:offsite_conversion.fb_pixel_purchase"


async def graph_get(sandbox: SandboxAdmin, path: str, **params: str) -> Any:
    """A Graph read of the sandbox with the demo token."""
    async with aiohttp.ClientSession() as http:
        url = f"{sandbox.base_url}/v25.0/{path}"
        async with http.get(url, params=params | {"access_token": SANDBOX_TOKEN}) as response:
            return await response.json()


async def ads_insights(sandbox: SandboxAdmin) -> dict[str, dict[str, Any]]:
    """The last 7 days of every ad of the campaign, by ad id, as Meta reports them."""
    body = await graph_get(
        sandbox,
        "act_1001/insights",
        level="ad",
        date_preset="last_7d",
        fields="ad_id,ad_name,spend,results,cost_per_result,quality_ranking",
        filtering=f'[{{"field":"campaign.name","operator":"CONTAIN","value":"{CAMPAIGN}"}}]',
        use_unified_attribution_setting="true",
        limit="500",
    )
    return {row["ad_id"]: row for row in body["data"]}


def ad_rule(conditions: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    data = campaign_rule({"type": "pause"}, conditions, level="ad", **extra)
    data["filters"] = [
        {"field": "campaign.name", "operator": "CONTAIN", "value": CAMPAIGN},
        {"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]},
    ]
    return data


def _cost(row: dict[str, Any]) -> float | None:
    entries = row.get("cost_per_result") or []
    values = entries[0].get("values") if entries else None
    return float(values[0]["value"]) if values else None


async def test_an_ad_rule_pauses_the_ads_whose_results_cost_too_much(
    settings: Settings, accounts: list[str], db: Database, sandbox: SandboxAdmin
) -> None:
    rows = await ads_insights(sandbox)
    costs = sorted(c for r in rows.values() if (c := _cost(r)) is not None)
    assert len(costs) >= 2, rows
    threshold = costs[len(costs) // 2]  # the dearer half is paused
    conditions = [
        {"metric": "results", "period": "last_7d", "operator": ">=", "value": 1},
        {"metric": "cost_per_result", "period": "last_7d", "operator": ">", "value": threshold},
    ]
    rule = await run_rule(settings, db, ad_rule(conditions))
    dear = {ad for ad, row in rows.items() if (c := _cost(row)) is not None and c > threshold}
    seen = await records(db, rule_id=rule.id)
    applied = {r["entity_id"] for r in seen if r.get("outcome") == "applied"}
    assert applied == dear and dear
    for record in seen:
        if record["entity_id"] in dear:
            assert record["field"] == "status" and record["after"] == "PAUSED"
            assert {c.get("indicator") for c in record["conditions"]} == {PURCHASES}
    for ad in rows:
        status = (await sandbox.object(ad))["status"]
        assert status == ("PAUSED" if ad in dear else "ACTIVE")


async def _ads(sandbox: SandboxAdmin) -> list[dict[str, Any]]:
    body = await graph_get(
        sandbox,
        "act_1001/ads",
        fields="id,name,adset{name},campaign{name},effective_status",
        limit="500",
    )
    return [a for a in body["data"] if CAMPAIGN in a["campaign"]["name"]]


async def test_ads_are_renamed_duplicated_and_picked_by_their_ad_set_s_name(
    settings: Settings, accounts: list[str], db: Database, sandbox: SandboxAdmin
) -> None:
    ads = await _ads(sandbox)
    adset_name = ads[0]["adset"]["name"]
    mine = {a["id"] for a in ads if a["adset"]["name"] == adset_name}
    spent = {"metric": "impressions", "period": "last_7d", "operator": ">=", "value": 0}
    data = ad_rule([spent])
    data["filters"] = [{"field": "adset.name", "operator": "EQUAL", "value": adset_name}]
    data["tasks"][0]["action"] = {"type": "append_to_name", "text": " [seen]"}
    data["tasks"].append({"id": "copy", "conditions": [spent], "action": {"type": "duplicate"}})
    rule = await run_rule(settings, db, data)
    seen = await records(db, rule_id=rule.id)
    renamed = {r["entity_id"] for r in seen if r["task_id"] == "t" and r["outcome"] == "applied"}
    copied = [r for r in seen if r["task_id"] == "copy" and r["outcome"] == "applied"]
    assert renamed == mine and {r["entity_id"] for r in copied} == mine
    for ad in mine:
        assert (await sandbox.object(ad))["name"].endswith(" [seen]")
    for record in copied:
        copy = await sandbox.object(record["response"]["copied_id"])
        assert (
            copy["status"] == "PAUSED"
            and copy["adset_id"] == (await sandbox.object(record["entity_id"]))["adset_id"]
        )
