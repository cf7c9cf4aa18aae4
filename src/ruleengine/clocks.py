"""The engine's two clocks: a host's wall clock, and MongoDB's, which a host's step does not move.

A host's clock steps — NTP corrects a drift, a VM resumes, someone fixes a wrong time. What
must not move with it is measured on MongoDB's clock (``JobRun.db_now``, read once per job,
and carried on from there by the monotonic clock, :func:`carried`): every time stored to be
compared later — cooldowns, when a follow-up is due, a write's time (Meta's 4 budget changes
an hour, the change budget's 24 h, oscillations), whose owner is gone, approvals' expiry and
retries, which batch the reaper abandons. What runs on a host's clock — when a rule is due,
when an arq timer fires — is put back in line after a step by the dispatcher. Which clock
decides what: docs/operations.md, "When the clock steps".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

Clock = Callable[[], datetime]

#: Two clocks this close agree: what separates their readings is a round trip, not a step.
AGREEING: Final = timedelta(seconds=1)


def utcnow() -> datetime:
    """A host's wall clock now, aware UTC."""
    return datetime.now(UTC)


def carried(
    at: datetime, ticks: float, *, monotonic: Callable[[], float] = time.monotonic
) -> datetime:
    """``at`` (a reading of MongoDB's clock, taken when this host's monotonic clock read
    ``ticks``) carried on to now by the monotonic clock: MongoDB's clock now, to within the
    round trip of the reading, whatever this host's wall clock does meanwhile."""
    return at + timedelta(seconds=monotonic() - ticks)


def offset(local: datetime, db: datetime) -> timedelta:
    """How far a host's clock (``local``) is ahead of MongoDB's (``db``), both read at one moment.

    Zero when they agree within :data:`AGREEING`, so that in the usual case a time moved from
    one clock to the other is not moved at all.
    """
    ahead = local - db
    return ahead if abs(ahead) >= AGREEING else timedelta(0)


class StepWatch:
    """Notices a step of a wall clock: between two readings it moved other than the monotonic
    clock (which no step moves) did."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._last: tuple[datetime, float] | None = None

    def stepped(self, now: datetime) -> bool:
        """Whether the clock that read ``now`` stepped since the previous reading (False at the
        first one)."""
        ticks = self._monotonic()
        last, self._last = self._last, (now, ticks)
        if last is None:
            return False
        drift = (now - last[0]) - timedelta(seconds=ticks - last[1])
        return abs(drift) >= AGREEING
