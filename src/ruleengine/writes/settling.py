"""Settling a pending intent: its status from the live value, and what its batch says about it.

A write whose answer Meta lost (a timeout, a reset connection, a 5xx without Meta's body, a
``null`` item that could not be read back) leaves its intent ``pending`` — flagged
``record_unconfirmed`` — and the record of the batch that owns it ``failed``
(``write_unconfirmed``). Whoever settles such an intent goes through
:meth:`Settlement.settle`: a later run that meets it on its field
(:meth:`IntentSettler.blocking`, in both write paths), the batch's own next delivery, an
approval's retry or a follow-up's rerun (:meth:`IntentSettler.settle_own`), the reaper. It
moves the intent (compare-and-set on ``pending``) and then corrects the owning record —
``applied`` with before → after when the write landed, ``failed`` with the reason when it
did not — recounts the batch row from its records, gives a follow-up's document what its
write did, and only then drops the flag. A settler killed in between leaves the flag on a
settled intent: the reaper's next pass corrects the record then (:meth:`Settlement.repair`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import PyMongoError
from redis.exceptions import RedisError

from ruleengine.acting.results import UNVERIFIABLE, ActResult, JobRun, reconcile, schedule_landed
from ruleengine.errors import RuleEngineError
from ruleengine.rules.language.budget_schedules import SCHEDULES, ScheduleSpec
from ruleengine.store.db import Document
from ruleengine.store.fences import Fence
from ruleengine.store.followups import FollowupStore, followup_of_batch, followup_record_key
from ruleengine.store.intents import WRITE_UNCONFIRMED, Intent, IntentStatus, IntentStore
from ruleengine.store.records import BatchStore, ExecutionStore, record_key

log = logging.getLogger(__name__)

#: Called with the corrected record and its intent when a settled write is found to have landed.
LandedHook = Callable[[Document, Intent], Awaitable[None]]


@dataclass(frozen=True)
class Settled:
    """How a pending intent is settled: its new status and what the intent keeps."""

    status: IntentStatus
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        """Why a ``failed`` intent failed."""
        reason = self.fields.get("reason")
        return None if reason is None else str(reason)


@dataclass(frozen=True)
class SettledBy:
    """Who settled an intent, as the corrected record says: ``recovered_by`` (``reaper``,
    ``redelivery``, ``later_run``) and, for a later run, its batch (``settled_by``)."""

    kind: str
    batch_id: str | None = None


REAPER = SettledBy("reaper")
REDELIVERY = SettledBy("redelivery")
# the intent was settled before its own batch wrote the record (its worker paused past its lock)
SETTLED_FIRST = SettledBy("settled_first")


def from_live(intent: Intent, live: Any) -> Settled:
    """``done`` when ``live`` is the target, else ``failed`` (``not_applied``). Copies and
    messages cannot be read back: ``failed`` as ``unverifiable``, never sent again."""
    if intent.field in UNVERIFIABLE:
        return Settled("failed", {"reason": "unverifiable"})
    if live == intent.target:
        return Settled("done", {"changed": True, "reconciled": True})
    return Settled("failed", {"reason": "not_applied", "live": live})


def owning_record(intent: Intent) -> str:
    """The key of the execution record that tells what the intent's write did: a follow-up's
    own record (``followup|<key>|<generation>``), or its batch's ``<batch>|<task>|<entity>``."""
    followup = followup_of_batch(intent.batch_id)
    if followup is not None:
        return followup_record_key(*followup)
    return record_key(intent.batch_id, intent.task_id, intent.entity_id)


def corrected(intent: Intent, settled: Settled, by: SettledBy) -> dict[str, Any]:
    """The fields of a ``write_unconfirmed`` record once its intent is settled."""
    done = settled.status == "done"
    after = intent.target if done else intent.before
    if intent.field == "copies" and done and isinstance(intent.response, dict):
        after = intent.response.get("copied_id")  # a copy's record names the copy
    fields = {
        "outcome": "applied" if done else "failed",
        "executed": done,
        "reason": None if done else settled.reason or "not_applied",
        "before": intent.before,
        "after": after,
        "recovered_by": by.kind,
    }
    if intent.field == SCHEDULES and "response" in settled.fields:
        fields["response"] = settled.fields["response"]  # the schedule's id, for an undo
    return fields | ({"settled_by": by.batch_id} if by.batch_id else {})


