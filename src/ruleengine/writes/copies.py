"""The ``duplicate`` action: ``POST /{id}/copies``, at most once per (batch, task, entity).

A copy cannot be read back to tell whether an earlier, unconfirmed attempt made
one, so its intent is recorded first (:func:`~ruleengine.acting.results.record_once`) and a
pending one found later is given up rather than risk a second copy. The copy is
started under the account's write lock, like every write: there the task's cooldown
and ``execution_count_limit`` are checked again (an overlapping run of the rule may
have copied the entity since the job's cooldown stage), the intent is recorded under
the lock's fence, and the lock is checked right before each copy request. A holder
fenced out after Meta made the copy notes Meta's answer on the pending intent; the
reaper settles it from there (:func:`settle_copy`), flagged ``record_unconfirmed`` so
that the record is corrected too. A copy whose answer never came — a timeout, a dead
worker — is settled only from what Meta holds: the copies of its source (``GET
/{id}/copies``, :func:`settle_unanswered_copy`), under the account's write lock, which a live
owner still copying holds. A copy of the source no other intent names is the one it made
(``done``); none, once no request of a dead owner can still land, means none was made
(``failed``, ``not_made``); until then it stays pending, blocking a second copy.

Meta makes a copy of at most 3 objects at once; a bigger one (a deep copy of a
campaign with its ad sets and ads) it refuses without copying anything (100/1885194).
A deep copy's children are read first; one of more than 3 objects is made as a tree
under the same lock and intent — the object alone,
then its children in synchronous Batch API calls (:mod:`ruleengine.writes.copy_tree`;
new apps may not use asynchronous batch requests) — or refused before any write when
it is too big (``copy_too_large``). The record's ``after`` is the copy's id and its
``response`` lists every object the copy made. Intents of copies started as
asynchronous batches by earlier releases are still settled from their request set by
the reaper (:func:`settle_copy`) — never sent again.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ruleengine.acting.results import (
    ActKey,
    ActResult,
    JobRun,
    give_up_unsent,
    record_once,
    unanswered,
)
from ruleengine.meta.copies import (
    CopyResult,
    read_async_copy,
    read_copies,
    read_tree_copy,
    too_large,
)
from ruleengine.meta.errors import GraphError
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.writer import GraphWriter, WriteContext
from ruleengine.rules.advantage import REASON as ADVANTAGE_REASON
from ruleengine.rules.advantage import refusal_message
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.action_types import DuplicateAction
from ruleengine.rules.language.model import Task
from ruleengine.store.intents import WRITE_UNCONFIRMED, Intent, IntentStore
from ruleengine.writes.copy_tree import (
    SYNC_COPY_MAX_OBJECTS,
    TREE_COPY_MAX_OBJECTS,
    Tree,
    copy_tree,
    read_tree,
)
from ruleengine.writes.lock import AccountLocks, Fenced, HeldLock, LockLost
from ruleengine.writes.settling import REDELIVERY, IntentSettler, Settled, SettledBy


async def duplicate(
    run: JobRun,
    writer: GraphWriter,
    entity: Entity,
    task: Task,
    action: DuplicateAction,
    *,
    intents: IntentStore,
    locks: AccountLocks,
    settler: IntentSettler | None = None,
) -> ActResult:
    """Copy ``entity`` as ``action`` says; the record's ``after`` is the copy's id."""
    if (kind := entity.legacy_advantage) is not None:  # Meta refuses to copy it: not sent
        error = {"message": refusal_message(kind, "duplicate")}
        return ActResult("skipped", ADVANTAGE_REASON, "copies", entity.id, None, error=error)
    earlier = await intents.get(run.batch_id, task.id, entity.id)
    if earlier is not None and earlier.status == "pending" and answered(earlier.response):
        return await _resume(run, entity, earlier, intents)  # read back, never sent again
    async with locks.hold(run.account) as lock:
        fenced = intents.under(lock.fence)  # recorded and settled under the lock's fence
        if earlier is not None and earlier.status == "pending" and settler is not None:
            # an earlier delivery's copy whose answer never came: Meta's copies tell
            return await _looked_up(run, entity, earlier, settler.under(lock.fence))
        intent = await record_once(
            fenced,
            run,
            entity,
            ActKey.of(task),
            field="copies",
            before=entity.name,
            target=None,
            recheck=True,  # an overlapping run of the rule may have copied it meanwhile
        )
        if isinstance(intent, ActResult):
            return intent
        return await _start(run, writer, entity, action, intent, _Locked(fenced, lock))


@dataclass(frozen=True)
class _Locked:
    """The account's write lock held for a copy, and the intent store under its fence."""

    intents: IntentStore
    lock: HeldLock

    async def check(self, intent: Intent, run: JobRun) -> ActResult | None:
        """The lock checked right before a copy request: the result when it is lost."""
        try:
            await self.lock.check()
        except LockLost as exc:  # nothing was sent
            await give_up_unsent(self.intents, [intent.id], "lock_lost", now=run.store_now())
            return ActResult("failed", "lock_lost", "copies", error={"message": str(exc)})
        return None


