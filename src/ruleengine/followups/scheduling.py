"""Scheduling follow-ups: store each in MongoDB, arm its timer in Redis, re-arm lost ones.

When Redis is unreachable, the action itself has already been done and
recorded; the follow-up is stored as ``pending`` with the reason, and the
dispatcher re-arms every pending follow-up (and any ``scheduled`` one whose
timer vanished from Redis) once Redis answers again. A follow-up whose due time
passed meanwhile runs late, once, and says how late.

A follow-up is due by MongoDB's clock (``due_at``), which a step of a host's clock does not
move; its timer is an arq job whose score is that time on the clock of the hosts that poll
Redis — ``due_at`` plus how far their clock is ahead of MongoDB's (usually nothing). When a
host's clock steps, the dispatcher finds the timers out of line and moves them, so a
follow-up runs when it is due in real time, not a step early or late.

This module never writes to Meta: the dispatcher imports it to re-arm timers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from arq.constants import job_key_prefix
from arq.utils import to_unix_ms
from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.rules.language.action_types import FollowUp
from ruleengine.rules.language.model import Rule
from ruleengine.rules.language.schedule import next_local_time
from ruleengine.store.db import Database, Document
from ruleengine.store.followups import (
    FollowupDoc,
    FollowupStore,
    ScheduledTimer,
    followup_job_id,
    followup_key,
)
from ruleengine.store.intents import Intent
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)

REARM_SCHEDULED_EVERY_S = 30.0
#: Why a follow-up stays ``pending``: Redis could not take its timer.
REDIS_UNAVAILABLE = "redis_unavailable"
REARM_CHUNK = 500  # scheduled follow-ups checked per Redis round trip
# A timer this far from where it belongs is moved: a step of a host's clock, not a round trip.
TIMER_TOLERANCE_MS = 2_000


def due_time(then: FollowUp, *, now: datetime, rule: Rule) -> datetime:
    """When a follow-up is due: ``after_minutes`` from now, or the next ``at_time`` locally."""
    if then.after_minutes is not None:
        return now + timedelta(minutes=then.after_minutes)
    assert then.at_time is not None
    return next_local_time(then.at_time, after=now, tz=rule.zone())


@dataclass(frozen=True)
class Origin:
    """The action a follow-up follows."""

    batch_id: str
    rule_id: str
    rule_version: int
    rule: Rule
    task_id: str
    account: str
    entity_id: str
    entity_name: str
    field: str | None
    set_value: Any
    previous: Any


class FollowupScheduler:
    """Stores follow-ups and arms their timers; re-arms the ones Redis lost."""

    def __init__(self, db: Database, *, queue: ArqRedis, on_result: Any = None) -> None:
        self.store = FollowupStore(db)
        self._queue = queue
        self.on_result = on_result  # counts scheduled/pending/re-armed (metrics), optional
        self._last_scheduled_check: float | None = None  # time.monotonic(): no step moves it

    @property
    def redis(self) -> ArqRedis:
        """The Redis of the timers."""
        return self._queue

    def _count(self, result: str, amount: int = 1) -> None:
        if self.on_result is not None and amount:
            self.on_result(result, amount)

    async def schedule(
        self,
        origin: Origin,
        then: FollowUp,
        *,
        now: datetime,
        offset: timedelta = timedelta(0),
        only_if_missing: bool = False,
    ) -> FollowupDoc | None:
        """Record (or replace) the follow-up of an action and arm its timer.

        ``now`` is the job's time on this host's clock, ``offset`` how far that clock is ahead
        of MongoDB's (:func:`ruleengine.clocks.offset`): the follow-up is stored due by
        MongoDB's clock, its timer armed on this host's. With ``only_if_missing`` (a
        redelivered job whose action was already applied), nothing changes when this batch
        already scheduled it.
        """
        key = followup_key(origin.rule_id, origin.task_id, origin.entity_id)
        if only_if_missing:
            existing = await self.store.get(key)
            if existing is not None and existing.batch_id == origin.batch_id:
                return existing
        doc = await self._store(key, origin, then, now=now, offset=offset)
        armed = await self._arm(doc, now=now, offset=offset)
        # as _arm marked it (no read back: a timer due minutes from now has not fired yet)
        if armed:
            return doc.model_copy(update={"status": "scheduled", "reason": None})
        return doc.model_copy(update={"status": "pending", "reason": REDIS_UNAVAILABLE})

    async def schedule_late(
        self, origin: Origin, then: FollowUp, *, written_at: datetime
    ) -> FollowupDoc | None:
        """The follow-up of a write found to have landed only later (its answer was lost, then
        someone settled it): due as if scheduled when it was written — at once when that is
        past. None when a later action of the task on the entity has scheduled its own, which
        stands."""
        key = followup_key(origin.rule_id, origin.task_id, origin.entity_id)
        existing = await self.store.get(key)
        if existing is not None and (
            existing.batch_id == origin.batch_id or existing.created_at >= written_at
        ):
            return None
        return await self.schedule(origin, then, now=written_at)

    async def _store(
        self, key: str, origin: Origin, then: FollowUp, *, now: datetime, offset: timedelta
    ) -> FollowupDoc:
        fields = {
            "rule_id": origin.rule_id,
            "rule_name": origin.rule.name,
            "rule_version": origin.rule_version,
            "task_id": origin.task_id,
            "entity_id": origin.entity_id,
            "entity_name": origin.entity_name,
            "account": origin.account,
            "level": origin.rule.level,
            "batch_id": origin.batch_id,
            "do": then.do,
            "webhook": then.webhook,
            "template": then.template,
            "timezone": origin.rule.timezone,
            "field": origin.field,
            "set_value": origin.set_value,
            "previous": origin.previous,
            "due_at": due_time(then, now=now, rule=origin.rule) - offset,  # MongoDB's clock
            "status": "pending",
            "reason": "not_armed_yet",
            "updated_at": now,
            "late_s": None,
        }
        followup = await self.store.replace(key, fields, now=now)
        if followup.generation > 1:
            await self.cancel_timers([followup_job_id(key, followup.generation - 1)])
        return followup

    async def cancel_timers(self, job_ids: list[str]) -> None:
        """Drop timers from Redis — a replaced generation's, or those of follow-ups run ahead
        of them — in one round trip. Best effort: a timer that fires all the same finds a
        newer generation, or its follow-up taken, and does nothing."""
        if not job_ids:
            return
        try:
            async with self._queue.pipeline(transaction=False) as pipe:
                for job_id in job_ids:
                    pipe.zrem(c.QUEUE_NAME, job_id)
                    pipe.delete(job_key_prefix + job_id)
                await pipe.execute()
        except (RedisError, OSError):
            log.info("could not drop %d timer(s); they will find nothing to do", len(job_ids))

    async def _arm(self, doc: FollowupDoc, *, now: datetime, offset: timedelta) -> bool:
        """Enqueue the timer (at ``due_at`` on this host's clock, ``offset`` ahead of MongoDB's);
        on Redis trouble leave the follow-up pending with the reason."""
        fires_at = doc.due_at + offset
        try:
            await self._queue.enqueue_job(
                c.FOLLOWUP_JOB,
                # the batch: its timers firing at once take turns to claim (running.py)
                {"key": doc.id, "generation": doc.generation, "batch_id": doc.batch_id},
                _job_id=doc.job_id,
                _queue_name=c.QUEUE_NAME,
                _defer_until=fires_at,
                _expires=max(fires_at - now, timedelta(0)) + timedelta(days=7),
            )
        except (RedisError, OSError) as exc:
            log.warning("follow-up %s stays pending: Redis unavailable (%s)", doc.id, exc)
            await self.store.mark(doc, "pending", reason=REDIS_UNAVAILABLE, now=now)
            self._count("pending")
            return False
        await self.store.mark(doc, "scheduled", reason=None, now=now)
        self._count("scheduled")
        return True

    async def rearm(
        self, *, now: datetime, offset: timedelta = timedelta(0), check_timers: bool = False
    ) -> int:
        """Arm pending follow-ups; every :data:`REARM_SCHEDULED_EVERY_S` (or at once with
        ``check_timers``: this host's clock stepped), also scheduled ones whose timer Redis
        lost, and move timers out of line with MongoDB's clock. Returns how many timers were
        armed or moved.

        ``offset`` is how far this host's clock is ahead of MongoDB's, measured now.
        """
        armed = 0
        async for doc in self.store.pending():
            armed += await self._arm(doc, now=now, offset=offset)
        checked = time.monotonic()
        last = self._last_scheduled_check
        if check_timers or last is None or checked - last >= REARM_SCHEDULED_EVERY_S:
            self._last_scheduled_check = checked
            armed += await self._check_timers(now=now, offset=offset)
        if armed:
            log.info("re-armed %d follow-up timer(s)", armed)
            self._count("rearmed", armed)
        return armed

    async def _check_timers(self, *, now: datetime, offset: timedelta) -> int:
        """Re-arm scheduled follow-ups whose timer is gone, and move those out of line, checking
        Redis a chunk at a time.

        Thousands of scheduled follow-ups cost one round trip to Redis per chunk (a
        pipeline of ``EXISTS`` and ``ZSCORE``), not one each, and only their keys and due
        times come from MongoDB.
        """
        armed = 0
        chunk: list[ScheduledTimer] = []
        async for timer in self.store.scheduled_timers(batch_size=REARM_CHUNK):
            chunk.append(timer)
            if len(chunk) == REARM_CHUNK:
                armed += await self._check_chunk(chunk, now=now, offset=offset)
                chunk = []
        if chunk:
            armed += await self._check_chunk(chunk, now=now, offset=offset)
        return armed

    async def _check_chunk(
        self, chunk: list[ScheduledTimer], *, now: datetime, offset: timedelta
    ) -> int:
        async with self._queue.pipeline(transaction=False) as pipe:
            for timer in chunk:
                pipe.exists(job_key_prefix + timer.job_id)
                pipe.zscore(c.QUEUE_NAME, timer.job_id)
            answers = await pipe.execute()
        lost = [t for t, exists in zip(chunk, answers[0::2], strict=True) if not exists]
        moved = {
            timer.job_id: due_ms
            for timer, score in zip(chunk, answers[1::2], strict=True)
            if score is not None
            and abs(score - (due_ms := to_unix_ms(timer.due_at + offset))) > TIMER_TOLERANCE_MS
        }
        return await self._rearm_lost(lost, now=now, offset=offset) + await self._move(moved)

    async def _rearm_lost(
        self, lost: list[ScheduledTimer], *, now: datetime, offset: timedelta
    ) -> int:
        armed = 0
        for timer in lost:
            doc = await self.store.get(timer.key)
            if doc is None or (doc.status, doc.generation) != ("scheduled", timer.generation):
                continue  # it ran, or was replaced, since the chunk was read
            log.warning("timer of follow-up %s is missing from Redis; re-arming", doc.id)
            armed += await self._arm(doc, now=now, offset=offset)
        return armed

    async def _move(self, moved: dict[str, int]) -> int:
        """Put timers where they belong; ``XX``: one that fired meanwhile is not brought back."""
        if not moved:
            return 0
        changed = int(await self._queue.zadd(c.QUEUE_NAME, moved, xx=True, ch=True))
        log.warning(
            "moved %d follow-up timer(s) out of line with MongoDB's clock (did this host's clock"
            " step?) to when they are due",
            changed,
        )
        return changed


@dataclass
class LandedFollowups:
    """Schedules the ``then`` of a write found to have landed only when it was settled (its
    answer was lost): the action happened, so its follow-up is due as for any other —
    "+50 % for 2 hours, then restore" must not keep the raised budget because Meta's answer
    was lost (:class:`ruleengine.writes.settling.Settlement` calls it)."""

    scheduler: FollowupScheduler
    rules: RuleStore

    async def __call__(self, record: Document, intent: Intent) -> None:
        then = (record.get("action") or {}).get("then")
        if not then or record.get("kind") in ("followup", "approval", "undo"):
            return
        version = await self.rules.version(str(record["rule_id"]), int(record["rule_version"]))
        origin = Origin(
            batch_id=str(record["batch_id"]),
            rule_id=str(record["rule_id"]),
            rule_version=int(record["rule_version"]),
            rule=Rule.model_validate({**version.definition, "status": "ACTIVE"}),
            task_id=intent.task_id,
            account=str(record["account"]),
            entity_id=intent.entity_id,
            entity_name=str(record.get("entity_name") or ""),
            field=intent.field,
            set_value=intent.target,
            previous=intent.before,
        )
        written_at = intent.created_at or datetime.now(UTC)
        await self.scheduler.schedule_late(
            origin, FollowUp.model_validate(then), written_at=written_at
        )
