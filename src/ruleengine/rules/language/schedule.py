"""Schedules: the two schedule models, date ranges, and the maths of when a rule runs next.

Interval schedules count from the previous *scheduled* time, not from when the
dispatcher got round to it, so dispatch lag never makes a schedule drift; slots
missed while the dispatcher was behind are skipped, never burst. Timetable
slots are local wall-clock times in the rule's timezone (zoneinfo, so DST is
handled): a slot that falls into a spring-forward gap runs shifted by the gap
(02:30 becomes 03:30 when clocks jump from 02:00 to 03:00), and a slot inside a
fall-back hour runs once, at its first occurrence. A clock stepped forward runs a rule once
to catch up (the skipped slots are skipped); one stepped back leaves a schedule ahead of the
clock, which :func:`reanchor` brings back to the next instant after now.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo

from pydantic import Field, field_validator, model_validator

from ruleengine.rules.basics import FIRST_DATE, LAST_DATE, WEEKDAYS, RuleModel, Weekday, parse_hhmm
from ruleengine.rules.language.validation import PathError


class IntervalSchedule(RuleModel):
    """Run every ``every_minutes``, measured from the previous *scheduled* time (no drift)."""

    mode: Literal["interval"]
    every_minutes: int = Field(ge=1, le=525_600)


class TimetableSchedule(RuleModel):
    """Run at fixed local times on a 7-day grid, e.g. ``{"mon": ["08:00", "12:30"]}``."""

    mode: Literal["timetable"]
    slots: dict[Weekday, list[str]]

    @field_validator("slots")
    @classmethod
    def _check_slots(cls, slots: dict[Weekday, list[str]]) -> dict[Weekday, list[str]]:
        for day, times in slots.items():
            for index, value in enumerate(times):
                try:
                    parse_hhmm(value)
                except ValueError as exc:
                    raise PathError(f"{day}[{index}]", str(exc)) from None
        if not any(slots.values()):
            raise ValueError('a timetable needs at least one slot, e.g. {"mon": ["08:00"]}')
        return {day: sorted(set(slots[day])) for day in WEEKDAYS if slots.get(day)}


Schedule = Annotated[IntervalSchedule | TimetableSchedule, Field(discriminator="mode")]


class DateRange(RuleModel):
    """Inclusive dates, in the rule's timezone, outside which the rule is not dispatched."""

    start: date | None = None
    end: date | None = None

    @field_validator("start", "end")
    @classmethod
    def _bounded(cls, value: date | None) -> date | None:
        if value is not None and not FIRST_DATE <= value <= LAST_DATE:
            raise ValueError(
                f"{value} is out of range; use a date between {FIRST_DATE} and {LAST_DATE}"
            )
        return value

    @model_validator(mode="after")
    def _ordered(self) -> DateRange:
        if self.start and self.end and self.end < self.start:
            raise PathError("end", f"end {self.end} is before start {self.start}")
        return self


TIMETABLE_HORIZON_DAYS = 7


def _require_aware(value: datetime, name: str) -> None:
    if value.tzinfo is None:
        raise ValueError(f"{name} must be timezone-aware (UTC inside the engine)")


def first_run(schedule: Schedule, *, now: datetime, tz: ZoneInfo) -> datetime:
    """When a newly activated rule is first due.

    An interval rule is due at once; a timetable rule at its next slot after ``now``.
    """
    _require_aware(now, "now")
    if isinstance(schedule, IntervalSchedule):
        return now.astimezone(UTC).replace(microsecond=0)
    return next_slot(schedule, after=now, tz=tz)


def next_run(schedule: Schedule, *, scheduled: datetime, now: datetime, tz: ZoneInfo) -> datetime:
    """The run after the one scheduled at ``scheduled``; always later than ``now``.

    Args:
        schedule: the rule's schedule.
        scheduled: the time the run being dispatched was scheduled for.
        now: the current time (the dispatcher may be late: ``now`` > ``scheduled``).
        tz: the rule's timezone (used by timetables).
    """
    _require_aware(scheduled, "scheduled")
    _require_aware(now, "now")
    if isinstance(schedule, IntervalSchedule):
        return next_interval(scheduled, every=timedelta(minutes=schedule.every_minutes), now=now)
    return next_slot(schedule, after=max(now, scheduled), tz=tz)


def next_interval(scheduled: datetime, *, every: timedelta, now: datetime) -> datetime:
    """``scheduled + k × every`` for the smallest k ≥ 1 that lands after ``now``."""
    behind = now - scheduled
    steps = 1 if behind < every else behind // every + 1
    return (scheduled + steps * every).astimezone(UTC)


#: How far a re-anchored interval grid is moved off the grid the schedule ran on: its instants
#: (a batch is named by its instant, to the second) are then ones the rule never ran.
REANCHOR_SHIFT = timedelta(seconds=1)
#: An interval schedule up to this much more than one interval ahead stands: a step back that
#: small only delays the next run by the step, where re-anchoring could run the rule again
#: seconds after it last ran (the step came just after a run).
REANCHOR_SLACK = timedelta(minutes=1)