async def _start(
    run: JobRun,
    writer: GraphWriter,
    entity: Entity,
    action: DuplicateAction,
    intent: Intent,
    locked: _Locked,
) -> ActResult:
    """Copy at once, or as a tree when it makes more objects than Meta copies at once."""
    options: dict[str, Any] = {
        "status_option": action.status_option,
        "rename_suffix": action.rename_suffix,
        "deep_copy": None if run.rule.level == "ad" else action.deep_copy,
        "token": run.token,
        "ctx": WriteContext(run.account, entity.id, run.rule_id, run.batch_id),
    }
    intents = locked.intents
    tree = None
    if options["deep_copy"]:  # what the copy makes, read before any write
        tree = await read_tree(run, entity.id, run.rule.level)
        if tree.size > SYNC_COPY_MAX_OBJECTS:
            return await _tree(run, writer, entity, intent, locked, options, tree)
    if (lost := await locked.check(intent, run)) is not None:
        return lost
    try:
        return await _done(run, entity, intent, intents, await writer.copy(**options))
    except GraphError as exc:
        if unanswered(exc):  # it may have been made: pending until Meta's copies tell
            await intents.unconfirmed(intent.id, error=exc.as_dict())
            return ActResult("failed", WRITE_UNCONFIRMED, "copies", entity.id, error=exc.as_dict())
        if not too_large(exc):
            return await _refused(run, entity, intent, intents, exc)
    # Meta copied nothing: it found the copy bigger than it looked
    tree = tree or await read_tree(run, entity.id, run.rule.level)
    return await _tree(run, writer, entity, intent, locked, options, tree)


async def _tree(
    run: JobRun,
    writer: GraphWriter,
    entity: Entity,
    intent: Intent,
    locked: _Locked,
    options: dict[str, Any],
    tree: Tree,
) -> ActResult:
    """The copy made as a tree (:mod:`ruleengine.writes.copy_tree`), or refused before any
    write when it is too big."""
    intents = locked.intents
    if tree.size > TREE_COPY_MAX_OBJECTS:
        error = {
            "message": f"the copy would make {tree.size} objects; at most "
            f"{TREE_COPY_MAX_OBJECTS} are copied"
        }
        await give_up_unsent(intents, [intent.id], "copy_too_large", now=run.store_now())
        return ActResult("failed", "copy_too_large", "copies", entity.id, None, error=error)

    async def note(response: dict[str, Any]) -> None:
        await intents.note(intent.id, response=response)

    async def still_ours() -> bool:
        return await locked.check(intent, run) is None

    try:
        made = await copy_tree(writer, tree, options=options, note=note, still_ours=still_ours)
    except GraphError as exc:
        return await _refused(run, entity, intent, intents, exc)
    held = made.result() if made.complete else await _as_held(run, made.result())
    if held.complete:
        return await _done(run, entity, intent, intents, held)
    response = held.as_response()
    with contextlib.suppress(Fenced):  # made, partly: settled, never sent again
        await intents.resolve(intent.id, status="done", now=run.store_now(), response=response)
    return ActResult(
        "applied",
        "copy_incomplete",
        "copies",
        entity.id,
        made.copied_id,
        error=made.error,
        response=response,
    )


