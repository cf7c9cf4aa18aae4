"""Deciding an approval (API, CLI): the compare-and-set decision, then its write enqueued.

Approving moves a pending, unexpired proposal to ``approved`` once (a second approve, or
one sent at the same time, finds it decided and changes nothing) and enqueues the
``apply_approval`` job with a fixed id, ``approval:<id>``: a worker writes the change
through the intent path (:mod:`ruleengine.approvals.applying`). The web app and the CLI never
write to Meta themselves. An approved change stays ``approved`` until its write closes it;
its ``retry_at`` says when the reaper's cron (:func:`requeue_approved`) enqueues the write
again: :data:`REQUEUE_AFTER` after the decision or an attempt began — Redis was down when it
was approved, or the worker died during the job (``max_tries=1``: arq drops it) — or when an
attempt that met a transient failure set it; the intent path makes a write a dead worker did
land count once. A proposal past its expiry is marked
``expired`` when someone tries to decide it (and by the reaper,
:meth:`ApprovalStore.expire_due`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.store.approvals import ApprovalStore
from ruleengine.store.db import Document

log = logging.getLogger(__name__)

#: How long an approved change may wait for its write before the reaper enqueues it again
#: (longer than a queued job normally waits; a duplicate job finds it closed and does nothing).
REQUEUE_AFTER: Final = timedelta(minutes=5)


def approval_job_id(approval: str) -> str:
    """The arq job id of an approval's write (a second enqueue is refused by arq)."""
    return f"approval:{approval}"


@dataclass(frozen=True)
class Decision:
    """What deciding did: the approval as it is now, and why nothing changed if it did not."""

    doc: Document
    changed: bool
    reason: str | None = None  # approval_expired, already_<status>


async def decide(
    store: ApprovalStore,
    queue: Any,
    approval: str,
    *,
    status: Literal["approved", "rejected"],
    by: str,
    now: datetime,
) -> Decision:
    """Approve or reject ``approval`` as ``by``; NotFoundError if it does not exist.

    ``queue`` None: Redis is known not to answer; an approved change's write is left to
    :func:`requeue_approved` (its ``retry_at``).
    """
    retry_at = now + REQUEUE_AFTER if status == "approved" else None
    doc = await store.decide(approval, status=status, by=by, now=now, retry_at=retry_at)
    if doc is None:
        expired = await store.expire(approval, now=now)
        current = expired or await store.get(approval)
        reason = (
            "approval_expired" if current["status"] == "expired" else f"already_{current['status']}"
        )
        return Decision(current, changed=False, reason=reason)
    log.info("approval %s %s by %s", approval, status, by)
    if status == "approved" and queue is not None:
        await enqueue_write(queue, approval)
    return Decision(doc, changed=True)


async def enqueue_write(queue: Any, approval: str) -> bool:
    """Enqueue the write of an approved proposal; False when Redis is unavailable or a job
    with its id is still queued (:func:`requeue_approved` tries again later)."""
    try:
        job = await queue.enqueue_job(
            c.APPROVAL_JOB,
            {"approval": approval},
            _job_id=approval_job_id(approval),
            _queue_name=c.QUEUE_NAME,
        )
    except (RedisError, OSError) as exc:
        log.warning("approval %s: its write waits for Redis (%s)", approval, exc)
        return False
    return job is not None


async def requeue_approved(
    store: ApprovalStore, queue: Any, *, now: datetime, after: timedelta = REQUEUE_AFTER
) -> int:
    """Enqueue again the writes of approved changes whose ``retry_at`` has come (or, approved
    before ``retry_at`` was kept, approved more than ``after`` ago); how many were enqueued
    (arq refuses the id while a job of it is still queued or running)."""
    queued = 0
    for approval in await store.due(now, decided_before=now - after):
        queued += await enqueue_write(queue, approval)
    if queued:
        log.info("%d approved change(s) enqueued again", queued)
    return queued
