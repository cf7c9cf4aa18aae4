"""``rebalance_budget``'s planning arithmetic (pure): the total never changes, no entity
crosses its bounds or its cap, and a better entity never loses budget to a worse one."""

from __future__ import annotations

import dataclasses
from decimal import ROUND_DOWN, Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.errors import RuleValidationError
from ruleengine.rules.language.action_types import RebalanceBudgetAction
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.plan.plan import percent_of
from ruleengine.rules.plan.rebalance import (
    Limits,
    Member,
    Owed,
    Previous,
    Unsettled,
    in_order,
    owed,
    plan_rebalance,
    trimmed,
)

members_st = st.lists(
    st.builds(
        Member,
        id=st.from_regex(r"[0-9]{1,6}", fullmatch=True),
        budget=st.integers(min_value=1, max_value=10**9),
        metric=st.none() | st.floats(min_value=0, max_value=100, allow_nan=False),
        learning=st.booleans(),
        room=st.none() | st.integers(min_value=-(10**6), max_value=10**8),
    ),
    min_size=0,
    max_size=12,
    unique_by=lambda m: m.id,
)
limits_st = st.builds(
    Limits,
    higher_is_better=st.booleans(),
    max_change_pct=st.floats(min_value=0.01, max_value=100),
    lower=st.integers(min_value=1, max_value=10**6),
    upper=st.none() | st.integers(min_value=1, max_value=2 * 10**9),
    respect_learning=st.booleans(),
    learning_pct=st.none() | st.floats(min_value=0.01, max_value=100),
)


def _better(a: float, b: float, limits: Limits) -> bool:
    return a > b if limits.higher_is_better else a < b


@given(members_st, limits_st)
def test_the_total_never_changes(members: list[Member], limits: Limits) -> None:
    plan = plan_rebalance(members, limits)
    assert plan.total_after == plan.total_before == sum(m.budget for m in members)
    assert [m.id for m in plan.moves] == [m.id for m in members]


@given(members_st, limits_st)
def test_no_entity_crosses_its_bounds_or_its_cap(members: list[Member], limits: Limits) -> None:
    plan = plan_rebalance(members, limits)
    by_id = {m.id: m for m in members}
    for move in plan.moves:
        member = by_id[move.id]
        if move.delta < 0:
            assert move.after >= limits.lower
        if move.delta > 0 and limits.upper is not None:
            assert move.after <= limits.upper
        if member.metric is None:
            assert move.delta == 0 and move.reason == "no_data"
            continue
        percent = limits.max_change_pct
        if member.learning and limits.respect_learning:
            if limits.learning_pct is None:
                assert move.delta == 0 and move.reason == "in_learning_phase"
                continue
            percent = min(percent, limits.learning_pct)
        cap = percent_of(member.budget, Decimal(str(percent)), rounding=ROUND_DOWN)
        assert abs(move.delta) <= cap
        if member.room is not None:
            assert abs(move.delta) <= max(0, member.room)


@given(members_st, limits_st)
def test_a_better_entity_never_loses_budget_to_a_worse_one(
    members: list[Member], limits: Limits
) -> None:
    moves = plan_rebalance(members, limits).moves
    givers = [m for m in moves if m.delta < 0]
    takers = [m for m in moves if m.delta > 0]
    for giver in givers:
        for taker in takers:
            assert giver.metric is not None and taker.metric is not None
            assert _better(taker.metric, giver.metric, limits)


@given(members_st, limits_st, st.integers(min_value=0, max_value=10**8))
def test_what_is_given_back_is_placed_or_carried_and_never_taken_from_anyone(
    members: list[Member], limits: Limits, give_back: int
) -> None:
    plan = plan_rebalance(members, limits, give_back=give_back)
    assert plan.total_after == plan.total_before + give_back - plan.unplaced
    assert 0 <= plan.unplaced <= give_back


@given(members_st, limits_st, st.integers(min_value=0, max_value=10**9))
def test_increases_trimmed_to_what_was_freed_never_exceed_it(
    members: list[Member], limits: Limits, freed: int
) -> None:
    decreases, increases = in_order(plan_rebalance(members, limits).moves)
    assert all(m.delta < 0 for m in decreases)
    kept = trimmed(increases, freed)
    assert sum(m.delta for m in kept) == min(freed, sum(m.delta for m in increases))
    assert all(0 <= k.delta <= m.delta for k, m in zip(kept, increases, strict=True))


def test_the_worst_gives_to_the_best_first() -> None:
    group = [Member(str(i), 10_000, float(i)) for i in range(6)]  # 5 the best ROAS
    plan = plan_rebalance(group, Limits(higher_is_better=True, max_change_pct=20))
    assert {m.id: m.delta for m in plan.moves} == {
        "0": -2000,
        "1": -2000,
        "2": -2000,
        "3": 2000,
        "4": 2000,
        "5": 2000,
    }


def test_a_cost_ranks_the_lowest_best_and_ties_do_not_move() -> None:
    group = [Member("a", 5000, 2.0), Member("b", 5000, 1.0), Member("c", 5000, 2.0)]
    plan = plan_rebalance(group, Limits(higher_is_better=False, max_change_pct=10))
    assert [m.delta for m in plan.moves] == [0, 500, -500]  # ties: the larger id ranks below
    tied = plan_rebalance(group[:1] + group[2:], Limits(higher_is_better=False, max_change_pct=10))
    assert [m.delta for m in tied.moves] == [0, 0]


