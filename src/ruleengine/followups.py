"""Follow-ups: the delayed second step of an action (``then``), with MongoDB as the source of truth.

"Pause now, re-activate in 2 hours": when an action with ``then`` fires, one
``followups`` document per (rule, task, entity) records what the action left
(the status it set, the budget it wrote, the name it wrote, and the values
before), the due time and a *generation*. Redis is only the timer: a delayed
arq job with a deterministic id per (key, generation). Scheduling again for the
same key bumps the generation and replaces the document, so an older timer that
still fires finds a newer generation and does nothing — never two follow-ups
for one key.

When Redis is unreachable, the action itself has already been done and
recorded; the follow-up is stored as ``pending`` with the reason, and the
dispatcher re-arms every pending follow-up (and any ``scheduled`` one whose
timer vanished from Redis) once Redis answers again. A follow-up whose due time
passed meanwhile runs late, once, and says how late.

This module never writes to Meta: the dispatcher imports it to re-arm timers.
Running a follow-up is :mod:`ruleengine.followup_runner` (workers only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from arq.connections import ArqRedis
from arq.constants import job_key_prefix
from pydantic import BaseModel, ConfigDict
from pymongo import ReturnDocument
from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.rules.model import FollowUp, Rule
from ruleengine.rules.schedule import next_local_time
from ruleengine.store.db import Database, Document

log = logging.getLogger(__name__)

FollowupStatus = Literal["pending", "scheduled", "running", "done", "skipped", "failed"]
FINISHED = ("done", "skipped", "failed")
REARM_SCHEDULED_EVERY_S = 30.0
REARM_CHUNK = 500  # scheduled follow-ups checked per Redis round trip


class FollowupDoc(BaseModel):
    """One follow-up, as stored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    rule_id: str
    rule_name: str
    rule_version: int
    task_id: str
    entity_id: str
    entity_name: str
    account: str
    level: str
    batch_id: str
    do: str
    webhook: str | None = None
    template: str | None = None
    timezone: str = "UTC"
    field: str | None = None  # what the original action changed
    set_value: Any = None  # … the value it left
    previous: Any = None  # … and the value before
    due_at: datetime
    generation: int
    status: FollowupStatus
    reason: str | None = None
    created_at: datetime
    updated_at: datetime
    late_s: float | None = None

    @classmethod
    def from_mongo(cls, doc: Document) -> FollowupDoc:
        """Build from a ``followups`` document."""
        return cls(id=doc["_id"], **{k: v for k, v in doc.items() if k != "_id"})

    @property
    def job_id(self) -> str:
        """The arq job id of this generation's timer."""
        return followup_job_id(self.id, self.generation)


def followup_key(rule_id: str, task_id: str, entity_id: str) -> str:
    """One follow-up per (rule, task, entity)."""
    return f"{rule_id}:{task_id}:{entity_id}"


def followup_job_id(key: str, generation: int) -> str:
    """The deterministic arq job id of a follow-up's timer."""
    return f"followup:{key}:{generation}"


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
        self._followups = db[c.FOLLOWUPS]
        self._queue = queue
        self.on_result = on_result  # counts scheduled/pending/re-armed (metrics), optional
        self._last_scheduled_check = 0.0

    def _count(self, result: str, amount: int = 1) -> None:
        if self.on_result is not None and amount:
            self.on_result(result, amount)

    async def get(self, key: str) -> FollowupDoc | None:
        """The follow-up of a key, if any."""
        doc = await self._followups.find_one({"_id": key})
        return None if doc is None else FollowupDoc.from_mongo(doc)

    async def schedule(
        self, origin: Origin, then: FollowUp, *, now: datetime, only_if_missing: bool = False
    ) -> FollowupDoc | None:
        """Record (or replace) the follow-up of an action and arm its timer.

        With ``only_if_missing`` (a redelivered job whose action was already
        applied), nothing changes when this batch already scheduled it.
        """
        key = followup_key(origin.rule_id, origin.task_id, origin.entity_id)
        if only_if_missing:
            existing = await self.get(key)
            if existing is not None and existing.batch_id == origin.batch_id:
                return existing
        doc = await self._store(key, origin, then, now=now)
        await self._arm(doc, now=now)
        return await self.get(key)

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
        doc = await self._followups.find_one_and_update(
            {"_id": key},
            {"$set": fields, "$inc": {"generation": 1}, "$setOnInsert": {"created_at": now}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        followup = FollowupDoc.from_mongo(doc)
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
            await self._mark(doc, "pending", reason="redis_unavailable", now=now)
            self._count("pending")
            return False
        await self._mark(doc, "scheduled", reason=None, now=now)
        self._count("scheduled")
        return True

    async def _mark(
        self, doc: FollowupDoc, status: str, *, reason: str | None, now: datetime
    ) -> None:
        await self._followups.update_one(
            {"_id": doc.id, "generation": doc.generation, "status": {"$nin": list(FINISHED)}},
            {"$set": {"status": status, "reason": reason, "updated_at": now}},
        )

    async def rearm(self, *, now: datetime) -> int:
        """Arm pending follow-ups and scheduled ones whose timer Redis lost; returns how many."""
        armed = 0
        async for raw in self._followups.find({"status": "pending"}):
            armed += await self._arm(FollowupDoc.from_mongo(raw), now=now)
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
        cursor = self._followups.find(
            {"status": "scheduled"}, {"generation": 1}, batch_size=REARM_CHUNK
        )
        async for raw in cursor:
            chunk.append((raw["_id"], raw["generation"]))
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
            doc = await self.get(key)
            if doc is None or (doc.status, doc.generation) != ("scheduled", generation):
                continue  # it ran, or was replaced, since the chunk was read
            log.warning("timer of follow-up %s is missing from Redis; re-arming", doc.id)
            armed += await self._arm(doc, now=now)
        return armed

    async def release_stale(self, *, older_than: datetime, now: datetime) -> int:
        """Follow-ups left ``running`` by a dead worker go back to pending (to be re-armed).

        Running them again is safe: their writes go through intents keyed by generation.
        """
        result = await self._followups.update_many(
            {"status": "running", "updated_at": {"$lt": older_than}},
            {"$set": {"status": "pending", "reason": "worker_lost", "updated_at": now}},
        )
        return result.modified_count

    async def claim(self, key: str, generation: int, *, now: datetime) -> FollowupDoc | None:
        """Take a due follow-up for running: only its own generation, only once."""
        doc = await self._followups.find_one_and_update(
            {"_id": key, "generation": generation, "status": {"$in": ["scheduled", "pending"]}},
            {"$set": {"status": "running", "updated_at": now}},
            return_document=ReturnDocument.AFTER,
        )
        return None if doc is None else FollowupDoc.from_mongo(doc)

    async def finish(
        self, doc: FollowupDoc, status: str, *, reason: str | None, now: datetime, late_s: float
    ) -> None:
        """Close a follow-up (done, skipped or failed)."""
        await self._followups.update_one(
            {"_id": doc.id, "generation": doc.generation},
            {
                "$set": {
                    "status": status,
                    "reason": reason,
                    "updated_at": now,
                    "done_at": now,
                    "late_s": late_s,
                }
            },
        )
