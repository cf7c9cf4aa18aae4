"""Scheduling follow-ups: store each in MongoDB, arm its timer in Redis, re-arm lost ones.

When Redis is unreachable, the action itself has already been done and
recorded; the follow-up is stored as ``pending`` with the reason, and the
dispatcher re-arms every pending follow-up (and any ``scheduled`` one whose
timer vanished from Redis) once Redis answers again. A follow-up whose due time
passed meanwhile runs late, once, and says how late.

This module never writes to Meta: the dispatcher imports it to re-arm timers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from arq.constants import job_key_prefix
from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.rules.action_types import FollowUp
from ruleengine.rules.model import Rule
from ruleengine.rules.schedule import next_local_time
from ruleengine.store.db import Database
from ruleengine.store.followups import FollowupDoc, FollowupStore, followup_job_id, followup_key

log = logging.getLogger(__name__)

REARM_SCHEDULED_EVERY_S = 30.0
REARM_CHUNK = 500  # scheduled follow-ups checked per Redis round trip


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
        self._last_scheduled_check = 0.0

    def _count(self, result: str, amount: int = 1) -> None:
        if self.on_result is not None and amount:
            self.on_result(result, amount)

    async def schedule(
        self, origin: Origin, then: FollowUp, *, now: datetime, only_if_missing: bool = False
    ) -> FollowupDoc | None:
        """Record (or replace) the follow-up of an action and arm its timer.

        With ``only_if_missing`` (a redelivered job whose action was already
        applied), nothing changes when this batch already scheduled it.
        """
        key = followup_key(origin.rule_id, origin.task_id, origin.entity_id)
        if only_if_missing:
            existing = await self.store.get(key)
            if existing is not None and existing.batch_id == origin.batch_id:
                return existing
        doc = await self._store(key, origin, then, now=now)
        await self._arm(doc, now=now)
        return await self.store.get(key)

    async def _store(
        self, key: str, origin: Origin, then: FollowUp, *, now: datetime
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
            "due_at": due_time(then, now=now, rule=origin.rule),
            "status": "pending",
            "reason": "not_armed_yet",
            "updated_at": now,
            "late_s": None,
        }
        followup = await self.store.replace(key, fields, now=now)
        if followup.generation > 1:
            await self._cancel(followup_job_id(key, followup.generation - 1))
        return followup

    async def _cancel(self, job_id: str) -> None:
        """Drop a replaced timer from Redis (best effort: the generation check stops it anyway)."""
        try:
            await self._queue.zrem(c.QUEUE_NAME, job_id)
            await self._queue.delete(job_key_prefix + job_id)
        except (RedisError, OSError):
            log.info("could not cancel replaced timer %s; it will find a newer generation", job_id)

    async def _arm(self, doc: FollowupDoc, *, now: datetime) -> bool:
        """Enqueue the timer; on Redis trouble leave the follow-up pending with the reason."""
        try:
            await self._queue.enqueue_job(
                c.FOLLOWUP_JOB,
                {"key": doc.id, "generation": doc.generation},
                _job_id=doc.job_id,
                _queue_name=c.QUEUE_NAME,
                _defer_until=doc.due_at,
                _expires=max(doc.due_at - now, timedelta(0)) + timedelta(days=7),
            )
        except (RedisError, OSError) as exc:
            log.warning("follow-up %s stays pending: Redis unavailable (%s)", doc.id, exc)
            await self.store.mark(doc, "pending", reason="redis_unavailable", now=now)
            self._count("pending")
            return False
        await self.store.mark(doc, "scheduled", reason=None, now=now)
        self._count("scheduled")
        return True

    async def rearm(self, *, now: datetime) -> int:
        """Arm pending follow-ups and scheduled ones whose timer Redis lost; returns how many."""
        armed = 0
        async for doc in self.store.pending():
            armed += await self._arm(doc, now=now)
        if now.timestamp() - self._last_scheduled_check >= REARM_SCHEDULED_EVERY_S:
            self._last_scheduled_check = now.timestamp()
            armed += await self._rearm_lost(now=now)
        if armed:
            log.info("re-armed %d follow-up timer(s)", armed)
            self._count("rearmed", armed)
        return armed

    async def _rearm_lost(self, *, now: datetime) -> int:
        """Re-arm scheduled follow-ups whose timer is gone, checking Redis a chunk at a time.

        Thousands of scheduled follow-ups cost one round trip to Redis per chunk (a
        pipeline of ``EXISTS``), not one each, and only their keys come from MongoDB.
        """
        armed = 0
        chunk: list[tuple[str, int]] = []
        async for key, generation in self.store.scheduled_keys(batch_size=REARM_CHUNK):
            chunk.append((key, generation))
            if len(chunk) == REARM_CHUNK:
                armed += await self._rearm_chunk(chunk, now=now)
                chunk = []
        if chunk:
            armed += await self._rearm_chunk(chunk, now=now)
        return armed

    async def _rearm_chunk(self, chunk: list[tuple[str, int]], *, now: datetime) -> int:
        async with self._queue.pipeline(transaction=False) as pipe:
            for key, generation in chunk:
                pipe.exists(job_key_prefix + followup_job_id(key, generation))
            present = await pipe.execute()
        armed = 0
        for (key, generation), exists in zip(chunk, present, strict=True):
            if exists:
                continue
            doc = await self.store.get(key)
            if doc is None or (doc.status, doc.generation) != ("scheduled", generation):
                continue  # it ran, or was replaced, since the chunk was read
            log.warning("timer of follow-up %s is missing from Redis; re-arming", doc.id)
            armed += await self._arm(doc, now=now)
        return armed