def reanchor(
    schedule: Schedule,
    *,
    next_at: datetime,
    now: datetime,
    tz: ZoneInfo,
    last_scheduled: datetime | None = None,
) -> datetime | None:
    """Where a schedule goes when the clock stepped back behind it; None when it stands.

    A clock stepped back leaves ``next_at`` ahead of ``now`` by the step, and a schedule due
    at ``next_at ≤ now`` would wait out the step. One more than one interval ahead (and
    :data:`REANCHOR_SLACK`), or with a timetable slot before ``next_at`` it has not run, is
    moved to the next instant after ``now`` — never onto an instant it ran:

    * an interval schedule goes to the first instant after ``now`` of its grid, or — when
      that instant is not after ``last_scheduled`` (unknown: assume so), so may have run —
      of its grid shifted by :data:`REANCHOR_SHIFT`, whose instants never ran (while fewer
      re-anchorings than the interval has seconds shift it: a grid comes back after that);
    * a timetable goes to its first slot after both ``now`` and ``last_scheduled``: a slot
      the clock passes again is not run again, one the clock skipped is.

    Args:
        schedule: the rule's schedule.
        next_at: when the rule is due (``next_execute_at``).
        now: the current time.
        tz: the rule's timezone (used by timetables).
        last_scheduled: the instant of the rule's last dispatched run, if known.
    """
    _require_aware(next_at, "next_at")
    _require_aware(now, "now")
    if isinstance(schedule, IntervalSchedule):
        every = timedelta(minutes=schedule.every_minutes)
        if next_at - now <= every + REANCHOR_SLACK:
            return None
        moved = _first_on_grid(next_at, every=every, after=now)
        if last_scheduled is None or moved <= last_scheduled:
            moved = _first_on_grid(next_at + REANCHOR_SHIFT, every=every, after=now)
        return moved
    floor = now if last_scheduled is None else max(now, last_scheduled)
    slot = next_slot(schedule, after=floor, tz=tz)
    return slot if slot < next_at else None


def _first_on_grid(anchor: datetime, *, every: timedelta, after: datetime) -> datetime:
    """``anchor + k × every`` for the smallest integer k (any sign) landing after ``after``."""
    return (anchor + ((after - anchor) // every + 1) * every).astimezone(UTC)


def _local_slot(day: date, slot: time, tz: ZoneInfo) -> datetime:
    # fold=0: in a fall-back hour this is the first occurrence; in a spring-forward
    # gap zoneinfo applies the pre-transition offset, shifting the slot by the gap.
    return datetime.combine(day, slot, tzinfo=tz).replace(fold=0).astimezone(UTC)


def next_slot(schedule: TimetableSchedule, *, after: datetime, tz: ZoneInfo) -> datetime:
    """The first timetable slot strictly after ``after``, scanning up to 7 days ahead."""
    local_today = after.astimezone(tz).date()
    for offset in range(TIMETABLE_HORIZON_DAYS + 1):
        day = local_today + timedelta(days=offset)
        times = schedule.slots.get(WEEKDAYS[day.weekday()], [])
        for value in times:  # sorted by the model
            candidate = _local_slot(day, parse_hhmm(value), tz)
            if candidate > after:
                return candidate
    raise ValueError("timetable has no slot")  # unreachable: the model rejects empty grids


def active_window(
    date_range: DateRange | None, tz: ZoneInfo
) -> tuple[datetime | None, datetime | None]:
    """``date_range`` as UTC instants ``[from, until)``; None where open-ended."""
    if date_range is None:
        return None, None
    start = _local_midnight(date_range.start, tz) if date_range.start else None
    end = _local_midnight(date_range.end + timedelta(days=1), tz) if date_range.end else None
    return start, end


def _local_midnight(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(0, 0), tzinfo=tz).astimezone(UTC)


def in_window(now: datetime, window: tuple[datetime | None, datetime | None]) -> bool:
    """True when ``now`` is inside ``[from, until)``."""
    start, end = window
    return (start is None or now >= start) and (end is None or now < end)


def describe(schedule: Schedule) -> str:
    """The schedule in words, e.g. "every 15 min" or "Mon 08:00, 12:30; Fri 18:00"."""
    if isinstance(schedule, IntervalSchedule):
        minutes = schedule.every_minutes
        if minutes % 1440 == 0:
            return f"every {minutes // 1440} day" + ("s" if minutes > 1440 else "")
        if minutes % 60 == 0:
            return f"every {minutes // 60} h"
        return f"every {minutes} min"
    return "; ".join(
        f"{day.capitalize()} {', '.join(times)}" for day, times in schedule.slots.items()
    )


def next_local_time(hhmm: str, *, after: datetime, tz: ZoneInfo) -> datetime:
    """The next ``HH:MM`` wall-clock time in ``tz`` strictly after ``after`` (aware UTC)."""
    _require_aware(after, "after")
    local_day = after.astimezone(tz).date()
    for offset in range(3):  # today, tomorrow — and one more day across a DST gap
        candidate = _local_slot(local_day + timedelta(days=offset), parse_hhmm(hhmm), tz)
        if candidate > after:
            return candidate
    raise AssertionError("unreachable: a time of day recurs within two days")
