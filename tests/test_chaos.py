"""The chaos harness (``bench/chaos.py``) in the suite, and its invariant checks on their own.

The harness starts servers of its own (it restarts them), real worker processes it
SIGKILLs, and drives the dispatcher on a fake clock; see its docstring. Here it runs at a
smaller scale than the benchmark's default (3 accounts × 30 campaigns, 6 kills, over 200
budget actions, about 30 s on a 2-core machine). What it checks is what Meta received and
what MongoDB holds; the unit tests below show that each check catches what it is for.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from chaos import ChaosConfig, Observed, check_invariants, run_chaos

SMALL = ChaosConfig(accounts=3, campaigns=30, workers=3, kills=6, seed=1, min_runs=4)


@pytest.mark.timeout(300)
async def test_workers_killed_and_servers_restarted_leave_every_write_recorded_once(
    tmp_path: Path,
) -> None:
    result = await run_chaos(SMALL, work_dir=tmp_path)
    figures = result.figures
    assert not result.violations, (
        f"{len(result.violations)} invariant(s) broken (logs in {tmp_path / 'logs'}):\n"
        + "\n".join(result.violations[:40])
    )
    # the chaos happened, while budgets were being changed
    assert figures["budget_actions"] >= 200
    assert figures["kills"] == SMALL.kills
    assert figures["kills_mid_job"] >= 1
    assert (figures["redis_restarts"], figures["mongodb_restarts"]) == (1, 1)
    assert figures["ticks_during_outages"] == {
        "redis": "redis_unreachable",
        "mongodb": "mongodb_unreachable",
    }
    assert figures["writes"] > 0 and figures["batches_abandoned"] > 0


# ---------------------------------------------------------------- the checks themselves

T0 = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)


def _intent(batch: str, entity: str, before: int, target: int, **extra: Any) -> dict[str, Any]:
    return {
        "batch_id": batch,
        "task_id": "up",
        "entity_id": entity,
        "rule_id": "r",
        "before": before,
        "target": target,
        "status": "done",
        "created_at": T0,
        "cooldown_minutes": 0,
        **extra,
    }


def _record(batch: str, entity: str, after: int, **extra: Any) -> dict[str, Any]:
    return {
        "batch_id": batch,
        "task_id": "up",
        "entity_id": entity,
        "outcome": "applied",
        "after": after,
        **extra,
    }


def _write(entity: str, value: int) -> dict[str, Any]:
    return {"id": entity, "params": {"daily_budget": str(value)}, "ok": True}


def _observed(**changes: Any) -> Observed:
    """Two composed writes on one campaign, each with its intent, record and batch."""
    base: dict[str, Any] = {
        "writes": [_write("c1", 101), _write("c1", 102)],
        "intents": [_intent("b1", "c1", 100, 101), _intent("b2", "c1", 101, 102)],
        "records": [_record("b1", "c1", 101), _record("b2", "c1", 102)],
        "batches": [
            {"_id": "b1", "status": "DONE", "applied_count": 1},
            {"_id": "b2", "status": "ABANDONED", "applied_count": 1},
        ],
        "initial": {"c1": 100},
        "once_per_run": {},
    }
    return Observed(**(base | changes))


def test_a_clean_run_breaks_nothing() -> None:
    assert check_invariants(_observed()) == []


def test_a_write_without_a_done_intent_is_caught() -> None:
    seen = _observed(writes=[_write("c1", 101), _write("c1", 102), _write("c1", 102)])
    assert any("2 at Meta, 1 done intent" in v for v in check_invariants(seen))


def test_a_done_intent_without_its_applied_record_is_caught() -> None:
    seen = _observed(records=[_record("b1", "c1", 101)])
    assert any("b2|up|c1: 0 execution record" in v for v in check_invariants(seen))
    failed = _observed(
        records=[_record("b1", "c1", 101), _record("b2", "c1", 101, outcome="failed")]
    )
    assert any("its record says failed" in v for v in check_invariants(failed))


def test_two_records_of_one_batch_task_and_entity_are_caught() -> None:
    records = [_record("b1", "c1", 101), _record("b2", "c1", 102), _record("b2", "c1", 102)]
    assert any("has 2 execution records" in v for v in check_invariants(_observed(records=records)))


def test_a_second_change_within_the_cooldown_is_caught() -> None:
    intents = [
        _intent("b1", "c1", 100, 101, cooldown_minutes=60),
        _intent("b2", "c1", 101, 102, cooldown_minutes=60, created_at=T0 + timedelta(minutes=5)),
    ]
    broken = check_invariants(_observed(intents=intents, once_per_run={"c1": 1}))
    assert any("changed c1 twice 300s apart" in v for v in broken)
    assert any("received 2 writes; its cooldowns allow 1" in v for v in broken)


def test_a_lost_update_is_caught() -> None:
    # the second write was computed from 100, as if the first had not landed
    intents = [_intent("b1", "c1", 100, 101), _intent("b2", "c1", 100, 102)]
    assert any("lost update on c1" in v for v in check_invariants(_observed(intents=intents)))


def test_batch_counts_and_leftovers_are_caught() -> None:
    batches = [
        {"_id": "b1", "status": "DONE", "applied_count": 0},
        {"_id": "b2", "status": "RUNNING"},
    ]
    intents = [_intent("b1", "c1", 100, 101), _intent("b2", "c1", 101, 102, status="pending")]
    broken = check_invariants(_observed(batches=batches, intents=intents))
    assert any("says applied_count=0, its records 1" in v for v in broken)
    assert any("b2 left RUNNING" in v for v in broken)
    assert any("b2|up|c1 left pending" in v for v in broken)
