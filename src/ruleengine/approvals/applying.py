"""Writing an approved change: the ``apply_approval`` job, tried until it lands or expires.

An attempt reads the live value again and, when it still equals ``before``, writes ``after``
through the intent path under the approval's write batch
(:func:`~ruleengine.store.approvals.write_batch`) — exactly once however often the job runs
— or closes the approval ``changed_by_someone_else`` with the live value. A change that
lands is closed ``applied`` and gets its task's ``then`` follow-up, as a change written at
once does.

A person approved the change, so a failure on our side or in Graph's transport
(:data:`TRANSIENT`) does not close it: it stays ``approved`` with ``attempts``,
``last_error`` and ``retry_at``, and the reaper's cron enqueues it again then
(:func:`~ruleengine.approvals.deciding.requeue_approved`). Before writing, an attempt looks at what
earlier ones left, the write batch's intent (:func:`next_step`): done — it landed; pending
— a write that may still land, so nothing is sent until its owner is provably gone or the
reaper has settled it (:func:`write_settled` makes the next attempt due then); failed
without landing — the change is written afresh under the next write batch. Retries stop at
``expires_at`` (closed ``expired``, ``approval_expired``): the first attempt of a change
approved in time always runs, and a write that may have landed is never closed as expired.
Any other reason — Meta refused the write, a guard held it, the rule version or the token is
gone — closes it ``failed``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

from pymongo.errors import PyMongoError

from ruleengine.accounts.facts import AccountFacts
from ruleengine.acting.results import (
    ACT_FAILURES,
    MONEY_FIELDS,
    ActKey,
    ActResult,
    JobRun,
    Target,
    as_result,
    check_currency,
    failure_result,
    settled,
)
from ruleengine.approvals.deciding import REQUEUE_AFTER
from ruleengine.constants import STAGES
from ruleengine.errors import NotFoundError, RuleEngineError
from ruleengine.followups.scheduling import Origin
from ruleengine.meta.http import Cost
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.budget_schedules import SCHEDULES, ScheduleSpec
from ruleengine.rules.language.model import Rule
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import approved_schedule
from ruleengine.rules.plan.targets import live_value as field_value
from ruleengine.store.approvals import ApprovalStore, approval_of_batch, write_batch
from ruleengine.store.credentials import token_ref
from ruleengine.store.db import Document
from ruleengine.store.intents import Intent
from ruleengine.store.records import record_key

if TYPE_CHECKING:
    from ruleengine.worker.deps import Engine

log = logging.getLogger(__name__)

#: Why an attempt did not write an approved change that a later attempt may overcome: the
#: account's write lock or Redis, Graph failing to read the live value, a write not settled
#: yet (this change's own or another batch's on the field), or this change's write settled
#: as failed between the attempt's first look and the lock (the next attempt looks again).
TRANSIENT: Final = frozenset(
    {
        "account_lock_timeout",
        "lock_lost",
        "lock_unavailable",
        "live_read_failed",
        "write_unconfirmed",
        "write_pending",
        "write_pending_elsewhere",
        "previous_attempt_failed",
    }
)
#: Transient reasons that leave a write which may have landed: never closed as expired.
UNSETTLED: Final = frozenset({"write_unconfirmed", "write_pending"})
#: Why a write's intent failed that proves the write did not land: the lock was lost before
#: it was sent, or the live value was not its target once its owner was provably gone.
NOT_LANDED: Final = frozenset({"lock_lost", "not_applied"})
#: The longest wait between two attempts (they are 1, 2, 4 and 8 minutes apart before it).
MAX_RETRY_DELAY: Final = timedelta(minutes=10)

Step = Literal["landed", "wait", "write", "next_write", "expire", "close"]


def next_step(intent: Document | None, *, owner_gone: bool, past_expiry: bool) -> Step:
    """What an attempt does, given its write batch's intent (None: no write recorded yet).

    ``landed``: the intent is done. ``wait``: it is pending and its owner may still be
    writing (or, past the expiry, the reaper settles it first). ``write``: write (a pending
    intent of a gone owner is reconciled from the live value first). ``next_write``: the
    write did not land; write afresh under the next batch. ``expire``: retries end here.
    ``close``: the write failed for good (its intent says why).
    """
    if intent is None:
        return "expire" if past_expiry else "write"
    if intent["status"] == "done":
        return "landed"
    if intent["status"] == "pending":
        return "write" if owner_gone and not past_expiry else "wait"
    if intent.get("reason") not in NOT_LANDED:
        return "close"
    return "expire" if past_expiry else "next_write"


def retry_delay(attempts: int) -> timedelta:
    """How long after its ``attempts``-th attempt an approved change is tried again."""
    return min(timedelta(minutes=2 ** min(max(attempts - 1, 0), 4)), MAX_RETRY_DELAY)


@dataclass(frozen=True)
class Attempt:
    """What one attempt did: its result, under which write batch, and the follow-up."""

    result: ActResult
    batch: str
    followup: dict[str, Any] | None = None
    tried: bool = True  # False: nothing was tried (a wait, an expiry): no record


async def apply_approval(engine: Engine, approval: str, *, now: datetime) -> dict[str, Any]:
    """One attempt at writing an approved change (the ``apply_approval`` job); what happened."""
    store = engine.approvals
    try:
        doc = await store.get(approval)
    except NotFoundError:
        return {"approval": approval, "status": "unknown"}
    begun = None
    if doc["status"] == "approved":
        begun = await store.begin_attempt(approval, now=now, retry_at=now + REQUEUE_AFTER)
    if begun is None:  # closed by an earlier attempt (or just now)
        current = doc if doc["status"] != "approved" else await store.get(approval)
        return {"approval": approval, "status": current["status"]}
    started = time.perf_counter()
    attempt = await _attempt(engine, begun, now=now)
    if attempt.tried:
        await _keep_record(engine, begun, attempt, now, time.perf_counter() - started)
    status = await _conclude(store, begun, attempt, now=now)
    reason = attempt.result.reason
    log.info("approval %s, attempt %d: %s (%s)", approval, begun["attempts"], status, reason)
    return {"approval": approval, "status": status, "reason": reason}


async def _attempt(engine: Engine, doc: Document, *, now: datetime) -> Attempt:
    generation = int(doc.get("generation") or 1)
    batch = write_batch(doc["_id"], generation)
    intent = await _intent(engine, batch, doc)
    cutoff = now - timedelta(seconds=engine.settings.orphan_after_s)
    owner_gone = intent is not None and intent["created_at"] < cutoff
    past_expiry = doc["attempts"] > 1 and now >= doc["expires_at"]
    step = next_step(intent, owner_gone=owner_gone, past_expiry=past_expiry)
    if step == "next_write":
        if await engine.approvals.next_write(doc["_id"], generation=generation) is None:
            step = "wait"  # another attempt moved on first
        else:
            batch, step = write_batch(doc["_id"], generation + 1), "write"
    if step in ("wait", "expire", "close"):
        return Attempt(_untried(doc, step, intent), batch, tried=False)
    if intent is not None and step == "landed":
        result = settled(Intent.from_mongo(intent, created=False))
    else:
        try:
            result = await _write(engine, doc, batch, now=now)
        except RuleEngineError as exc:  # the rule version or the token cannot be found
            return Attempt(ActResult("failed", "cannot_run", error={"message": str(exc)}), batch)
    followup = await _follow_up(engine, doc, batch, result, now=now) if result.fired else None
    return Attempt(result, batch, followup)


async def _intent(engine: Engine, batch: str, doc: Document) -> Document | None:
    """The intent of the change's write under ``batch``, if one was recorded."""
    for intent in await engine.intents.for_batch(batch):
        if (intent["task_id"], intent["entity_id"]) == (doc["task_id"], doc["entity_id"]):
            return intent
    return None