class Settlement:
    """The one place an intent is settled: the intent, then the record and counts of its batch."""

    def __init__(
        self,
        intents: IntentStore,
        batches: BatchStore,
        executions: ExecutionStore,
        followups: FollowupStore,
        *,
        on_landed: LandedHook | None = None,
    ) -> None:
        self.intents = intents
        self.batches = batches
        self.executions = executions
        self.followups = followups
        self.on_landed = on_landed  # schedules a landed write's ``then`` (the worker's engine)

    def under(self, fence: Fence) -> Settlement:
        """This settlement moving intents under ``fence`` (a holder of the account's lock)."""
        return Settlement(
            self.intents.under(fence),
            self.batches,
            self.executions,
            self.followups,
            on_landed=self.on_landed,
        )

    async def settle(
        self, intent: Intent, settled: Settled, *, now: datetime, by: SettledBy
    ) -> bool:
        """Move a pending intent to ``settled`` and correct its batch's record; False when
        someone settled it first (they correct the record)."""
        resolved = await self.intents.resolve(
            intent.id, status=settled.status, now=now, **settled.fields
        )
        if resolved:
            await self.correct(intent, settled, now=now, by=by)
        return resolved

    async def correct(
        self, intent: Intent, settled: Settled, *, now: datetime, by: SettledBy
    ) -> None:
        """Make a record that still says ``write_unconfirmed`` say what the settled write did,
        recount its batch (a follow-up: its document instead), then drop the intent's flag.

        A record not written yet needs nothing: its batch's own run writes it from this
        intent, or the reaper recovers it (an ABANDONED or FAILED batch).
        """
        key = owning_record(intent)
        record = await self.executions.get(key)
        if record is not None and record.get("reason") == WRITE_UNCONFIRMED:
            await self.executions.correct(key, corrected(intent, settled, by))
            log.warning("write %s was unconfirmed; %s found it %s", key, by.kind, settled.status)
            await self.landed(record, intent, settled)
        if record is not None and record.get("kind") != "followup":
            # also when the record was corrected already: a settler killed right after
            # correcting it left the counts as they were
            counts = await self.executions.counts(record["batch_id"])
            await self.batches.recount(record["batch_id"], counts)
        followup = followup_of_batch(intent.batch_id)
        if followup is not None:
            done = settled.status == "done"
            await self.followups.settle_unconfirmed(
                *followup,
                status="done" if done else "failed",
                reason=None if done else settled.reason,
                now=now,
            )
        await self.intents.record_corrected(intent.id)

    async def settled_meanwhile(self, batch_id: str, records: list[Document]) -> list[Document]:
        """``records`` of one batch about to be written, those that say ``write_unconfirmed``
        corrected when their intent was settled before they could be written (a worker paused
        past its lock while another settled its write): a record is never written staler than
        its intent."""
        waiting = {
            (r["task_id"], r["entity_id"]): i
            for i, r in enumerate(records)
            if r.get("reason") == WRITE_UNCONFIRMED
        }
        found = await self.intents.settled_of(batch_id, waiting)
        for key, doc in found.items():
            intent = Intent.from_mongo(doc, created=False)
            settled = Settled(intent.status, {"reason": doc.get("reason")})
            index = waiting[key]
            records[index] = records[index] | corrected(intent, settled, SETTLED_FIRST)
            await self.landed(records[index], intent, settled)
        return records

    async def landed(self, record: Document, intent: Intent, settled: Settled) -> None:
        """A write found to have landed gets what its action promised after it: its ``then``
        follow-up. A failure to schedule it is logged; the correction stands."""
        if settled.status != "done" or self.on_landed is None:
            return
        try:
            await self.on_landed(record, intent)
        except (PyMongoError, RedisError, RuleEngineError):
            log.exception("could not schedule the follow-up of the landed write %s", intent.id)

    async def repair(self, *, now: datetime) -> int:
        """Correct the records of settled intents whose settler stopped before it could (the
        reaper's pass); returns how many intents it looked at."""
        docs = await self.intents.uncorrected()
        for doc in docs:
            intent = Intent.from_mongo(doc, created=False)
            settled = Settled(intent.status, {"reason": doc.get("reason")})
            await self.correct(intent, settled, now=now, by=REAPER)
        return len(docs)


