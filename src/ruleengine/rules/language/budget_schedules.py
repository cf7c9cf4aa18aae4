"""Budget schedules (Meta's high-demand periods), pure: the window, what is sent, what Meta holds.

Meta's reference (``/{campaign or ad set}/budget_schedules``, "Ad Campaign Group Budget
Schedules" and "Ad Campaign Budget Schedules", updated 2023-11-17,
https://developers.facebook.com/documentation/ads-commerce/marketing-api/reference/ad-campaign-group/budget_schedules
and …/reference/ad-campaign/budget_schedules): ``POST`` with ``budget_value`` (int64, "Actual
budget increase, unit defined by BudgetValueType (e.g. 140 could be $140 or 140%)"),
``budget_value_type`` (``ABSOLUTE`` or ``MULTIPLIER``), ``time_start`` and ``time_end``
(int64), answered ``{"id"}``; ``GET`` filtered by ``time_start`` ("Filters out any HDPs with
stop time <= time_start") and ``time_stop``. The SDK's ``HighDemandPeriod`` (facebook-business
26.0.3) deletes one (``DELETE /{id}``): what an undo does.

Where the reference is silent the engine takes the reading under which a misreading can only
spend less (docs/rules.md, "schedule_budget"):

* ``MULTIPLIER``: the **increase** in percent (50: the budget × 1.5). Read as "the budget
  becomes 50 %", the same value would lower it; the other way round it would raise it past
  what was asked.
* ``ABSOLUTE``: the **increase in whole units** of the account's currency, rounded down
  (Meta's "$140"). Were Meta to read minor units, the increase would be a hundredth of it.
* Windows start and end on quarter hours (a third-party client of the API says Meta requires
  it): the start rounded up, the end down, so a window never grows.

An ``ABSOLUTE`` schedule's budget in its window is the budget before plus the increase; a
``MULTIPLIER`` one's the budget before times (1 + percent/100), rounded down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo

from ruleengine.rules.basics import parse_hhmm
from ruleengine.rules.language.action_types import ScheduleWindow

#: The field an intent and a record of a schedule name (also Meta's edge).
SCHEDULES: Final = "budget_schedules"
QUARTER_HOUR_S: Final = 900
#: What the engine reads of a schedule.
SCHEDULE_FIELDS: Final = "id,time_start,time_end,budget_value,budget_value_type"
ValueType = Literal["ABSOLUTE", "MULTIPLIER"]


@dataclass(frozen=True)
class Listed:
    """A schedule as Meta lists it (times in Unix seconds)."""

    id: str
    time_start: int
    time_end: int
    budget_value: int | None
    value_type: str | None

    def overlaps(self, start: int, end: int) -> bool:
        """True when its window and ``[start, end)`` share an instant."""
        return self.time_start < end and start < self.time_end


def unix(value: Any) -> int | None:
    """Meta's time of a schedule — Unix seconds, or a datetime text (``2026-12-24T18:00:00+0000``,
    as the SDK reads ``time_start``) — in Unix seconds; None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        try:
            moment = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S%z")
        except ValueError:
            return None
        return int(moment.timestamp())
    return None


def listed(raw: Any) -> list[Listed]:
    """The schedules of a live read (``live["budget_schedules"]``), those Meta named well."""
    found: list[Listed] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping) or not item.get("id"):
            continue
        start, end = unix(item.get("time_start")), unix(item.get("time_end"))
        if start is None or end is None:
            continue
        value = item.get("budget_value")
        kind = item.get("budget_value_type")
        found.append(
            Listed(
                str(item["id"]),
                start,
                end,
                int(value) if isinstance(value, int | str) and str(value).isdigit() else None,
                str(kind) if kind is not None else None,
            )
        )
    return found


