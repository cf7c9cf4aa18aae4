"""Every money clock is MongoDB's: workers whose clocks disagree — one 3 hours ahead, one 20
minutes behind — never send Meta a fifth budget change in its hour, never hold a write back
longer than Meta's hour, never reap a batch whose worker still runs, and keep the change
budget over 24 real hours.

A worker's clock is the ``now`` its job runs at (injected, as in ``test_clock_steps``); MongoDB,
Redis and the sandbox stay on the real clock, the sandbox's frozen at the real time so that
Meta and the engine agree on what the last hour is.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flow import aged, campaign_rule, engine_for, records, save_rule, wait_for
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.jobs import reap_job
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.ruledocs import RuleDoc
from test_clock_steps import run_at
from test_meta_budget_limits import ADSET, HAS_BUDGET, adset_id, adset_rule

AHEAD = timedelta(hours=3)  # a worker whose clock is 3 hours ahead
BEHIND = timedelta(minutes=20)  # and one 20 minutes behind


@pytest.fixture
async def real(sandbox: SandboxAdmin, accounts: list[str], redis: Any) -> datetime:
    """The real time, the sandbox frozen at it: Meta's hour is the real hour."""
    now = datetime.now(UTC).replace(microsecond=0)
    await sandbox.set_clock(now)
    return now


async def raise_adset(db: Database, real: datetime) -> RuleDoc:
    """+1 % on one ad set of act_1001 each run, no cooldown: each run is one budget change."""
    data = adset_rule({"type": "increase_budget", "percent": 1}, account="act_1001", adsets=ADSET)
    return await save_rule(db, data | {"status": "PAUSED"}, now=real)  # run here, not dispatched


async def test_no_fifth_change_in_an_hour_reaches_meta_whatever_the_workers_clocks(
    settings: Settings, db: Database, sandbox: SandboxAdmin, real: datetime
) -> None:
    rule = await raise_adset(db, real)
    for n in range(4):  # Meta's four, made by the worker behind
        summary = await run_at(settings, db, rule, f"b-behind-{n}", datetime.now(UTC) - BEHIND)
        assert summary.applied == 1
    fifth = await run_at(settings, db, rule, "b-ahead", datetime.now(UTC) + AHEAD)
    assert fifth.applied == 0
    (record,) = await records(db, batch_id="b-ahead")
    assert (record["outcome"], record["reason"]) == ("skipped", "meta_budget_change_limit")
    allowed_at = record["error"]["allowed_at"].replace(tzinfo=UTC)
    assert allowed_at <= datetime.now(UTC) + timedelta(hours=1)
    writes = await sandbox.writes()
    assert len(writes) == 4 and all(w["ok"] for w in writes)  # Meta's code 17 never met


async def test_a_code_17_holds_the_ad_set_back_for_metas_hour_not_the_workers(
    settings: Settings, db: Database, sandbox: SandboxAdmin, real: datetime
) -> None:
    target = await adset_id(sandbox, "act_1001", ADSET)
    for step in range(4):  # the hour used up in Ads Manager, where the engine cannot see it
        await sandbox.ads_manager_change(target, daily_budget=5001 + step)
    await sandbox.set_faults(rules=[{"path_contains": "/activities", "code": 2}])
    rule = await raise_adset(db, real)
    refused = await run_at(settings, db, rule, "b-ahead", datetime.now(UTC) + AHEAD)
    assert refused.failed == 1
    intent = await db[c.ACTION_INTENTS].find_one({"entity_id": target})
    assert intent is not None and intent["reason"] == "meta_budget_change_limit"
    blocked_until = intent["allowed_at"].replace(tzinfo=UTC)
    # Meta blocks the ad set for an hour from its answer; no worker waits longer than that
    assert blocked_until - datetime.now(UTC) <= timedelta(hours=1)
    behind = await run_at(settings, db, rule, "b-behind", datetime.now(UTC) - BEHIND)
    assert behind.applied == 0
    (record,) = await records(db, batch_id="b-behind")
    assert record["reason"] == "meta_budget_change_limit"
    assert record["error"]["allowed_at"] == intent["allowed_at"]
    assert len(await sandbox.writes()) == 1  # the refused one: nothing sent while blocked


async def test_the_change_budget_counts_24_real_hours_on_a_worker_3_hours_ahead(
    settings: Settings, db: Database, sandbox: SandboxAdmin, real: datetime
) -> None:
    data = campaign_rule(
        {"type": "increase_budget", "percent": 20},
        [HAS_BUDGET],
        filters=[{"field": "name", "operator": "EQUAL", "value": "[AUTO] Prospecting US 1"}],
    )
    data |= {"change_budget": {"max_daily_budget_change_pct": 30}, "status": "PAUSED"}
    rule = await save_rule(db, data, now=real)
    first = await run_at(settings, db, rule, "b-yesterday", datetime.now(UTC))
    (raised,) = await records(db, batch_id="b-yesterday")
    assert first.applied == 1
    base = int(raised["before"])
    await aged(db, "b-yesterday", timedelta(hours=22))  # it ran 22 real hours ago
    await run_at(settings, db, rule, "b-ahead", datetime.now(UTC) + AHEAD)
    (second,) = await records(db, batch_id="b-ahead")
    after = int(second["after"] if second["outcome"] == "applied" else second["before"])
    # both changes are within 24 real hours: together at most 30 % of the budget before them
    assert after - base <= base * 30 // 100 + 1


async def test_a_batch_whose_worker_runs_is_never_reaped_whatever_the_clocks(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, real: datetime
) -> None:
    rule = await raise_adset(db, real)
    await sandbox.set_faults(latency_ms=1500)  # a job that takes a while
    queue = connect_queue(settings)
    try:
        async with engine_for(settings, db) as engine:
            running = asyncio.create_task(
                run_at(settings, db, rule, "b-behind", datetime.now(UTC) - BEHIND)
            )

            async def started() -> bool:
                row = await db[c.BATCHES].find_one({"_id": "b-behind"})
                return row is not None and row["status"] == "RUNNING"

            await wait_for(started)
            # a reaper pass on another worker, while the job still runs
            assert await reap_job({"engine": engine, "queue": queue}) == 0
            row = await db[c.BATCHES].find_one({"_id": "b-behind"})
            assert row is not None and row["status"] == "RUNNING"
            summary = await running
    finally:
        await queue.aclose()
    assert summary.status == "DONE" and summary.applied == 1