class IntentSettler:
    """Settles pending intents from the live value Meta holds now: another batch's once its
    owner is gone, or the run's own (a crash, an unanswered write) before writing again."""

    def __init__(self, settlement: Settlement, *, orphan_after_s: float) -> None:
        self.settlement = settlement
        self.intents = settlement.intents
        self.orphan_after_s = orphan_after_s

    def under(self, fence: Fence) -> IntentSettler:
        """This settler moving intents under ``fence`` (a holder of the account's lock)."""
        return IntentSettler(self.settlement.under(fence), orphan_after_s=self.orphan_after_s)

    async def owner_gone(self, intent: Document, *, now: datetime) -> bool:
        """True when the job that recorded ``intent`` can no longer be writing.

        It was recorded longer ago than a job may run plus a lock's lifetime — both times
        by MongoDB's clock (``now``, the intent's ``created_at``), so a step of a host's
        clock neither hastens nor delays it — or the reaper marked its batch ABANDONED.
        """
        cutoff = now - timedelta(seconds=self.orphan_after_s)
        if intent["created_at"] < cutoff:
            return True
        return await self.settlement.batches.status(intent["batch_id"]) == "ABANDONED"

    async def settle(
        self, intent: Document, live: Any, *, now: datetime, by: SettledBy
    ) -> IntentStatus | None:
        """Settle ``intent`` from ``live`` (:func:`from_live`; a budget schedule's from the
        schedules Meta lists, :meth:`schedule_settled`); the status it got, None if someone
        settled it first — or, a schedule not found whose request may still land, if it is
        left pending."""
        pending = Intent.from_mongo(intent, created=False)
        settled = (
            await self.schedule_settled(pending, live, now=now)
            if pending.field == SCHEDULES
            else from_live(pending, live)
        )
        if settled is None:
            return None
        if await self.settlement.settle(pending, settled, now=now, by=by):
            return settled.status
        return None

    async def schedule_settled(self, intent: Intent, live: Any, *, now: datetime) -> Settled | None:
        """How a budget schedule's pending intent is settled from the schedules Meta lists:
        ``done`` when its schedule is there (one no other intent names; a deletion: gone),
        ``failed`` when it is not and no request of its owner can still land — recorded longer
        ago, by MongoDB's clock, than a job and a lock can live — and None before: a new
        schedule is never sent twice, so it waits."""
        claimed = await self.intents.schedules_of(intent.entity_id, other_than=intent.id)
        found = schedule_landed(intent, live, claimed)
        if found is not None:
            return Settled("done", {"response": {"id": found}, "changed": True, "reconciled": True})
        spec = ScheduleSpec.from_doc(intent.schedule)
        created = intent.created_at
        young = created is None or created >= now - timedelta(seconds=self.orphan_after_s)
        if spec is not None and spec.op == "create" and young:
            return None
        reason = "not_made" if spec is not None and spec.op == "create" else "not_applied"
        return Settled("failed", {"reason": reason})

    async def settle_own(self, intent: Intent, live: Any, *, now: datetime) -> ActResult | None:
        """A pending intent of this batch (a crash, an unanswered write) settled from the live
        value; None when the write did not land and may be sent (:func:`reconcile`). A new
        budget schedule not found is never sent again: left pending (``write_pending``) while
        its request may still land, then failed (``previous_attempt_failed``)."""
        verdict = reconcile(intent, live)
        log.info(
            "reconciling pending intent %s (batch %s): %s", intent.id, intent.batch_id, verdict
        )
        if intent.field == SCHEDULES and verdict != "write":
            return await self._schedule_own(intent, live, now=now)
        if verdict == "write":
            return None
        if verdict == "done":
            settled = Settled("done", {"changed": True, "reconciled": True})
            await self.settlement.settle(intent, settled, now=now, by=REDELIVERY)
            return ActResult(
                "no_change", "already_applied", intent.field, intent.before, intent.target
            )
        settled = Settled("failed", {"reason": "changed_by_someone_else"})
        await self.settlement.settle(intent, settled, now=now, by=REDELIVERY)
        return ActResult("skipped", "changed_by_someone_else", intent.field, live, live)

    async def _schedule_own(self, intent: Intent, live: Any, *, now: datetime) -> ActResult:
        """This batch's pending schedule intent, settled from Meta's schedules (or left)."""
        settled = await self.schedule_settled(intent, live, now=now)
        before, doc = intent.before, intent.schedule
        if settled is None:
            return ActResult("skipped", "write_pending", intent.field, before, before, schedule=doc)
        await self.settlement.settle(intent, settled, now=now, by=REDELIVERY)
        if settled.status == "done":
            response = settled.fields.get("response")
            return ActResult(
                "no_change",
                "already_applied",
                intent.field,
                before,
                intent.target,
                response=response,
                schedule=doc,
            )
        return ActResult(
            "skipped", "previous_attempt_failed", intent.field, before, before, schedule=doc
        )

    async def blocking(
        self, run: JobRun, field_name: str, value: Any, others: list[Document]
    ) -> ActResult | None:
        """Pending intents of other batches on this field: settle them, or do not write.

        A pending intent seen under the lock belongs to a job that no longer holds
        it. Until that job is provably gone its write may still land, so writing
        now could lose one of the two changes: skip, and let a later run decide.
        ``others`` are those intents, ``value`` the field's live value.
        """
        by = SettledBy("later_run", run.batch_id)
        outcomes: list[IntentStatus | None] = []
        for doc in others:
            message = f"batch {doc['batch_id']} has a write on {field_name} not yet settled"
            pending = ActResult(
                "skipped",
                "write_pending_elsewhere",
                field_name,
                value,
                value,
                error={"message": message},
            )
            if not await self.owner_gone(doc, now=run.store_now()):
                return pending
            status = await self.settle(doc, value, now=run.store_now(), by=by)
            if status is None and doc["field"] == SCHEDULES:
                current = await self.intents.get(doc["batch_id"], doc["task_id"], doc["entity_id"])
                if current is not None and current.status == "pending":
                    return pending  # a schedule that may still be made: never a second one
            outcomes.append(status)
        if "done" in outcomes:
            return ActResult("skipped", "previous_write_reconciled", field_name, value, value)
        return None


__all__ = [
    "REAPER",
    "REDELIVERY",
    "IntentSettler",
    "Settled",
    "SettledBy",
    "Settlement",
    "corrected",
    "from_live",
    "owning_record",
]