def test_what_an_interrupted_rebalance_owes_only_while_nobody_else_changed_a_budget() -> None:
    previous = Previous(
        total=30_000, befores={"a": 10_000, "b": 10_000, "c": 10_000}, done={"a": 8000}
    )
    assert owed(previous, {"a": 8000, "b": 10_000, "c": 10_000}) == Owed(2000)
    assert owed(previous, {"a": 8000, "b": 10_000, "c": 9000}) == Owed()  # someone changed c
    assert owed(None, {}) == Owed()


def test_a_decrease_whose_answer_was_lost_is_owed_by_the_run_after_its_settling() -> None:
    befores = {"a": 10_000, "b": 10_000, "c": 10_000}
    lost = Previous(total=30_000, befores=befores, done={}, pending={"a": 8000}, batch="r1")
    carried = Unsettled("r1", "a", "done", 2000)
    for landed in (8000, 10_000):  # landed or not, it is not known yet: nothing owed, carried
        assert owed(lost, befores | {"a": landed}) == Owed(0, (carried,))
    # the next run (r2) moved nothing and carried it; r1's decrease is then settled
    r2 = {"a": 8000, "b": 10_000, "c": 10_000}
    for status, owes in (("done", 2000), ("failed", 0)):
        after = Previous(28_000, r2, {}, carried=[dataclasses.replace(carried, status=status)])
        assert owed(after, r2) == Owed(owes)
    still = Previous(28_000, r2, {}, carried=[carried])  # still pending: carried on
    assert owed(still, r2) == Owed(0, (carried,))


@given(
    befores=st.lists(st.integers(1000, 50_000), min_size=2, max_size=6),
    data=st.data(),
)
def test_nothing_is_owed_that_a_pending_write_may_not_owe(befores: list[int], data: Any) -> None:
    """Whatever a pending write turns out to have done, what the next run gives back now is no
    more than the group lacks then, and with what the run after gives once it is settled, it is
    exactly what the group lacks."""
    ids = [f"e{i}" for i in range(len(befores))]
    before = dict(zip(ids, befores, strict=True))
    deltas = {i: data.draw(st.integers(-before[i] // 5, before[i] // 5)) for i in ids}
    states = {i: data.draw(st.sampled_from(["done", "failed", "pending"])) for i in ids}
    give_back = data.draw(st.integers(0, 5000))
    total = sum(before.values()) + give_back
    done = {i: before[i] + deltas[i] for i in ids if states[i] == "done"}
    pending = {i: before[i] + deltas[i] for i in ids if states[i] == "pending"}
    landed = {i: data.draw(st.booleans()) for i in pending}
    live = {i: done.get(i, pending[i] if landed.get(i) else before[i]) for i in ids}
    lacks = total - sum(live.values())
    debt = owed(Previous(total, before, done, pending, "r1"), live)
    assert debt.amount <= max(0, lacks)
    later = [
        dataclasses.replace(u, status="done" if landed[u.entity] else "failed")
        for u in debt.unsettled
    ]
    settled_then = owed(Previous(sum(live.values()), live, {}, carried=later), live)
    counted = {
        i: max(before[i], pending[i]) if i in pending else done.get(i, before[i]) for i in ids
    }
    if total >= sum(counted.values()):  # a plan whose increases its decreases paid for
        assert debt.amount + settled_then.amount == lacks


def _rule(action: dict[str, object], **task: object) -> dict[str, object]:
    return {
        "name": "Rebalance",
        "format": 2,
        "level": "adset",
        "ad_accounts": ["act_1"],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "tasks": [
            {
                "id": "t",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "rebalance_budget", "metric": "ctr", "period": "last_7d"}
                | action,
                **task,
            }
        ],
    }


@pytest.mark.parametrize(
    ("action", "task", "path", "words"),
    [
        ({"metric": "spend"}, {}, "tasks[0].action.metric", "what a rebalance ranks by"),
        ({"max_change_percent": 150}, {}, "tasks[0].action.max_change_percent", "100"),
        ({"min_budget": 50, "max_budget": 10}, {}, "tasks[0].action.min_budget", "> max_budget"),
        (
            {"then": {"after_minutes": 60, "do": "restore_budget"}},
            {},
            "tasks[0].action.then",
            "undo the whole batch",
        ),
        ({}, {"approval": {"when": "always"}}, "tasks[0].approval", "not approved entity"),
        ({}, {"holdout": {"percent": 20}}, "tasks[0].holdout", "cannot be measured"),
    ],
)
def test_a_wrong_rebalance_is_refused_with_its_path(
    action: dict[str, object], task: dict[str, object], path: str, words: str
) -> None:
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(_rule(action, **task))
    found = {e.path: e.message for e in caught.value.errors}
    assert path in found and words in found[path], found


def test_a_rebalance_in_currency_units_parses() -> None:
    rule = parse_rule(_rule({"min_budget": 10.5, "max_budget": 500, "max_change_percent": 15}))
    action = rule.tasks[0].action
    assert isinstance(action, RebalanceBudgetAction)
    assert (action.min_budget, action.max_budget, action.max_change_percent) == (10.5, 500, 15)
