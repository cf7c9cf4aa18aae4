"""Schedule maths: drift-free intervals, timetables over 7 days, DST, date ranges."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.basics import WEEKDAYS
from ruleengine.rules.schedule import (
    DateRange,
    IntervalSchedule,
    TimetableSchedule,
    active_window,
    describe,
    first_run,
    in_window,
    next_run,
    next_slot,
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
