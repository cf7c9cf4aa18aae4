"""The timeline's authorship rules over generated record histories (no servers)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ruleengine.web.api.entities import build_timeline

START = datetime(2026, 11, 20, tzinfo=UTC)
# Each step: (the live budget someone outside set first, or None; the engine's new budget)
STEPS = st.lists(
    st.tuples(st.none() | st.integers(100, 10_000), st.integers(100, 10_000)), max_size=12
)


def history(start_budget: int, steps: list[tuple[int | None, int]]) -> list[dict[str, Any]]:
    """Records of a rule writing budgets, the live value moved between some of them."""
    live, records = start_budget, []
    for n, (outside, target) in enumerate(steps):
        live = outside if outside is not None else live
        records.append(
            {
                "_id": n,
                "created_at": START + timedelta(minutes=15 * n),
                "rule_id": "r",
                "rule_name": "Scale",
                "rule_version": 1 + n % 2,
                "outcome": "applied",
                "field": "daily_budget",
                "before": live,
                "after": target,
                "entity": {"id": "1", "daily_budget": live, "status": "ACTIVE"},
            }
        )
        live = target
    return records[::-1]  # the store gives them newest first


@given(st.integers(100, 10_000), STEPS)
def test_changes_chain_and_outside_is_each_value_the_engine_did_not_leave(
    start_budget: int, steps: list[tuple[int | None, int]]
) -> None:
    body = build_timeline("1", history(start_budget, steps), since=START)
    if not steps:
        assert body["fields"] == {} and body["executions"] == []
        return
    budget = body["fields"]["daily_budget"]
    changes = budget["changes"]
    # each change starts where the one before ended, and the steps are the values left
    assert all(a["after"] == b["before"] for a, b in itertools.pairwise(changes))
    assert [s["value"] for s in budget["steps"][1:]] == [ch["after"] for ch in changes]
    # outside: exactly the moves of the live value away from what was last known
    live, expected = None, 0
    for outside, target in steps:
        if outside is not None and live is not None and outside != live:
            expected += 1
        live = target
    assert sum(ch["by"]["kind"] == "outside" for ch in changes) == expected
    assert all(
        ch["by"]["label"].startswith("Scale v") for ch in changes if ch["by"]["kind"] == "rule"
    )
    assert body["fields"]["status"]["changes"] == []


def test_a_pause_by_a_rule_and_an_activation_outside_are_status_steps() -> None:
    seen = {"id": "1", "daily_budget": 5000}
    paused = {
        "_id": 1,
        "created_at": START,
        "rule_id": "r",
        "rule_name": "Pause losers",
        "rule_version": 3,
        "outcome": "applied",
        "field": "status",
        "before": "ACTIVE",
        "after": "PAUSED",
        "entity": seen | {"status": "ACTIVE"},
    }
    later = {
        "_id": 2,
        "created_at": START + timedelta(hours=1),
        "rule_id": "r",
        "rule_name": "Pause losers",
        "rule_version": 3,
        "outcome": "skipped",
        "field": None,
        "entity": seen | {"status": "ACTIVE"},  # someone activated it in Ads Manager
    }
    body = build_timeline("1", [later, paused], since=START)
    status = body["fields"]["status"]
    assert [s["value"] for s in status["steps"]] == ["ACTIVE", "PAUSED", "ACTIVE"]
    assert [ch["by"]["label"] for ch in status["changes"]] == [
        "Pause losers v3",
        "outside the engine",
    ]
    assert body["fields"]["daily_budget"]["changes"] == []
    assert body["metric"] is None  # the rule that acted had no conditions recorded
    assert [e["id"] for e in body["executions"]] == ["2", "1"]