async def _as_held(run: JobRun, made: CopyResult) -> CopyResult:
    """A tree copy that stopped part-way, as Meta holds it: a call that went unanswered may
    have made children nobody noted, or all of them (:func:`read_tree_copy`); what was noted
    when Meta cannot be read now."""
    try:
        return await read_tree_copy(
            run.reader, made.as_response(), token=run.token, account_id=run.account
        )
    except GraphError:
        return made


async def _refused(
    run: JobRun, entity: Entity, intent: Intent, intents: IntentStore, exc: GraphError
) -> ActResult:
    """Meta refused the copy: nothing was made (fenced out, the reaper settles the intent)."""
    with contextlib.suppress(Fenced):
        await intents.resolve(intent.id, status="failed", now=run.store_now(), error=exc.as_dict())
    return _failed(entity, exc)


def _unfinished_tree(response: Any) -> bool:
    """True for a tree copy the intent does not note as whole (its worker died part-way)."""
    tree = isinstance(response, dict) and response.get("mode") == "tree"
    return tree and bool(response.get("copied_id")) and not response.get("complete")


def _request_set(response: Any) -> str | None:
    """The asynchronous batch a pending copy intent started, if it started one."""
    found = response.get("request_set_id") if isinstance(response, dict) else None
    return str(found) if found else None


async def _resume(run: JobRun, entity: Entity, intent: Intent, intents: IntentStore) -> ActResult:
    """A redelivered job finds its copy answered (started in the background, or made): read
    it, send nothing."""
    doc = {"_id": intent.id, "account": run.account, "response": intent.response}
    await settle_copy(intents, doc, reader=run.reader, token=run.token, now=run.store_now())
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
    try:
        await intents.resolve(intent.id, status="done", now=run.store_now(), response=response)
    except Fenced as exc:
        # Made, but the account is a newer holder's now: Meta's answer stays on the pending
        # intent, and the reaper settles it from there; flagged, so that the record saying
        # write_unconfirmed is corrected even when that settler dies before it
        await intents.note(intent.id, response=response)
        await intents.flag_unconfirmed([intent.id])
        error = {"message": str(exc)}
        return ActResult(
            "failed", "write_unconfirmed", "copies", entity.id, None, error=error, response=response
        )
    return ActResult("applied", None, "copies", entity.id, copy.copied_id, response=response)


async def _looked_up(
    run: JobRun, entity: Entity, intent: Intent, settler: IntentSettler
) -> ActResult:
    """A redelivered job's own copy left pending without an answer, settled from the copies
    Meta holds (:func:`settle_unanswered_copy`); never sent again."""
    doc = {
        "_id": intent.id,
        "batch_id": intent.batch_id,
        "task_id": intent.task_id,
        "entity_id": entity.id,
        "account": run.account,
        "field": "copies",
        "before": intent.before,
        "target": intent.target,
        "status": "pending",
        "created_at": intent.created_at,
    }
    await settle_unanswered_copy(
        settler, doc, reader=run.reader, token=run.token, now=run.store_now(), by=REDELIVERY
    )
    now = await settler.intents.get(run.batch_id, intent.task_id, entity.id) or intent
    if now.status == "done" and isinstance(now.response, dict):
        copied = now.response.get("copied_id")
        return ActResult(
            "no_change", "already_applied", "copies", entity.id, copied, response=now.response
        )
    if now.status == "failed":
        return ActResult("skipped", "previous_attempt_failed", "copies", entity.id, None)
    # still pending: the copy may still be made; the reaper settles it once Meta tells
    return ActResult("skipped", "pending_intent_unverifiable", "copies", entity.id, None)


