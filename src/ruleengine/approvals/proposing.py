"""Approvals in the worker: proposing a planned change that waits for a person.

A task with ``approval`` plans its change as usual (live value, clamps); when the change
needs approval (:func:`~ruleengine.rules.language.model.needs_approval`) the write path returns
``awaiting_approval`` instead of writing, and :func:`propose` stores the proposal (one open
per entity × task, :mod:`ruleengine.store.approvals`) and announces it with a link to the
Approvals screen. :func:`open_results` answers for pairs that already wait.

An approved change is written by the ``apply_approval`` job (:mod:`ruleengine.approvals.applying`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from ruleengine.acting.results import ActResult, JobRun
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.model import Task, approval_webhook
from ruleengine.rules.language.money import field_words, format_field_change
from ruleengine.rules.language.template import message_text
from ruleengine.store.approvals import ApprovalStore, approval_id
from ruleengine.store.db import Document
from ruleengine.writes.notify import Notifier, NotifyError

log = logging.getLogger(__name__)


def waiting(doc: Document) -> ActResult:
    """The result of a pair whose proposal (made by this batch) waits for a decision."""
    return ActResult(
        "awaiting_approval",
        "approval_required",
        doc["field"],
        doc["before"],
        doc["after"],
        schedule=doc.get("schedule"),
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
        "schedule": result.schedule,  # a budget schedule's window and value (None: none)
        # by MongoDB's clock, as the reaper's expiry and the deciders' check read them
        "created_at": run.store_now(),
        "expires_at": run.store_now() + timedelta(minutes=task.approval.expires_after_minutes),
        "generation": 1,  # the first write goes under approval:<id> (see write_batch)
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
    if not await store.claim_announcement(doc["_id"], now=run.store_now()):
        return
    account = run.facts.registered if run.facts else None
    text = message(
        doc,
        base_url=base_url,
        account_name=account.name if account else None,
        currency=account.currency if account else None,
    )
    try:
        await notifier.send(webhook, text, context={"approval": doc["_id"]})
    except NotifyError as exc:
        await store.note(doc["_id"], notified={"webhook": webhook, "error": str(exc)})
    else:
        await store.note(doc["_id"], notified={"webhook": webhook, "at": run.store_now()})


def message(
    doc: Document,
    *,
    base_url: str,
    account_name: str | None = None,
    currency: str | None = None,
) -> str:
    """The announcement of a proposal: what would change — money in the account's currency,
    with the change in percent —, on which account, until when, and where to decide. Every
    name is message text (:func:`~ruleengine.rules.language.template.message_text`)."""
    text = {k: message_text(doc.get(k)) for k in ("rule_name", "entity_name", "entity_id")}
    field = doc.get("field")
    change = format_field_change(
        field, doc.get("before"), doc.get("after"), currency, doc.get("schedule")
    )
    account = str(doc.get("account") or "")
    where = f"{account_name} ({account})" if account_name and account_name != account else account
    on = f" on {message_text(where)}" if where else ""
    return (
        f"{text['rule_name']}: {text['entity_name']} ({text['entity_id']}){on}:"
        f" {message_text(field_words(field))} {message_text(change)} waits for approval until"
        f" {doc['expires_at']:%Y-%m-%d %H:%M} UTC: {base_url.rstrip('/')}/approvals/{doc['_id']}"
    )
