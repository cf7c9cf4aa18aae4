"""The reaper: closes batches whose worker died, settles their writes, and records them.

A batch still RUNNING after the job timeout (plus a grace period) lost its
worker — killed, OOM, machine gone. Every pass of the reaper (each worker runs
it every minute; everything is compare-and-set, so several at once are fine):

1. marks such batches ABANDONED;
2. settles every pending intent whose owner is provably gone (its batch is
   ABANDONED or FAILED, or its job started longer ago than a job and a write
   lock can live) by re-reading the live value under the account's write lock:
   ``done`` when Meta holds the target, ``failed`` otherwise — through
   :class:`~ruleengine.writes.settling.Settlement`, which corrects a record that said
   ``write_unconfirmed`` and its batch's counts, as every settler does. An intent that
   cannot be settled now (Graph or Redis trouble) stays pending for the next pass;
   one of an approved change's write makes that change's next attempt due
   (:func:`~ruleengine.approvals.applying.write_settled`); a settled intent whose settler died
   before correcting its record is corrected here;
3. turns the intents of each ABANDONED batch — and of each FAILED one, whose job
   stopped on an error (MongoDB gone, say) possibly after some writes landed —
   into the execution records they lack (``recovered_by: reaper``) once all are
   settled, and writes again a record that a done intent contradicts (an earlier
   delivery of the batch recorded as failed a change a later one made and died
   before recording), so every write Meta received shows in Rule Logs as applied,
   and recounts the batch row.

It never writes to Meta, so the next scheduled run decides afresh and never
applies a change twice. One failing batch or intent never stops the others.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pymongo.errors import PyMongoError
from redis.exceptions import RedisError

from ruleengine.acting.results import UNVERIFIABLE, since_of
from ruleengine.approvals.applying import write_settled
from ruleengine.constants import STAGES
from ruleengine.errors import ErrorReport, RuleEngineError
from ruleengine.meta.errors import GraphError, InvalidRequestError
from ruleengine.meta.http import READ_ONLY
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.schedules import read_schedules
from ruleengine.rules.language.budget_schedules import SCHEDULES
from ruleengine.rules.plan.targets import live_value
from ruleengine.store.credentials import token_ref
from ruleengine.store.db import Document
from ruleengine.store.intents import Intent
from ruleengine.store.records import record_key
from ruleengine.writes.copies import answered, settle_copy, settle_unanswered_copy
from ruleengine.writes.settling import REAPER, Settled

if TYPE_CHECKING:
    from ruleengine.worker.deps import Engine

log = logging.getLogger(__name__)

GRACE_S = 60
# Meta's answers for an object that no longer exists (deleted, or never visible).
_GONE_CODES = frozenset({100, 803})


class Reaper:
    """Closes abandoned batches, settles orphaned intents and records what they did."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.settler = engine.executor.settler
        self.intents = engine.intents

    async def reap(self, *, now: datetime) -> int:
        """One pass; returns how many batches it marked ABANDONED."""
        abandoned = await self._abandon(now=now)
        await self.settle_orphans(now=now)
        await self.repair_records(now=now)
        await self.recover_records(now=now)
        await self.expire_approvals(now=now)
        return abandoned

    async def expire_approvals(self, *, now: datetime) -> int:
        """Mark approvals left undecided past their expiry ``expired`` (``approval_expired``)."""
        try:
            expired = await self.engine.approvals.expire_due(now=now)
        except PyMongoError as exc:
            log.warning("could not expire approvals this pass: %s", exc)
            return 0
        if expired:
            log.info("%d approval(s) expired undecided", expired)
        return expired

    async def _abandon(self, *, now: datetime) -> int:
        cutoff = now - timedelta(seconds=self.engine.settings.job_timeout_s + GRACE_S)
        try:
            await self.engine.followups.store.release_stale(older_than=cutoff, now=now)
        except PyMongoError as exc:
            log.warning("could not release stale follow-ups this pass: %s", exc)
        abandoned = 0
        for batch in await self.engine.batches.stale_running(older_than=cutoff):
            try:
                if await self.engine.batches.abandon(batch["_id"], started_before=cutoff, now=now):
                    abandoned += 1
                    log.warning("batch %s abandoned (worker lost)", batch["_id"])
            except PyMongoError as exc:
                log.warning("could not abandon batch %s this pass: %s", batch["_id"], exc)
        return abandoned

    # ---------------------------------------------------------------- intents

    async def settle_orphans(self, *, now: datetime) -> int:
        """Settle pending intents whose owner is gone; returns how many were settled."""
        started_before = now - timedelta(seconds=self.engine.settings.orphan_after_s)
        orphans = {d["_id"]: d for d in await self.intents.orphaned(started_before=started_before)}
        ended = [b["_id"] for b in await self.engine.batches.unrecovered()]
        orphans |= {d["_id"]: d for d in await self.intents.pending(batch_ids=ended)}
        by_account: dict[str, list[Document]] = defaultdict(list)
        for doc in orphans.values():
            by_account[str(doc.get("account"))].append(doc)
        settled = 0
        for account, docs in by_account.items():
            settled += await self._settle_account(account, docs, now=now)
        return settled

    async def _settle_account(self, account: str, docs: list[Document], *, now: datetime) -> int:
        try:
            token = await self.engine.credentials.usable_token(token_ref(account))
        except (RuleEngineError, PyMongoError) as exc:
            log.error("cannot settle %d intent(s) of %s now: %s", len(docs), account, exc)
            return 0
        reader = GraphReader.from_settings(self.engine.session.view(methods=READ_ONLY))
        settled = 0
        for doc in docs:
            try:
                status = await self.settle(doc, reader=reader, token=token, now=now)
                if status is not None:
                    settled += 1
                    await write_settled(self.engine.approvals, doc, status, now=now)
            except (GraphError, RedisError, OSError, PyMongoError, RuleEngineError) as exc:
                # left pending: the next pass tries again
                log.warning("intent %s not settled this pass: %s", doc["_id"], exc)
                await self._report(exc, doc)
        return settled

    async def settle(
        self, intent: Document, *, reader: GraphReader, token: str, now: datetime
    ) -> str | None:
        """Settle one orphaned intent from the live value, under the account's write lock.

        Returns the status it got, None when someone else settled it first.
        """
        field = intent["field"]
        if field == "copies" and answered(intent.get("response")):
            # A copy Meta answered is settled from its answer (a copy made in the background
            # is read back from its request set).
            return await settle_copy(self.intents, intent, reader=reader, token=token, now=now)
        if field == "copies":  # under the lock, from the copies Meta holds of its source
            async with self.engine.executor.locks.hold(intent["account"]) as lock:
                settler = self.settler.under(lock.fence)
                return await settle_unanswered_copy(
                    settler, intent, reader=reader, token=token, now=now, by=REAPER
                )
        if field in UNVERIFIABLE:  # a message cannot be read back: never sent again
            return await self.settler.settle(intent, None, now=now, by=REAPER)
        async with self.engine.executor.locks.hold(intent["account"]) as lock:
            settler = self.settler.under(lock.fence)
            try:
                raw = await _live(reader, intent, token=token, now=now)
            except InvalidRequestError as exc:
                if exc.code not in _GONE_CODES:
                    raise
                gone = Settled("failed", {"reason": "entity_gone", "error": exc.as_dict()})
                pending = Intent.from_mongo(intent, created=False)
                settled = await settler.settlement.settle(pending, gone, now=now, by=REAPER)
                return "failed" if settled else None
            return await settler.settle(intent, live_value(raw, field), now=now, by=REAPER)

    # ---------------------------------------------------------------- records

    async def repair_records(self, *, now: datetime) -> int:
        """Correct the records of intents settled by a settler that died before it could."""
        try:
            return await self.settler.settlement.repair(now=now)
        except PyMongoError as exc:
            log.warning("could not correct unconfirmed records this pass: %s", exc)
            return 0

    async def recover_records(self, *, now: datetime) -> int:
        """Records for the intents of ABANDONED and FAILED batches; returns how many were new."""
        written = 0
        for batch in await self.engine.batches.unrecovered():
            try:
                written += await self._recover(batch, now=now)
            except PyMongoError as exc:
                log.warning("records of batch %s not recovered this pass: %s", batch["_id"], exc)
        return written

    async def _recover(self, batch: Document, *, now: datetime) -> int:
        intents = await self.intents.for_batch(batch["_id"])
        if any(i["status"] == "pending" for i in intents):
            return 0  # not all settled yet: a later pass records them
        executions = self.engine.executions
        # a worker killed between its chunks and its records: the chunks have every pair
        written = await executions.insert_missing(
            [r | {"recovered_by": "reaper"} for r in await executions.missing_records(batch["_id"])]
        )
        written += await executions.insert_missing(
            [recovered_record(batch, intent) for intent in intents]
        )
        written += await self._contradicted(batch, intents)
        counts = await executions.counts(batch["_id"])
        await self.engine.batches.mark_recovered(batch["_id"], counts, now=now)
        if written:
            log.warning("batch %s: %d change(s) recovered into Rule Logs", batch["_id"], written)
        return written

    async def _contradicted(self, batch: Document, intents: list[Document]) -> int:
        """Records their batch's done intents contradict, written again from the intents:
        two deliveries of one batch ran (a dispatcher's second enqueue after Redis lost its
        markers), the first recorded a change as failed — it never got the lock, say — and
        the second made it and died before recording it. The intent is what Meta was sent;
        the record says so, once the batch is over."""
        done = [i for i in intents if i["status"] == "done"]
        if not done:
            return 0
        kept = await self.engine.executions.by_key(batch["_id"])
        fixes = []
        for intent in done:
            record = kept.get(record_key(batch["_id"], intent["task_id"], intent["entity_id"]))
            if record is not None and record.get("outcome") != "applied":
                fixes.append(recovered_record(batch, intent))
        await self.engine.executions.upsert_many(fixes)
        return len(fixes)

    async def _report(self, exc: BaseException, intent: Document) -> None:
        await self.engine.errors.report(
            ErrorReport.of(
                exc,
                function="reaper.settle",
                params={
                    "batch_id": intent.get("batch_id"),
                    "entity_id": intent.get("entity_id"),
                    "field": intent.get("field"),
                },
                response=exc.as_dict() if isinstance(exc, GraphError) else None,
                context={"account": intent.get("account")},
            )
        )


