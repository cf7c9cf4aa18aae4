"""When an ad set could deliver, and at what budget: spans of time from the status and budget logs.

Every status write is logged with its time (:meth:`World.set_status`), so a pause stops
delivery from that instant on and an activation starts it again; what was delivered before
a pause stays delivered. Every budget write is logged too (:meth:`World.log_budget`): from
its instant on the ad set delivers at the new budget's ratio to the budget before the first
change (:func:`budget_ratios`). :class:`Unwritten` reads the logs as they would be had
nothing been written through the Graph API since some instant: the counterfactual.
Pure date maths on the logs, no I/O.

The scenarios build objects without a history. An object built ``PAUSED`` (or archived)
counts as having been so since the start of the account-local day of its first logged
change (or of the day being asked about, while it has none): its past days are full, its
today is empty. A copy's first status holds from its creation.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import NamedTuple, Protocol, TypeVar
from zoneinfo import ZoneInfo

from graph_sandbox.schedules import BEGINNING as BEGINNING
from graph_sandbox.schedules import END as END
from graph_sandbox.schedules import HighDemandPeriod

#: A half-open interval ``[start, end)`` of instants.
Span = tuple[datetime, datetime]

ALWAYS: list[Span] = [(BEGINNING, END)]


class StatusChange(NamedTuple):
    """One logged status write: at ``at`` the status went from ``before`` to ``after``
    (``via_api``: through the Graph API, as the write log has it; else in Ads Manager)."""

    at: datetime
    before: str
    after: str
    via_api: bool = True


class BudgetChange(NamedTuple):
    """One logged budget write: at ``at`` the budget went from ``before`` to ``after``
    (minor units; the daily or the lifetime budget, whichever the object has)."""

    at: datetime
    before: int
    after: int
    via_api: bool = True


class History(Protocol):
    """The logged changes delivery depends on (a :class:`World`, or a view of one)."""

    def status_log(self, object_id: str) -> list[StatusChange]:
        """Every status change of an object, in the order they were made."""
        ...

    def budget_log(self, object_id: str) -> list[BudgetChange]:
        """Every budget change of an object, in the order they were made."""
        ...

    def high_demand_periods(self, object_id: str) -> list[HighDemandPeriod]:
        """Every budget schedule of an object, deleted ones too."""
        ...


#: A budget ratio in force during a span.
RatioSpan = tuple[Span, float]


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


def budget_ratios(changes: Sequence[BudgetChange]) -> list[RatioSpan]:
    """The budget in force over time, as a ratio to the budget before the first change.

    The spans cover all time, in order; consecutive spans never have the same ratio (a
    change back to the first budget is a ratio of 1 again). With no change: one span, 1.
    """
    ordered = sorted(changes, key=lambda change: change.at)
    reference = ordered[0].before if ordered else 0
    steps = [(BEGINNING, 1.0)]
    for change in ordered:
        ratio = change.after / reference if reference > 0 else 1.0
        if change.at == steps[-1][0]:
            steps[-1] = (change.at, ratio)  # two writes at one instant: the last one holds
        elif ratio != steps[-1][1]:
            steps.append((change.at, ratio))
    ends = [start for start, _ in steps[1:]] + [END]
    return _merged([((start, end), ratio) for (start, ratio), end in zip(steps, ends, strict=True)])


def budget_at(changes: Sequence[BudgetChange], current: int | None, at: datetime) -> int | None:
    """The budget in force at ``at``: the last logged change's before it, else the first
    change's ``before``, else ``current`` (an object whose budget never changed)."""
    ordered = sorted(changes, key=lambda change: change.at)
    budget = ordered[0].before if ordered else current
    for change in ordered:
        if change.at > at:
            break
        budget = change.after
    return budget


def multiply(left: Sequence[RatioSpan], right: Sequence[RatioSpan]) -> list[RatioSpan]:
    """The product of two budget ratios over time (an ad set's own budget and its campaign's:
    both move its delivery); both cover all time, and so does the product."""
    if len(right) == 1 and right[0][1] == 1.0:
        return list(left)
    if len(left) == 1 and left[0][1] == 1.0:
        return list(right)
    product = []
    for (l_start, l_end), l_ratio in left:
        for (r_start, r_end), r_ratio in right:
            start, end = max(l_start, r_start), min(l_end, r_end)
            if start < end:
                product.append(((start, end), l_ratio * r_ratio))
    return _merged(product)


def _merged(spans: list[RatioSpan]) -> list[RatioSpan]:
    """Adjacent spans with the same ratio joined into one."""
    out: list[RatioSpan] = []
    for (start, end), ratio in spans:
        if out and out[-1][1] == ratio and out[-1][0][1] == start:
            out[-1] = ((out[-1][0][0], end), ratio)
        else:
            out.append(((start, end), ratio))
    return out


def at_ratios(active: list[Span], ratios: Sequence[RatioSpan]) -> list[tuple[float, list[Span]]]:
    """The active spans cut by budget ratio: each ratio with the active spans it held over.

    With no budget change this is ``[(1.0, active)]``, the very list given (``ALWAYS``
    stays ``ALWAYS``, which tells the engine that whole days count).
    """
    if len(ratios) == 1:
        return [(ratios[0][1], active)]
    pieces = [(ratio, intersect(active, [span])) for span, ratio in ratios]
    return [(ratio, spans) for ratio, spans in pieces if spans]


def ratio_at(ratios: Sequence[RatioSpan], at: datetime) -> float:
    """The budget ratio in force at ``at``."""
    return next((ratio for (start, end), ratio in ratios if start <= at < end), 1.0)


_Change = TypeVar("_Change", StatusChange, BudgetChange)


def without_api_writes(changes: Sequence[_Change], since: datetime | None) -> list[_Change]:
    """A log as it would read had nothing been written through the Graph API at or after
    ``since`` (``None``: ever).

    Each such write stays in the log as a change to what was already in force: the log
    keeps its length and instants, so whatever is anchored on its first change (since when
    a scenario's paused object was paused, the reference budget) is the same, and so is
    everything before ``since``. Changes made in Ads Manager stay; each starts from what
    was in force without the API's writes.
    """
    if not changes:
        return []
    order = sorted(range(len(changes)), key=lambda index: changes[index].at)
    out = list(changes)
    current = changes[order[0]].before
    for index in order:
        change = changes[index]
        dropped = change.via_api and (since is None or change.at >= since)
        after = current if dropped else change.after
        out[index] = change._replace(before=current, after=after)
        current = after
    return out


class Unwritten:
    """A history as it would be had nothing been written through the Graph API at or after
    ``since`` (``None``: ever): the counterfactual the sandbox's delivery is compared with.

    Args:
        history: The real history (the world).
        since: The first instant whose API writes are left out.
    """

    def __init__(self, history: History, since: datetime | None) -> None:
        self._history = history
        self._since = since

    def status_log(self, object_id: str) -> list[StatusChange]:
        """The object's status changes, the API's since ``since`` made no-ops."""
        return without_api_writes(self._history.status_log(object_id), self._since)

    def budget_log(self, object_id: str) -> list[BudgetChange]:
        """The object's budget changes, the API's since ``since`` made no-ops."""
        return without_api_writes(self._history.budget_log(object_id), self._since)

    def high_demand_periods(self, object_id: str) -> list[HighDemandPeriod]:
        """The object's budget schedules made before ``since`` (every one is made through the
        API; none at all when ``since`` is None)."""
        if self._since is None:
            return []
        since = self._since
        return [p for p in self._history.high_demand_periods(object_id) if p.created_at < since]
