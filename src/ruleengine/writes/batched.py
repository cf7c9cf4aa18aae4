"""The batched write path: one job's status, budget, bid and name changes on one ad account.

The protocol of :mod:`ruleengine.writes.executor`, for many changes at once
(``RULEENGINE_WRITE_BATCH_SIZE`` > 1). Under one hold of the account's fenced write
lock, the first slice's live values are read (the Batch API, ≤ 50 GETs a call) while the
batch's own intents, the cooldowns other runs left, other batches' pending intents, the
guards and the budget history of the round's entities are looked up (one query each, at
once). Then slice by slice of ≤ ``write_batch_size`` changes, as a pipeline: while slice
k's call is in flight, slice k+1's live values come in (read ahead), its changes are
planned from them (clamps, the account's minimum daily budget, Meta's ad-set budget
limit) and its intents recorded in one insert, and slice k-1's answers are settled; so
the calls go out back to back, one at a time — the lock (and its fence) checked before
each — and each write is planned from a value read at most one round trip before it is
sent. Each intent is resolved from its own sub-response (a token error stops the
sending after that call: the writes not sent are ``token_refused``, and a slice recorded
meanwhile is given up the same way). A ``null`` sub-response (Meta did not process it) is
reconciled against the live value, never sent blindly again: sent once more only when
the live value shows it did not land.

A crash between two calls leaves the sent call's intents pending, the next slice's
recorded but never sent, and the later slices unrecorded: the next delivery of the batch
reconciles its own, the reaper settles them once their owner is gone — from the live
values in both cases (a write never sent did not land), so nothing lands twice.
Intents are recorded and settled under the lock's fence: a round that finds another
worker has taken the account over (:class:`~ruleengine.errors.Fenced`) records and sends
nothing more — its writes already sent are ``write_unconfirmed``, the others
``lock_lost``, and their intents stay pending for the reaper.

When two tasks of the job change the same field of one entity, the second is planned
in a later round, from the value the first left (as one write at a time would).

The changes of one call to :meth:`BatchedWrites.apply` are one job's, recorded under its
batch — or, for a follow-up job's, each under its own follow-up's (``FieldChange.batch_id``):
its intent is looked up, recorded, guarded and settled under that batch, as it would be
written alone (:mod:`ruleengine.followups.running`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pymongo.errors import PyMongoError

from ruleengine.acting.results import (
    ACT_FAILURES,
    ActKey,
    ActResult,
    FreshPair,
    JobRun,
    Target,
    applied,
    failure_result,
    fired_elsewhere,
    give_up_unsent,
    intent_doc,
    not_applied,
    pending_plan,
    reconcile,
    settled,
    since_of,
    unanswered,
    unchanged,
)
from ruleengine.guards.cross_rule import CrossRuleGuards, GuardRound, intent_fields
from ruleengine.meta.batch import BatchReader, SubRequest
from ruleengine.meta.errors import GraphError, RateLimitError, token_status
from ruleengine.meta.schedules import listed_in, schedules_request
from ruleengine.meta.writer import FieldWrite, GraphWriter, WriteContext
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.budget_schedules import SCHEDULES
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import live_value
from ruleengine.settings import Settings
from ruleengine.store.intents import (
    WRITE_UNCONFIRMED,
    BudgetHistory,
    Intent,
    IntentStore,
    Resolution,
)
from ruleengine.writes.lock import AccountLocks, Fenced, HeldLock, LockLost
from ruleengine.writes.meta_limits import budget_check, budget_history, counts_toward_limit, refuse
from ruleengine.writes.settling import IntentSettler

log = logging.getLogger(__name__)


class WriteDeps(Protocol):
    """What the batched writer needs of the worker's write path (the executor provides it):
    its settings, the intent store and settler, the account locks, the cross-rule guards,
    and how it waits (times are the run's: :meth:`JobRun.store_now`)."""

    settings: Settings
    intents: IntentStore
    settler: IntentSettler
    locks: AccountLocks
    guards: CrossRuleGuards | None
    sleep: Callable[[float], Awaitable[None]]


#: How many times a write Meta did not process (a ``null`` item) is sent again, after the
#: live value showed it had not landed.
NULL_RESENDS = 1


@dataclass(frozen=True)
class FieldChange:
    """One passing (entity, task) whose action changes a field."""

    entity: Entity
    key: ActKey
    target: Target
    #: more fields for the change's intent (a rebalance's plan of its group)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: the batch its intent is recorded under when not the run's: the changes of a follow-up
    #: job, each under its follow-up's own (:func:`~ruleengine.store.followups.followup_batch`)
    batch_id: str | None = None

    def batch_in(self, run: JobRun) -> str:
        """The batch this change's intent is recorded under, in ``run``."""
        return self.batch_id or run.batch_id

    def run_in(self, run: JobRun) -> JobRun:
        """``run`` as this change is recorded, sent and settled in: under its own batch."""
        return run if self.batch_id is None else dataclasses.replace(run, batch_id=self.batch_id)


@dataclass
class _Send:
    """A change on its way to Meta: its plan, its recorded intent, its position in the job."""

    index: int
    change: FieldChange
    plan: Plan
    intent: Intent
    resends: int = 0

    def write(self, run: JobRun) -> FieldWrite:
        batch_id = self.change.batch_in(run)
        ctx = WriteContext(run.account, self.change.entity.id, run.rule_id, batch_id)
        return FieldWrite(ctx, self.plan.field, self.plan.after, self.plan.schedule)

    def applied(self, response: Any = None) -> ActResult:
        return applied(self.plan, response)

    def failed(self, reason: str, error: dict[str, Any] | None = None) -> ActResult:
        return not_applied(self.plan, "failed", reason, error)


def rounds(changes: Sequence[FieldChange]) -> list[list[int]]:
    """Positions of ``changes`` by round: a round changes each (entity, field) at most once."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    out: list[list[int]] = []
    for index, change in enumerate(changes):
        key = (change.entity.id, change.target.field)
        round_number = seen[key]
        seen[key] += 1
        if round_number == len(out):
            out.append([])
        out[round_number].append(index)
    return out


class BatchedWrites:
    """Carries out many field changes of one job through Batch API calls (see the module)."""

    def __init__(self, executor: WriteDeps) -> None:
        self.executor = executor
        self.intents = executor.intents
        self.size = executor.settings.write_batch_size

    async def apply(
        self, run: JobRun, writer: GraphWriter, changes: Sequence[FieldChange]
    ) -> list[ActResult]:
        """The result of each change, in order."""
        results: dict[int, ActResult] = {}
        if run.facts is not None and any(counts_toward_limit(run, c.target.field) for c in changes):
            await run.facts.budget_events()  # read once per job, never under the lock
        for positions in rounds(changes):
            todo = {i: changes[i] for i in positions}
            done: dict[int, ActResult] = {}  # what the round settled before it stopped
            try:
                results |= await self._round(run, writer, todo, done)
            except ACT_FAILURES as exc:
                # the changes the round had settled keep their results (a write that landed
                # stays applied, whatever stopped the round after it): the others failed
                results |= {i: done.get(i) or failure_result(exc) for i in todo}
        return [results[i] for i in range(len(changes))]

    async def apply_held(
        self, run: JobRun, writer: GraphWriter, changes: Sequence[FieldChange], lock: HeldLock
    ) -> list[ActResult]:
        """:meth:`apply` under a lock the caller holds and keeps (a rebalance's group is
        planned and written in one hold). ``run.reader`` must not wait out rate limits: one
        met is raised, for the caller to wait it out after releasing the lock."""
        results: dict[int, ActResult] = {}
        reads = self._reads(run, writer)
        for positions in rounds(changes):
            todo = {i: changes[i] for i in positions}
            done: dict[int, ActResult] = {}
            try:
                results |= await _LockedRound(self, run, writer, reads, lock, done).go(todo)
            except ACT_FAILURES as exc:
                if isinstance(exc, RateLimitError):
                    raise
                results |= {i: done.get(i) or failure_result(exc) for i in todo}
        return [results[i] for i in range(len(changes))]

    def _reads(self, run: JobRun, writer: GraphWriter) -> BatchReader:
        """The Batch API reads of a locked round: no rate-limit wait under the lock."""
        return BatchReader(
            writer.session,
            policy=run.reader.reads.without_rate_limit_waits(),
            concurrency=self.executor.settings.graph_concurrency,
        )

    async def _round(
        self,
        run: JobRun,
        writer: GraphWriter,
        todo: dict[int, FieldChange],
        results: dict[int, ActResult],
    ) -> dict[int, ActResult]:
        # As in ActionExecutor.apply: a rate limit met reading inside the lock is waited out
        # after releasing it, and the locked section starts again from the live reads.
        # ``results`` is kept across a restart: what is done stays done.
        policy = run.reader.reads
        reads = self._reads(run, writer)
        for attempt in itertools.count(1):
            remaining = {i: c for i, c in todo.items() if i not in results}
            try:
                async with self.executor.locks.hold(run.account) as lock:
                    await _LockedRound(self, run, writer, reads, lock, results).go(remaining)
                    return results
            except RateLimitError as exc:
                wait = policy.rate_limit_wait(exc, attempt=attempt)
                if wait is None:
                    raise
                log.info(
                    "rate limited reading live values; retrying in %.1fs outside the lock", wait
                )
                await self.executor.sleep(wait)
        raise AssertionError("unreachable")


#: What preparing a slice may meet (Meta, Redis, the lock, MongoDB, a newer holder's fence):
#: no longer raised once the round has stopped or is being left.
_PREPARE_FAILURES = (*ACT_FAILURES, PyMongoError, Fenced)

#: Live values read (entity id → fields) and the reads that failed (entity id → error).
_Live = tuple[dict[str, dict[str, Any]], dict[str, GraphError]]


class _Pipe:
    """The slices of one locked round on their way through the stages: read ahead, planned
    and recorded while the slice before is in flight, then sent (see ``_LockedRound._go``).

    The first slice is the round's first ``size`` changes, read while the round looks up
    what decides which of them are still to do; the later slices hold only those."""

    def __init__(self, locked: _LockedRound, todo: dict[int, FieldChange]) -> None:
        self.locked = locked
        self.todo = todo
        self.slices: list[list[int]] = [list(todo)[: locked.owner.size]] if todo else []
        self.fresh: dict[int, FieldChange] = {}  # to record and send
        self.own: dict[int, Intent] = {}  # recorded by an earlier delivery, still pending
        self.others: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.reading: asyncio.Task[_Live] | None = None
        self.preparing: asyncio.Task[list[_Send]] | None = None
        if self.slices:
            self._read(0)

    async def run(
        self,
        fresh: dict[int, FieldChange],
        own: dict[int, Intent],
        others: dict[tuple[str, str], list[dict[str, Any]]],
    ) -> None:
        """Send the calls of the changes still to do (``fresh``, ``own``) one after the
        other, each next one prepared meanwhile."""
        self.fresh, self.own, self.others = fresh, own, others
        size = self.locked.owner.size
        first = set(self.slices[0]) if self.slices else set()
        later = [i for i in self.todo if (i in fresh or i in own) and i not in first]
        self.slices += [later[n : n + size] for n in range(0, len(later), size)]
        if not self.slices:
            return
        ready = await self._prepare(0)
        for number in range(len(self.slices)):
            if number + 1 < len(self.slices):
                self.preparing = asyncio.create_task(self._prepare(number + 1))
            sent = await self.locked._send(ready)
            ready = await self._prepared(sent)
            if not sent:  # stopped: the slices after it are not written
                self.locked._stopped([i for later in self.slices[number + 1 :] for i in later])
                return

    def _read(self, number: int) -> None:
        part = {i: self.todo[i] for i in self.slices[number]}
        self.reading = asyncio.create_task(self.locked._live(part))

    async def _prepare(self, number: int) -> list[_Send]:
        """Slice ``number``'s writes still to do, planned from their live values and
        recorded; the next slice's read started as soon as this one's values are in."""
        assert self.reading is not None
        live, unread = await self.reading
        self.reading = None
        if number + 1 < len(self.slices):
            self._read(number + 1)
        part = [i for i in self.slices[number] if i in self.fresh or i in self.own]
        locked = self.locked
        for index in part:
            error = unread.get(self.todo[index].entity.id)
            if error is not None:
                locked.results[index] = failure_result(error)
        mine = {i: self.own[i] for i in part if i in self.own}
        sends = await locked._reconcile_own(mine, self.todo, live)
        ours = {i: self.fresh[i] for i in part if i in self.fresh}
        sends += await locked._record(await locked._plan(ours, live, self.others))
        locked.sends |= {send.index: send for send in sends}
        return sends

    async def _prepared(self, sent: bool) -> list[_Send]:
        """The next slice, once prepared; when the round stopped, its recorded writes are
        given up unsent (a failure to prepare it no longer matters then)."""
        preparing, self.preparing = self.preparing, None
        if preparing is None:
            return []
        if sent:
            return await preparing
        try:
            ready = await preparing
        except _PREPARE_FAILURES as exc:  # the round stops all the same
            log.info("batch %s: the slice after a stop met %r", self.locked.run.batch_id, exc)
            return []
        await self.locked._settle_unsent(ready, *self.locked.stop_reason())
        return []

    async def close(self) -> None:
        """Leave nothing running: a slice being prepared is let finish (its intents stay
        pending: a retry of the round or the reaper settles them from the live values), a
        read ahead is dropped."""
        if self.preparing is not None:
            with contextlib.suppress(*_PREPARE_FAILURES):
                await self.preparing
            self.preparing = None
        if self.reading is not None:
            self.reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reading
            self.reading = None


class _LockedRound:
    """One round under the account's write lock: look, plan, record, send, resolve."""

    def __init__(
        self,
        owner: BatchedWrites,
        run: JobRun,
        writer: GraphWriter,
        reads: BatchReader,
        lock: HeldLock,
        results: dict[int, ActResult],
    ) -> None:
        self.owner = owner
        self.intents = owner.intents.under(lock.fence)  # recorded and settled under the fence
        self.settler = owner.executor.settler.under(lock.fence)
        self.run = run
        self.writer = writer
        self.reads = reads
        self.lock = lock
        self.results = results
        self.refused: GraphError | None = None  # a token error Meta answered a write with
        self.guard: GuardRound | None = None  # the change budget and holds of this round
        self.sends: dict[int, _Send] = {}  # every write recorded to be sent, by position
        self.sent: set[int] = set()  # positions whose write went out to Meta
        self.stop: tuple[str, dict[str, Any]] | None = None  # why the round stopped early
        self.history = BudgetHistory()  # the round's entities' budget changes (Meta's limits)
        self.settling: asyncio.Task[None] | None = None  # applied writes being settled
        self.unsettled: list[tuple[_Send, Any]] = []  # the last call's, settled as the next goes
        self.answered_at = run.store_now()  # when the last call's answer came (MongoDB's clock)

    async def go(self, todo: dict[int, FieldChange]) -> dict[int, ActResult]:
        try:
            await self._go(todo)
        except Fenced as exc:
            await self._fenced_out(todo, exc)
        return self.results

    async def _fenced_out(self, todo: dict[int, FieldChange], exc: Fenced) -> None:
        """A newer holder took the account's lock over: this round records and sends nothing
        more. A write already sent is ``write_unconfirmed``, its intent flagged
        ``record_unconfirmed`` (the reaper settles it from the live value and corrects the
        record — also when a settler dies in between), one not sent ``lock_lost``."""
        log.warning("batch %s fenced out of %s: %s", self.run.batch_id, self.run.account, exc)
        error = {"message": str(exc)}
        unconfirmed = []
        for index in todo:
            if index in self.results:
                continue
            send = self.sends.get(index)
            if send is None:
                self.results[index] = failure_result(exc)
            elif index in self.sent:
                self.results[index] = send.failed(WRITE_UNCONFIRMED, error)
                unconfirmed.append(send.intent.id)
            else:
                self.results[index] = send.failed("lock_lost", error)
        await self.intents.flag_unconfirmed(unconfirmed)

    async def _go(self, todo: dict[int, FieldChange]) -> None:
        """Read the first slice's live values while looking up the round's own intents and
        re-checking cooldowns; then, slice by slice of ≤ ``size`` changes, plan, record the
        intents and send one Batch API call. Slice k+1 is read, planned and recorded while
        slice k's call is in flight, and slice k is settled while slice k+1's call is: the
        account's calls go out back to back, one at a time, each planned from a live value
        read at most one round trip before it is sent."""
        pipe = _Pipe(self, todo)
        try:
            await pipe.run(*await self._look(todo))
        finally:
            await pipe.close()
            await self._settled()

    async def _look(
        self, todo: dict[int, FieldChange]
    ) -> tuple[
        dict[int, FieldChange], dict[int, Intent], dict[tuple[str, str], list[dict[str, Any]]]
    ]:
        """The changes still to record (fresh), those an earlier delivery recorded and left
        pending (own), and other batches' pending intents on the round's entities."""
        run = self.run
        existing = await self.intents.of_keys(_key(run, c) for c in todo.values())
        fresh: dict[int, FieldChange] = {}
        own: dict[int, Intent] = {}
        for index, change in todo.items():
            intent = existing.get(_key(run, change))
            if intent is None:
                fresh[index] = change
            elif intent.status == "pending":
                own[index] = intent
            else:
                self.results[index] = settled(intent)
        # the round's look-ups at once, each one query (a change another run's firing skips
        # is looked up too: harmless); under the lock no other writer records meanwhile, and
        # a round changes each (entity, field) once
        skipped, others, _, self.history = await asyncio.gather(
            self._fired_elsewhere(fresh),
            self._pending_elsewhere(fresh),
            self._look_guards(fresh),
            budget_history(self.intents, run, [(c.entity, c.target.field) for c in fresh.values()]),
        )
        for index, result in skipped.items():
            self.results[index] = result
            del fresh[index]
        return fresh, own, others

    def stop_reason(self) -> tuple[str, dict[str, Any]]:
        """Why the round stopped early, and the error its unsent changes carry."""
        return self.stop or ("lock_lost", {"message": "the round stopped"})

    def _stopped(self, unsent: list[int]) -> None:
        """Changes of later slices, neither recorded nor sent, once the round had to stop."""
        reason, error = self.stop_reason()
        for index in unsent:
            if index not in self.results:
                self.results[index] = ActResult("failed", reason, error=error)

    # ---------------------------------------------------------------- before recording

    async def _fired_elsewhere(self, fresh: dict[int, FieldChange]) -> dict[int, ActResult]:
        """The changes to skip: another run of the rule fired since the job's cooldown stage
        (each change's own batch aside)."""
        by_batch: dict[str | None, dict[int, FreshPair]] = defaultdict(dict)
        for index, change in fresh.items():
            pair = FreshPair(change.key, change.entity.id, change.target.field)
            by_batch[change.batch_id][index] = pair
        skipped: dict[int, ActResult] = {}
        for pairs in by_batch.values():
            run = fresh[next(iter(pairs))].run_in(self.run)
            skipped |= await fired_elsewhere(self.intents, run, pairs)
        return skipped

    async def _live(self, changes: dict[int, FieldChange]) -> _Live:
        """Entity id → its live fields, through the Batch API, and entity id → the error its
        read met (a rate limit is raised: waited out unlocked)."""
        fields: dict[str, set[str]] = defaultdict(set)
        for change in changes.values():
            fields[change.entity.id].update(change.target.reads)
        ids = sorted(fields)
        requests = [
            SubRequest(i, {"fields": ",".join(["id", *sorted(fields[i] - {SCHEDULES})])})
            for i in ids
        ]
        # a schedule's live value is Meta's schedules of the object: one more item each
        scheduled = [i for i in ids if SCHEDULES in fields[i]]
        since = since_of(self.run.now)
        requests += [schedules_request(i, since=since) for i in scheduled]
        answers = await self.reads.get_many(
            requests, token=self.run.token, account_id=self.run.account
        )
        live: dict[str, dict[str, Any]] = {}
        errors: dict[str, GraphError] = {}
        for entity_id, answer in zip(ids, answers[: len(ids)], strict=True):
            if isinstance(answer.error, RateLimitError):
                raise answer.error
            if answer.error is None and isinstance(answer.body, dict) and "id" in answer.body:
                live[entity_id] = answer.body
            else:
                errors[entity_id] = answer.error or GraphError("no object in the answer")
        for entity_id, answer in zip(scheduled, answers[len(ids) :], strict=True):
            if isinstance(answer.error, RateLimitError):
                raise answer.error
            items = listed_in(answer.body) if answer.error is None else None
            if entity_id in live and items is None:  # unread, or more than one page of them
                del live[entity_id]
                errors[entity_id] = answer.error or GraphError(
                    f"the budget schedules of {entity_id} came in more than one page"
                )
            elif entity_id in live:
                live[entity_id][SCHEDULES] = items
        return live, errors

    async def _reconcile_own(
        self, own: dict[int, Intent], todo: dict[int, FieldChange], live: dict[str, dict[str, Any]]
    ) -> list[_Send]:
        """A crash (or an unprocessed item) left these pending: look before writing again."""
        sends: list[_Send] = []
        for index, intent in own.items():
            change = todo[index]
            if change.entity.id not in live:
                continue  # its live read failed
            value = live_value(live[change.entity.id], intent.field)
            result = await self.settler.settle_own(intent, value, now=self.run.store_now())
            if result is None:
                plan = pending_plan(intent)
                sends.append(_Send(index, change, plan, intent))
            else:
                self.results[index] = result
        return sends

    async def _pending_elsewhere(
        self, fresh: dict[int, FieldChange]
    ) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """Other batches' pending intents on the round's entities, by (entity, field): one
        query for the round (under the lock, no other writer records any meanwhile). Changes
        of several batches (a follow-up job's) get every pending intent, each change then
        leaving out its own batch's (:meth:`_plan`)."""
        others: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        ids = sorted({c.entity.id for c in fresh.values()})
        several = any(c.batch_id is not None for c in fresh.values())
        other_than = None if several else self.run.batch_id
        for doc in await self.intents.pending_elsewhere(ids, other_than=other_than) if ids else []:
            others[(doc["entity_id"], doc["field"])].append(doc)
        return others

    async def _plan(
        self,
        fresh: dict[int, FieldChange],
        live: dict[str, dict[str, Any]],
        others: dict[tuple[str, str], list[dict[str, Any]]],
    ) -> dict[int, tuple[FieldChange, Plan]]:
        """Plans that change something and that nothing (another batch, Meta's limits) stops."""
        run = self.run
        readable = {i: c for i, c in fresh.items() if c.entity.id in live}
        plans: dict[int, tuple[FieldChange, Plan]] = {}
        for index, change in readable.items():
            entity, field = change.entity, change.target.field
            value = live_value(live[entity.id], field)
            mine = change.run_in(run)
            elsewhere = [d for d in others[(entity.id, field)] if d["batch_id"] != mine.batch_id]
            blocked = await self.settler.blocking(mine, field, value, elsewhere)
            plan = blocked or change.target.planner(live[entity.id])
            if isinstance(plan, ActResult):
                self.results[index] = plan
            elif not plan.changes:
                self.results[index] = unchanged(plan)
            else:
                plans[index] = (change, plan)
        await self._guard(plans)
        for index, (change, plan) in list(plans.items()):
            refused = await budget_check(self.history, run, change.entity, plan)
            if refused is not None:
                self.results[index] = refused
                del plans[index]
        return plans

    async def _look_guards(self, fresh: dict[int, FieldChange]) -> None:
        """The change budget and oscillation holds of the round's entities, over every rule's
        changes (one query for the round)."""
        guards = self.owner.executor.guards
        if guards is not None and fresh:
            entity_ids = list(dict.fromkeys(c.entity.id for c in fresh.values()))
            self.guard = await guards.look(self.run, entity_ids)

    async def _guard(self, plans: dict[int, tuple[FieldChange, Plan]]) -> None:
        """Hold each plan to the change budget and the oscillation holds."""
        if self.guard is None or not plans:
            return
        for index, (change, plan) in list(plans.items()):
            checked = self.guard.check(change.entity, plan)
            if isinstance(checked, ActResult):
                self.results[index] = checked
                del plans[index]
            else:
                plans[index] = (change, checked)

    async def _record(self, plans: dict[int, tuple[FieldChange, Plan]]) -> list[_Send]:
        """Every intent of the slice in one insert, before its call is sent."""
        docs = [
            intent_doc(change.run_in(self.run), change.entity, change.key, plan)
            | intent_fields(change.key)
            | dict(change.extra)
            for change, plan in plans.values()
        ]
        intents = await self.intents.begin_many(docs, now=self.run.store_now())
        sends: list[_Send] = []
        for (index, (change, plan)), intent in zip(plans.items(), intents, strict=True):
            if intent.created:
                sends.append(_Send(index, change, plan, intent))
            else:  # another delivery of this batch recorded it meanwhile
                self.results[index] = settled(intent)
        return sends

    # ---------------------------------------------------------------- sending

    async def _send(self, queue: list[_Send]) -> bool:
        """One Batch API call at a time, the lock checked before each; False when the round
        must stop (the lock lost, the token refused: every later call would fail alike)."""
        size = self.owner.size
        while queue:
            chunk, queue = queue[:size], queue[size:]
            try:
                await self.lock.check()
            except LockLost as exc:  # nothing of these was sent: they did not happen
                self.stop = ("lock_lost", {"message": str(exc)})
                await self._settle_unsent([*chunk, *queue], *self.stop)
                return False
            queue += await self._send_chunk(chunk)
            if self.refused is not None and queue:  # every call with this token would fail
                await self._settle_unsent(queue, "token_refused", self.refused.as_dict())
        if self.refused is not None:
            self.stop = ("token_refused", self.refused.as_dict())
            return False
        return True

    async def _settle_unsent(self, unsent: list[_Send], reason: str, error: dict[str, Any]) -> None:
        ids = [s.intent.id for s in unsent]
        await give_up_unsent(self.intents, ids, reason, now=self.run.store_now())
        for send in unsent:
            self.results[send.index] = send.failed(reason, error)

    async def _send_chunk(self, chunk: list[_Send]) -> list[_Send]:
        """Send one call; resolve what it answered. Returns the writes to send again."""
        run = self.run
        await self._settle_next()
        self.sent.update(send.index for send in chunk)
        try:
            answers = await self.writer.write_batch([s.write(run) for s in chunk], token=run.token)
        except GraphError as exc:
            for send in chunk:
                await self._failed(send, exc, own_answer=False)
            return []
        # when Meta's answer came, by MongoDB's clock: no earlier than the writes landed, so
        # Meta's hour of budget changes is never counted short (the job's start could be
        # minutes earlier)
        self.answered_at = run.store_now()
        done: list[tuple[_Send, Any]] = []
        unprocessed: list[_Send] = []
        for send, answer in zip(chunk, answers, strict=True):
            if answer is None:
                unprocessed.append(send)
            elif answer.error is not None:
                await self._failed(send, answer.error)
            else:
                done.append((send, answer.body))
        self.unsettled = done
        return await self._reconcile_unprocessed(unprocessed)

    async def _settle_next(self) -> None:
        """Start settling the last call's applied writes, as the next call goes out (so they
        are settled while it is in flight; the settling before is awaited first, and its
        failure — a newer holder's fence, :class:`Fenced` — raised here)."""
        settling, self.settling = self.settling, None
        if settling is not None:
            await settling
        if self.unsettled:
            answered = self.answered_at
            self.settling = asyncio.create_task(self._resolve_done(self.unsettled, at=answered))
        self.unsettled = []

    async def _settled(self) -> None:
        """Every applied write of the round settled (the last call's too)."""
        await self._settle_next()
        await self._settle_next()

    async def _resolve_done(
        self, done: list[tuple[_Send, Any]], *, at: datetime, **fields: Any
    ) -> None:
        resolutions = [
            Resolution(s.intent.id, "done", {"response": body, "changed": True, **fields})
            for s, body in done
        ]
        settled_now = await self.intents.resolve_many(resolutions, now=at)
        if settled_now != len(resolutions):
            log.error(
                "%d intent(s) were settled by someone else while their writes were in flight",
                len(resolutions) - settled_now,
            )
        for send, body in done:
            result = send.applied(body)
            if self.guard is not None and send.intent.created:  # not one a crash left pending
                change = send.change
                result.oscillation = await self.guard.landed(
                    change.entity, change.key, send.plan, batch_id=change.batch_id
                )
            self.results[send.index] = result

    async def _failed(self, send: _Send, exc: GraphError, *, own_answer: bool = True) -> None:
        if token_status(exc.code, exc.subcode) is not None:
            self.refused = exc  # no further call: each would meet the same refusal
        if unanswered(exc):
            # No verdict: the write may still land. The intent stays pending — its cooldown in
            # force, the field blocked for other runs — until it is settled from the live value.
            await self.intents.unconfirmed(send.intent.id, error=exc.as_dict())
            self.results[send.index] = send.failed(WRITE_UNCONFIRMED, exc.as_dict())
            return
        self.results[send.index] = await refuse(
            self.intents,
            send.intent,
            send.plan,
            send.change.run_in(self.run),
            exc,
            now=self.run.store_now(),
            own_answer=own_answer,
        )

    async def _reconcile_unprocessed(self, unprocessed: list[_Send]) -> list[_Send]:
        """Meta answered these ``null``: read them back; send again only what did not land.
        A budget schedule is left pending (``write_unconfirmed``), never sent again: its
        settling reads Meta's schedules once its request can no longer land."""
        null = {"message": "Meta answered the schedule's item null"}
        for send in [s for s in unprocessed if s.plan.schedule is not None]:
            await self.intents.unconfirmed(send.intent.id, error=null)
            self.results[send.index] = send.failed(WRITE_UNCONFIRMED, null)
        unprocessed = [s for s in unprocessed if s.plan.schedule is None]
        if not unprocessed:
            return []
        live: dict[str, dict[str, Any]] = {}
        requests = [
            SubRequest(s.change.entity.id, {"fields": f"id,{s.plan.field}"}) for s in unprocessed
        ]
        answers = await self.reads.get_many(
            requests, token=self.run.token, account_id=self.run.account
        )
        resend: list[_Send] = []
        landed: list[tuple[_Send, Any]] = []
        for send, answer in zip(unprocessed, answers, strict=True):
            if answer.error is not None or not isinstance(answer.body, dict):
                error = answer.error or GraphError("no object in the answer")
                await self.intents.unconfirmed(send.intent.id, error=error.as_dict())
                self.results[send.index] = send.failed(WRITE_UNCONFIRMED, error.as_dict())
                continue
            live[send.change.entity.id] = answer.body
            verdict = reconcile(send.intent, live_value(answer.body, send.plan.field))
            if verdict == "done":
                landed.append((send, None))
            elif verdict == "write" and send.resends < NULL_RESENDS:
                send.resends += 1
                resend.append(send)
            else:
                reason = "not_processed" if verdict == "write" else "changed_by_someone_else"
                await self.intents.resolve(
                    send.intent.id, status="failed", now=self.run.store_now(), reason=reason
                )
                self.results[send.index] = send.failed(reason)
        await self._resolve_done(landed, at=self.run.store_now(), reconciled=True)
        return resend


def _key(run: JobRun, change: FieldChange) -> tuple[str, str, str]:
    """What a change's intent is recorded under: (batch, task, entity)."""
    return (change.batch_in(run), change.key.task_id, change.entity.id)


__all__ = ["BatchedWrites", "FieldChange", "rounds"]
