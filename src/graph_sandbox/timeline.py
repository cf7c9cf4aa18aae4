"""When an ad set could deliver: the spans during which it and its campaign were both ACTIVE.

Every status write is logged with its time (:meth:`World.set_status`), so a pause stops
delivery from that instant on and an activation starts it again; what was delivered before
a pause stays delivered. Pure date maths on the log, no I/O.

The scenarios build objects without a history. An object built ``PAUSED`` (or archived)
counts as having been so since the start of the account-local day of its first logged
change (or of the day being asked about, while it has none): its past days are full, its
today is empty. A copy's first status holds from its creation.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

#: A half-open interval ``[start, end)`` of instants.
Span = tuple[datetime, datetime]

BEGINNING = datetime.min.replace(tzinfo=UTC)
END = datetime.max.replace(tzinfo=UTC)
ALWAYS: list[Span] = [(BEGINNING, END)]


class StatusChange(NamedTuple):
    """One logged status write: at ``at`` the status went from ``before`` to ``after``."""

    at: datetime
    before: str
    after: str


def day_window(day: date, tz: ZoneInfo) -> Span:
    """The instants of one calendar day in ``tz`` (23 or 25 hours long around DST changes)."""
    start = datetime.combine(day, time(), tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(), tz).astimezone(UTC)
    return start, end


def hour_window(day: date, hour: int, tz: ZoneInfo) -> Span:
    """The instants of local hour ``hour`` (0–23) of ``day`` in ``tz``; empty if DST skips it."""
    start = datetime.combine(day, time(hour), tz).astimezone(UTC)
    if hour == 23:
        end = day_window(day, tz)[1]
    else:
        end = datetime.combine(day, time(hour + 1), tz).astimezone(UTC)
    return start, max(start, end)


def active_spans(
    status: str, changes: Sequence[StatusChange], *, settled_at: datetime
) -> list[Span]:
    """The spans during which an object's own status was ``ACTIVE``.

    Args:
        status: The status now (used when nothing was logged).
        changes: The logged changes, oldest first.
        settled_at: Since when the status before the first change held; before that
            instant the object counts as active (it delivered its history).
    """
    # A clock set back by hand can log a change before an earlier one: order by time.
    ordered = sorted(changes, key=lambda change: change.at)
    first = ordered[0].before if ordered else status
    if ordered:
        settled_at = min(settled_at, ordered[0].at)
    # (instant, status from then on), in order; the first status holds from settled_at.
    steps = [(BEGINNING, "ACTIVE"), (settled_at, first), *((c.at, c.after) for c in ordered)]
    spans: list[Span] = []
    for (start, current), (end, _) in zip(steps, [*steps[1:], (END, "")], strict=True):
        if current == "ACTIVE" and start < end:
            if spans and spans[-1][1] >= start:
                spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            else:
                spans.append((start, end))
    return spans


def intersect(left: Sequence[Span], right: Sequence[Span]) -> list[Span]:
    """The spans common to two sorted lists of disjoint spans."""
    out: list[Span] = []
    i = j = 0
    while i < len(left) and j < len(right):
        start = max(left[i][0], right[j][0])
        end = min(left[i][1], right[j][1])
        if start < end:
            out.append((start, end))
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return out


def overlap(window: Span, spans: Sequence[Span]) -> timedelta:
    """How much of ``window`` the spans cover."""
    covered = timedelta()
    for start, end in spans:
        lo, hi = max(window[0], start), min(window[1], end)
        if lo < hi:
            covered += hi - lo
    return covered


def union(groups: Sequence[Sequence[Span]]) -> list[Span]:
    """The instants covered by any of several lists of spans, as sorted disjoint spans."""
    merged: list[Span] = []
    for start, end in sorted(span for spans in groups for span in spans):
        if merged and merged[-1][1] >= start:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif start < end:
            merged.append((start, end))
    return merged


def covers(spans: Sequence[Span], instant: datetime) -> bool:
    """True when ``instant`` lies in one of the spans."""
    return any(start <= instant < end for start, end in spans)


class BudgetChange(NamedTuple):
    """One logged budget write: at ``at`` the budget went from ``before`` to ``after``."""

    at: datetime
    before: int
    after: int


#: ``(from this instant, rate)`` steps, in time order: how fast an ad set delivers
#: relative to its profile.
Rates = list[tuple[datetime, float]]


def budget_rates(changes: Sequence[BudgetChange]) -> Rates:
    """How fast delivery runs after each budget change: the budget over the first budget
    logged (the one the scenario built); 1 before the first change."""
    ordered = sorted(changes, key=lambda change: change.at)
    base = ordered[0].before
    return [(BEGINNING, 1.0), *((change.at, change.after / base) for change in ordered)]


def paced(window: Span, spans: Sequence[Span], rates: Rates) -> float:
    """Seconds of ``window`` the spans cover, each second weighted by the rate then."""
    total = 0.0
    ends = [*(start for start, _ in rates[1:]), END]
    for start, end in spans:
        lo, hi = max(window[0], start), min(window[1], end)
        for (step, rate), step_end in zip(rates, ends, strict=True):
            a, b = max(lo, step), min(hi, step_end)
            if a < b:
                total += (b - a).total_seconds() * rate
    return total
