"""The replay, pure: the fast walk equals a run of every instant, and the rules of the live engine.

The walk (candidate masks, one entity at a time, plans that change nothing skipped) must
do exactly what a plain replay does — every entity at every instant, every task
evaluated by the engine's ``evaluate_task`` — on any history, rule and lag curve:
hypothesis generates them and both must agree fire for fire.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.replay.lag import share as lag_share
from ruleengine.rules.replay.rows import RawHistory, RowBuilder, history_plan
from ruleengine.rules.replay.run import (
    AccountHistory,
    Fire,
    Replay,
    ReplayOptions,
    _Pending,
    run_instants,
)

TZ = ZoneInfo("America/New_York")
FIRST = date(2026, 11, 1)
CURVE = ((0.0, 0.5), (24.0, 0.8), (72.0, 0.95), (168.0, 1.0))
FETCHED = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def history(seed: int, entities: list[str], days: int = 14) -> RawHistory:
    """Deterministic day and hour numbers (hours add up to their day)."""
    rng = random.Random(seed)
    daily: dict[str, dict[date, tuple[dict[str, Any], datetime | None]]] = {}
    hourly: dict[str, dict[date, dict[str, Any]]] = {}
    for entity in entities:
        for n in range(days):
            day = FIRST + timedelta(days=n)
            hours: dict[str, dict[str, Any]] = {"spend": {}, "clicks": {}, "actions": {}}
            totals = {"spend": 0.0, "clicks": 0, "purchases": 0, "value": 0.0}
            for hour in range(24):
                if rng.random() < 0.15:
                    continue  # an hour without delivery
                spend = round(rng.uniform(0, 12), 2)
                clicks = rng.randint(0, 9)
                purchases = rng.randint(0, 2)
                totals["spend"] += spend
                totals["clicks"] += clicks
                totals["purchases"] += purchases
                totals["value"] += purchases * 40.0
                key = f"{hour:02d}"
                hours["spend"][key] = f"{spend:.2f}"
                hours["clicks"][key] = str(clicks)
                hours["actions"][key] = [{"action_type": "omni_purchase", "value": str(purchases)}]
            values = {
                "spend": f"{totals['spend']:.2f}",
                "clicks": str(totals["clicks"]),
                "actions": [{"action_type": "omni_purchase", "value": str(totals["purchases"])}],
                "action_values": [{"action_type": "omni_purchase", "value": f"{totals['value']}"}],
            }
            daily.setdefault(entity, {})[day] = (values, FETCHED)
            hourly.setdefault(entity, {})[day] = hours
    return RawHistory(daily, hourly)


CONDITIONS = [
    ("spend", "today", [5.0, 40.0, 120.0]),
    ("purchase_roas.omni_purchase", "last_3d", [2.0, 3.5, 5.0]),
    ("cpc", "today", [1.0, 2.0, 4.0]),
    ("actions.omni_purchase", "yesterday", [10.0, 20.0, 30.0]),
    ("current_hour", None, [6.0, 12.0, 18.0]),
    ("daily_budget", None, [60.0, 120.0, 300.0]),
    ("spend", "last_7_days", [300.0, 600.0, 900.0]),
]
ACTIONS = [
    {"type": "pause", "then": {"after_minutes": 90, "do": "activate"}},
    {"type": "activate"},
    {"type": "pause"},
    {"type": "increase_budget", "percent": 20, "max_budget": 250},
    {"type": "decrease_budget", "percent": 25, "min_budget": 40},
    {"type": "set_budget", "amount": 80, "then": {"after_minutes": 120, "do": "restore_budget"}},
    {
        "type": "append_to_name",
        "text": " [hot]",
        "then": {"at_time": "06:00", "do": "restore_name"},
    },
    {"type": "rename", "template": "{name} {date}"},
]


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    tasks = []
    for index in range(draw(st.integers(1, 3))):
        conditions = []
        for _ in range(draw(st.integers(1, 2))):
            metric, period, values = draw(st.sampled_from(CONDITIONS))
            condition: dict[str, Any] = {
                "metric": metric,
                "operator": draw(st.sampled_from([">", "<", ">=", "<=", "==", "!="])),
                "value": draw(st.sampled_from(values)),
            }
            if draw(st.booleans()) and metric not in ("current_hour", "daily_budget"):
                condition["operator"] = draw(st.sampled_from(["IN_RANGE", "NOT_IN_RANGE"]))
                condition["value"] = sorted(draw(st.sampled_from(values)) * f for f in (0.5, 1.5))
            if period:
                condition["period"] = period
            conditions.append(condition)
        task: dict[str, Any] = {
            "id": f"t{index}",
            "match": draw(st.sampled_from(["all", "any"])),
            "conditions": conditions,
            "action": draw(st.sampled_from(ACTIONS)),
            "cooldown_minutes": draw(st.sampled_from([0, 0, 45, 360])),
        }
        if draw(st.integers(0, 4)) == 0:
            task["execution_count_limit"] = draw(st.integers(1, 3))
        tasks.append(task)
    filters = draw(
        st.sampled_from(
            [[], [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]]
        )
    )
    return parse_rule(
        {
            "name": "replayed",
            "format": 2,
            "level": draw(st.sampled_from(["campaign", "adset"])),
            "ad_accounts": ["act_1"],
            "schedule": {"mode": "interval", "every_minutes": draw(st.sampled_from([15, 60]))},
            "timezone": "America/New_York",
            "filters": filters,
            "tasks": tasks,
        }
    )


def account(rule: Rule, raw: RawHistory, budgets: list[int]) -> AccountHistory:
    items = {
        f"e{n}": {
            "id": f"e{n}",
            "name": f"entity {n}",
            "status": "ACTIVE",
            "effective_status": "ACTIVE",
            "daily_budget": str(budget),
        }
        for n, budget in enumerate(budgets)
    }
    pairs = []
    for task in rule.tasks:
        for condition in task.conditions:
            pairs.append((condition.period, condition.spec))
    needs = history_plan(pairs, today=FIRST + timedelta(days=10)).needs
    return AccountHistory("act_1", TZ, "USD", 100, 1000, items, raw, needs)


def plain_replay(replay: Replay) -> list[Fire]:
    """Every instant, every entity, every task through ``evaluate_task``: the reference."""
    rule = replay.rule
    for at in replay.instants:
        _follow_ups(replay, until=at, inclusive=True)
        for entity_id in replay.ids:
            state = replay.states[entity_id]
            if not state.eligible:
                continue
            start = state.entity
            verdicts = [
                (task, replay.verdict(entity_id, start, task, at))
                for task in rule.tasks
                if (state.cooling.get(task.id) is None or at >= state.cooling[task.id])
                and (
                    task.execution_count_limit is None
                    or state.counts.get(task.id, 0) < task.execution_count_limit
                )
            ]
            for task, verdict in verdicts:
                if not verdict.passed:
                    continue
                planned = replay.plan(state, task.action, verdict, at)
                if isinstance(planned, str) or (planned is not None and not planned.changes):
                    continue
                fire = Fire(
                    at,
                    "act_1",
                    entity_id,
                    str(state.item.get("name", "")),
                    task.id,
                    task.action.type,
                    planned.field if planned else None,
                    planned.before if planned else None,
                    planned.after if planned else None,
                )
                if planned is not None:
                    replay.change(state, planned.field, planned.after, at)
                replay.fire(fire)
                if task.cooldown_minutes:
                    state.cooling[task.id] = at + timedelta(minutes=task.cooldown_minutes)
                state.counts[task.id] = state.counts.get(task.id, 0) + 1
                if task.action.then is not None:
                    state.pending[task.id] = _Pending(
                        replay.due(task.action.then, at),
                        task.action.then,
                        fire.field,
                        fire.after,
                        fire.before,
                    )
    _follow_ups(replay, until=replay.until, inclusive=False)
    return replay.finish().fires


def _follow_ups(replay: Replay, *, until: datetime, inclusive: bool) -> None:
    due = sorted(
        (p.due, entity_id, task_id)
        for entity_id, state in replay.states.items()
        for task_id, p in state.pending.items()
        if p.due < until or (inclusive and p.due == until)
    )
    for _, entity_id, task_id in due:
        state = replay.states[entity_id]
        replay.follow_up(entity_id, state, task_id, state.pending.pop(task_id))


def shown(fires: list[Fire]) -> list[tuple[Any, ...]]:
    return sorted(
        (f.time, f.entity_id, f.task, f.action, f.field, str(f.before), str(f.after)) for f in fires
    )


@dataclass(frozen=True)
class Case:
    rule: Rule
    seed: int
    budgets: list[int]
    seen: bool


@st.composite
def cases(draw: st.DrawFn) -> Case:
    return Case(
        draw(rules()),
        draw(st.integers(0, 10_000)),
        draw(st.lists(st.sampled_from([5000, 9000, 20000, 30000]), min_size=2, max_size=3)),
        draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_walk_does_what_a_run_of_every_instant_does(case: Case) -> None:
    raw = history(case.seed, [f"e{n}" for n in range(len(case.budgets))])
    since = datetime(2026, 11, 8, 5, 0, tzinfo=UTC)
    until = since + timedelta(days=3)
    instants = run_instants(case.rule, since=since, until=until)
    share = functools.partial(lag_share, CURVE) if case.seen else None

    def replay() -> Replay:
        return Replay(
            case.rule,
            account(case.rule, raw, case.budgets),
            ReplayOptions(),
            instants=instants,
            until=until,
            share=share,
        )

    assert shown(replay().run().fires) == shown(plain_replay(replay()))


def test_rows_add_hours_before_the_running_one_and_a_share_of_it() -> None:
    raw = history(1, ["e0"])
    day = FIRST + timedelta(days=5)
    builder = RowBuilder(raw.entity("e0"), {"today": frozenset({("spend", None)})}, TZ)
    at = datetime(2026, 11, 6, 10, 15, tzinfo=TZ)
    hours = raw.hour_values("e0", "spend")[day]
    expected = sum(v for h, v in hours.items() if h < 10) + hours.get(10, 0.0) * 0.25
    assert abs(builder.rows(at)["today"]["spend"] - expected) < 1e-9


def test_as_seen_conversions_shrink_by_the_curve_and_spend_does_not() -> None:
    raw = history(2, ["e0"])
    needs = {"yesterday": frozenset({("actions", "omni_purchase"), ("spend", None)})}
    matured = RowBuilder(raw.entity("e0"), needs, TZ)
    seen = RowBuilder(raw.entity("e0"), needs, TZ, functools.partial(lag_share, CURVE))
    at = datetime(2026, 11, 6, 9, 0, tzinfo=TZ)  # yesterday ended 9 h ago; fetched 14 days on
    full, partial = matured.rows(at)["yesterday"], seen.rows(at)["yesterday"]
    assert partial["spend"] == full["spend"]
    purchases = full["actions"][0]["value"]
    assert abs(partial["actions"][0]["value"] - purchases * (0.5 + 0.3 * 9 / 24)) < 1e-9


def test_a_raise_without_max_budget_stops_where_no_budget_goes() -> None:
    """+50 % every 15 minutes for three days would pass 10^28 cents: the replay stops at
    the largest budget a rule may name instead of failing on Decimal's precision."""
    rule = parse_rule(
        {
            "name": "runaway",
            "format": 2,
            "level": "campaign",
            "ad_accounts": ["act_1"],
            "schedule": {"mode": "interval", "every_minutes": 15},
            "timezone": "America/New_York",
            "tasks": [
                {
                    "id": "up",
                    "conditions": [
                        {"metric": "spend", "period": "last_7d", "operator": ">", "value": 0}
                    ],
                    "action": {"type": "increase_budget", "percent": 50},
                }
            ],
        }
    )
    since = datetime(2026, 11, 8, 5, 0, tzinfo=UTC)
    until = since + timedelta(days=3)
    replay = Replay(
        rule,
        account(rule, history(3, ["e0"]), [5000]),
        ReplayOptions(),
        instants=run_instants(rule, since=since, until=until),
        until=until,
    )
    result = replay.run()
    assert result.blocked["beyond_any_budget"] > 0
    assert max(int(f.after) for f in result.fires) <= 10**12 * 100