def _untried(doc: Document, step: Step, intent: Document | None) -> ActResult:
    """The result of an attempt that sent nothing (see :func:`next_step`)."""
    field, before = doc["field"], doc["before"]
    if step == "expire":
        return ActResult("skipped", "approval_expired", field, before, before)
    if step == "wait" or intent is None:
        message = "the change's write is not settled yet; it is not sent again before"
        return ActResult(
            "failed", "write_pending", field, before, before, error={"message": message}
        )
    reason = str(intent.get("reason") or "previous_attempt_failed")
    live = intent.get("live")
    return ActResult("failed", reason, field, live, live, error=intent.get("error"))


async def _conclude(store: ApprovalStore, doc: Document, attempt: Attempt, *, now: datetime) -> str:
    """Close the approval with what the attempt found, or keep it approved for a retry."""
    approval, result = doc["_id"], attempt.result
    if result.fired:
        await store.close(
            approval, status="applied", now=now, result=result.reason, batch=attempt.batch
        )
        return "applied"
    if result.reason == "changed_by_someone_else":
        await store.close(
            approval,
            status="changed_by_someone_else",
            now=now,
            result=result.reason,
            live=result.before,
            batch=attempt.batch,
        )
        return "changed_by_someone_else"
    error = {"reason": result.reason, "error": result.error, "at": now, "batch": attempt.batch}
    expired = now >= doc["expires_at"] and result.reason not in UNSETTLED
    if result.reason == "approval_expired" or (result.reason in TRANSIENT and expired):
        await store.close(
            approval, status="expired", now=now, reason="approval_expired", expired_at=now
        )
        return "expired"
    if result.reason in TRANSIENT:
        retry_at = now + retry_delay(doc["attempts"])
        if result.reason not in UNSETTLED:  # the last retry comes at the expiry
            retry_at = min(retry_at, doc["expires_at"])
        await store.retry_later(approval, retry_at=retry_at, error=error)
        return "approved"
    await store.close(
        approval,
        status="failed",
        now=now,
        result=result.reason,
        error=result.error,
        batch=attempt.batch,
    )
    return "failed"


