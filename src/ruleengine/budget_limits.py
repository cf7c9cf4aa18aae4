"""Meta's limits on budget writes, as one job sees them: the ad account's minimum daily
budget, and the 4 budget changes an ad set may take in an hour — counting changes made
outside the engine without counting the engine's own twice.

Meta limits an ad set to 4 budget changes in a rolling hour, *whoever* makes them, and
answers the 5th with code 17, after which the ad set's budget is blocked for an hour.
The engine's own changes are in its intents; everyone else's only in the ad account's
activity log. :class:`AccountFacts` reads that log (and the minimum daily budget) at
most once per job, lazily, and only for jobs that change budgets;
:func:`count_changes` merges the log with the intents: an intent whose value the log
already shows is the same change, counted once; one the log does not show yet (a write
made after the log was read, or one Meta has not logged yet) is added.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from ruleengine.meta.adaccount import BudgetEvent, read_budget_events, read_min_daily_budget
from ruleengine.meta.errors import GraphError
from ruleengine.meta.reader import GraphReader
from ruleengine.store.intents import AppliedChange

log = logging.getLogger(__name__)

#: Meta's window for the ad-set budget limit, and how long it blocks after a code 17.
CHANGE_WINDOW: Final = timedelta(hours=1)


@dataclass(frozen=True)
class ChangeCount:
    """An entity's budget changes within the window, each counted once.

    Attributes:
        times: when each counted change happened, oldest first.
        outside: how many of them the engine did not make (seen only in Meta's log).
    """

    times: list[datetime]
    outside: int = 0

    def allowed_at(self, per_hour: int) -> datetime | None:
        """When one more change is allowed, or ``None`` when it is allowed now."""
        if len(self.times) < per_hour:
            return None
        return self.times[len(self.times) - per_hour] + CHANGE_WINDOW


def same_value(reported: Decimal | None, target: Any, *, offset: int) -> bool:
    """True when Meta's logged value is the budget the engine wrote (``target``, minor units).

    Meta does not document the unit of ``extra_data``: minor units and major units
    (``target / offset``) both match.
    """
    if reported is None or isinstance(target, bool) or not isinstance(target, int):
        return False
    return reported == target or reported * offset == target


def count_changes(
    events: Sequence[BudgetEvent],
    own: Sequence[AppliedChange],
    *,
    since: datetime,
    offset: int,
) -> ChangeCount:
    """One entity's budget changes since ``since``: Meta's log, plus the engine's own
    changes the log does not show, each change counted once.

    ``events`` are the entity's logged budget events; ``own`` the engine's applied
    changes. Each own change is matched to one logged event with the same new value;
    an own change without a match is counted on its own.
    """
    logged = sorted((e for e in events if e.at >= since), key=lambda e: e.at)
    unmatched = list(logged)
    extra: list[datetime] = []
    for change in sorted((c for c in own if c.at >= since), key=lambda c: c.at):
        match = next(
            (e for e in unmatched if same_value(e.new_value, change.target, offset=offset)), None
        )
        if match is None:
            extra.append(change.at)
        else:
            unmatched.remove(match)
    times = sorted([e.at for e in logged] + extra)
    return ChangeCount(times, outside=len(unmatched))


class AccountFacts:
    """What one job learns about its ad account from Meta, each read at most once, when needed.

    A read that fails is logged and answered with ``None``: the write path then works
    with what it knows (its own intents; no minimum) and Meta's own answer (code 17,
    "budget too low") is the backstop.

    Args:
        reader: the job's reader (it waits out rate limits: use it outside the write lock).
        account: ``act_…``.
        token: the account's token.
        now: the job's time.
        currency_offset: budget units per currency unit (100, or 1 for JPY and the like).
    """

    def __init__(
        self, reader: GraphReader, *, account: str, token: str, now: datetime, currency_offset: int
    ) -> None:
        self.reader = reader
        self.account = account
        self.token = token
        self.now = now
        self.currency_offset = currency_offset
        self._minimum: tuple[int | None] | None = None
        self._events: tuple[list[BudgetEvent] | None] | None = None

    async def min_daily_budget(self) -> int | None:
        """The account's minimum daily budget (minor units), or ``None`` if unknown."""
        if self._minimum is None:
            try:
                value = await read_min_daily_budget(self.reader, self.account, token=self.token)
            except GraphError as exc:
                log.warning("could not read min_daily_budget of %s: %s", self.account, exc)
                value = None
            self._minimum = (value,)
        return self._minimum[0]

    async def budget_events(self) -> list[BudgetEvent] | None:
        """Every budget change in the account's activity log within the last hour, by anyone;
        ``None`` when the log could not be read."""
        if self._events is None:
            try:
                events: list[BudgetEvent] | None = await read_budget_events(
                    self.reader, self.account, token=self.token, since=self.now - CHANGE_WINDOW
                )
            except GraphError as exc:
                log.warning("could not read the activities of %s: %s", self.account, exc)
                events = None
            self._events = (events,)
        return self._events[0]

    async def changes(self, entity_id: str, own: Sequence[AppliedChange]) -> ChangeCount:
        """The entity's budget changes in the last hour: the log's and the engine's own."""
        events = [e for e in (await self.budget_events() or []) if e.object_id == entity_id]
        return count_changes(
            events, own, since=self.now - CHANGE_WINDOW, offset=self.currency_offset
        )