@dataclass(frozen=True)
class ScheduleSpec:
    """What a schedule write sends: a new schedule, or the deletion of one (an undo).

    Attributes:
        op: ``create`` (``POST /{id}/budget_schedules``) or ``delete`` (``DELETE /{id}``).
        time_start: The window's start, Unix seconds (on a quarter hour).
        time_end: Its end.
        value_type: ``MULTIPLIER`` (percent) or ``ABSOLUTE`` (whole currency units).
        budget_value: The increase, in those units.
        offset: Minor units per unit of the account's currency.
        schedule_id: The schedule a ``delete`` deletes.
    """

    op: Literal["create", "delete"]
    time_start: int
    time_end: int
    value_type: ValueType = "MULTIPLIER"
    budget_value: int = 0
    offset: int = 1
    schedule_id: str | None = None

    def as_doc(self) -> dict[str, Any]:
        """What an intent, a record and an approval keep of it."""
        doc: dict[str, Any] = {
            "op": self.op,
            "time_start": self.time_start,
            "time_end": self.time_end,
            "budget_value_type": self.value_type,
            "budget_value": self.budget_value,
            "offset": self.offset,
        }
        return doc | ({"schedule_id": self.schedule_id} if self.schedule_id else {})

    @classmethod
    def from_doc(cls, doc: Any) -> ScheduleSpec | None:
        """The spec an intent, a record or an approval kept (None: none, or not one)."""
        if not isinstance(doc, Mapping) or doc.get("op") not in ("create", "delete"):
            return None
        kind: ValueType = "ABSOLUTE" if doc.get("budget_value_type") == "ABSOLUTE" else "MULTIPLIER"
        return cls(
            op="delete" if doc["op"] == "delete" else "create",
            time_start=int(doc.get("time_start") or 0),
            time_end=int(doc.get("time_end") or 0),
            value_type=kind,
            budget_value=int(doc.get("budget_value") or 0),
            offset=int(doc.get("offset") or 1),
            schedule_id=str(doc["schedule_id"]) if doc.get("schedule_id") else None,
        )

    def form(self) -> dict[str, str]:
        """The POST parameters of a ``create`` (Meta's ``budget_schedules`` edge)."""
        return {
            "budget_value": str(self.budget_value),
            "budget_value_type": self.value_type,
            "time_start": str(self.time_start),
            "time_end": str(self.time_end),
        }

    def scheduled(self, before: int) -> int:
        """The daily budget in the window, from the budget ``before`` it (minor units)."""
        if self.value_type == "ABSOLUTE":
            return before + self.budget_value * self.offset
        return before + before * self.budget_value // 100

    def is_at(self, found: Iterable[Listed], claimed: frozenset[str] = frozenset()) -> str | None:
        """A ``create``'s schedule among ``found`` (its id), not one another intent ``claimed``:
        the same window and value. None when Meta holds none such."""
        for item in found:
            same = (item.time_start, item.time_end) == (self.time_start, self.time_end)
            value = (item.value_type, item.budget_value) == (self.value_type, self.budget_value)
            if same and value and item.id not in claimed:
                return item.id
        return None

    def gone_from(self, found: Iterable[Listed]) -> bool:
        """A ``delete`` landed: its schedule is no longer among ``found``."""
        return all(item.id != self.schedule_id for item in found)

    def window_text(self, tz: ZoneInfo | None = None) -> str:
        """``2026-12-24 18:00–22:00`` (in ``tz``, UTC without one)."""
        zone = tz or UTC
        start = datetime.fromtimestamp(self.time_start, zone)
        end = datetime.fromtimestamp(self.time_end, zone)
        tail = (
            end.strftime("%H:%M") if end.date() == start.date() else end.strftime("%Y-%m-%d %H:%M")
        )
        return f"{start:%Y-%m-%d %H:%M}–{tail}"


def fit(spec: ScheduleSpec, before: int, after: int) -> tuple[ScheduleSpec, int]:
    """The spec that raises ``before`` as close to ``after`` as Meta's units let it, never
    past it (the value rounded down), and the daily budget it makes in the window."""
    increase = max(0, after - before)
    if spec.value_type == "ABSOLUTE":
        value = increase // spec.offset
    else:
        value = increase * 100 // before if before > 0 else 0
    fitted = replace(spec, budget_value=value)
    return fitted, fitted.scheduled(before)


def _ceil_quarter(moment: datetime) -> int:
    return math.ceil(moment.timestamp() / QUARTER_HOUR_S) * QUARTER_HOUR_S


def _floor_quarter(moment: datetime) -> int:
    return math.floor(moment.timestamp() / QUARTER_HOUR_S) * QUARTER_HOUR_S


def window_of(window: ScheduleWindow, *, now: datetime, tz: ZoneInfo) -> tuple[int, int] | None:
    """The window in Unix seconds, on quarter hours, never before ``now``: ``hours`` long from
    the first quarter hour ``start_in_hours`` after ``now``; or today's local ``start``–``end``
    in ``tz`` (tomorrow's once today's is over; while it runs, the rest of it from the next
    quarter hour). None when nothing of it is left."""
    if window.hours is not None:  # whole quarter hours long, from the next quarter hour
        first = _ceil_quarter(now + timedelta(hours=window.start_in_hours or 0))
        return first, first + round(window.hours * 3600)
    assert window.start is not None
    assert window.end is not None
    today = now.astimezone(tz).date()
    for day in (today - timedelta(days=1), today, today + timedelta(days=1)):
        begin, end = _local_window(day, window.start, window.end, tz)
        if end > now:
            first, last = _ceil_quarter(max(begin, now)), _floor_quarter(end)
            if first < last:
                return first, last
    return None


def _local_window(day: date, start: str, end: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """``start``–``end`` of ``day`` in ``tz`` (an end before the start: the next day's)."""
    begin = datetime.combine(day, parse_hhmm(start), tz)
    finish_day = day if parse_hhmm(end) > parse_hhmm(start) else day + timedelta(days=1)
    finish = datetime.combine(finish_day, parse_hhmm(end), tz)
    return begin.astimezone(UTC), finish.astimezone(UTC)


__all__ = [
    "QUARTER_HOUR_S",
    "SCHEDULES",
    "SCHEDULE_FIELDS",
    "Listed",
    "ScheduleSpec",
    "ValueType",
    "fit",
    "listed",
    "unix",
    "window_of",
]