async def write_settled(
    store: ApprovalStore, intent: Document, status: str, *, now: datetime
) -> bool:
    """Someone (the reaper) settled the intent of an approved change's write as ``status``:
    make the change's next attempt due now, which closes it ``applied`` (with its follow-up)
    when the write landed, and otherwise writes it afresh or closes it as expired. False when
    the intent is no approved change's write (or the change is closed)."""
    approval = approval_of_batch(str(intent.get("batch_id", "")))
    if approval is None:
        return False
    settlement = {"batch": intent["batch_id"], "status": status, "at": now}
    return await store.retry_now(approval, now=now, settled=settlement)


async def _rule(engine: Engine, doc: Document) -> Rule:
    version = await engine.rules.version(doc["rule_id"], doc["rule_version"])
    return Rule.model_validate({**version.definition, "status": "ACTIVE"})


async def _write(engine: Engine, doc: Document, batch: str, *, now: datetime) -> ActResult:
    rule = await _rule(engine, doc)
    token = await engine.credentials.usable_token(token_ref(doc["account"]))
    account = await engine.credentials.get(doc["account"])
    reader, batch_reader, writer = engine.graph(Cost())
    db_now = await engine.intents.db_time()
    facts = AccountFacts(reader, account=account, token=token, now=db_now)
    run = JobRun(
        batch_id=batch,
        rule_id=doc["rule_id"],
        rule_version=doc["rule_version"],
        rule=rule,
        account=doc["account"],
        token=token,
        now=now,
        reader=reader,
        facts=facts,
        db_now=db_now,
        batch=batch_reader,
    )
    entity = Entity(id=doc["entity_id"], name=doc["entity_name"])
    # the task's own key: the written change starts its cooldown and counts towards its limit
    tasks = {t.id: t for t in rule.tasks}
    task = tasks.get(doc["task_id"])
    key = ActKey.of(task) if task is not None else ActKey(doc["task_id"], doc["action"])
    try:
        if doc["field"] in (*MONEY_FIELDS, SCHEDULES):  # planned in the registered currency
            await check_currency(run)
        return await engine.executor.apply(run, writer, entity, key, _target(doc, now=now))
    except ACT_FAILURES as exc:
        return failure_result(exc)


