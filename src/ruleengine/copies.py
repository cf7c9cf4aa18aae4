"""The ``duplicate`` action: ``POST /{id}/copies``, at most once per (batch, task, entity).

A copy cannot be read back to tell whether an earlier, unconfirmed attempt made
one, so its intent is recorded first (:func:`~ruleengine.acts.record_once`) and a
pending one found later is given up rather than risk a second copy. The copy is
made under the account's write lock, like every write.
"""

from __future__ import annotations

from ruleengine.acts import ActKey, ActResult, JobRun, record_once
from ruleengine.locks import AccountLocks, LockLost
from ruleengine.meta.errors import GraphError
from ruleengine.meta.writer import GraphWriter, WriteContext
from ruleengine.rules.action_types import DuplicateAction
from ruleengine.rules.entity import Entity
from ruleengine.rules.model import Task
from ruleengine.store.intents import IntentStore


async def duplicate(
    run: JobRun,
    writer: GraphWriter,
    entity: Entity,
    task: Task,
    action: DuplicateAction,
    *,
    intents: IntentStore,
    locks: AccountLocks,
) -> ActResult:
    """Copy ``entity`` as ``action`` says; the record's ``after`` is the copy's id."""
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
        try:
            copied = await writer.copy(
                status_option=action.status_option,
                rename_suffix=action.rename_suffix,
                deep_copy=action.deep_copy,
                token=run.token,
                ctx=WriteContext(run.account, entity.id, run.rule_id, run.batch_id),
            )
        except GraphError as exc:
            await intents.resolve(intent.id, status="failed", now=run.now, error=exc.as_dict())
            return ActResult(
                "failed", "write_failed", "copies", entity.id, None, error=exc.as_dict()
            )
        response = {"copied_id": copied}
        await intents.resolve(intent.id, status="done", now=run.now, response=response)
        return ActResult("applied", None, "copies", entity.id, copied, response=response)
