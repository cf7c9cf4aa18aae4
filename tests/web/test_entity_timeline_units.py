"""The timeline's authorship rules over generated record histories (no servers)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ruleengine.web.api.entities import ReadOrder, build_timeline

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
    order = ReadOrder(
        listings={"b1": (2, START - timedelta(minutes=1)), "b2": (3, START + timedelta(hours=1))},
        fences={("b1", "pause"): 3},
    )
    paused |= {"batch_id": "b1", "task_id": "pause"}
    later |= {"batch_id": "b2", "task_id": "pause"}
    body = build_timeline("1", [later, paused], since=START, order=order)
    status = body["fields"]["status"]
    assert [s["value"] for s in status["steps"]] == ["ACTIVE", "PAUSED", "ACTIVE"]
    assert [ch["by"]["label"] for ch in status["changes"]] == [
        "Pause losers v3",
        "outside the engine",
    ]
    assert body["fields"]["daily_budget"]["changes"] == []
    assert body["metric"] is None  # the rule that acted had no conditions recorded
    assert [e["id"] for e in body["executions"]] == ["2", "1"]


def _change(
    batch: str, at: datetime, before: int, after: int, *, rule: str = "Margin guard"
) -> dict[str, Any]:
    return {
        "_id": f"{batch}-c",
        "batch_id": batch,
        "task_id": "t",
        "created_at": at,
        "rule_id": rule,
        "rule_name": rule,
        "rule_version": 1,
        "outcome": "applied",
        "field": "daily_budget",
        "before": before,
        "after": after,
        "entity": {"id": "1", "daily_budget": before},
    }


def _looked(batch: str, at: datetime, budget: int) -> dict[str, Any]:
    return {
        "_id": f"{batch}-q",
        "batch_id": batch,
        "task_id": "t",
        "created_at": at,
        "rule_id": batch,
        "rule_name": batch,
        "rule_version": 1,
        "outcome": "not_matched",
        "field": None,
        "entity": {"id": "1", "daily_budget": budget},
    }


@given(st.sampled_from([2, 3]))
def test_rules_that_listed_before_another_rules_change_in_the_same_tick_invent_nothing(
    listed_fence: int,
) -> None:
    tick = START
    # Margin guard writes 30000 → 27000 under fence 4; two rules of the same tick listed the
    # entity before it (fence 3 finished, or still held: 2) and record later, seeing 30000.
    records = [
        _change("guard", tick + timedelta(milliseconds=5), 30000, 27000),
        _looked("scale", tick + timedelta(milliseconds=13), 30000),
        _looked("watch", tick + timedelta(milliseconds=20), 30000),
    ]
    order = ReadOrder(
        listings={b: (listed_fence, tick) for b in ("guard", "scale", "watch")},
        fences={("guard", "t"): 4},
    )
    body = build_timeline("1", records[::-1], since=START, order=order)
    budget = body["fields"]["daily_budget"]
    assert [(c["before"], c["after"], c["by"]["kind"]) for c in budget["changes"]] == [
        (30000, 27000, "rule")
    ]
    assert budget["steps"][-1]["value"] == 27000


def test_a_listing_after_the_change_that_saw_another_value_is_outside() -> None:
    records = [
        _change("guard", START, 30000, 27000),
        _looked("later", START + timedelta(minutes=15), 25000),  # someone set 250 since
    ]
    order = ReadOrder(
        listings={"guard": (3, START), "later": (4, START + timedelta(minutes=15))},
        fences={("guard", "t"): 4},
    )
    body = build_timeline("1", records[::-1], since=START, order=order)
    changes = body["fields"]["daily_budget"]["changes"]
    assert [(c["before"], c["after"], c["by"]["kind"]) for c in changes] == [
        (30000, 27000, "rule"),
        (27000, 25000, "outside"),
    ]


EVENTS = st.lists(st.sampled_from(["write", "list"]), min_size=1, max_size=16)


@given(EVENTS, st.lists(st.integers(0, 10_000), min_size=32, max_size=32), st.randoms())
def test_without_outside_edits_no_interleaving_of_reads_and_writes_shows_an_outside_change(
    events: list[str], delays_ms: list[int], rng: Any
) -> None:
    """Writes take a fence, may wait, then land; listings read the fence then the live value
    at any point, even while a write holds the lock; every record is written any time later."""
    fence, live, records, listings, fences = 0, 30000, [], {}, {}
    clock = START
    for n, event in enumerate(events):
        clock += timedelta(seconds=1)
        late = clock + timedelta(milliseconds=delays_ms[n])  # when the record is written
        if event == "write":
            fence += 1  # taken: the fence before it is finished, this one not yet
            target = rng.randrange(1000, 50000)
            if rng.random() < 0.5:  # a listing between the fence's taking and the write
                listings[f"mid{n}"] = (fence - 1, clock)
                records.append(_looked(f"mid{n}", late + timedelta(seconds=30), live))
            if rng.random() < 0.3:  # fence read while finished, listed after a newer write
                listings[f"race{n}"] = (fence - 1, clock)
                records.append(_looked(f"race{n}", late + timedelta(seconds=9), target))
            records.append(_change(f"w{n}", late, live, target))
            fences[(f"w{n}", "t")] = fence
            live = target
        else:
            listings[f"l{n}"] = (fence, clock)  # the last holder finished
            records.append(_looked(f"l{n}", late, live))
    records.sort(key=lambda r: r["created_at"], reverse=True)
    body = build_timeline("1", records, since=START, order=ReadOrder(listings, fences))
    changes = body["fields"].get("daily_budget", {"changes": []})["changes"]
    assert [c for c in changes if c["by"]["kind"] == "outside"] == []
