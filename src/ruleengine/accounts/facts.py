"""What one job learns about its ad account from Meta, each read at most once, when needed.

:class:`AccountFacts` is read by the worker's stages, the write path, the preview,
approvals, undo and follow-ups; it reads through the job's (read-only) reader and depends
on nothing of the write path, so every side can import it. Counting an entity's budget
changes in Meta's window (:func:`count_changes`) lives here too: it joins Meta's activity
log with the engine's own changes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from ruleengine.meta.adaccount import (
    AdAccount,
    BudgetEvent,
    read_ad_account,
    read_budget_events,
)
from ruleengine.meta.errors import GraphError
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.entity import currency_offset
from ruleengine.store.credentials import Account, CurrencyState
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
    for change in sorted((o for o in own if o.at >= since), key=lambda o: o.at):
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

    The ad account itself (its minimum daily budget, currency and timezone) is one GET,
    made when the job first plans a change whose amount is in the currency; the activity
    log is read for jobs that change ad-set budgets. A read that fails is logged and
    answered with ``None``: the write path then works with what it knows (its own intents;
    no minimum; the registered currency, unless a job already found it not Meta's) and
    Meta's own answer (code 17, "budget too low") is the backstop.

    Args:
        reader: the job's reader (it waits out rate limits: use it outside the write lock).
        account: the registered account (its currency gives ``currency_offset``: budget
            units per currency unit, 100, or 1 for JPY and the like).
        token: the account's token.
        now: the job's time by MongoDB's clock (the activity log is read back an hour from
            it: Meta's times and the engine's own changes are compared on that clock).
    """

    def __init__(self, reader: GraphReader, *, account: Account, token: str, now: datetime) -> None:
        self.reader = reader
        self.registered = account
        self.account = account.id
        self.token = token
        self.now = now
        self.currency_offset = currency_offset(account.currency)
        self._ad_account: tuple[AdAccount | None] | None = None
        self._events: tuple[list[BudgetEvent] | None] | None = None

    @property
    def read(self) -> AdAccount | None:
        """The ad account as this job read it; ``None`` before the read, or when it failed."""
        return None if self._ad_account is None else self._ad_account[0]

    async def ad_account(self) -> AdAccount | None:
        """The ad account as Meta holds it (read once per job), or ``None`` if unreadable."""
        if self._ad_account is None:
            try:
                value: AdAccount | None = await read_ad_account(
                    self.reader, self.account, token=self.token
                )
            except GraphError as exc:
                log.warning("could not read the ad account %s: %s", self.account, exc)
                value = None
            self._ad_account = (value,)
        return self._ad_account[0]

    async def min_daily_budget(self) -> int | None:
        """The account's minimum daily budget (minor units), or ``None`` if unknown."""
        found = await self.ad_account()
        return None if found is None else found.min_daily_budget

    async def mismatch(self) -> CurrencyState | None:
        """How the registered currency or timezone is not Meta's, or ``None`` when they agree.

        When Meta cannot be read now, the last finding stands (the account's
        ``currency_state``): an account found wrong stays stopped until it is fixed.
        """
        found = await self.ad_account()
        if found is None:
            return self.registered.currency_state
        return self.registered.disagreement(
            currency=found.currency, timezone=found.timezone, now=self.now
        )

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

    async def changes(
        self, entity_id: str, own: Sequence[AppliedChange], *, now: datetime | None = None
    ) -> ChangeCount:
        """The entity's budget changes in the hour before ``now`` (MongoDB's clock, the one
        the engine's own changes are stamped by; None: the job's time): the log's and the
        engine's own."""
        events = [e for e in (await self.budget_events() or []) if e.object_id == entity_id]
        since = (self.now if now is None else now) - CHANGE_WINDOW
        return count_changes(events, own, since=since, offset=self.currency_offset)