def test_a_holdout_keeps_its_entities_unchanged_in_the_replay_as_the_engine_does() -> None:
    """A stored rule's holdout draws as the live engine does: held-out entities get no fire
    and keep their budget (counted as ``held_out``); a draft, without an id, acts on all."""
    from ruleengine.rules.impact.holdout import Holdout, is_held_out

    data = {
        "name": "held",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1"],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "up",
                "conditions": [
                    {"metric": "spend", "period": "last_7d", "operator": ">", "value": 0}
                ],
                "action": {"type": "increase_budget", "percent": 10},
                "cooldown_minutes": 24 * 60,
                "holdout": {"percent": 50},
            }
        ],
    }
    rule = parse_rule(data)
    ids = [f"e{i}" for i in range(8)]
    since = datetime(2026, 11, 8, 5, 0, tzinfo=UTC)
    until = since + timedelta(days=2)

    def replayed(rule_id: str | None) -> Any:
        return Replay(
            rule,
            account(rule, history(5, ids), [5000] * len(ids)),
            ReplayOptions(),
            instants=run_instants(rule, since=since, until=until),
            until=until,
            rule_id=rule_id,
        ).run()

    held = {e for e in ids if is_held_out("rule-1", "up", e, Holdout(percent=50))}
    assert held and held != set(ids)
    stored, draft = replayed("rule-1"), replayed(None)
    assert {f.entity_id for f in stored.fires} == set(ids) - held
    assert {f.entity_id for f in draft.fires} == set(ids)
    assert stored.blocked["held_out"] == len(draft.fires) - len(stored.fires)
    assert all(stored.end[e]["daily_budget"] == stored.start[e]["daily_budget"] for e in held)
