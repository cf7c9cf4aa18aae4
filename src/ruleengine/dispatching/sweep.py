"""The dispatcher's sweep: every tick, find due rules, list their entities, enqueue one job per
ad account.

Run by ``python -m ruleengine.dispatch`` (:mod:`ruleengine.dispatch`). Ticks never
overlap and do not drift: the loop sleeps what remains of the tick after a
sweep. The dispatcher cannot write to Meta: it imports only the read-only Graph
client, whose session refuses every method but GET (a test walks the import
graph to prove it). What it writes is three fields of each rule —
``next_execute_at``, ``last_execute_at`` and ``last_scheduled_at`` — compare-and-set
on the value it read, and only after the rule's jobs are enqueued: when Redis is down
the rule stays due and goes out once Redis is back. When its clock steps back it
re-anchors the rules left ahead of it, and moves follow-up timers back in line with
MongoDB's clock (docs/operations.md, "When the clock steps").

(Over 400 lines because the loop, the lease's use, the sweep, re-anchoring after a clock
step and the schedule's advance are one protocol; the listings are
:mod:`ruleengine.dispatching.listings`, the lease :mod:`ruleengine.dispatching.lease`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from pymongo.errors import PyMongoError
from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.clocks import StepWatch
from ruleengine.clocks import offset as clock_offset
from ruleengine.dispatching.lease import Lease
from ruleengine.dispatching.listings import Listings, SweepListings
from ruleengine.dispatching.payload import EvaluateJob, ListingPacker, batch_id_for, evaluate_job_id
from ruleengine.errors import ErrorReport, RuleEngineError
from ruleengine.followups.scheduling import FollowupScheduler
from ruleengine.meta.reader import GraphReader
from ruleengine.observability import DispatcherMetrics
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.model import Rule
from ruleengine.rules.language.schedule import next_run
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database, server_time
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.fences import FenceStore
from ruleengine.store.heartbeats import Heartbeats
from ruleengine.store.ruledocs import RuleDoc, StoredRuleError
from ruleengine.store.rules import RuleStore
from ruleengine.store.snapshots import ListingSnapshots

log = logging.getLogger("ruleengine.dispatch")

Clock = Callable[[], datetime]
DISPATCHED_TTL_S = 2 * 24 * 3600
# How often the leader looks for rules a clock stepped back left ahead of it.
REANCHOR_EVERY_S = 30.0


def utcnow() -> datetime:
    """The current time, aware UTC."""
    return datetime.now(UTC)


@dataclass
class SweepReport:
    """What a sweep did (one log line per tick)."""

    due: int = 0
    jobs: int = 0
    duplicates: int = 0
    listings: int = 0
    skipped: list[str] = field(default_factory=list)  # "rule_id/account"
    advanced: int = 0
    held_back: int = 0  # due rules not advanced (Redis trouble, lost lease)
    set_aside: int = 0  # due rules that no longer validate, marked HAS_ISSUES
    degraded: str | None = None
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (stored in the heartbeat)."""
        return {
            "due": self.due,
            "jobs": self.jobs,
            "duplicates": self.duplicates,
            "listings": self.listings,
            "skipped": len(self.skipped),
            "advanced": self.advanced,
            "held_back": self.held_back,
            "set_aside": self.set_aside,
            "degraded": self.degraded,
            "duration_s": round(self.duration_s, 3),
        }


@dataclass(frozen=True)
class _RuleRun:
    """One scheduled execution of a rule being dispatched."""

    doc: RuleDoc
    rule: Rule
    scheduled: datetime
    next_at: datetime
    now: datetime
    fence: int


class LostLease(RuleEngineError):
    """Another dispatcher took the lease during the sweep."""


