"""The ``duplicate`` action: ``POST /{id}/copies``, at most once per (batch, task, entity).

A copy cannot be read back to tell whether an earlier, unconfirmed attempt made
one, so its intent is recorded first (:func:`~ruleengine.acts.record_once`) and a
pending one found later is given up rather than risk a second copy. The copy is
started under the account's write lock, like every write.

Meta makes a copy of at most 3 objects at once; a bigger one (a deep copy of a
campaign with its ad sets and ads) it refuses without copying anything (100/1885194).
That copy is then started as an asynchronous batch — the same single copy request,
never a second one — whose request-set id is noted on the intent at once; the
worker polls it outside the lock for up to ``RULEENGINE_COPY_WAIT_S``. The record's
``after`` is the copy's id and its ``response`` lists every object the copy made.
A background copy not finished by then is recorded as applied with reason
``copy_in_progress``; its intent stays pending and the reaper settles it from the
request set (:func:`settle_async_copy`) — it is never sent again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ruleengine.acts import ActKey, ActResult, JobRun, record_once
from ruleengine.locks import AccountLocks, LockLost
from ruleengine.meta.copies import CopyResult, read_async_copy, too_large, wait_for_async_copy
from ruleengine.meta.errors import GraphError
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.writer import GraphWriter, WriteContext
from ruleengine.rules.action_types import DuplicateAction
from ruleengine.rules.entity import Entity
from ruleengine.rules.model import Task
from ruleengine.store.intents import Intent, IntentStore


async def duplicate(
    run: JobRun,
    writer: GraphWriter,
    entity: Entity,
    task: Task,
    action: DuplicateAction,
    *,
    intents: IntentStore,
    locks: AccountLocks,
    wait_s: float = 60.0,
) -> ActResult:
    """Copy ``entity`` as ``action`` says; the record's ``after`` is the copy's id."""
    earlier = await intents.get(run.batch_id, task.id, entity.id)
    if earlier is not None and earlier.status == "pending" and _request_set(earlier.response):
        return await _resume(run, entity, earlier, intents)  # read back, never sent again
    async with locks.hold(run.account) as lock:
        intent = await record_once(
            intents, run, entity, ActKey.of(task), field="copies", before=entity.name, target=None
        )
        if isinstance(intent, ActResult):
            return intent
        try:
            await lock.check()
        except LockLost as exc:  # nothing was sent
            await intents.resolve(intent.id, status="failed", now=run.now, reason="lock_lost")
            return ActResult("failed", "lock_lost", "copies", error={"message": str(exc)})
        started = await _start(run, writer, entity, action, intent, intents)
    if not isinstance(started, str):
        return started
    unread: dict[str, Any] | None = None
    try:  # the background copy is waited for outside the lock: the write is done
        copy = await wait_for_async_copy(
            run.reader, started, token=run.token, account_id=run.account, wait_s=wait_s
        )
    except GraphError as exc:  # the set could not be read: Meta may still be copying
        copy, unread = None, exc.as_dict()
    if isinstance(copy, GraphError):
        await intents.resolve(intent.id, status="failed", now=run.now, error=copy.as_dict())
        return _failed(entity, copy)
    if copy is None:
        response = {"mode": "async", "request_set_id": started}
        return ActResult(
            "applied",
            "copy_in_progress",
            "copies",
            entity.id,
            None,
            error=unread,
            response=response,
        )
    return await _done(run, entity, intent, intents, copy)


async def _start(
    run: JobRun,
    writer: GraphWriter,
    entity: Entity,
    action: DuplicateAction,
    intent: Intent,
    intents: IntentStore,
) -> ActResult | str:
    """Copy at once, or start the copy as an asynchronous batch: the result, or the set's id."""
    options: dict[str, Any] = {
        "status_option": action.status_option,
        "rename_suffix": action.rename_suffix,
        "deep_copy": action.deep_copy,
        "token": run.token,
        "ctx": WriteContext(run.account, entity.id, run.rule_id, run.batch_id),
    }
    try:
        return await _done(run, entity, intent, intents, await writer.copy(**options))
    except GraphError as exc:
        if not too_large(exc):
            await intents.resolve(intent.id, status="failed", now=run.now, error=exc.as_dict())
            return _failed(entity, exc)
    try:  # Meta copied nothing: the same copy goes through an asynchronous batch
        set_id = await writer.copy_async(**options)
    except GraphError as exc:
        await intents.resolve(intent.id, status="failed", now=run.now, error=exc.as_dict())
        return _failed(entity, exc)
    await intents.note(intent.id, response={"mode": "async", "request_set_id": set_id})
    return set_id


def _request_set(response: Any) -> str | None:
    """The asynchronous batch a pending copy intent started, if it started one."""
    found = response.get("request_set_id") if isinstance(response, dict) else None
    return str(found) if found else None


async def _resume(run: JobRun, entity: Entity, intent: Intent, intents: IntentStore) -> ActResult:
    """A redelivered job finds its copy started in the background: read it, send nothing."""
    doc = {"_id": intent.id, "account": run.account, "response": intent.response}
    await settle_async_copy(intents, doc, reader=run.reader, token=run.token, now=run.now)
    now = await intents.get(run.batch_id, intent.task_id, entity.id) or intent
    response = now.response
    if now.status == "done" and isinstance(response, dict):
        copied = response.get("copied_id")
        return ActResult(
            "no_change", "already_applied", "copies", entity.id, copied, response=response
        )
    if now.status == "failed":
        return ActResult("skipped", "previous_attempt_failed", "copies", entity.id, None)
    return ActResult("no_change", "copy_in_progress", "copies", entity.id, None, response=response)


async def _done(
    run: JobRun, entity: Entity, intent: Intent, intents: IntentStore, copy: CopyResult
) -> ActResult:
    response = copy.as_response()
    await intents.resolve(intent.id, status="done", now=run.now, response=response)
    return ActResult("applied", None, "copies", entity.id, copy.copied_id, response=response)


def _failed(entity: Entity, exc: GraphError) -> ActResult:
    return ActResult("failed", "write_failed", "copies", entity.id, None, error=exc.as_dict())


async def settle_async_copy(
    intents: IntentStore,
    intent: dict[str, Any],
    *,
    reader: GraphReader,
    token: str,
    now: datetime,
) -> str | None:
    """Settle a pending copy intent from its asynchronous batch: ``done`` with every new id,
    ``failed`` with Meta's error, None while Meta is still copying (or someone settled it).

    Raises:
        GraphError: the set could not be read (the next pass tries again).
    """
    set_id = _request_set(intent.get("response"))
    assert set_id is not None, "only a copy started in the background is read back"
    copy = await read_async_copy(reader, set_id, token=token, account_id=intent["account"])
    if copy is None:
        return None
    if isinstance(copy, GraphError):
        fields: dict[str, Any] = {"status": "failed", "error": copy.as_dict()}
    else:
        fields = {"status": "done", "response": copy.as_response(), "reconciled": True}
    resolved = await intents.resolve(intent["_id"], now=now, **fields)
    return str(fields["status"]) if resolved else None
