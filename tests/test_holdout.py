"""Holdouts against the sandbox: held-out entities are recorded with the change they would
have had and never written; they cool down as a changed entity would; and a rule's measured
effect agrees with the sandbox's counterfactual truth (docs/impact.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flow import campaign_rule, dispatch, records, save_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.rules.holdout import Holdout, is_held_out
from ruleengine.settings import Settings
from ruleengine.store.db import Database

HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}
NEW_YORK = ZoneInfo("America/New_York")


def held_rule(percent: float, **extra: Any) -> dict[str, Any]:
    data = campaign_rule({"type": "pause"}, [HAS_BUDGET], name="Held", **extra)
    data["tasks"][0]["holdout"] = {"percent": percent}
    return data


async def test_held_out_entities_are_recorded_with_their_change_and_never_written(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    rule = await save_rule(db, held_rule(50, cooldown_minutes=60))
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    await work(settings)
    rows = await records(db, rule_id=rule.id, task_id="t")
    held = {r["entity_id"] for r in rows if r["outcome"] == "held_out"}
    acted = {r["entity_id"] for r in rows if r["outcome"] == "applied"}
    assert held and acted
    holdout = Holdout(percent=50)
    assert held == {
        r["entity_id"] for r in rows if is_held_out(rule.id, "t", r["entity_id"], holdout)
    } & (held | acted)
    for record in (r for r in rows if r["outcome"] == "held_out"):
        assert (record["field"], record["before"], record["after"]) == (
            "status",
            "ACTIVE",
            "PAUSED",
        )
        assert record["next_execute_at"] is not None and not record["executed"]
        # a full execution record, not only a row of the batch's chunk
        assert await db[c.EXECUTIONS].find_one({"key": record["key"]}) is not None
        assert (await sandbox.object(record["entity_id"]))["status"] == "ACTIVE"
    written = {w["id"] for w in await sandbox.writes()}
    assert not written & held and acted <= written
    assert await db[c.ACTION_INTENTS].count_documents({"entity_id": {"$in": sorted(held)}}) == 0
    # the next run leaves held-out entities alone while the change would cool them down
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    later = [r for r in await records(db, rule_id=rule.id) if r["batch_id"] != rows[0]["batch_id"]]
    assert {(r["outcome"], r["reason"]) for r in later if r["entity_id"] in held} == {
        ("skipped", "next_execute_not_reached")
    }
    assert not {w["id"] for w in await sandbox.writes()} & held
