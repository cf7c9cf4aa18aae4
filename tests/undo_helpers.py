"""A batch that misfired for the undo tests: 5 daily budgets raised, 3 campaigns paused."""

from __future__ import annotations

from typing import Any

from flow import campaign_ids, records, run_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database

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
