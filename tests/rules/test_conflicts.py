"""Static conflict analysis: which pairs of tasks fight over a field of the same entities."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruleengine.rules.conflicts import (
    RuleEntry,
    find_conflicts,
    fire_together,
    interval_set,
    meet_all,
    scope_overlap,
)
from ruleengine.rules.filtering import LocalFilter, wire
from ruleengine.rules.language.model import Rule, parse_rule

ROAS = "purchase_roas.omni_purchase"


def rule(
    name: str,
    action: dict[str, Any],
    *,
    filters: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    match: str = "all",
    level: str = "campaign",
    accounts: tuple[str, ...] = ("act_1001",),
    tasks: list[dict[str, Any]] | None = None,
) -> Rule:
    doc = {
        "name": name,
        "format": 2,
        "level": level,
        "ad_accounts": list(accounts),
        "filters": filters if filters is not None else [],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": tasks
        or [
            {
                "id": "t",
                "match": match,
                "conditions": conditions
                or [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": action,
            }
        ],
    }
    return parse_rule(doc)


def entries(*rules: Rule) -> list[RuleEntry]:
    return [RuleEntry(f"r{i}", r.name, r) for i, r in enumerate(rules)]


UP = {"type": "increase_budget", "percent": 20}
DOWN = {"type": "decrease_budget", "percent": 20}
AUTO = [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}]


def roas(operator: str, value: Any, period: str = "last_7d") -> dict[str, Any]:
    return {"metric": ROAS, "period": period, "operator": operator, "value": value}


def test_scale_up_and_cut_down_of_the_same_filtered_campaigns_is_a_conflict() -> None:
    (finding,) = find_conflicts(
        entries(rule("Scale", UP, filters=AUTO), rule("Cut", DOWN, filters=AUTO))
    )
    assert finding.field == "daily_budget"
    assert finding.kind == "opposing"
    assert finding.scope == "overlap"
    assert finding.conditions == "can_fire_together"
    assert finding.severity == "conflict"
    assert {finding.a.rule_id, finding.b.rule_id} == {"r0", "r1"}
    assert "opposite directions" in finding.why


def test_contain_vs_not_contain_the_same_text_is_disjoint() -> None:
    other = [{"field": "name", "operator": "NOT_CONTAIN", "value": "[a]"}]  # case ignored
    a = rule("Scale", UP, filters=[{"field": "name", "operator": "CONTAIN", "value": "[A]"}])
    assert find_conflicts(entries(a, rule("Cut", DOWN, filters=other))) == []


def test_thresholds_that_exclude_each_other_cannot_fire_together() -> None:
    a = rule("Scale", UP, conditions=[roas("<", 1)])
    b = rule("Cut", DOWN, conditions=[roas(">", 2)])
    (finding,) = find_conflicts(entries(a, b))
    assert finding.conditions == "cannot_fire_together"
    assert finding.severity == "note"
    assert "cannot fire together" in finding.why


def test_other_periods_or_metric_comparisons_may_fire_together() -> None:
    a = rule("Scale", UP, conditions=[roas("<", 1)])
    b = rule("Cut", DOWN, conditions=[roas(">", 2, period="last_3d")])
    assert find_conflicts(entries(a, b))[0].conditions == "can_fire_together"
    compare = {
        "metric": "spend",
        "period": "today",
        "operator": ">",
        "compare_to": {"metric": "daily_budget"},
    }
    c = rule("Cut", DOWN, conditions=[roas(">", 2), compare])
    assert find_conflicts(entries(a, c))[0].conditions == "cannot_fire_together"
    d = rule("Cut", DOWN, conditions=[roas(">", 0.5), compare])
    assert find_conflicts(entries(a, d))[0].conditions == "may_fire_together"


def test_any_needs_every_branch_excluded() -> None:
    a = rule("A", UP, conditions=[roas("<", 1)])
    b = rule("B", DOWN, match="any", conditions=[roas(">", 2), roas("IN_RANGE", [0.5, 0.8])])
    assert find_conflicts(entries(a, b))[0].conditions == "can_fire_together"
    c = rule("C", DOWN, match="any", conditions=[roas(">", 2), roas("==", 1)])
    assert find_conflicts(entries(a, c))[0].conditions == "cannot_fire_together"


def test_pause_vs_activate_ignores_the_status_filters_the_actions_move_across() -> None:
    active = [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]
    paused = [{"field": "effective_status", "operator": "IN", "value": ["PAUSED"]}]
    a = rule("Pause", {"type": "pause"}, filters=active)
    b = rule("Revive", {"type": "activate"}, filters=paused)
    (finding,) = find_conflicts(entries(a, b))
    assert finding.field == "status" and finding.scope == "overlap"
    # but a status filter still separates budget fights
    assert (
        find_conflicts(entries(rule("U", UP, filters=active), rule("D", DOWN, filters=paused)))
        == []
    )


def test_a_then_that_undoes_another_rules_action() -> None:
    pause_then = {"type": "pause", "then": {"after_minutes": 120, "do": "activate"}}
    a = rule("Cool off", pause_then, filters=AUTO)
    b = rule("Pause losers", {"type": "pause"}, filters=AUTO)
    (finding,) = find_conflicts(entries(a, b))
    assert finding.kind == "undoes_followup"
    assert finding.conditions == "may_fire_together"
    assert finding.severity == "conflict"  # Pause losers' pause of a paused one changes nothing
    assert "then activate" in (finding.a.does, finding.b.does)


def test_restore_budget_undoes_another_rules_increase() -> None:
    boost = {
        "type": "increase_budget",
        "percent": 10,
        "then": {"after_minutes": 60, "do": "restore_budget"},
    }
    (finding,) = find_conflicts(entries(rule("Boost", boost), rule("Scale", UP)))
    assert finding.kind == "undoes_followup"
    assert "then restore_budget" in (finding.a.does, finding.b.does)
    # its re-check leaves a change made after its action alone: reported, as a note
    assert finding.severity == "note" and "changed_by_someone_else" in finding.why
    dip = {
        "type": "decrease_budget",
        "percent": 10,
        "then": {"after_minutes": 60, "do": "restore_budget"},
    }
    found = find_conflicts(entries(rule("Dip", dip), rule("Scale", UP)))
    assert [f.kind for f in found] == ["opposing"]  # the restore moves the way Scale does
    # its own action and follow-up are one design, never a finding
    assert find_conflicts(entries(rule("Dip", dip))) == []


def test_tasks_of_one_rule_fight_too() -> None:
    tasks = [
        {"id": "up", "conditions": [roas(">", 3)], "action": UP},
        {
            "id": "set",
            "conditions": [roas("<", 2)],
            "action": {"type": "set_budget", "amount": 300},
        },
    ]
    (finding,) = find_conflicts(entries(rule("Both", UP, tasks=tasks)))
    assert (finding.a.task_id, finding.b.task_id) == ("set", "up")
    assert finding.conditions == "cannot_fire_together"


def test_renames_that_drop_an_appended_tag() -> None:
    tag = {"type": "append_to_name", "text": " [x]"}
    keeps = rule("Rename", {"type": "rename", "template": "{name} - {date}"})
    drops = rule("Rename", {"type": "rename", "template": "Evergreen {date}"})
    assert find_conflicts(entries(rule("Tag", tag), keeps)) == []
    (finding,) = find_conflicts(entries(rule("Tag", tag), drops))
    assert finding.field == "name" and "drops" in finding.why


def test_other_levels_and_accounts_do_not_meet() -> None:
    assert find_conflicts(entries(rule("A", UP, level="adset"), rule("B", DOWN))) == []
    assert find_conflicts(entries(rule("A", UP, accounts=("act_2",)), rule("B", DOWN))) == []


def test_ids_and_equal_values() -> None:
    ids = lambda *v: [{"field": "id", "operator": "IN", "value": list(v)}]  # noqa: E731
    assert (
        find_conflicts(
            entries(rule("A", UP, filters=ids("1", "2")), rule("B", DOWN, filters=ids("3")))
        )
        == []
    )
    assert find_conflicts(
        entries(rule("A", UP, filters=ids("1", "2")), rule("B", DOWN, filters=ids("2.0")))
    )
    eq = lambda v: [{"field": "name", "operator": "EQUAL", "value": v}]  # noqa: E731
    assert (
        find_conflicts(entries(rule("A", UP, filters=eq("x")), rule("B", DOWN, filters=eq("y"))))
        == []
    )


# ---------------------------------------------------------------- properties

TEXTS = st.sampled_from(["[A]", "[a]", "A", "[B]", "x", "5", "5.0", "nan", "inf", "Infinity"])
FILTER = st.one_of(
    st.builds(
        lambda f, o, v: {"field": f, "operator": o, "value": v},
        st.sampled_from(["name", "id", "campaign.id"]),
        st.sampled_from(["EQUAL", "NOT_EQUAL", "CONTAIN", "NOT_CONTAIN"]),
        TEXTS,
    ),
    st.builds(
        lambda o, v: {"field": "effective_status", "operator": o, "value": v},
        st.sampled_from(["IN", "NOT_IN"]),
        st.lists(
            st.sampled_from(["ACTIVE", "PAUSED", "ARCHIVED", "DELETED"]), min_size=1, max_size=3
        ),
    ),
    st.builds(
        lambda f, o, v: {"field": f, "operator": o, "value": v},
        st.sampled_from(["name", "id"]),
        st.sampled_from(["IN", "NOT_IN"]),
        st.lists(TEXTS, min_size=1, max_size=3),
    ),
    st.builds(
        lambda o, v: {"field": "id", "operator": o, "value": v},
        st.sampled_from(
            ["GREATER_THAN", "LESS_THAN", "GREATER_THAN_OR_EQUAL", "LESS_THAN_OR_EQUAL"]
        ),
        st.integers(0, 5),
    ),
)
NUMBER = st.integers(-3, 3).map(float)
OPERATOR = st.sampled_from([">", ">=", "<", "<=", "==", "!="])
CONDITION = st.one_of(
    st.builds(roas, OPERATOR, NUMBER, st.sampled_from(["last_7d", "today"])),
    st.builds(
        lambda o, a, b: roas(o, sorted([a, b])),
        st.sampled_from(["IN_RANGE", "NOT_IN_RANGE"]),
        NUMBER,
        NUMBER,
    ),
    st.just(
        {
            "metric": "spend",
            "period": "today",
            "operator": ">",
            "compare_to": {"metric": "daily_budget"},
        }
    ),
)
ACTION = st.sampled_from(
    [
        UP,
        DOWN,
        {"type": "set_budget", "amount": 300},
        {"type": "set_budget", "amount": 200},
        {"type": "pause"},
        {"type": "activate"},
        {"type": "pause", "then": {"after_minutes": 60, "do": "activate"}},
        {
            "type": "increase_budget",
            "percent": 5,
            "then": {"after_minutes": 60, "do": "restore_budget"},
        },
        {"type": "scale_to_target", "metric": ROAS, "period": "last_7d", "target": 2},
        {"type": "append_to_name", "text": " [done]"},
        {"type": "rename", "template": "{name} {date}"},
        {"type": "notify", "webhook": "ops"},
    ]
)
TASK = st.builds(
    lambda conditions, action, match: {"conditions": conditions, "action": action, "match": match},
    st.lists(CONDITION, min_size=1, max_size=3),
    ACTION,
    st.sampled_from(["all", "any"]),
)


@st.composite
def rules(draw: st.DrawFn, name: str, extra: list[dict[str, Any]] | None = None) -> Rule:
    tasks = [
        t | {"id": f"t{i}"} for i, t in enumerate(draw(st.lists(TASK, min_size=1, max_size=3)))
    ]
    filters = draw(st.lists(FILTER, max_size=3)) + (extra or [])
    accounts = draw(st.sampled_from([("act_1",), ("act_1", "act_2"), ("act_2",)]))
    return rule(name, UP, filters=filters, tasks=tasks, accounts=accounts)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(rules("A"), rules("B"))
def test_the_analysis_never_crashes_and_is_symmetric(a: Rule, b: Rule) -> None:
    forward = find_conflicts([RuleEntry("a", "A", a), RuleEntry("b", "B", b)])
    backward = find_conflicts([RuleEntry("b", "B", b), RuleEntry("a", "A", a)])
    assert [f.as_dict() for f in forward] == [f.as_dict() for f in backward]
    assert (scope_overlap(a, b)[0] is None) == (scope_overlap(b, a)[0] is None)
    for ta in a.tasks:
        for tb in b.tasks:
            assert fire_together(ta, tb) == fire_together(tb, ta)


@SETTINGS
@given(
    rules("A", extra=[{"field": "name", "operator": "CONTAIN", "value": "[A]"}]),
    rules("B", extra=[{"field": "name", "operator": "NOT_CONTAIN", "value": "[A]"}]),
)
def test_disjoint_name_filters_are_never_reported(a: Rule, b: Rule) -> None:
    # A rename (or an appended "[A]") could move an entity from one scope into the other,
    # and is then rightly a "may overlap": leave those actions out.
    assume_no_rename = all(
        t.action.type != "rename" and "[a]" not in str(getattr(t.action, "text", "")).lower()
        for t in (*a.tasks, *b.tasks)
    )
    if not assume_no_rename:
        return
    found = find_conflicts([RuleEntry("a", "A", a), RuleEntry("b", "B", b)])
    assert [f for f in found if f.a.rule_id != f.b.rule_id] == []


NAMES = ["", "[A]", "x [a]", "5", "5.0", "[B] x", "y", "[a][B]"]
STATUSES = ["ACTIVE", "PAUSED", "ARCHIVED", "DELETED"]


@SETTINGS
@given(rules("A"), rules("B"))
def test_a_disjoint_scope_has_no_entity_both_rules_list(a: Rule, b: Rule) -> None:
    # soundness of "disjoint" against the filters' own meaning, over a grid of objects
    if a.level != b.level or not set(a.ad_accounts) & set(b.ad_accounts):
        return
    if scope_overlap(a, b)[0] is not None:
        return
    fa, fb = LocalFilter(a.level, wire(a.filtering())), LocalFilter(b.level, wire(b.filtering()))
    for name in NAMES:
        for ident in ["1", "2", "3", "5", "5.0", "x", "nan", "inf", "INF"]:
            for status in STATUSES:
                item = {"id": ident, "name": name, "effective_status": status, "campaign_id": ident}
                assert not (fa.keep(item) and fb.keep(item)), item


INTERVAL_CONDITION = st.one_of(
    st.tuples(OPERATOR, NUMBER),
    st.tuples(st.sampled_from(["IN_RANGE", "NOT_IN_RANGE"]), st.tuples(NUMBER, NUMBER).map(sorted)),
)


def _passes(operator: str, value: Any, x: float) -> bool:
    match operator:
        case ">":
            return x > value
        case ">=":
            return x >= value
        case "<":
            return x < value
        case "<=":
            return x <= value
        case "==":
            return x == value
        case "!=":
            return x != value
        case "IN_RANGE":
            return value[0] <= x <= value[1]
    return not value[0] <= x <= value[1]


@settings(max_examples=400, deadline=None)
@given(st.lists(INTERVAL_CONDITION, min_size=1, max_size=4))
def test_interval_arithmetic_agrees_with_sampling(conditions: list[tuple[str, Any]]) -> None:
    # every threshold, a point between each two, and beyond both ends: if some number
    # passes every condition, one of these does
    points = sorted(
        {
            float(v)
            for _, value in conditions
            for v in (value if isinstance(value, list) else [value])
        }
    )
    samples = [points[0] - 1, points[-1] + 1, *points]
    samples += [(x + y) / 2 for x, y in pairwise(points)]
    sampled = any(all(_passes(o, v, x) for o, v in conditions) for x in samples)
    meet = meet_all(interval_set(o, v) for o, v in conditions)
    assert bool(meet) == sampled
    for x in samples:
        assert any(i.holds(x) for i in meet) == all(_passes(o, v, x) for o, v in conditions)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (roas("<", 1), roas(">", 2), "cannot_fire_together"),
        (roas("<=", 1), roas(">=", 1), "can_fire_together"),
        (roas("<", 1), roas(">=", 1), "cannot_fire_together"),
        (roas("IN_RANGE", [1, 2]), roas("NOT_IN_RANGE", [0, 3]), "cannot_fire_together"),
        (roas("==", 1), roas("!=", 1), "cannot_fire_together"),
    ],
)
def test_interval_verdicts(a: dict[str, Any], b: dict[str, Any], expected: str) -> None:
    ra, rb = rule("A", UP, conditions=[a]), rule("B", DOWN, conditions=[b])
    assert fire_together(ra.tasks[0], rb.tasks[0]) == expected


def test_another_rule_changing_what_a_holdout_leaves_alone_is_a_note() -> None:
    measured = rule("measured", {"type": "increase_budget", "percent": 10})
    doc = measured.model_dump(mode="json", exclude_none=True)
    doc["tasks"][0]["holdout"] = {"percent": 30}
    measured = parse_rule(doc)
    other = rule("other", {"type": "increase_budget", "percent": 20})
    (finding,) = find_conflicts(entries(measured, other))
    assert (finding.kind, finding.severity, finding.field) == (
        "holdout_touched",
        "note",
        "daily_budget",
    )
    assert "'measured' task 't' holds out" in finding.why
    # the same rules without the holdout do not meet: both raise budgets
    plain = rule("measured", {"type": "increase_budget", "percent": 10})
    assert find_conflicts(entries(plain, other)) == []


def test_a_budget_or_rebalance_task_on_a_pause_tasks_held_out_entities_is_a_note() -> None:
    """Another field counts too: a budget cut or a rebalance changes the held-out ad sets a
    pause task leaves alone to measure itself."""
    measured = rule("measured", {"type": "pause"})
    doc = measured.model_dump(mode="json", exclude_none=True)
    doc["tasks"][0]["holdout"] = {"percent": 30}
    measured = parse_rule(doc)
    rebalance = {
        "type": "rebalance_budget",
        "metric": "purchase_roas.omni_purchase",
        "period": "last_7d",
    }
    for action in (DOWN, rebalance):
        other = rule("other", action)
        (finding,) = find_conflicts(entries(measured, other))
        assert (finding.kind, finding.severity, finding.field) == (
            "holdout_touched",
            "note",
            "daily_budget",
        )
        assert (finding.a.rule_id, finding.b.rule_id) == ("r0", "r1")
        assert "'measured' task 't' holds out" in finding.why
        # the other way round, the same finding: the measured task stays side a
        (again,) = find_conflicts(entries(other, measured))
        assert (again.a.rule_id, again.field) == ("r1", "daily_budget")
    # without the holdout a pause and a budget cut do not fight
    plain = rule("measured", {"type": "pause"})
    assert find_conflicts(entries(plain, rule("other", DOWN))) == []
    # another level or another account never meets
    assert find_conflicts(entries(measured, rule("other", DOWN, level="adset"))) == []
    assert find_conflicts(entries(measured, rule("other", DOWN, accounts=("act_9",)))) == []
