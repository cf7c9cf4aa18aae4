"""A budget schedule as the API shows it: its record's window, the undo plan listing it like any
change (and deleting it), the entity timeline's window with who made and who deleted it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from web_helpers import AUTH, Client, evening_push

from flow import campaign_ids, dispatch, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database

ONE = "[AUTO] Prospecting US 1"


async def test_a_schedule_in_rule_logs_the_undo_plan_and_the_timeline(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    campaign = (await campaign_ids(sandbox))[ONE]
    assert (await client.post("/api/rules", json=evening_push(ONE), headers=AUTH)).status == 201
    await dispatch(web_settings, db, now=datetime.now(UTC))
    await work(web_settings)
    (batch,) = (await (await client.get("/api/batches", headers=AUTH)).json())["items"]
    path = f"/api/batches/{batch['batch_id']}"
    records = await (await client.get(f"{path}/executions?acted=1", headers=AUTH)).json()
    (record,) = records["items"]
    assert (record["field"], record["before"], record["after"]) == (
        "budget_schedules",
        20000,
        30000,
    )
    window = record["schedule"]
    assert (window["op"], window["budget_value"]) == ("create", 50)

    plan = await (await client.post(f"{path}/undo", json={"dry_run": True}, headers=AUTH)).json()
    (row,) = plan["changes"]
    assert (row["field"], row["action"], row["will_revert"]) == ("budget_schedules", "revert", True)
    assert row["schedule"]["schedule_id"] == record["response"]["id"]

    timeline = await (await client.get(f"/api/entities/{campaign}/timeline", headers=AUTH)).json()
    (made,) = timeline["schedules"]
    assert (made["schedule_id"], made["before"], made["after"]) == (
        record["response"]["id"],
        20000,
        30000,
    )
    assert made["by"]["label"] == "Evening push v1" and made["deleted_at"] is None

    undo = await client.post(f"{path}/undo", json={}, headers=AUTH)
    assert undo.status in (200, 202)
    await work(web_settings)
    timeline = await (await client.get(f"/api/entities/{campaign}/timeline", headers=AUTH)).json()
    (made,) = timeline["schedules"]
    assert made["deleted_at"] is not None
    assert made["deleted_by"]["kind"] == "undo"
    assert [w["kind"] for w in await sandbox.writes()] == ["budget_schedule", "delete"]