async def settle_unanswered_copy(
    settler: IntentSettler,
    intent: dict[str, Any],
    *,
    reader: GraphReader,
    token: str,
    now: datetime,
    by: SettledBy,
) -> str | None:
    """Settle a pending copy intent whose answer never came, from the copies Meta holds of
    its source — under the account's write lock (``settler`` under its fence), which a live
    owner still copying holds: it settles its own first, and this finds it settled.

    A copy of the source that no other intent names is this one's: ``done`` with it. None
    found: ``failed`` (``not_made``) once the copy can no longer be made — its intent older,
    by MongoDB's clock, than a job and a lock can live (``orphan_after_s``) — and left
    pending before (None): a request the dead owner sent may still be on its way. The status
    it got, None when left pending or settled first by someone else.

    Raises:
        GraphError: Meta's copies could not be read (the next pass tries again).
    """
    current = await settler.intents.get(intent["batch_id"], intent["task_id"], intent["entity_id"])
    if current is None or current.status != "pending":
        return None
    source = str(intent["entity_id"])
    made = await read_copies(reader, source, token=token, account_id=str(intent["account"]))
    claimed = await settler.intents.copies_of(source)
    mine = [copy for copy in made if copy not in claimed]
    if mine:
        response = {"copied_id": mine[0], "copied_ids": [mine[0]], "mode": "found"}
        found = Settled("done", {"response": response, "reconciled": True})
        pending = dataclasses.replace(current, response=response)
        return "done" if await settler.settlement.settle(pending, found, now=now, by=by) else None
    cutoff = now - timedelta(seconds=settler.orphan_after_s)
    created = current.created_at
    if created is None or created >= cutoff:
        return None
    missed = Settled("failed", {"reason": "not_made"})
    return "failed" if await settler.settlement.settle(current, missed, now=now, by=by) else None


def _failed(entity: Entity, exc: GraphError) -> ActResult:
    return ActResult("failed", "write_failed", "copies", entity.id, None, error=exc.as_dict())


def answered(response: Any) -> bool:
    """True when a pending copy intent carries what Meta answered: the asynchronous batch
    the copy started, or the copy itself (noted by a holder fenced out before it could
    settle it). Such an intent is settled from that (:func:`settle_copy`), never sent again
    nor given up as unverifiable."""
    made = isinstance(response, dict) and bool(response.get("copied_id"))
    return made or _request_set(response) is not None


async def settle_copy(
    intents: IntentStore,
    intent: dict[str, Any],
    *,
    reader: GraphReader,
    token: str,
    now: datetime,
) -> str | None:
    """Settle a pending copy intent from what Meta answered (:func:`answered`): ``done`` with
    the copy noted on it, or from its asynchronous batch — ``done`` with every new id,
    ``failed`` with Meta's error; None while Meta is still copying (or someone settled it).

    Raises:
        GraphError: the set could not be read (the next pass tries again).
    """
    response = intent.get("response")
    set_id = _request_set(response)
    if isinstance(response, dict) and _unfinished_tree(response):
        # what Meta holds under it, the children of the call on its way included
        held = await read_tree_copy(
            reader, response, token=token, account_id=str(intent["account"])
        )
        fields: dict[str, Any] = {
            "status": "done",
            "response": held.as_response(),
            "reconciled": True,
        }
    elif isinstance(response, dict) and response.get("copied_id"):
        fields = {"status": "done", "reconciled": True}
    elif set_id is None:
        raise ValueError("only a copy Meta answered is settled from its answer")
    else:
        copy = await read_async_copy(reader, set_id, token=token, account_id=intent["account"])
        if copy is None:
            return None
        if isinstance(copy, GraphError):
            fields = {"status": "failed", "error": copy.as_dict()}
        else:
            fields = {"status": "done", "response": copy.as_response(), "reconciled": True}
    resolved = await intents.resolve(intent["_id"], now=now, **fields)
    return str(fields["status"]) if resolved else None
