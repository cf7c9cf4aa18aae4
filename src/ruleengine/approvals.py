"""Approvals in the worker: proposing a planned change, and writing an approved one.

A task with ``approval`` plans its change as usual (live value, clamps); when the change
needs approval (:func:`~ruleengine.rules.model.needs_approval`) the write path returns
``awaiting_approval`` instead of writing, and :func:`propose` stores the proposal (one open
per entity × task, :mod:`ruleengine.store.approvals`) and announces it with a link to the
Approvals screen. :func:`open_results` answers for pairs that already wait.

:func:`apply_approval` is the ``apply_approval`` job: it reads the live value again and,
when it still equals ``before``, writes ``after`` through the intent path under the batch
``approval:<id>`` — exactly once however often the job runs — or closes the approval as
``changed_by_someone_else`` with the live value. Each run leaves an execution record of
that batch.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ruleengine.acts import ACT_FAILURES, ActKey, ActResult, JobRun, Target, failure_result
from ruleengine.acts import live_value as field_value
from ruleengine.budget_limits import AccountFacts
from ruleengine.constants import STAGES
from ruleengine.errors import NotFoundError, RuleEngineError
from ruleengine.meta.http import Cost
from ruleengine.notify import Notifier, NotifyError
from ruleengine.rules.entity import Entity, currency_offset
from ruleengine.rules.model import Rule, Task, approval_webhook
from ruleengine.rules.plan import Plan
from ruleengine.store.approvals import ApprovalStore, approval_id
from ruleengine.store.credentials import token_ref
from ruleengine.store.db import Document

if TYPE_CHECKING:
    from ruleengine.engine import Engine

log = logging.getLogger(__name__)


def approval_batch(approval: str) -> str:
    """The batch an approved change is written under."""
    return f"approval:{approval}"


def waiting(doc: Document) -> ActResult:
    """The result of a pair whose proposal (made by this batch) waits for a decision."""
    return ActResult(
        "awaiting_approval", "approval_required", doc["field"], doc["before"], doc["after"]
    )


def open_results(
    batch_id: str, found: dict[tuple[str, str], Document]
) -> dict[tuple[str, str], ActResult]:
    """Results for pairs with an open proposal: this batch's own (a redelivery) still awaits
    approval; another batch's makes this one skip with ``approval_pending``."""
    return {key: open_result(batch_id, doc) for key, doc in found.items()}


def open_result(batch_id: str, doc: Document) -> ActResult:
    """The result of a pair with the open proposal ``doc`` (see :func:`open_results`)."""
    if doc.get("batch_id") == batch_id and doc["status"] == "pending":
        return waiting(doc)
    message = f"approval {doc['_id']} ({doc['status']}) is open for this entity and task"
    return ActResult(
        "skipped",
        "approval_pending",
        doc["field"],
        doc["before"],
        doc["before"],
        error={"message": message, "approval": doc["_id"]},
    )


def proposal_doc(run: JobRun, entity: Entity, task: Task, result: ActResult) -> Document:
    """The approval document of a change that waits."""
    assert task.approval is not None
    return {
        "_id": approval_id(run.batch_id, task.id, entity.id),
        "batch_id": run.batch_id,
        "rule_id": run.rule_id,
        "rule_name": run.rule.name,
        "rule_version": run.rule_version,
        "task_id": task.id,
        "action": task.action.type,
        "account": run.account,
        "level": run.rule.level,
        "entity_id": entity.id,
        "entity_name": entity.name,
        "field": result.field,
        "before": result.before,
        "after": result.after,
        "clamped_by": result.clamped_by,
        "created_at": run.now,
        "expires_at": run.now + timedelta(minutes=task.approval.expires_after_minutes),
        "decided_by": None,
        "decided_at": None,
    }


async def propose(
    store: ApprovalStore,
    notifier: Notifier,
    run: JobRun,
    entity: Entity,
    task: Task,
    result: ActResult,
    *,
    base_url: str,
) -> Document:
    """Store the proposal of a waiting change and announce it (once, see :func:`announce`)."""
    proposal = await store.propose(proposal_doc(run, entity, task, result))
    await announce(store, notifier, run, task, proposal.doc, base_url=base_url)
    return proposal.doc


async def announce(
    store: ApprovalStore,
    notifier: Notifier,
    run: JobRun,
    task: Task,
    doc: Document,
    *,
    base_url: str,
) -> None:
    """Post a pending proposal's announcement to its webhook unless it was posted: by the
    delivery that made it or — when that one died before posting — by the next run that
    finds the proposal open. One claim per proposal keeps two runs from both posting."""
    webhook = approval_webhook(run.rule, task)
    if webhook is None or doc.get("notified") or doc["status"] != "pending":
        return
    if not await store.claim_announcement(doc["_id"], now=run.now):
        return
    text = message(doc, base_url=base_url)
    try:
        await notifier.send(webhook, text, context={"approval": doc["_id"]})
    except NotifyError as exc:
        await store.note(doc["_id"], notified={"webhook": webhook, "error": str(exc)})
    else:
        await store.note(doc["_id"], notified={"webhook": webhook, "at": run.now})