def _target(doc: Document, *, now: datetime) -> Target:
    """``after``, planned only while the live value is still ``before`` (a budget schedule's:
    the live daily budget; :func:`~ruleengine.rules.plan.targets.approved_schedule`)."""
    field, before, after = doc["field"], doc["before"], doc["after"]
    if field == SCHEDULES:
        spec = ScheduleSpec.from_doc(doc.get("schedule"))
        if spec is None:
            raise RuleEngineError(f"approval {doc['_id']} holds no budget schedule")

        def planned(live: dict[str, Any]) -> Plan | ActResult:
            return as_result(approved_schedule(spec, live, before=before, after=after, now=now))

        return Target(field, ["daily_budget", "lifetime_budget", SCHEDULES], planned)
    reads = ["daily_budget", "lifetime_budget"] if field == "daily_budget" else [field]

    def plan(live: dict[str, Any]) -> Plan | ActResult:
        current = field_value(live, field)
        if current != before:
            return ActResult("skipped", "changed_by_someone_else", field, current, current)
        return Plan(field, before, after)

    return Target(field, reads, plan)


async def _follow_up(
    engine: Engine, doc: Document, batch: str, result: ActResult, *, now: datetime
) -> dict[str, Any] | None:
    """Schedule the task's ``then`` for the change that landed, as a run that writes it at
    once does; a later attempt that finds it landed only fills in a missing one."""
    try:
        rule = await _rule(engine, doc)
        task = next((t for t in rule.tasks if t.id == doc["task_id"]), None)
        then = task.action.then if task is not None else None
        if then is None:
            return None
        origin = Origin(
            batch_id=batch,
            rule_id=doc["rule_id"],
            rule_version=doc["rule_version"],
            rule=rule,
            task_id=doc["task_id"],
            account=doc["account"],
            entity_id=doc["entity_id"],
            entity_name=doc["entity_name"],
            field=result.field,
            set_value=result.after,
            previous=result.before,
        )
        scheduled = await engine.followups.schedule(origin, then, now=now, only_if_missing=True)
    except (RuleEngineError, PyMongoError) as exc:  # the change is written; say what was lost
        log.exception("could not store the follow-up of approval %s", doc["_id"])
        return {"error": str(exc)}
    if scheduled is None:
        return None
    return {
        "key": scheduled.id,
        "do": scheduled.do,
        "due_at": scheduled.due_at,
        "status": scheduled.status,
        "reason": scheduled.reason,
    }


async def _keep_record(
    engine: Engine, doc: Document, attempt: Attempt, now: datetime, act_s: float
) -> None:
    """The execution record of the write batch: what this attempt did, unless an earlier
    attempt's applied change is recorded already (that stays the record)."""
    record = _record(doc, attempt, now, act_s)
    earlier = await engine.executions.get(record["key"])
    if earlier is not None and earlier.get("outcome") == "applied":
        return
    await engine.executions.upsert_many([record])


def _record(doc: Document, attempt: Attempt, now: datetime, act_s: float) -> dict[str, Any]:
    result, batch = attempt.result, attempt.batch
    landed_before = result.reason == "already_applied"  # an earlier attempt's write landed
    record = {
        "key": record_key(batch, doc["task_id"], doc["entity_id"]),
        "batch_id": batch,
        "kind": "approval",
        "approval_id": doc["_id"],
        "attempt": doc["attempts"],
        "proposed_by_batch": doc.get("batch_id"),
        "decided_by": doc.get("decided_by"),
        "rule_id": doc["rule_id"],
        "rule_name": doc.get("rule_name"),
        "rule_version": doc["rule_version"],
        "account": doc["account"],
        "level": doc.get("level"),
        "task_id": doc["task_id"],
        "entity_id": doc["entity_id"],
        "entity_name": doc.get("entity_name"),
        "outcome": "applied" if landed_before else result.outcome,
        "executed": result.outcome == "applied" or landed_before,
        "reason": result.reason,
        "action": {"type": doc.get("action")},
        "field": result.field,
        "before": result.before,
        "after": result.after,
        "clamped_by": result.clamped_by,
        "schedule": result.schedule,
        "error": result.error,
        "response": result.response,
        "conditions": [],
        "followup": attempt.followup,
        "trace": dict.fromkeys(STAGES, 0.0) | {"act": round(act_s, 6)},
        "duration_s": round(act_s, 6),
        "created_at": now,
    }
    if landed_before:
        record["recovered_by"] = "redelivery"
    return record
