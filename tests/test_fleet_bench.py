"""``bench/fleet.py``: its command line, its pure helpers, and the JSON of a tiny real run.

The tiny run (one account, five campaigns, one worker, about twenty seconds of soak)
starts the whole embedded stack with a real dispatcher and worker process, so the
figures' shape is checked where they are made; the figures themselves are the
benchmark's business (``docs/performance.md``), never asserted here.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from fleet import (
    MIX,
    Minute,
    fleet_rules,
    lag_grows,
    next_step,
    scheduled_of,
    sizing,
    summarise_profile,
    verdict,
)
from ruleengine.dispatching.payload import batch_id_for
from ruleengine.rules.language.model import parse_rule

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "fleet.py"


def test_help_names_every_option() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True
    )
    for option in (
        "--accounts",
        "--rules-per-account",
        "--entities",
        "--minutes",
        "--workers",
        "--find-capacity",
        "--soak-at",
        "--profile",
        "--every-minutes",
    ):
        assert option in done.stdout


def test_flat_or_noisy_lag_does_not_grow_and_a_climbing_one_does() -> None:
    assert not lag_grows([])
    assert not lag_grows([30.0])
    assert not lag_grows([9.5, 9.8, 9.6, 9.9, 9.7])
    assert not lag_grows([25.0, 10.0, 10.4, 10.2])  # a slow first minute is a warm-up
    assert lag_grows([10.0, 10.0, 14.0, 19.0, 25.0])
    assert lag_grows([10.0, 14.0])  # two minutes: the second is the judge
    assert not lag_grows([10.0, 10.5])


def test_the_capacity_search_doubles_then_bisects_to_ten_percent() -> None:
    assert next_step(None, None, tried=4) == 8
    assert next_step(8, None, tried=8) == 16
    assert next_step(8, 16, tried=16) == 12
    assert next_step(12, 16, tried=12) == 14
    assert next_step(14, 15, tried=14) is None
    assert next_step(None, 4, tried=4) == 2  # the first step failed: halve
    assert next_step(None, 1, tried=1) is None


def test_the_scheduled_time_is_read_back_from_the_engines_batch_id() -> None:
    at = datetime(2026, 11, 24, 17, 3, 20, tzinfo=UTC)
    assert scheduled_of(batch_id_for("65a1b2c3", "act_2001", at)) == at
    assert scheduled_of("followup:x") is None


def test_a_fleet_is_sustained_only_while_each_tick_is_taken_before_the_next() -> None:
    calm = [Minute(lag_p99_s=9.9, after_tick_p99_s=1.2) for _ in range(3)]
    assert verdict(calm, tick_s=10, dropped=0) == (True, "kept up")
    late = [*calm, Minute(lag_p99_s=19.0, after_tick_p99_s=11.0)]
    assert not verdict(late, tick_s=10, dropped=0)[0]
    assert not verdict(calm, tick_s=10, dropped=3)[0]


def test_every_rule_of_the_mix_is_valid_and_each_account_gets_its_own() -> None:
    rules = fleet_rules(["act_2001", "act_2002"], len(MIX) + 1)
    assert len(rules) == 2 * (len(MIX) + 1)
    for data in rules:
        parse_rule(data, accounts={"act_2001": "USD", "act_2002": "USD"}, webhooks={"fleet"})
        assert len(data["ad_accounts"]) == 1
    assert len({r["name"] for r in rules}) == len(rules)
    own = {r["schedule"]["every_minutes"] for r in rules}
    assert own == {every for _, _, _, every, _ in MIX}  # the mix's own intervals, 2 to 5
    agency = fleet_rules(["act_2001"], len(MIX), every_minutes=15)
    assert {r["schedule"]["every_minutes"] for r in agency} == {15}
    assert [r["tasks"] for r in agency] == [r["tasks"] for r in rules[: len(MIX)]]


def test_a_profile_is_shared_out_by_package_and_engine_step_with_idle_apart() -> None:
    loop = "<module> (arq:6);BaseEventLoop._run_once (asyncio/base_events.py:1922)"
    collapsed = "\n".join(
        [
            f"{loop};EpollSelector.select (selectors.py:468) 50",
            f"{loop};Evaluation.act (ruleengine/engine.py:10);"
            "Actor.apply (ruleengine/actions.py:20);Collection.find (pymongo/x.py:3) 30",
            f"{loop};compare (ruleengine/rules/evaluate.py:5) 20",
        ]
    )
    summary = summarise_profile(collapsed)
    assert summary["samples"] == 100
    assert summary["idle_pct"] == 50.0
    assert summary["busy_by_package_pct"] == {"pymongo": 60.0, "ruleengine": 40.0}
    assert summary["busy_by_engine_step_pct"] == {
        "act (write path, notify)": 60.0,
        "evaluate": 40.0,
    }


@pytest.mark.timeout(120)
def test_growth_is_split_into_bytes_per_run_and_per_change() -> None:
    # a 240-account run's collections (bytes and documents an hour)
    by_collection = {
        "action_intents": {"docs": 119_041, "bytes": 64_112_430},
        "batches": {"docs": 25_598, "bytes": 18_384_891},
        "evaluations": {"docs": 25_598, "bytes": 73_845_081},
        "executions": {"docs": 119_041, "bytes": 43_298_349},
        "followups": {"docs": 15_939, "bytes": 10_145_860},
    }
    assert sizing(by_collection, 240) == {
        "runs_per_account_hour": 106.7,
        "bytes_per_run": 3_603,  # (18,384,891 + 73,845,081) / 25,598
        "changes_per_account_hour": 496.0,
        "bytes_per_change": 902,  # (64,112,430 + 43,298,349) / 119,041
    }
    # a run that changed nothing: no division by zero, and nothing per change
    quiet = sizing({"batches": {"docs": 10, "bytes": 7_000}}, 1)
    assert quiet == {
        "runs_per_account_hour": 10.0,
        "bytes_per_run": 700,
        "changes_per_account_hour": 0.0,
        "bytes_per_change": 0,
    }


def test_a_tiny_run_prints_the_figures_as_its_last_line(tmp_path: Path) -> None:
    argv = [sys.executable, str(SCRIPT), "--accounts", "1", "--entities", "5", "--workers", "1"]
    argv += ["--minutes", "0.35", "--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=110, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout.strip().splitlines()[-1])
    for key in (
        "jobs_per_s",
        "evals_per_s",
        "writes",
        "graph_calls_per_account_hour",
        "mongo_docs_per_hour",
        "mongo_bytes_per_hour",
        "mongo_sizing",
        "sustained",
    ):
        assert key in result
    assert isinstance(result["lag_p99_s_by_minute"], list)
    assert len(result["lag_p99_s_by_minute"]) == 1
    assert set(result["max_rss_mb"]) == {"dispatcher", "worker", "sandbox", "mongodb", "redis"}
    assert all(mb > 0 for mb in result["max_rss_mb"].values())
    assert "minute 1:" in done.stderr