def message(doc: Document, *, base_url: str) -> str:
    """The announcement of a proposal: what would change, until when, and where to decide."""
    return (
        f"{doc['rule_name']}: {doc['entity_name']} ({doc['entity_id']}) {doc['field']}"
        f" {doc['before']} → {doc['after']} waits for approval until"
        f" {doc['expires_at']:%Y-%m-%d %H:%M} UTC: {base_url.rstrip('/')}/approvals/{doc['_id']}"
    )


# ---------------------------------------------------------------- the apply_approval job


async def apply_approval(engine: Engine, approval: str, *, now: datetime) -> dict[str, Any]:
    """Write an approved change once (the ``apply_approval`` job); what happened."""
    store = engine.approvals
    try:
        doc = await store.get(approval)
    except NotFoundError:
        return {"approval": approval, "status": "unknown"}
    if doc["status"] != "approved":  # written (or closed) by an earlier run
        return {"approval": approval, "status": doc["status"]}
    started = time.perf_counter()
    try:
        result = await _write(engine, doc, now=now)
    except RuleEngineError as exc:  # the rule version or the token cannot be found
        result = ActResult("failed", "cannot_run", error={"message": str(exc)})
    status, fields = _closing(result)
    fields["batch"] = approval_batch(approval)
    await engine.executions.upsert_many([_record(doc, result, now, time.perf_counter() - started)])
    await store.close(approval, status=status, now=now, result=result.reason, **fields)
    log.info("approval %s: %s", approval, status)
    return {"approval": approval, "status": status}


def _closing(result: ActResult) -> tuple[Any, dict[str, Any]]:
    if result.fired:
        return "applied", {}
    if result.reason == "changed_by_someone_else":
        return "changed_by_someone_else", {"live": result.before}
    return "failed", {"error": result.error}


async def _write(engine: Engine, doc: Document, *, now: datetime) -> ActResult:
    version = await engine.rules.version(doc["rule_id"], doc["rule_version"])
    rule = Rule.model_validate({**version.definition, "status": "ACTIVE"})
    token = await engine.credentials.usable_token(token_ref(doc["account"]))
    account = await engine.credentials.get(doc["account"])
    reader, _batch, writer = engine.graph(Cost())
    facts = AccountFacts(
        reader,
        account=doc["account"],
        token=token,
        now=now,
        currency_offset=currency_offset(account.currency),
    )
    run = JobRun(
        batch_id=approval_batch(doc["_id"]),
        rule_id=doc["rule_id"],
        rule_version=doc["rule_version"],
        rule=rule,
        account=doc["account"],
        token=token,
        now=now,
        reader=reader,
        facts=facts,
        db_now=await engine.intents.db_time(),
    )
    entity = Entity(id=doc["entity_id"], name=doc["entity_name"])
    # the task's own key: the written change starts its cooldown and counts towards its limit
    tasks = {t.id: t for t in rule.tasks}
    task = tasks.get(doc["task_id"])
    key = ActKey.of(task) if task is not None else ActKey(doc["task_id"], doc["action"])
    try:
        return await engine.executor.apply(run, writer, entity, key, _target(doc))
    except ACT_FAILURES as exc:
        return failure_result(exc)


def _target(doc: Document) -> Target:
    """``after``, planned only while the live value is still ``before``."""
    field, before, after = doc["field"], doc["before"], doc["after"]
    reads = ["daily_budget", "lifetime_budget"] if field == "daily_budget" else [field]

    def plan(live: dict[str, Any]) -> Plan | ActResult:
        current = field_value(live, field)
        if current != before:
            return ActResult("skipped", "changed_by_someone_else", field, current, current)
        return Plan(field, before, after)

    return Target(field, reads, plan)


def _record(doc: Document, result: ActResult, now: datetime, act_s: float) -> dict[str, Any]:
    batch = approval_batch(doc["_id"])
    return {
        "key": f"{batch}|{doc['task_id']}|{doc['entity_id']}",
        "batch_id": batch,
        "kind": "approval",
        "approval_id": doc["_id"],
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
        "outcome": result.outcome,
        "executed": result.outcome == "applied",
        "reason": result.reason,
        "action": {"type": doc.get("action")},
        "field": result.field,
        "before": result.before,
        "after": result.after,
        "clamped_by": result.clamped_by,
        "error": result.error,
        "response": result.response,
        "conditions": [],
        "trace": dict.fromkeys(STAGES, 0.0) | {"act": round(act_s, 6)},
        "duration_s": round(act_s, 6),
        "created_at": now,
    }