class Dispatcher:
    """One dispatcher instance: leader when it holds the lease, hot standby otherwise."""

    def __init__(
        self,
        settings: Settings,
        *,
        db: Database,
        queue: ArqRedis,
        reader: GraphReader,
        metrics: DispatcherMetrics | None = None,
        owner: str | None = None,
        clock: Clock = utcnow,
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.reader = reader
        self.metrics = metrics or DispatcherMetrics()
        self.clock = clock
        self.db = db
        self.rules = RuleStore(db)
        self.credentials = CredentialStore(db, load_key(settings))
        self.errors = ErrorLog(db)
        self.heartbeats = Heartbeats(db)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        ttl_ms = int(max(3 * settings.tick_seconds, 1.0) * 1000)
        self.lease = Lease(queue, owner=self.owner, ttl_ms=ttl_ms)
        self._limit = asyncio.Semaphore(settings.dispatch_concurrency)
        self.listings = Listings(
            reader=reader,
            credentials=self.credentials,
            fences=FenceStore(db),
            errors=self.errors,
            metrics=self.metrics,
            limit=self._limit,
        )
        self.followups = FollowupScheduler(db, queue=queue)
        self._reanchored_at: float | None = None  # time.monotonic() of the last re-anchoring
        self._steps = StepWatch()
        self._stepped = False  # this host's clock stepped since the last tick as leader
        self.packer = ListingPacker(
            ListingSnapshots(db), inline_max_bytes=settings.payload_inline_max_bytes
        )

    # ---------------------------------------------------------------- the loop

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set; a sweep in progress always finishes."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            started = loop.time()
            try:
                await self.tick()
            except Exception as exc:  # nothing raised inside a tick may end the loop
                await self._tick_failed(exc)
            remaining = self.settings.tick_seconds - (loop.time() - started)
            if remaining > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=remaining)

    async def _tick_failed(self, exc: Exception) -> None:
        log.exception("tick failed; the next tick runs as scheduled")
        await self.errors.report(
            ErrorReport.of(exc, function="dispatch.tick", context={"dispatcher": self.owner})
        )

    async def tick(self) -> SweepReport | None:
        """One tick: hold the lease, sweep, beat. None when on standby."""
        self.metrics.ticks.inc()
        now = self.clock()
        # noticed on every tick, a standby's too: a step before it leads is still a step
        self._stepped = self._steps.stepped(now) or self._stepped
        try:
            fence = await self.lease.acquire()
            self.metrics.redis_up.set(1)
        except (RedisError, OSError) as exc:
            self.metrics.redis_up.set(0)
            log.warning("Redis unreachable (%s): not dispatching; due rules stay due", exc)
            report = SweepReport(degraded="redis_unreachable")
            await self._beat("dispatcher", now, role="unknown", report=report)
            return report
        self.metrics.leader.set(0 if fence is None else 1)
        if fence is None:
            await self._beat(f"dispatcher-standby:{self.owner}", now, role="standby", report=None)
            return None
        try:
            async with self._keeping_lease(fence):
                report = await self.sweep(now, fence)
            await self._reanchor_rules(now, report)
            await self._rearm_followups(now, report)
            if not report.degraded:
                self._stepped = False  # rules and timers were looked at since the step
        except PyMongoError as exc:
            # keep ticking: MongoDB coming back is the next tick's business
            log.warning("MongoDB unreachable (%s): nothing dispatched this tick", exc)
            report = SweepReport(degraded="mongodb_unreachable")
        await self._beat("dispatcher", now, role="leader", report=report)
        return report

    @contextlib.asynccontextmanager
    async def _keeping_lease(self, fence: int) -> AsyncIterator[None]:
        """Renew the lease every third of its lifetime while a sweep runs.

        A sweep slowed down by Graph can outlast the lease; renewing keeps it (and
        a lapse nobody else used is taken back with the same token), so a single
        dispatcher never holds its own rules back.
        """

        async def keep() -> None:
            while True:
                await asyncio.sleep(self.lease.ttl_ms / 3000)
                try:
                    if await self.lease.acquire() != fence:
                        log.warning("lease lost to another dispatcher during a sweep")
                        return
                except (RedisError, OSError) as exc:
                    log.warning("could not renew the lease during a sweep: %s", exc)

        keeper = asyncio.create_task(keep())
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _reanchor_rules(self, now: datetime, report: SweepReport) -> None:
        """Bring back rules a clock stepped back left ahead of it: at once when this host's
        clock stepped, at the first tick as leader, and every :data:`REANCHOR_EVERY_S` (on the
        monotonic clock, which no step moves) for a step this process did not see."""
        checked = time.monotonic()
        last = self._reanchored_at
        if report.degraded or (
            not self._stepped and last is not None and checked - last < REANCHOR_EVERY_S
        ):
            return
        self._reanchored_at = checked
        moved = await self.rules.reanchor(now)
        if moved:
            log.warning(
                "%d rule(s) were more than one run ahead of the clock (did it step back?);"
                " each is due again at its next instant after now",
                moved,
            )

    async def _rearm_followups(self, now: datetime, report: SweepReport) -> None:
        """Re-arm follow-up timers that Redis lost (or never got), and move those a step of this
        host's clock put out of line — only while Redis answers."""
        if report.degraded:
            return
        try:
            armed = await self.followups.rearm(
                now=now, offset=await self._clock_offset(), check_timers=self._stepped
            )
            self.metrics.followups_rearmed.inc(armed)
        except (RedisError, OSError) as exc:
            log.warning("follow-ups not re-armed this tick: %s", exc)

    async def _clock_offset(self) -> timedelta:
        """How far this host's clock is ahead of MongoDB's now (zero when they agree)."""
        before = self.clock()
        db_now = await server_time(self.db)
        after = self.clock()
        return clock_offset(before + (after - before) / 2, db_now)

    async def _beat(
        self, name: str, now: datetime, *, role: str, report: SweepReport | None
    ) -> None:
        try:
            await self.heartbeats.beat(
                name,
                now=now,
                owner=self.owner,
                role=role,
                last_sweep=None if report is None else report.as_dict(),
            )
        except Exception:  # a heartbeat must never stop the loop
            log.exception("could not write the dispatcher heartbeat")

    # ---------------------------------------------------------------- a sweep

    async def sweep(self, now: datetime, fence: int) -> SweepReport:
        """Dispatch every due rule; see the module docstring."""
        started = time.perf_counter()
        report = SweepReport()
        due = await self.rules.due(now)
        report.due = len(due.ready) + len(due.broken)
        for broken in due.broken:
            await self._set_aside(broken, now, report)
        if due.ready:
            parsed = due.ready
            listings = await self.listings.fetch([rule for _, rule in parsed], now=now)
            report.listings = len(listings)
            outcomes = await asyncio.gather(
                *(self._dispatch(doc, rule, listings, now, fence, report) for doc, rule in parsed)
            )
            advances = [a for a in outcomes if a is not None]
            report.advanced = await self.rules.advance_many(advances, now=now)
            report.held_back = len(parsed) - len(advances)
        report.duration_s = time.perf_counter() - started
        self.metrics.sweep_seconds.observe(report.duration_s)
        self._log(report)
        return report

    async def _set_aside(self, error: StoredRuleError, now: datetime, report: SweepReport) -> None:
        """A due rule that no longer validates: mark it HAS_ISSUES and report it, once."""
        report.set_aside += 1
        log.error("rule %s set aside (HAS_ISSUES): %s", error.rule_id, error.problem)
        if not await self.rules.set_aside(error, now=now):
            return  # changed meanwhile (e.g. fixed): the next tick reads it again
        await self.errors.report(
            ErrorReport.of(
                error,
                function="dispatch.load_rule",
                message=str(error),
                params={"name": error.name},
                context={"rule_id": error.rule_id},
            )
        )

    @staticmethod
    def _log(report: SweepReport) -> None:
        log.info(
            "tick: %d due, %d job(s) enqueued, %d duplicate(s), %d listing(s), %d account(s)"
            " skipped, %d advanced, %d held back%s in %.2fs",
            report.due,
            report.jobs,
            report.duplicates,
            report.listings,
            len(report.skipped),
            report.advanced,
            report.held_back,
            f" [degraded: {report.degraded}]" if report.degraded else "",
            report.duration_s,
        )

    async def _dispatch(
        self,
        doc: RuleDoc,
        rule: Rule,
        listings: SweepListings,
        now: datetime,
        fence: int,
        report: SweepReport,
    ) -> tuple[str, datetime, datetime] | None:
        """Enqueue a rule's jobs; the (id, expected, next) advance when all went out."""
        assert doc.next_execute_at is not None
        scheduled = doc.next_execute_at
        next_at = next_run(rule.schedule, scheduled=scheduled, now=now, tz=rule.zone())
        run = _RuleRun(doc, rule, scheduled, next_at, now, fence)
        async with self._limit:
            if report.degraded:
                return None
            try:
                for account in rule.ad_accounts:
                    listing = listings.entities(rule, account)
                    if isinstance(listing, RuleEngineError):
                        log.warning(
                            "rule %s (%s) skips %s this run: %s", doc.id, doc.name, account, listing
                        )
                        report.skipped.append(f"{doc.id}/{account}")
                        continue
                    listed_fence = listings.fence(account)
                    await self._enqueue(run, account, listing, report, listed_fence=listed_fence)
            except (RedisError, OSError, LostLease) as exc:
                report.degraded = (
                    "lost_lease" if isinstance(exc, LostLease) else "redis_unreachable"
                )
                log.warning("rule %s not dispatched, stays due: %s", doc.id, exc)
                return None
        return doc.id, scheduled, next_at

    async def _enqueue(
        self,
        run: _RuleRun,
        account: str,
        entities: list[Entity],
        report: SweepReport,
        *,
        listed_fence: int | None,
    ) -> None:
        doc, scheduled, now = run.doc, run.scheduled, run.now
        batch_id = batch_id_for(doc.id, account, scheduled)
        # A job that could not start before the rule's next run is dropped, not run late:
        # after a worker outage the backlog never bursts, the next scheduled run decides.
        expires = max(run.next_at - now, timedelta(seconds=self.settings.tick_seconds))
        # A big listing goes to MongoDB once per tick, kept until its last job may have run.
        keep_until = now + expires + timedelta(seconds=self.settings.job_timeout_s)
        packed = await self.packer.pack(
            entities, account=account, level=run.rule.level, now=now, keep_until=keep_until
        )
        payload = EvaluateJob.of(
            run.rule,
            batch_id=batch_id,
            rule_id=doc.id,
            version=doc.version,
            account=account,
            entities=packed,
            scheduled_at=scheduled,
            dispatched_at=now,
            fence=run.fence,
            listed_fence=listed_fence,
        )
        # One script checks the lease and enqueues (with the dispatched marker) atomically.
        enqueued = await self.lease.enqueue(
            run.fence,
            function=c.EVALUATE_JOB,
            payload=payload.to_job(),
            job_id=evaluate_job_id(batch_id),
            queue_name=c.QUEUE_NAME,
            expires=expires,
            marker=f"{c.DISPATCHED_KEY_PREFIX}{batch_id}",
            marker_value=now.isoformat(),
            marker_ttl_s=DISPATCHED_TTL_S,
        )
        if enqueued is None:
            raise LostLease("the lease moved to another dispatcher")
        if not enqueued:
            report.duplicates += 1
            self.metrics.jobs_duplicate.inc()
            return
        report.jobs += 1
        self.metrics.jobs_enqueued.inc()
        self.metrics.dispatch_lag.observe(max(0.0, (self.clock() - scheduled).total_seconds()))
