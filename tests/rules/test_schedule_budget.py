"""``schedule_budget``, pure: the action's shape, the window on quarter hours in the rule's
timezone, the budget in the window clamped like an increase and fitted to Meta's units (never
past a clamp), Meta's schedules read back, the change budget, conflicts and export."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.errors import RuleValidationError
from ruleengine.guards.change_budget import ChangeLimits, limit_change
from ruleengine.rules.conflicts import RuleEntry, find_conflicts
from ruleengine.rules.language.action_types import ScheduleBudgetAction, ScheduleWindow
from ruleengine.rules.language.budget_schedules import (
    QUARTER_HOUR_S,
    ScheduleSpec,
    listed,
    unix,
    window_of,
)
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.meta.exporting import export_rule
from ruleengine.rules.meta.vocab import MetaAccount
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import PlanContext, Refused, plan_change
from ruleengine.store.intents import PastChange

NEW_YORK = ZoneInfo("America/New_York")
KOLKATA = ZoneInfo("Asia/Kolkata")  # UTC+05:30
#: 10:07 in New York on Saturday 5 December 2026.
NOW = datetime(2026, 12, 5, 15, 7, tzinfo=UTC)


def action(**fields: Any) -> ScheduleBudgetAction:
    return ScheduleBudgetAction.model_validate({"type": "schedule_budget", **fields})


def ctx(**changes: Any) -> PlanContext:
    fields: dict[str, Any] = {
        "level": "campaign",
        "offset": 100,
        "scale": 100,
        "max_change_pct": 50,
        "now": NOW,
        "tz": NEW_YORK,
    }
    return PlanContext(**(fields | changes))


def rule(act: dict[str, Any], level: str = "campaign", **task: Any) -> dict[str, Any]:
    return {
        "name": "Evening push",
        "format": 2,
        "level": level,
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "push",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "schedule_budget", **act},
                **task,
            }
        ],
    }


def paths(data: dict[str, Any]) -> list[str]:
    with pytest.raises(RuleValidationError) as refused:
        parse_rule(data)
    return [e.path for e in refused.value.errors]


# ---------------------------------------------------------------- the action's shape


def test_a_rule_takes_a_multiplier_or_an_amount_and_a_quarter_hour_window() -> None:
    parse_rule(rule({"multiplier": 1.5, "window": {"hours": 4}}))
    parse_rule(
        rule({"amount": 300, "max_budget": 500, "window": {"start": "18:00", "end": "22:30"}})
    )
    parse_rule(rule({"multiplier": 2, "window": {"hours": 1.75, "start_in_hours": 2.5}}, "adset"))
    bad: list[dict[str, Any]] = [
        {"window": {"hours": 4}},  # neither
        {"multiplier": 1.5, "amount": 300, "window": {"hours": 4}},  # both
        {"multiplier": 1, "window": {"hours": 4}},  # not an increase
        {"multiplier": 1.5, "window": {"hours": 4.1}},  # not whole quarter hours
        {"multiplier": 1.5, "window": {"hours": 200}},  # past a week
        {"multiplier": 1.5, "window": {"start": "18:10", "end": "22:00"}},
        {"multiplier": 1.5, "window": {"start": "18:00", "end": "18:00"}},
        {"multiplier": 1.5, "window": {"start": "18:00"}},
        {"multiplier": 1.5, "window": {"hours": 2, "start": "18:00", "end": "20:00"}},
        {"multiplier": 1.5, "window": {"hours": 4}, "then": {"after_minutes": 60, "do": "pause"}},
    ]
    for act in bad:
        assert paths(rule(act)), act
    assert paths(rule({"multiplier": 1.5, "window": {"hours": 4}}, "ad")) == [
        "tasks[0].action.type"
    ]


@given(
    st.dictionaries(
        st.sampled_from(["hours", "start_in_hours", "start", "end", "days"]),
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-1000, 1000),
            st.text(max_size=8),
            st.sampled_from(["18:00", "24:00", "7:15", "23:45", "00:00"]),
        ),
    )
)
def test_any_window_is_a_valid_one_or_an_error_with_its_path(window: dict[str, Any]) -> None:
    problems: list[str] = []
    try:
        parse_rule(rule({"multiplier": 1.5, "window": window}))
    except RuleValidationError as refused:
        problems = [e.path for e in refused.errors]
    assert all(path.startswith("tasks[0].action") for path in problems)


# ---------------------------------------------------------------- the window


def test_hours_start_at_the_next_quarter_hour_and_keep_their_length() -> None:
    start, end = window_of(ScheduleWindow(hours=4), now=NOW, tz=NEW_YORK) or (0, 0)
    assert datetime.fromtimestamp(start, UTC) == datetime(2026, 12, 5, 15, 15, tzinfo=UTC)
    assert end - start == 4 * 3600
    later = window_of(ScheduleWindow(hours=1, start_in_hours=2.5), now=NOW, tz=NEW_YORK)
    assert later is not None
    assert datetime.fromtimestamp(later[0], UTC) == datetime(2026, 12, 5, 17, 45, tzinfo=UTC)


def test_a_local_window_is_todays_tomorrows_or_the_rest_of_the_running_one() -> None:
    def local(start: str, end: str, tz: ZoneInfo = NEW_YORK, now: datetime = NOW) -> list[str]:
        found = window_of(ScheduleWindow(start=start, end=end), now=now, tz=tz)
        assert found is not None
        return [datetime.fromtimestamp(t, tz).strftime("%d %H:%M") for t in found]

    assert local("18:00", "22:00") == ["05 18:00", "05 22:00"]  # today's, ahead
    assert local("08:00", "09:30") == ["06 08:00", "06 09:30"]  # today's is over: tomorrow's
    assert local("09:00", "12:00") == ["05 10:15", "05 12:00"]  # running: the rest of it
    assert local("22:00", "02:00") == ["05 22:00", "06 02:00"]  # past midnight
    # a half-hour timezone: its quarter hours are UTC's
    assert local("18:00", "19:45", KOLKATA) == ["06 18:00", "06 19:45"]


@given(
    now=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2028, 1, 1), timezones=st.just(UTC)
    ),
    tz=st.sampled_from(
        ["UTC", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu", "Europe/Berlin"]
    ),
    start=st.integers(0, 95),
    end=st.integers(0, 95),
    hours=st.integers(1, 4 * 168),
)
def test_every_window_falls_on_quarter_hours_ahead_of_the_run(
    now: datetime, tz: str, start: int, end: int, hours: int
) -> None:
    zone = ZoneInfo(tz)
    timed = window_of(ScheduleWindow(hours=hours / 4), now=now, tz=zone)
    assert timed is not None and timed[1] - timed[0] == hours * 900
    forms = [timed]
    if start != end:
        clock = [f"{q // 4:02d}:{q % 4 * 15:02d}" for q in (start, end)]
        forms.append(window_of(ScheduleWindow(start=clock[0], end=clock[1]), now=now, tz=zone))
    for found in forms:
        if found is None:  # a window skipped by a clock change, say
            continue
        first, last = found
        assert first % QUARTER_HOUR_S == 0 and last % QUARTER_HOUR_S == 0
        assert now.timestamp() <= first < last <= now.timestamp() + 2 * 86400 + hours * 900


# ---------------------------------------------------------------- the plan


def test_a_multiplier_is_held_to_the_cap_and_sent_as_the_percent_increase() -> None:
    plan = plan_change(
        action(multiplier=1.8, window={"hours": 4}), {"daily_budget": "20000"}, ctx()
    )
    assert isinstance(plan, Plan) and plan.schedule is not None
    assert (plan.field, plan.before, plan.requested, plan.after) == (
        "budget_schedules",
        20000,
        36000,
        30000,
    )
    assert plan.clamped_by == ["max_budget_change_pct"]
    assert (plan.schedule.value_type, plan.schedule.budget_value) == ("MULTIPLIER", 50)
    # never past a clamp once in Meta's whole percents: 10,001 × 1.333 → +33 %
    odd = plan_change(
        action(multiplier=1.333, window={"hours": 4}), {"daily_budget": "10001"}, ctx()
    )
    assert isinstance(odd, Plan) and odd.schedule is not None
    assert (odd.schedule.budget_value, odd.after) == (33, 13301)


def test_an_amount_is_sent_as_the_increase_in_whole_currency_units_rounded_down() -> None:
    usd = plan_change(action(amount=250.75, window={"hours": 4}), {"daily_budget": "20000"}, ctx())
    assert isinstance(usd, Plan) and usd.schedule is not None
    assert (usd.schedule.value_type, usd.schedule.budget_value, usd.after) == (
        "ABSOLUTE",
        50,
        25000,
    )
    assert usd.schedule.form()["budget_value"] == "50"
    # yen: whole yen are minor units
    jpy = plan_change(
        action(amount=15500, max_budget=15200, window={"hours": 2}),
        {"daily_budget": "12000"},
        ctx(offset=1, scale=1),
    )
    assert isinstance(jpy, Plan) and jpy.schedule is not None
    assert (jpy.schedule.budget_value, jpy.after, jpy.clamped_by) == (3200, 15200, ["max_budget"])
    # an amount at or under the live budget raises nothing
    flat = plan_change(action(amount=150, window={"hours": 2}), {"daily_budget": "20000"}, ctx())
    assert isinstance(flat, Plan) and not flat.changes and flat.reason == "no_change"


def test_refused_without_a_daily_budget_over_a_schedule_meta_holds_or_on_legacy_advantage() -> None:
    act = action(multiplier=1.5, window={"start": "18:00", "end": "22:00"})
    lifetime = plan_change(act, {"lifetime_budget": "600000"}, ctx())
    assert isinstance(lifetime, Refused) and lifetime.reason == "no_daily_budget"
    held = {
        "id": "120280010000001",
        "time_start": "2026-12-05T23:30:00+0000",  # 18:30 in New York
        "time_end": "2026-12-06T01:00:00+0000",
        "budget_value": 20,
        "budget_value_type": "MULTIPLIER",
    }
    taken = plan_change(act, {"daily_budget": "20000", "budget_schedules": [held]}, ctx())
    assert isinstance(taken, Refused) and taken.reason == "schedule_overlap"
    assert taken.message is not None and "120280010000001" in taken.message
    legacy = {"daily_budget": "20000", "smart_promotion_type": "AUTOMATED_SHOPPING_ADS"}
    refused = plan_change(act, legacy, ctx())
    assert isinstance(refused, Refused) and refused.reason == "advantage_plus_legacy"


def test_the_change_budget_counts_a_schedule_and_refits_it_within_what_is_left() -> None:
    plan = plan_change(
        action(multiplier=1.5, window={"hours": 4}), {"daily_budget": "20000"}, ctx()
    )
    assert isinstance(plan, Plan)
    raised = PastChange(NOW, "b", "r", "t", "1", None, "daily_budget", 18000, 20000)
    held = limit_change(plan, [raised], ChangeLimits(budget_pct=30))
    # 30 % of the base 180.00 is 54.00; 20.00 moved already: 34.00 left → 17 % of 200.00
    assert isinstance(held, Plan) and held.schedule is not None
    assert (held.after, held.schedule.budget_value) == (23400, 17)
    assert "change_budget" in held.clamped_by


def test_meta_schedules_are_read_back_whatever_the_form_of_their_times() -> None:
    start = int(datetime(2026, 12, 5, 15, 30, tzinfo=UTC).timestamp())
    spec = ScheduleSpec("create", start, start + 4 * 3600, "MULTIPLIER", 50, 100)
    found = listed(
        [
            {
                "id": "9",
                "time_start": "2026-12-05T15:30:00+0000",  # as Meta writes a datetime
                "time_end": start + 4 * 3600,  # or Unix seconds
                "budget_value": "50",
                "budget_value_type": "MULTIPLIER",
            },
            {"id": "8", "time_start": "soon"},
            "junk",
        ]
    )
    assert [f.id for f in found] == ["9"]
    assert unix("2026-12-05T15:30:00+0000") == start
    assert spec.is_at(found) == "9"
    assert spec.is_at(found, frozenset({"9"})) is None  # another intent's
    gone = ScheduleSpec("delete", 0, 0, schedule_id="9")
    assert not gone.gone_from(found) and gone.gone_from([])


# ---------------------------------------------------------------- conflicts and export


def test_a_scheduled_raise_fights_a_cut_of_the_same_campaigns() -> None:
    push = parse_rule(rule({"multiplier": 1.5, "window": {"hours": 4}}))
    cut_data = rule({"multiplier": 1.5, "window": {"hours": 4}}) | {"name": "Cut"}
    cut_data["tasks"][0]["action"] = {"type": "decrease_budget", "percent": 20}
    cut = parse_rule(cut_data)
    (finding,) = find_conflicts([RuleEntry("a", push.name, push), RuleEntry("b", cut.name, cut)])
    assert (finding.field, finding.kind) == ("daily_budget", "opposing")
    assert "schedule_budget ×1.5 for 4 h" in finding.why


def test_export_to_meta_refuses_a_schedule_with_the_reason() -> None:
    result = export_rule(
        parse_rule(rule({"multiplier": 1.5, "window": {"hours": 4}})),
        accounts={"act_1001": MetaAccount("act_1001", "USD", "America/New_York")},
    )
    assert result.rules == []
    (problem,) = [p for p in result.problems if p.severity == "error"]
    assert problem.path == "tasks[0].action.type"
    assert "no schedule action" in problem.why
