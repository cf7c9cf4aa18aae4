"""``schedule_budget`` through the sandbox: a budget increase for a window made as one of Meta's
budget schedules (high-demand periods) through the budget write path — live read, clamp,
intent, never twice, approvals, Rule Logs, the preview, undo by deleting it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flow import campaign_rule, dispatch, engine_for, records, run_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.undo.run import undo_batch
from test_copies import graph

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
PROSPECTING = "[AUTO] Prospecting US 1"  # campaign daily budget 200.00


def schedule_rule(action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A campaign rule scheduling ``action`` on Prospecting US 1 (act_1001, New York)."""
    return campaign_rule(
        {"type": "schedule_budget", **action},
        [ALWAYS],
        filters=[{"field": "name", "operator": "EQUAL", "value": PROSPECTING}],
        **extra,
    )


async def schedules_of(sandbox: SandboxAdmin, object_id: str) -> list[dict[str, Any]]:
    """The budget schedules Meta holds of an object, as any client lists them."""
    fields = "id,time_start,time_end,budget_value,budget_value_type"
    return list((await graph(sandbox, f"{object_id}/budget_schedules", fields=fields))["data"])


async def test_a_window_of_hours_is_scheduled_once_and_undone_by_deleting_it(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    started = datetime.now(UTC)
    rule = await run_rule(settings, db, schedule_rule({"multiplier": 1.5, "window": {"hours": 4}}))
    (row,) = await records(db, rule_id=rule.id, outcome="applied")
    assert (row["field"], row["before"], row["after"]) == ("budget_schedules", 20000, 30000)
    schedule = row["schedule"]
    assert (schedule["budget_value_type"], schedule["budget_value"]) == ("MULTIPLIER", 50)
    start = schedule["time_start"]
    assert start % 900 == 0 and started.timestamp() <= start < started.timestamp() + 900
    assert schedule["time_end"] == start + 4 * 3600
    (held,) = await schedules_of(sandbox, row["entity_id"])
    assert held["id"] == row["response"]["id"]
    assert (held["budget_value"], held["budget_value_type"]) == (50, "MULTIPLIER")
    intents = await db[c.ACTION_INTENTS].find({"field": "budget_schedules"}).to_list(None)
    assert [(i["status"], i["schedule"]["time_start"]) for i in intents] == [("done", start)]

    # the next run finds it at Meta: the window overlaps it, nothing is sent again
    await dispatch(settings, db, now=datetime.now(UTC) + timedelta(minutes=15))
    await work(settings)
    again = [r for r in await records(db, rule_id=rule.id) if r["batch_id"] != row["batch_id"]]
    assert [(r["outcome"], r["reason"]) for r in again] == [("skipped", "schedule_overlap")]
    assert len(await schedules_of(sandbox, row["entity_id"])) == 1

    async with engine_for(settings, db) as engine:
        undone = await undo_batch(engine, row["batch_id"], by="api", now=datetime.now(UTC))
    assert [(c["outcome"], c["revert"]) for c in undone["changes"]] == [("applied", "reverted")]
    assert await schedules_of(sandbox, row["entity_id"]) == []
    writes = [(w["kind"], w["ok"]) for w in await sandbox.writes()]
    assert writes == [("budget_schedule", True), ("delete", True)]
