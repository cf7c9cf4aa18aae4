"""``execution_count_limit``, ``change_bid`` and ``scale_to_target`` against the sandbox:
what Meta received, what MongoDB holds — across worker restarts, rule edits and a SIGKILL
in the middle of the bid writes."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

from flow import (
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
    writes_at_least,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.intents import IntentStore
from support import BENCH_ZONE, SANDBOX_NOW, SANDBOX_TOKEN

SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1}
HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}


async def intents(db: Database, **query: Any) -> list[dict[str, Any]]:
    return [d async for d in db[c.ACTION_INTENTS].find(query)]


def adset_rule(
    action: dict[str, Any], *, account: str, campaigns: str, **extra: Any
) -> dict[str, Any]:
    data = campaign_rule(action, [SPENT], level="adset", **extra)
    data["ad_accounts"] = [account]
    data["filters"] = [{"field": "campaign.name", "operator": "CONTAIN", "value": campaigns}]
    return data


# ---------------------------------------------------------------- execution_count_limit


async def _worked_by_a_new_process(
    settings: Settings, db: Database, redis: Any, tmp_path: Path, rule_id: str, runs: int
) -> None:
    """A fresh worker process works the queue until ``runs`` batches of the rule are DONE and
    arq has taken the job off its queue; then it is killed."""
    worker = start_worker(settings, tmp_path / f"worker{runs}.log")
    try:

        async def done() -> bool:
            query = {"rule_id": rule_id, "status": "DONE"}
            finished = await db[c.BATCHES].count_documents(query) >= runs
            return finished and await redis.zcard(c.QUEUE_NAME) == 0

        await wait_for(done, timeout_s=60)
    finally:
        kill(worker)


async def test_execution_count_limit_holds_across_worker_restarts_and_rule_edits(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    tmp_path: Path,
) -> None:
    data = campaign_rule({"type": "increase_budget", "percent": 10}, [HAS_BUDGET])
    data["tasks"][0]["execution_count_limit"] = 2
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": "Prospecting US 1"}]
    rule = await save_rule(db, data)
    start = datetime.now(UTC)
    for run in range(2):  # each run worked by a worker process of its own, then killed
        await dispatch(settings, db, now=start + timedelta(minutes=15 * run))
        await _worked_by_a_new_process(settings, db, redis, tmp_path, rule.id, run + 1)
    assert len(await successful_writes(sandbox)) == 2
    # a new version of the rule (another percent) keeps the count: it is the same task
    edited = await save_rule(
        db,
        data
        | {"tasks": [data["tasks"][0] | {"action": {"type": "increase_budget", "percent": 5}}]},
    )
    assert (edited.id, edited.version) == (rule.id, 2)
    await dispatch(settings, db, now=start + timedelta(minutes=30))
    await _worked_by_a_new_process(settings, db, redis, tmp_path, rule.id, 3)
    assert len(await successful_writes(sandbox)) == 2  # nothing more reached Meta
    third = [r for r in await records(db) if r["rule_version"] == 2]
    assert [(r["outcome"], r["reason"]) for r in third] == [("skipped", "execution_count_limit")]
    assert [i["status"] for i in await intents(db, rule_id=rule.id)] == ["done", "done"]
    # raising the limit lets the task act once more
    raised = data["tasks"][0] | {"execution_count_limit": 3}
    await save_rule(db, data | {"tasks": [raised]})
    await dispatch(settings, db, now=start + timedelta(minutes=45))
    await work(settings)
    assert len(await successful_writes(sandbox)) == 3


async def test_the_execution_count_query_counts_each_pair_over_every_batch_but_its_own(
    db: Database,
) -> None:
    intents_ = db[c.ACTION_INTENTS]
    await intents_.insert_many(
        [
            {
                "batch_id": f"b{i}",
                "task_id": "t",
                "entity_id": str(i % 7),
                "rule_id": f"r{i % 3}",
                "status": "done",
            }
            for i in range(200)
        ]
    )
    counts = await IntentStore(db).execution_counts(
        "r1", [("t", "1"), ("t", "2"), ("t", "3")], other_than="b1"
    )
    expected = {
        ("t", e): sum(1 for i in range(200) if i % 3 == 1 and str(i % 7) == e and i != 1)
        for e in ("1", "2", "3")
    }
    assert counts == expected


# ---------------------------------------------------------------- change_bid


@pytest.mark.parametrize("batch_size", [50, 1])
async def test_change_bid_writes_the_clamped_bid_once_and_skips_ad_sets_without_one(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    batch_size: int,
) -> None:
    settings = settings.model_copy(update={"write_batch_size": batch_size})
    action = {"type": "change_bid", "percent": 20, "direction": "increase", "max_bid": 5}
    await save_rule(db, adset_rule(action, account="act_1001", campaigns="Retargeting US"))
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    await work(settings)
    writes = await successful_writes(sandbox)
    # Retargeting US 2's two ad sets bid 4.50 with a cap: +20 % = 5.40, clamped to 5.00
    assert sorted((w["params"], w["ok"]) == ({"bid_amount": "500"}, True) for w in writes) == [
        True,
        True,
    ]
    applied = await records(db, outcome="applied")
    assert {r["entity_id"] for r in applied} == {w["id"] for w in writes}
    for record in applied:
        assert (record["field"], record["before"], record["requested"], record["after"]) == (
            "bid_amount",
            450,
            540,
            500,
        )
        assert record["clamped_by"] == ["max_bid"]
    skipped = await records(db, outcome="skipped")
    assert {r["reason"] for r in skipped} == {"no_bid"}  # Retargeting US 1: Meta bids alone
    assert len(skipped) == 2
    done = await intents(db, status="done")
    assert (
        sorted((i["field"], i["before"], i["target"]) for i in done)
        == [("bid_amount", 450, 500)] * 2
    )
    for write in writes:
        live = await sandbox.object(write["id"])
        assert live["bid_amount"] == 500
    # the next run sees the live bid at max_bid: nothing is written
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    assert len(await successful_writes(sandbox)) == 2
    later = [r for r in await records(db) if r["entity_id"] in {w["id"] for w in writes}]
    assert sorted(r["reason"] or "" for r in later) == ["", "", "at_max_bid", "at_max_bid"]


async def test_an_absolute_bid_is_in_the_accounts_currency_units(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    action = {"type": "change_bid", "amount": 720.4}  # ¥720.4 → ¥720: yen have no decimals
    await save_rule(db, adset_rule(action, account="act_1004", campaigns="Retargeting JP"))
    await dispatch(settings, db)
    await work(settings)
    writes = await successful_writes(sandbox)
    assert [w["params"] for w in writes] == [{"bid_amount": "720"}] * 2
    assert {r["after"] for r in await records(db, outcome="applied")} == {720}


async def test_a_worker_killed_in_the_middle_of_the_bid_writes_changes_no_bid_twice(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, tmp_path: Path
) -> None:
    # act_2001: 100 campaigns of one ad set; every fifth bids 5.00 with a cap (20 ad sets)
    await sandbox.reset(scenario="bench", accounts=1, campaigns_per_account=100)
    await sandbox.set_clock(SANDBOX_NOW)
    await CredentialStore(db, load_key(settings)).add(  # as Meta (the sandbox) holds it
        "act_2001", SANDBOX_TOKEN, now=datetime.now(UTC), timezone=BENCH_ZONE, currency="USD"
    )
    action = {"type": "change_bid", "percent": 10, "direction": "increase"}
    data = adset_rule(action, account="act_2001", campaigns="Bench", cooldown_minutes=60)
    rule = await save_rule(db, data)
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    # calls of 10 writes, each answered after 1.5 s: the worker dies once the first 10 have
    # landed and the second call is at the sandbox — its intents recorded, its writes on the way
    await sandbox.set_faults(write_latency_ms=1500)
    worker = start_worker(settings, tmp_path / "worker.log", write_batch_size="10")

    async def second_call_on_its_way() -> int:
        landed = await writes_at_least(sandbox, 10)
        return landed if landed and await write_in_flight(sandbox) else 0

    try:
        landed = await wait_for(second_call_on_its_way, timeout_s=60)
    finally:
        kill(worker)
    assert landed == 10
    await wait_for(lambda: sandbox_quiet(sandbox))
    await sandbox.clear_faults()
    first = (await db[c.BATCHES].find_one({"rule_id": rule.id}) or {})["_id"]
    assert "pending" in {i["status"] for i in await intents(db, batch_id=first)}
    await redis.delete(c.QUEUE_NAME)
    await reap(settings, db, redis, now=start + timedelta(hours=1))  # settles from live bids
    await dispatch(settings, db, now=start + timedelta(minutes=15))
    await work(settings)
    writes = await successful_writes(sandbox)
    assert len(writes) == 20 and len({w["id"] for w in writes}) == 20  # each bid once
    assert {w["params"]["bid_amount"] for w in writes} == {"550"}
    done = await intents(db, status="done")
    assert sorted(i["entity_id"] for i in done) == sorted(w["id"] for w in writes)
    assert {(i["field"], i["before"], i["target"]) for i in done} == {("bid_amount", 500, 550)}
    applied = await records(db, outcome="applied")
    assert sorted(r["entity_id"] for r in applied) == sorted(w["id"] for w in writes)
    assert await intents(db, status="pending") == []


# ---------------------------------------------------------------- scale_to_target


def _expected(before: int, roas: float, *, target: float, cap_pct: float, max_minor: int) -> int:
    """What the docs promise: live × roas/target, half up, within max_budget and the cap."""
    exact = Decimal(before) * Decimal(str(roas)) / Decimal(str(target))
    value = int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    value = min(value, max_minor)
    cap = math.floor(Decimal(before) * Decimal(str(cap_pct)) / 100)
    value = max(min(value, before + cap), before - cap)
    return max(value, before) if roas > target else min(value, before)


async def test_scale_to_target_moves_budgets_by_the_metric_fetched_with_the_conditions(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    action = {
        "type": "scale_to_target",
        "metric": "purchase_roas.omni_purchase",
        "period": "last_7d",
        "target": 2,
        "max_budget": 250,  # $250.00
        "max_change_percent": 30,
    }
    await save_rule(db, campaign_rule(action, [SPENT]))
    await dispatch(settings, db)
    await work(settings)
    rows = await records(db)
    by_outcome: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_outcome.setdefault(row["outcome"], []).append(row)
    applied = by_outcome["applied"]
    assert len(applied) >= 3
    writes = {w["id"]: int(w["params"]["daily_budget"]) for w in await successful_writes(sandbox)}
    assert writes == {r["entity_id"]: r["after"] for r in applied}
    for row in applied:
        metric = row["action_metric"]
        assert (metric["metric"], metric["period"]) == ("purchase_roas.omni_purchase", "last_7d")
        expected = _expected(row["before"], metric["actual"], target=2, cap_pct=30, max_minor=25000)
        assert row["after"] == expected, row
        assert row["after"] <= max(row["before"], 25000)
    grew = [r for r in applied if r["after"] > r["before"]]
    shrank = [r for r in applied if r["after"] < r["before"]]
    assert grew and shrank  # winners up, losers down
    assert all(r["action_metric"]["actual"] > 2 for r in grew)
    assert all(r["action_metric"]["actual"] < 2 for r in shrank)
    # a campaign without purchases has no ROAS: nothing to scale by
    reasons = {r["entity_name"]: r["reason"] for r in rows if r["outcome"] == "skipped"}
    assert reasons.get("Brand Awareness US") == "no_data"
