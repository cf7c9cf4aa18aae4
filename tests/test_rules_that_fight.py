"""Rules that fight, against the sandbox: the change budget over every rule, oscillation
detection and the ``on_oscillation: hold`` guard (docs/rules.md "Rules that fight")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flow import (
    campaign_ids,
    campaign_rule,
    dispatch,
    kill,
    reap,
    records,
    sandbox_quiet,
    save_rule,
    start_worker,
    successful_writes,
    wait_for,
    work,
    write_in_flight,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from test_followups import fast_forward, raise_then

HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}
ONE = "[AUTO] Prospecting US 1"


def one_campaign(action: dict[str, Any], name: str, **extra: Any) -> dict[str, Any]:
    """A rule acting on the one campaign ``ONE`` at every run (no Insights needed)."""
    data = campaign_rule(action, [HAS_BUDGET], name=name, **extra)
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": ONE}]
    return data


async def budget_of(sandbox: SandboxAdmin, campaign: str) -> int:
    return int((await sandbox.object(campaign))["daily_budget"])


async def run_all(settings: Settings, db: Database, at: datetime) -> float:
    """Dispatch at ``at`` and work the jobs; how many oscillations the worker counted."""
    await dispatch(settings, db, now=at)
    worker = await work(settings)
    registry = worker.ctx["metrics"].registry
    found = registry.get_sample_value("ruleengine_oscillations_total", {"field": "daily_budget"})
    return found or 0.0


async def save_fighting_pair(db: Database) -> None:
    """Two rules on the same campaign: "Up" (+10 %, holding on oscillation) and "Down" (−10 %)."""
    up = one_campaign({"type": "increase_budget", "percent": 10}, "Up")
    up["tasks"][0]["on_oscillation"] = "hold"
    await save_rule(db, up)
    await save_rule(db, one_campaign({"type": "decrease_budget", "percent": 10}, "Down"))


@pytest.mark.parametrize("batch_size", [50, 1], ids=["batched", "one-at-a-time"])
async def test_a_30_pct_change_budget_lets_20_pct_through_and_clamps_the_next_20_pct_to_10(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin, batch_size: int
) -> None:
    settings = settings.model_copy(update={"write_batch_size": batch_size})
    campaign = (await campaign_ids(sandbox))[ONE]
    base = await budget_of(sandbox, campaign)
    data = one_campaign({"type": "increase_budget", "percent": 20}, "Scale")
    await save_rule(db, data | {"change_budget": {"max_daily_budget_change_pct": 30}})
    start = datetime.now(UTC)
    await run_all(settings, db, start)
    assert await budget_of(sandbox, campaign) == round(base * 1.2)
    # compounding is measured against the budget before the window's first change:
    # +20 % then +20 % against 30 % → the second moves +10 % of the base, base × 1.30
    await run_all(settings, db, start + timedelta(minutes=15))
    assert await budget_of(sandbox, campaign) == round(base * 1.3)
    second = (await records(db, entity_id=campaign))[-1]
    assert second["outcome"] == "applied" and "change_budget" in second["clamped_by"]
    # nothing is left for 24 h: skipped, recorded, counted on the batch row
    await run_all(settings, db, start + timedelta(minutes=30))
    assert await budget_of(sandbox, campaign) == round(base * 1.3)
    third = (await records(db, entity_id=campaign))[-1]
    assert (third["outcome"], third["reason"]) == ("skipped", "change_budget_exhausted")
    rows = [b async for b in db[c.BATCHES].find({}).sort("started_at")]
    assert [b["change_budget_count"] for b in rows] == [0, 1, 1]


async def test_status_flips_beyond_the_limit_skip_with_change_budget_exhausted(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    campaign = (await campaign_ids(sandbox))[ONE]
    limited = settings.model_copy(update={"max_status_changes_per_day": 2})
    # one rule whose two tasks fight: a later round of the job's writes pauses, then activates
    data = one_campaign({"type": "pause"}, "Flip")
    activate = data["tasks"][0] | {"id": "back", "action": {"type": "activate"}}
    data["tasks"].append(activate)
    await save_rule(db, data)
    start = datetime.now(UTC)
    await run_all(limited, db, start)  # flips 1 and 2: paused, then active again
    assert (await sandbox.object(campaign))["status"] == "ACTIVE"
    await run_all(limited, db, start + timedelta(minutes=15))  # the third flip is refused
    assert (await sandbox.object(campaign))["status"] == "ACTIVE"
    second = [r for r in await records(db, entity_id=campaign)][2:]
    assert {(r["task_id"], r["outcome"], r["reason"]) for r in second} == {
        ("t", "skipped", "change_budget_exhausted"),
        ("back", "no_change", "already_active"),
    }
    status_writes = [w for w in await successful_writes(sandbox) if "status" in w["params"]]
    assert len(status_writes) == 2


async def test_two_rules_driving_a_budget_up_and_down_make_one_oscillation_and_hold_stops_it(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    campaign = (await campaign_ids(sandbox))[ONE]
    await save_fighting_pair(db)
    start = datetime.now(UTC)
    counted = 0.0
    for run in range(4):
        counted += await run_all(settings, db, start + timedelta(minutes=15 * run))
    assert counted >= 1  # ruleengine_oscillations_total{field="daily_budget"}
    groups = [g async for g in db[c.ERROR_LOG].find({"function": "oscillation"})]
    assert len(groups) == 1
    (group,) = groups
    assert campaign in group["message"] and "daily_budget" in group["message"]
    sample = group["samples"][-1]["context"]
    assert sample["entity_id"] == campaign and len(sample["rules"]) == 2
    assert len(sample["changes"]) >= 3
    hold = await db[c.HOLDS].find_one({})
    assert hold is not None and (hold["entity_id"], hold["status"]) == (campaign, "active")
    # with the hold in place nothing moves the budget any more, whichever rule runs
    writes = len(await successful_writes(sandbox))
    budget = await budget_of(sandbox, campaign)
    await run_all(settings, db, start + timedelta(minutes=60))
    assert (len(await successful_writes(sandbox)), await budget_of(sandbox, campaign)) == (
        writes,
        budget,
    )
    last = [r for r in await records(db, entity_id=campaign)][-2:]
    assert {r["reason"] for r in last} == {"oscillation_hold"}
    flagged = [r for r in await records(db, entity_id=campaign) if r.get("oscillation")]
    assert flagged and flagged[0]["oscillation"]["hold"] is True


async def test_a_worker_killed_between_its_intents_and_their_answers_never_passes_the_budget(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    ids = await campaign_ids(sandbox)
    bases = {i: (await sandbox.object(i)).get("daily_budget") for i in ids.values()}
    bases = {i: int(b) for i, b in bases.items() if b}
    assert len(bases) >= 3
    # 30 % of the base in 24 h over every run: +20 %, then +10 % (floor), then nothing
    ceiling = {i: b + b * 3 // 10 for i, b in bases.items()}
    data = campaign_rule({"type": "increase_budget", "percent": 20}, [HAS_BUDGET], name="Scale")
    await save_rule(db, data | {"change_budget": {"max_daily_budget_change_pct": 30}})
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    # one write at a time, each taking 4 s: the worker dies after its first write, with the
    # next entity's intent recorded and its write on the way (4 s: room for a busy machine
    # to see the condition and kill inside that write)
    await sandbox.set_faults(write_latency_ms=4000)
    worker = start_worker(settings, tmp_path / "worker.log", write_batch_size="1")

    async def next_write_on_its_way() -> bool:
        written = [w["id"] for w in await successful_writes(sandbox)]
        query = {"status": "pending", "entity_id": {"$nin": written}}
        if not written or not await db[c.ACTION_INTENTS].count_documents(query):
            return False
        return await write_in_flight(sandbox)

    try:  # the first write landed; the next one's intent is recorded, its write 4 s long
        await wait_for(next_write_on_its_way, timeout_s=60)
    finally:
        kill(worker)
    await wait_for(lambda: sandbox_quiet(sandbox))  # a write the dead worker sent still lands
    pending = [i async for i in db[c.ACTION_INTENTS].find({"status": "pending"})]
    assert len(pending) == 1
    assert (
        int((await sandbox.object(pending[0]["entity_id"]))["daily_budget"]) == pending[0]["target"]
    )
    await sandbox.clear_faults()
    await redis.delete(c.QUEUE_NAME)  # the dead worker's job would block an in-process burst
    await run_all(settings, db, start + timedelta(minutes=15))  # before the reaper settles
    await reap(settings, db, redis, now=start + timedelta(hours=1))
    for run in (2, 3):
        await run_all(settings, db, start + timedelta(minutes=15 * run))
    writes = await successful_writes(sandbox)
    for entity_id, top in ceiling.items():
        values = [int(w["params"]["daily_budget"]) for w in writes if w["id"] == entity_id]
        assert values and max(values) <= top, (entity_id, values, top)
        assert len(values) <= 2 and await budget_of(sandbox, entity_id) == top
    assert [i async for i in db[c.ACTION_INTENTS].find({"status": "pending"})] == []


async def test_a_follow_up_goes_through_the_change_budget_too(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    campaign = (await campaign_ids(sandbox))[ONE]
    base = await budget_of(sandbox, campaign)
    data = raise_then({"after_minutes": 60, "do": "restore_budget"}, percent=20)
    await save_rule(db, data | {"change_budget": {"max_daily_budget_change_pct": 30}})
    await run_all(settings, db, datetime.now(UTC))
    assert await budget_of(sandbox, campaign) == round(base * 1.2)
    await fast_forward(redis)
    await work(settings)
    # back to the base would move 20 % more (40 % in 24 h): the restore stops at 30 %
    assert await budget_of(sandbox, campaign) == round(base * 1.1)
    followup = await records(db, kind="followup")
    assert [r["clamped_by"] for r in followup] == [["change_budget"]]
