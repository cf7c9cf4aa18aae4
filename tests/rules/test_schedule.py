"""Schedule maths: drift-free intervals, timetables over 7 days, DST, date ranges."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.basics import WEEKDAYS
from ruleengine.rules.language.schedule import (
    REANCHOR_SLACK,
    DateRange,
    IntervalSchedule,
    TimetableSchedule,
    active_window,
    describe,
    first_run,
    in_window,
    next_run,
    next_slot,
    reanchor,
)

UTC_TZ = ZoneInfo("UTC")
ZONES = st.sampled_from(
    ["UTC", "Asia/Jakarta", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]
)
INSTANTS = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)
HHMM = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))
TIMETABLES = st.dictionaries(
    st.sampled_from(WEEKDAYS), st.lists(HHMM, min_size=1, max_size=4), min_size=1
).map(lambda slots: TimetableSchedule(mode="timetable", slots=slots))


def interval(minutes: int) -> IntervalSchedule:
    return IntervalSchedule(mode="interval", every_minutes=minutes)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# ---------------------------------------------------------------- interval


def test_interval_counts_from_the_scheduled_time_not_from_dispatch() -> None:
    scheduled = at("2026-12-01T10:00:00+00:00")
    late = scheduled + timedelta(seconds=7)
    assert next_run(interval(15), scheduled=scheduled, now=late, tz=UTC_TZ) == at(
        "2026-12-01T10:15:00+00:00"
    )


def test_interval_skips_missed_slots_instead_of_bursting() -> None:
    scheduled = at("2026-12-01T10:00:00+00:00")
    very_late = at("2026-12-01T10:47:00+00:00")
    assert next_run(interval(15), scheduled=scheduled, now=very_late, tz=UTC_TZ) == at(
        "2026-12-01T11:00:00+00:00"
    )


@given(
    minutes=st.integers(1, 24 * 60),
    scheduled=INSTANTS,
    lag=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)),
)
def test_interval_never_returns_the_past_and_stays_on_its_grid(
    minutes: int, scheduled: datetime, lag: timedelta
) -> None:
    now = scheduled + lag
    result = next_run(interval(minutes), scheduled=scheduled, now=now, tz=UTC_TZ)
    assert result > now
    assert result - now <= timedelta(minutes=minutes)
    assert (result - scheduled) % timedelta(minutes=minutes) == timedelta(0)


def test_a_new_interval_rule_is_due_at_once() -> None:
    now = at("2026-12-01T10:00:05.123456+00:00")
    assert first_run(interval(15), now=now, tz=UTC_TZ) == at("2026-12-01T10:00:05+00:00")


# ---------------------------------------------------------------- timetable


def test_timetable_takes_the_next_slot_today_then_scans_forward() -> None:
    schedule = TimetableSchedule(
        mode="timetable", slots={"mon": ["08:00", "12:30"], "fri": ["18:00"]}
    )
    jakarta = ZoneInfo("Asia/Jakarta")  # UTC+7, no DST
    monday_9 = at("2026-11-30T09:00:00+07:00")
    assert next_slot(schedule, after=monday_9, tz=jakarta) == at("2026-11-30T12:30:00+07:00")
    monday_13 = at("2026-11-30T13:00:00+07:00")
    assert next_slot(schedule, after=monday_13, tz=jakarta) == at("2026-12-04T18:00:00+07:00")
    friday_19 = at("2026-12-04T19:00:00+07:00")
    assert next_slot(schedule, after=friday_19, tz=jakarta) == at("2026-12-07T08:00:00+07:00")


def test_timetable_is_not_due_before_its_slot() -> None:
    schedule = TimetableSchedule(mode="timetable", slots={"tue": ["09:00"]})
    now = at("2026-12-01T08:59:59+00:00")
    assert first_run(schedule, now=now, tz=UTC_TZ) == at("2026-12-01T09:00:00+00:00")


def test_a_slot_exactly_now_runs_next_week() -> None:
    schedule = TimetableSchedule(mode="timetable", slots={"tue": ["09:00"]})
    now = at("2026-12-01T09:00:00+00:00")
    assert next_slot(schedule, after=now, tz=UTC_TZ) == at("2026-12-08T09:00:00+00:00")


def test_timetable_follows_local_time_across_dst() -> None:
    new_york = ZoneInfo("America/New_York")
    schedule = TimetableSchedule(mode="timetable", slots={"sun": ["09:00"], "mon": ["09:00"]})
    # DST ends on Sunday 2026-11-01 in New York: 09:00 is 13:00 UTC before, 14:00 UTC after.
    saturday = at("2026-10-31T12:00:00+00:00")
    sunday_slot = next_slot(schedule, after=saturday, tz=new_york)
    assert sunday_slot == at("2026-11-01T14:00:00+00:00")
    assert sunday_slot.astimezone(new_york).hour == 9


def test_a_slot_in_the_spring_forward_gap_still_runs_once() -> None:
    new_york = ZoneInfo("America/New_York")
    schedule = TimetableSchedule(mode="timetable", slots={"sun": ["02:30"]})
    # 2027-03-14 02:30 does not exist in New York; the run happens when the clock jumps.
    result = next_slot(schedule, after=at("2027-03-13T12:00:00+00:00"), tz=new_york)
    assert result == at("2027-03-14T07:30:00+00:00")
    assert next_slot(schedule, after=result, tz=new_york) > result + timedelta(days=6)


def test_a_slot_in_the_fall_back_hour_runs_at_its_first_occurrence_only() -> None:
    new_york = ZoneInfo("America/New_York")
    schedule = TimetableSchedule(mode="timetable", slots={"sun": ["01:30"]})
    first = next_slot(schedule, after=at("2026-10-31T12:00:00+00:00"), tz=new_york)
    assert first == at("2026-11-01T05:30:00+00:00")  # 01:30 EDT
    assert next_slot(schedule, after=first, tz=new_york) > first + timedelta(days=6)


@given(schedule=TIMETABLES, now=INSTANTS, zone=ZONES)
def test_timetable_next_run_is_a_slot_within_seven_days(
    schedule: TimetableSchedule, now: datetime, zone: str
) -> None:
    tz = ZoneInfo(zone)
    result = next_run(schedule, scheduled=now, now=now, tz=tz)
    assert result > now
    local = result.astimezone(tz)
    local_now = now.astimezone(tz)
    # wall-clock distance: a DST change may add or remove an hour of real time
    assert local.replace(tzinfo=None) - local_now.replace(tzinfo=None) <= timedelta(days=7, hours=1)
    day = WEEKDAYS[local.weekday()]
    slots = schedule.slots.get(day, [])
    assert f"{local:%H:%M}" in slots or _is_shifted_gap_slot(local, schedule, tz)


def _is_shifted_gap_slot(local: datetime, schedule: TimetableSchedule, tz: ZoneInfo) -> bool:
    """A slot inside a spring-forward gap fires at the shifted wall-clock time."""
    for day in (local.date(), local.date() - timedelta(days=1)):
        for value in schedule.slots.get(WEEKDAYS[day.weekday()], []):
            hour, minute = map(int, value.split(":"))
            naive = datetime(day.year, day.month, day.day, hour, minute)
            if naive.replace(tzinfo=tz).astimezone(UTC) == local.astimezone(UTC):
                return True
    return False


# ---------------------------------------------------------------- the clock steps


def test_a_clock_stepped_back_brings_an_interval_rule_back_within_one_interval() -> None:
    # every 3 minutes: it ran at 12:00 and is due at 12:03; then the clock steps back 20 minutes
    ran, due = at("2026-12-01T12:00:00+00:00"), at("2026-12-01T12:03:00+00:00")
    now = at("2026-12-01T11:43:30+00:00")
    moved = reanchor(interval(3), next_at=due, now=now, tz=UTC_TZ, last_scheduled=ran)
    # 11:45:00, its grid's next instant, may be one it ran before the step: one second on
    assert moved == at("2026-12-01T11:45:01+00:00")
    assert reanchor(interval(3), next_at=moved, now=now, tz=UTC_TZ, last_scheduled=ran) is None
    assert next_run(interval(3), scheduled=moved, now=moved, tz=UTC_TZ) == at(
        "2026-12-01T11:48:01+00:00"
    )


def test_an_interval_rule_at_most_one_interval_ahead_stands() -> None:
    due = at("2026-12-01T12:03:00+00:00")
    # a step back of under a minute just after the 12:00 run only delays 12:03 by the step
    for now in ("11:59:00", "11:59:59", "12:00:00", "12:02:59", "12:03:00", "12:30:00"):
        instant = at(f"2026-12-01T{now}+00:00")
        assert reanchor(interval(3), next_at=due, now=instant, tz=UTC_TZ) is None, now


def test_a_clock_set_right_after_running_ahead_goes_on_along_the_grid() -> None:
    # three hours ahead, the clock caught 10:00 up at 13:00 and moved on to 13:03; set right at
    # 10:01, the instants after 10:00 never ran: the grid goes on from 10:03
    ran, due = at("2026-12-01T10:00:00+00:00"), at("2026-12-01T13:03:00+00:00")
    now = at("2026-12-01T10:01:00+00:00")
    assert reanchor(interval(3), next_at=due, now=now, tz=UTC_TZ, last_scheduled=ran) == at(
        "2026-12-01T10:03:00+00:00"
    )


def test_a_timetable_slot_the_clock_passes_again_is_not_run_again() -> None:
    weekly = TimetableSchedule(mode="timetable", slots={"tue": ["12:00"]})  # 2026-12-01: a Tue
    ran, due = at("2026-12-01T12:00:00+00:00"), at("2026-12-08T12:00:00+00:00")
    now = at("2026-12-01T11:40:00+00:00")
    assert reanchor(weekly, next_at=due, now=now, tz=UTC_TZ, last_scheduled=ran) is None


def test_a_timetable_slot_the_clock_skipped_runs_once_the_clock_is_set_right() -> None:
    daily = TimetableSchedule(
        mode="timetable", slots={d: ["10:00", "12:00", "14:00"] for d in WEEKDAYS}
    )
    # three hours ahead, the clock ran 10:00 at 13:00 and moved on to 14:00; set right at 10:30
    ran, due = at("2026-12-01T10:00:00+00:00"), at("2026-12-01T14:00:00+00:00")
    now = at("2026-12-01T10:30:00+00:00")
    moved = reanchor(daily, next_at=due, now=now, tz=UTC_TZ, last_scheduled=ran)
    assert moved == at("2026-12-01T12:00:00+00:00")


# The dispatcher's ticks on a clock that steps: real seconds since the previous tick, and how
# far the clock stepped meanwhile (mostly not at all).
TICKS = st.lists(
    st.tuples(
        st.integers(1, 600),
        st.one_of(st.just(0), st.just(0), st.just(0), st.integers(-6 * 3600, 6 * 3600)),
    ),
    min_size=1,
    max_size=40,
)


def _dispatched(
    schedule: IntervalSchedule | TimetableSchedule,
    tz: ZoneInfo,
    start: datetime,
    ticks: list[tuple[int, int]],
) -> list[datetime]:
    """The instants a dispatcher runs a rule at, re-anchoring it at every tick; after each
    re-anchoring the rule is never more than one run ahead of the clock."""
    now, last = start, None
    next_at = first_run(schedule, now=now, tz=tz)
    ran = []
    for advance_s, step_s in ticks:
        now += timedelta(seconds=advance_s + step_s)
        next_at = (
            reanchor(schedule, next_at=next_at, now=now, tz=tz, last_scheduled=last) or next_at
        )
        if isinstance(schedule, IntervalSchedule):
            assert next_at - now <= timedelta(minutes=schedule.every_minutes) + REANCHOR_SLACK
        else:
            assert next_slot(schedule, after=max(now, last or now), tz=tz) >= next_at
        if next_at <= now:
            ran.append(next_at)
            last = next_at
            next_at = next_run(schedule, scheduled=next_at, now=now, tz=tz)
    return ran


@given(every=st.integers(1, 180), start=INSTANTS, ticks=TICKS)
def test_an_interval_rule_on_a_stepping_clock_runs_no_instant_twice(
    every: int, start: datetime, ticks: list[tuple[int, int]]
) -> None:
    ran = _dispatched(interval(every), UTC_TZ, start.replace(microsecond=0), ticks)
    assert len(ran) == len(set(ran))


@given(schedule=TIMETABLES, zone=ZONES, start=INSTANTS, ticks=TICKS)
def test_a_timetable_on_a_stepping_clock_runs_no_slot_twice(
    schedule: TimetableSchedule, zone: str, start: datetime, ticks: list[tuple[int, int]]
) -> None:
    ran = _dispatched(schedule, ZoneInfo(zone), start, ticks)
    assert ran == sorted(set(ran))


# ---------------------------------------------------------------- date range


def test_date_range_is_inclusive_in_the_rules_timezone() -> None:
    tz = ZoneInfo("Asia/Jakarta")
    window = active_window(DateRange(start=date(2026, 12, 1), end=date(2026, 12, 31)), tz)
    assert not in_window(at("2026-11-30T23:59:59+07:00"), window)
    assert in_window(at("2026-12-01T00:00:00+07:00"), window)
    assert in_window(at("2026-12-31T23:59:59+07:00"), window)
    assert not in_window(at("2027-01-01T00:00:00+07:00"), window)
    assert in_window(at("2030-01-01T00:00:00+00:00"), active_window(None, tz))


def test_schedules_are_described_in_words() -> None:
    assert describe(interval(15)) == "every 15 min"
    assert describe(interval(120)) == "every 2 h"
    timetable = TimetableSchedule(
        mode="timetable", slots={"fri": ["18:00"], "mon": ["12:30", "08:00"]}
    )
    assert describe(timetable) == "Mon 08:00, 12:30; Fri 18:00"