async def _live(
    reader: GraphReader, intent: Document, *, token: str, now: datetime
) -> dict[str, Any]:
    """The live value of an intent's field; a budget schedule's: the schedules Meta lists of
    the entity since its window's start (a schedule of the past is found again too)."""
    entity, field, account = intent["entity_id"], intent["field"], intent["account"]
    if field != SCHEDULES:
        return await reader.get_object(
            entity, token=token, fields=["id", field], account_id=account
        )
    since = since_of(now)
    start = (intent.get("schedule") or {}).get("time_start")
    if isinstance(start, int):
        since = min(since, start)
    listing = await read_schedules(reader, entity, token=token, account_id=account, since=since)
    return {"id": entity, SCHEDULES: listing}


def recovered_record(batch: Document, intent: Document) -> dict[str, Any]:
    """The execution record of a settled intent whose worker died before recording it."""
    done = intent["status"] == "done"
    after = intent.get("target") if done else intent.get("before")
    response = intent.get("response")
    if done and intent.get("field") == "copies" and isinstance(response, dict):
        after = response.get("copied_id")  # a copy's record names the copy
    return {
        "key": record_key(batch["_id"], intent["task_id"], intent["entity_id"]),
        "batch_id": batch["_id"],
        "rule_id": intent.get("rule_id") or batch.get("rule_id"),
        "rule_name": batch.get("rule_name"),
        "rule_version": intent.get("rule_version") or batch.get("rule_version"),
        "account": intent.get("account") or batch.get("account"),
        "level": batch.get("level"),
        "task_id": intent["task_id"],
        "entity_id": intent["entity_id"],
        "entity_name": intent.get("entity_name"),
        "outcome": "applied" if done else "failed",
        "executed": done,
        "reason": None if done else intent.get("reason") or "worker_lost",
        "action": {"type": intent.get("action")},
        "field": intent.get("field"),
        "before": intent.get("before"),
        "after": after,
        "requested": intent.get("requested"),
        "clamped_by": intent.get("clamped_by") or [],
        "schedule": intent.get("schedule"),
        "passed": True,  # an intent is only recorded for an entity whose task passed
        "conditions": [],
        "error": intent.get("error"),
        "response": intent.get("response"),
        "followup": None,
        "trace": dict.fromkeys(STAGES, 0.0),
        "duration_s": 0.0,
        "scheduled_at": batch.get("scheduled_at"),
        "created_at": intent.get("created_at"),
        "recovered_by": "reaper",
    }
