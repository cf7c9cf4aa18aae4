"""Budget schedules (Meta's high-demand periods): what they are and how they move delivery.

Meta's reference (``/{campaign or ad set}/budget_schedules``, "Ad Campaign Group Budget
Schedules" and "Ad Campaign Budget Schedules", updated 2023-11-17:
https://developers.facebook.com/documentation/ads-commerce/marketing-api/reference/ad-campaign-group/budget_schedules
and …/reference/ad-campaign/budget_schedules) lets a campaign or an ad set budget be raised
for a window: ``budget_value`` (int64, "Actual budget increase, unit defined by
BudgetValueType (e.g. 140 could be $140 or 140%)"), ``budget_value_type`` ``ABSOLUTE`` or
``MULTIPLIER``, ``time_start`` and ``time_end`` (int64). The SDK's ``HighDemandPeriod``
(``facebook_business/adobjects/highdemandperiod.py``, 26.0.3) also reads ``ad_object_id`` and
``recurrence_type`` and deletes one (``DELETE /{id}``).

What Meta does not say, and the sandbox decides (docs/sandbox.md lists it):

* ``ABSOLUTE``: the increase, in **whole units** of the account's currency (Meta's example
  "$140"); ``MULTIPLIER``: the increase in **percent** of the budget ("140%": the budget is
  raised by 140 %, to 2.4 times). The scheduled daily budget is the budget in force at the
  window's start plus that increase.
* ``recurrence_type``: ``ONE_TIME`` (the default) or ``WEEKLY`` (the window again every 7
  days); Meta names no values.

This module is pure: the periods of a world (:class:`ScheduleBook`) and the budget ratio they
put on an object's delivery over time (:func:`schedule_ratios`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

#: The first and last instants (:mod:`graph_sandbox.timeline` spans all time between them).
BEGINNING: Final = datetime.min.replace(tzinfo=UTC)
END: Final = datetime.max.replace(tzinfo=UTC)
#: A ratio in force over a span ``[start, end)``, as :mod:`graph_sandbox.timeline` has them.
RatioSpan = tuple[tuple[datetime, datetime], float]

ValueType = Literal["ABSOLUTE", "MULTIPLIER"]
VALUE_TYPES: Final = ("ABSOLUTE", "MULTIPLIER")
RECURRENCES: Final = ("ONE_TIME", "WEEKLY")
#: Windows start and end on quarter hours (a third-party wrapper of Meta's API says Meta
#: requires it; Meta's reference is silent, and the sandbox holds callers to the stricter).
QUARTER_HOUR_S: Final = 900
#: How far ahead a weekly period is repeated when its spans are laid out.
WEEKLY_HORIZON: Final = timedelta(days=366)
_ID_PREFIX: Final = "12028"


@dataclass
class HighDemandPeriod:
    """One budget schedule of a campaign or an ad set.

    Attributes:
        id: Its Graph id (``12026…``).
        object_id: The campaign or ad set (``ad_object_id``).
        account_id: The ad account's number.
        budget_value: The increase (whole currency units, or percent: ``budget_value_type``).
        budget_value_type: ``ABSOLUTE`` or ``MULTIPLIER``.
        time_start: When the raised budget starts (UTC).
        time_end: When it ends (UTC).
        recurrence_type: ``ONE_TIME`` or ``WEEKLY``; None when the caller named none.
        created_at: When it was made (the counterfactual leaves it out from then on).
        deleted_at: When it was deleted (None: it stands); its past spend stays spent.
    """

    id: str
    object_id: str
    account_id: str
    budget_value: int
    budget_value_type: ValueType
    time_start: datetime
    time_end: datetime
    recurrence_type: str | None
    created_at: datetime
    deleted_at: datetime | None = None

    def windows(self, *, until: datetime = END) -> Iterator[tuple[datetime, datetime]]:
        """The spans its raised budget is in force, in order (a deletion cuts them short)."""
        stop = min(until, self.deleted_at or END)
        step = timedelta(days=7) if self.recurrence_type == "WEEKLY" else None
        start, end = self.time_start, self.time_end
        last = self.time_start + WEEKLY_HORIZON
        while start < stop:
            yield start, min(end, stop)
            if step is None or start + step > last:
                return
            start, end = start + step, end + step

    def overlaps(self, other: HighDemandPeriod) -> bool:
        """True when the two periods' windows (recurrences included) share an instant."""
        until = max(self.time_end, other.time_end) + WEEKLY_HORIZON
        mine = list(self.windows(until=until))
        return any(s < e2 and s2 < e for s, e in mine for s2, e2 in other.windows(until=until))

    def ratio(self, budget: int, offset: int) -> float:
        """The scheduled budget over ``budget`` (minor units; ``offset``: minor units per unit)."""
        if self.budget_value_type == "MULTIPLIER":
            return 1 + self.budget_value / 100
        return (budget + self.budget_value * offset) / budget if budget > 0 else 1.0


class ScheduleBook:
    """Every budget schedule of a world, deleted ones kept for the spend they made.

    Args:
        seed: Part of the ids, as the world's objects' are.
    """

    def __init__(self, *, seed: int) -> None:
        self.seed = seed
        self._periods: dict[str, HighDemandPeriod] = {}
        self._serial = 0

    def next_id(self) -> str:
        """A fresh id, deterministic from the seed and the position."""
        self._serial += 1
        return f"{_ID_PREFIX}{self.seed % 1000:03d}{self._serial:07d}"

    def add(self, period: HighDemandPeriod) -> None:
        """Keep a new period."""
        self._periods[period.id] = period

    def live(self, period_id: str) -> HighDemandPeriod | None:
        """The period with this id, unless it was deleted."""
        found = self._periods.get(period_id)
        return found if found is not None and found.deleted_at is None else None

    def of(self, object_id: str, *, deleted: bool = False) -> list[HighDemandPeriod]:
        """An object's periods by start time (``deleted``: those deleted too)."""
        found = [
            p
            for p in self._periods.values()
            if p.object_id == object_id and (deleted or p.deleted_at is None)
        ]
        return sorted(found, key=lambda p: (p.time_start, p.id))


def schedule_ratios(
    periods: Sequence[HighDemandPeriod], budget_at: Callable[[datetime], int | None], offset: int
) -> list[RatioSpan]:
    """The ratio the periods put on an object's budget over all time: 1 outside every window,
    the scheduled budget over the budget in force at the window's start inside one (windows
    of one object never overlap: the sandbox refuses an overlapping one)."""
    pieces: list[tuple[datetime, datetime, float]] = []
    for period in periods:
        for start, end in period.windows():
            budget = budget_at(start)
            if start < end and budget:
                pieces.append((start, end, period.ratio(budget, offset)))
    pieces.sort()
    spans: list[RatioSpan] = []
    cursor = BEGINNING
    for start, end, ratio in pieces:
        if start < cursor:  # an overlap (never made through the API): the first holds
            start = cursor
            if start >= end:
                continue
        if cursor < start:
            spans.append(((cursor, start), 1.0))
        spans.append(((start, end), ratio))
        cursor = end
    spans.append(((cursor, END), 1.0))
    return spans
