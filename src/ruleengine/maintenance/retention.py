"""Retention: executions, batches and rollups expire after their configured periods.

The Insights history cache (``insights_history``) keeps each month's bucket for
:data:`INSIGHTS_HISTORY_KEEP` after that month ends: a backtest reaches back at most
90 days (``rules.history.MAX_DAYS``), so by then no backtest can ask for it.

TTL indexes do the deleting: MongoDB's TTL monitor (and the embedded server's,
which has one too) removes expired documents about once a minute. The worker's
minute cron (:func:`retention_job`) adds three things: it keeps the TTL indexes in
line with the settings (a changed setting changes the existing index), it rolls up
each settled day into ``rollups`` long before that day's batches expire, and it
deletes the action intents whose ``expires_at`` has passed (by MongoDB's clock;
:mod:`ruleengine.store.intents`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database, TtlChange, TtlIndex, ensure_ttl_index, server_time
from ruleengine.store.insights_history import drop_day_documents
from ruleengine.store.intents import IntentStore
from ruleengine.store.rollups import RollupStore, days_to_roll_up

log = logging.getLogger(__name__)

# a day settles this long after the job timeout has passed at its end: by then the
# reaper has closed whatever was still RUNNING
SETTLE_MARGIN: Final = timedelta(hours=1)
MAX_DAYS_PER_RUN: Final = 7  # a first run on a long history catches up over a few minutes
_MARKER_SLACK: Final = timedelta(days=2)
#: How long a month of the Insights history cache is kept after it ends: the 90 days a
#: backtest reaches back, and a month more.
INSIGHTS_HISTORY_KEEP: Final = timedelta(days=120)


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each collection keeps its documents, and when a day has settled."""

    executions: timedelta
    batches: timedelta
    rollups: timedelta
    settle: timedelta

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        """The policy of ``RULEENGINE_*_RETENTION_DAYS`` and the job timeout."""
        return cls(
            executions=timedelta(days=settings.executions_retention_days),
            batches=timedelta(days=settings.batches_retention_days),
            rollups=timedelta(days=settings.rollups_retention_days),
            settle=timedelta(seconds=settings.job_timeout_s) + SETTLE_MARGIN,
        )

    def ttl_indexes(self) -> list[TtlIndex]:
        """The TTL index of each collection that expires."""
        # A day's marker must outlive the window in which that day could be rolled up
        # again, or a day whose batches are partly gone would be recomputed from the rest.
        markers = max(self.batches, self.rollups) + _MARKER_SLACK
        return [
            TtlIndex(c.EXECUTIONS, "created_at", _seconds(self.executions)),
            TtlIndex(c.EVALUATIONS, "created_at", _seconds(self.executions)),
            TtlIndex(c.BATCHES, "finished_at", _seconds(self.batches)),  # RUNNING: never
            TtlIndex(c.ROLLUPS, "date", _seconds(self.rollups)),
            TtlIndex(c.ROLLUP_DAYS, "date", _seconds(markers)),
            TtlIndex(c.INSIGHTS_HISTORY, "month_end", _seconds(INSIGHTS_HISTORY_KEEP)),
        ]


def _seconds(period: timedelta) -> int:
    return int(period.total_seconds())


@dataclass(frozen=True)
class RetentionReport:
    """What one pass changed: TTL indexes by collection, the days rolled up, and how many
    expired intents it deleted."""

    ttl: dict[str, TtlChange]
    rolled_up: list[str]
    intents_expired: int = 0


async def apply_retention(
    db: Database, policy: RetentionPolicy, *, now: datetime, max_days: int = MAX_DAYS_PER_RUN
) -> RetentionReport:
    """Bring the TTL indexes in line with ``policy``; roll up the settled days not yet done;
    delete the intents that expired.

    Also deletes the Insights history documents of the layout before month buckets,
    once (:func:`~ruleengine.store.insights_history.drop_day_documents`).
    """
    ttl: dict[str, TtlChange] = {}
    for index in policy.ttl_indexes():
        ttl[index.collection] = change = await ensure_ttl_index(db, index)
        if change != "unchanged":
            log.info(
                "%s expire %d days after %s (TTL index %s)",
                index.collection,
                index.expire_after_s // 86400,
                index.field,
                change,
            )
    if dropped := await drop_day_documents(db):
        log.info("insights_history: %d document(s) of the per-day layout deleted", dropped)
    rollups = RollupStore(db)
    done = await rollups.rolled_up(since=(now - policy.batches).date())
    days = days_to_roll_up(now=now, settle=policy.settle, keep=policy.batches, done=done)
    for day in days[:max_days]:
        rules = await rollups.roll_up(day, now=now)
        log.info("rolled up %s: %d rule(s)", day.isoformat(), rules)
    expired = await IntentStore(db).drop_expired(now=await server_time(db))
    if expired:
        log.info("action_intents: %d expired intent(s) deleted", expired)
    return RetentionReport(
        ttl=ttl, rolled_up=[d.isoformat() for d in days[:max_days]], intents_expired=expired
    )


async def retention_job(ctx: dict[str, Any]) -> dict[str, Any]:
    """arq cron: keep the TTL indexes in line with the settings and roll up settled days, by
    MongoDB's clock (an intent's expiry was stamped by it; this worker's clock may be off)."""
    policy = RetentionPolicy.from_settings(ctx["settings"])
    report = await apply_retention(ctx["db"], policy, now=await server_time(ctx["db"]))
    return {"rolled_up": report.rolled_up, "intents_expired": report.intents_expired}
