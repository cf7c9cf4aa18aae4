"""``rebalance_budget`` against the sandbox: the group's total kept to the minor unit, budget
moved towards the better metric, decreases before increases — across a SIGKILL in the
middle of the writes — and an undo that puts every budget back."""

from __future__ import annotations

from typing import Any

from flow import (
    campaign_rule,
    dispatch,
    records,
    save_rule,
    successful_writes,
    work,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database

HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}
SPENT_7D = {"metric": "spend", "period": "last_7d", "operator": ">", "value": 0}
METRIC = "ctr"
ACTION = {
    "type": "rebalance_budget",
    "metric": METRIC,
    "period": "last_7d",
    "max_change_percent": 20,
}


def rebalance_rule(**extra: Any) -> dict[str, Any]:
    """Ad sets with their own daily budget on act_1001, rebalanced by CTR over 7 days."""
    action = {**ACTION, **extra.pop("action", {})}
    data = campaign_rule(action, [HAS_BUDGET, SPENT_7D], level="adset", **extra)
    data["filters"] = [{"field": "campaign.name", "operator": "CONTAIN", "value": "[AUTO]"}]
    return data


async def budgets(sandbox: SandboxAdmin, ids: list[str]) -> dict[str, int]:
    """Each ad set's daily budget as the sandbox holds it now."""
    return {i: int((await sandbox.object(i))["daily_budget"]) for i in ids}


async def group_of(db: Database) -> list[dict[str, Any]]:
    """The records of the rebalancing task of the first run (one per ad set it matched)."""
    rows = await records(db, task_id="t")
    first = rows[0]["batch_id"]
    return [r for r in rows if r["batch_id"] == first and r.get("field") == "daily_budget"]


async def test_a_rebalance_keeps_the_total_to_the_cent_and_moves_budget_to_the_better(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    await save_rule(db, rebalance_rule())
    await dispatch(settings, db)
    await work(settings)
    rows = await group_of(db)
    ids = [r["entity_id"] for r in rows]
    assert len(ids) >= 6
    before = {r["entity_id"]: r["before"] for r in rows}
    after = await budgets(sandbox, ids)
    assert sum(after.values()) == sum(before.values())
    moved = [r for r in rows if r["outcome"] == "applied"]
    assert moved
    for row in moved:  # before → after, and the metric that decided it
        assert after[row["entity_id"]] == row["after"] != row["before"]
        assert row["action_metric"]["metric"] == METRIC
        assert row["action_metric"]["actual"] is not None
    losers = [r for r in moved if r["after"] < r["before"]]
    winners = [r for r in moved if r["after"] > r["before"]]
    assert losers and winners
    worst_winner = min(r["action_metric"]["actual"] for r in winners)
    best_loser = max(r["action_metric"]["actual"] for r in losers)
    assert worst_winner > best_loser
    writes = await successful_writes(sandbox)
    assert sorted(w["id"] for w in writes) == sorted(r["entity_id"] for r in moved)
    # every decrease was sent before any increase
    kinds = ["down" if int(w["params"]["daily_budget"]) < before[w["id"]] else "up" for w in writes]
    assert kinds == sorted(kinds, key=lambda k: k == "up")
