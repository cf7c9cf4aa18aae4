"""Batches for the undo tests: one that misfired (5 daily budgets raised, 3 campaigns
paused), one whose revert Meta's limit on ad-set budget changes holds back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from flow import campaign_ids, dispatch, records, run_rule, save_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_TOKEN

BUDGETED = [
    "[AUTO] Prospecting US 1",
    "[AUTO] Prospecting US 2",
    "[AUTO] Retargeting US 1",
    "[AUTO] Lead Gen US 1",
    "Brand Awareness US",
]
# campaigns without a campaign budget: the raise skips them, the cut pauses them
NO_CAMPAIGN_BUDGET = ["[AUTO] Prospecting US 3", "[AUTO] Retargeting US 2"]
DELIVERING = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
WEAK = {"metric": "purchase_roas.omni_purchase", "period": "last_7d", "operator": "<", "value": 2.3}
RAISED = set(BUDGETED)
PAUSED = {"[AUTO] Prospecting US 2", *NO_CAMPAIGN_BUDGET}


def raise_and_pause(*, then: dict[str, Any] | None = None) -> dict[str, Any]:
    """One rule whose one batch raises 5 daily budgets by 20 % and pauses 3 campaigns."""
    cut: dict[str, Any] = {"type": "pause"} | ({"then": then} if then else {})
    return {
        "name": "Misfire",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "filters": [{"field": "name", "operator": "IN", "value": BUDGETED + NO_CAMPAIGN_BUDGET}],
        "tasks": [
            {
                "id": "raise",
                "conditions": [DELIVERING],
                "action": {"type": "increase_budget", "percent": 20},
            },
            {"id": "cut", "conditions": [WEAK], "action": {"type": "pause"} | cut},
        ],
    }


async def state(sandbox: SandboxAdmin) -> dict[str, tuple[Any, Any]]:
    """(status, daily_budget) of the rule's campaigns, by name, as the sandbox holds them."""
    ids = await campaign_ids(sandbox)
    out = {}
    for name in BUDGETED + NO_CAMPAIGN_BUDGET:
        obj = await sandbox.object(ids[name])
        out[name] = (obj.get("status"), obj.get("daily_budget"))
    return out


async def misfire(
    settings: Settings, db: Database, sandbox: SandboxAdmin, **extra: Any
) -> tuple[str, dict[str, tuple[Any, Any]]]:
    """Run the misfiring rule once: its batch id and the campaigns' state before it."""
    before = await state(sandbox)
    await run_rule(settings, db, raise_and_pause(**extra))
    applied = [r for r in await records(db) if r["outcome"] == "applied"]
    assert {r["entity_name"] for r in applied if r["task_id"] == "raise"} == RAISED
    assert {r["entity_name"] for r in applied if r["task_id"] == "cut"} == PAUSED
    assert len(applied) == 8
    return str(applied[0]["batch_id"]), before


#: Three ad sets of act_1001 with daily budgets; the first is the one whose limit is used up.
ADSETS = "Creative Test US 1"
LIMITED = "Creative Test US 1 - Lookalike 1%"


async def adset_ids(sandbox: SandboxAdmin, account: str = "act_1001") -> dict[str, str]:
    """Ad set ids of ``account`` by name, listed through the sandbox's Graph API."""
    async with aiohttp.ClientSession() as http:
        url = f"{sandbox.base_url}/v27.0/{account}/adsets"
        params = {"fields": "id,name", "limit": "500", "access_token": SANDBOX_TOKEN}
        async with http.get(url, params=params) as response:
            body = await response.json()
    return {a["name"]: a["id"] for a in body["data"]}


@dataclass(frozen=True)
class Limited:
    """A batch that raised 3 ad sets' budgets; one of them then took 3 changes in Ads
    Manager (ending on the value the batch wrote), so Meta allows it no 5th this hour."""

    batch_id: str
    at: datetime  # the sandbox's clock (frozen) and the batch's time
    limited: str  # the ad set whose revert Meta's limit holds back
    execution: dict[str, str]  # ad set id -> the batch's execution id
    before: dict[str, int]  # ad set id -> its daily budget before the batch


async def adset_budgets(sandbox: SandboxAdmin, ids: list[str]) -> dict[str, int]:
    """The daily budgets of these ad sets as the sandbox holds them."""
    return {i: int((await sandbox.object(i))["daily_budget"]) for i in ids}


async def limit_used_up(settings: Settings, db: Database, sandbox: SandboxAdmin) -> Limited:
    """Run the ad-set raise once at the real time, then use up the limited ad set's hour."""
    at = datetime.now(UTC).replace(microsecond=0)  # Meta's times have whole seconds
    await sandbox.set_clock(at)  # the engine and Meta agree on what "the last hour" is
    names = await adset_ids(sandbox)
    ids = [i for name, i in names.items() if name.startswith(ADSETS)]
    before = await adset_budgets(sandbox, ids)
    rule = {
        "name": "Raise ad sets",
        "format": 2,
        "level": "adset",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "America/New_York",
        "filters": [{"field": "adset.name", "operator": "CONTAIN", "value": ADSETS}],
        "tasks": [
            {
                "id": "raise",
                "conditions": [{"metric": "daily_budget", "operator": ">", "value": 0}],
                "action": {"type": "increase_budget", "percent": 10},
            }
        ],
    }
    await save_rule(db, rule, now=at)
    await dispatch(settings, db, now=at)
    await work(settings)
    applied = [r for r in await records(db) if r["outcome"] == "applied"]
    assert {r["entity_id"] for r in applied} == set(ids)
    limited = names[LIMITED]
    wrote = next(int(r["after"]) for r in applied if r["entity_id"] == limited)
    for value in (wrote + 100, wrote + 200, wrote):  # 3 + the batch's own = Meta's 4
        await sandbox.ads_manager_change(limited, daily_budget=value)
    return Limited(
        batch_id=str(applied[0]["batch_id"]),
        at=at,
        limited=limited,
        execution={r["entity_id"]: str(r["_id"]) for r in applied},
        before=before,
    )
