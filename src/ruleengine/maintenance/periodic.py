"""The workers' periodic jobs (the reaper, retention): arq cron entries that a clock step
neither stops nor turns into a burst.

arq keeps each cron job's next run as a wall-clock time and moves it on one period at a
time. A clock stepped back 20 minutes would hold the job back 20 minutes; one stepped
forward 3 hours would catch up minute by minute, 180 passes in a few seconds. Here a job's
next run is never more than one period away from now — ahead, it is brought back to its
next time after now; behind, to its last time before now, so one catch-up pass runs — and
a pass that finds another one ran less than a period ago (a stamp in Redis, on Redis's
clock) does nothing: several workers, or workers whose clocks disagree, make one pass a
period between them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Final

from arq import cron
from arq.cron import CronJob

from ruleengine.clocks import Clock, utcnow

log = logging.getLogger(__name__)

STAMP_PREFIX: Final = "ruleengine:periodic:"
#: A stamp lasts this much less than the period, so that the next pass on time (its start
#: a little early or a little late) is never taken for a repeat.
STAMP_MARGIN: Final = timedelta(seconds=5)
ONE_MINUTE: Final = timedelta(minutes=1)

PeriodicJob = Callable[[dict[str, Any]], Awaitable[Any]]


class SteadyCron(CronJob):
    """An arq cron job whose next run stays within one period of ``clock()``.

    arq reads and writes ``next_run`` as a plain attribute; here reading it first brings a
    time more than one period ahead of now back to the next one after now (the clock stepped
    back), and one more than one period behind to the last one before now (stepped forward).
    """

    def __init__(self, job: CronJob, *, period: timedelta, clock: Clock = utcnow) -> None:
        self.period = period
        self.clock = clock
        self._next_run: datetime | None = None
        super().__init__(**{f.name: getattr(job, f.name) for f in dataclasses.fields(job)})

    @property
    def next_run(self) -> datetime | None:
        """When arq enqueues this job next, kept within one period of now."""
        planned = self._next_run
        if planned is None:
            return None
        now = self.clock()
        # arq enqueues a job up to a poll (and a second) before it is due, and plans the next
        # run from the due time: a next run a little more than a period ahead is not a step
        if planned - now > self.period + STAMP_MARGIN:
            self.calculate_next(now)
        elif now - planned > self.period + STAMP_MARGIN:
            self.calculate_next(now - self.period)
        else:
            return planned
        log.warning(
            "%s was due at %s: the clock stepped; now due at %s", self.name, planned, self._next_run
        )
        return self._next_run

    @next_run.setter
    def next_run(self, value: datetime | None) -> None:
        self._next_run = value


def every_minute(job: PeriodicJob, *, name: str, second: int) -> SteadyCron:
    """``job`` as a cron entry at ``second`` past every minute (and at the worker's start),
    steady across clock steps, one pass a minute between all workers."""
    period = ONE_MINUTE

    async def run(ctx: dict[str, Any]) -> Any:
        if not await first_this_period(ctx["redis"], name, period=period):
            log.info("%s ran less than %s ago: this pass does nothing", name, period)
            return None
        return await job(ctx)

    entry = cron(run, name=name, second=second, run_at_startup=True)
    return SteadyCron(entry, period=period)


async def first_this_period(redis: Any, name: str, *, period: timedelta) -> bool:
    """True for the first pass of ``name`` in ``period`` (``SET NX PX``): the stamp expires on
    Redis's clock, which a step of a worker's does not move."""
    ttl_ms = int((period - STAMP_MARGIN).total_seconds() * 1000)
    return bool(await redis.set(f"{STAMP_PREFIX}{name}", "1", nx=True, px=ttl_ms))
