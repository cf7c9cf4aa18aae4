"""Action intents, and the cooldowns that follow from them.

An **intent** is recorded before every write to Meta, unique per (batch, task,
entity), and resolved with Meta's answer: ``pending`` → ``done`` or
``failed``. Every status change is a compare-and-set on the status expected,
so a late resolver can never overwrite what another one decided.

**Execution counts** (a task's ``execution_count_limit``) are too: how many intents of
(rule, task, entity) are ``done`` or still ``pending``, over every batch and every
version of the rule.

**Cooldowns** are derived from intents, not written separately: a (rule, task,
entity) cools down for the task's ``cooldown_minutes`` from the start of the job
whose intent is ``done`` — or still ``pending``, because a pending write may
have landed. Both ends are read on MongoDB's clock (``cooling_from``, the job's
``db_now``), so a step of a worker's clock neither shortens nor stretches one.
Since the intent exists before the write is sent, a cooldown is in force from
the moment the write lands, whatever happens to the worker after.

**Retention.** An intent nothing reads again after a while expires
(:func:`expires_at`; the worker's retention cron deletes it, :meth:`IntentStore.drop_expired`):
:data:`KEPT_AFTER_COOLDOWN` after its cooldown ends,
longer than every window the write path and the guards look back over. Two kinds are
kept for good, for they are read however old they are: those of a task with an
``execution_count_limit`` (its count is over every intent ever) and a
``rebalance_budget``'s (its next run reads what its latest run left the group).

**Fenced transitions.** Each acquisition of an ad account's write lock takes a new fence
(:meth:`IntentStore.take_fence`) and hands every pending intent of the account to it
(``holder_fence``). A store :meth:`~IntentStore.under` a fence records intents with it
(``lock_fence``, ``holder_fence``) and moves only intents held by it, once the
account's fence was seen to be still its own — so after a newer holder's acquisition a
stale holder (a paused process, a Redis restart that lost its lock) records and settles
nothing: it gets :class:`~ruleengine.errors.Fenced`. An intent it recorded after the
takeover is caught by the check that follows the insert (it is never sent). Noting what
Meta answered on a pending intent (:meth:`~IntentStore.note`) is not fenced: it is
evidence of a write already sent, for whoever settles it.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson

from ruleengine import constants as c
from ruleengine.store.db import (
    PENDING_INTENTS_INDEX,
    Database,
    Document,
    insert_new,
    server_time,
)
from ruleengine.store.fences import Fence, FenceStore

IntentStatus = Literal["pending", "done", "failed"]
# Intents whose effect is (or may be) in place: they start a cooldown.
FIRED: tuple[IntentStatus, ...] = ("pending", "done")
BUDGET_FIELDS = ["daily_budget", "lifetime_budget"]
#: How long an intent is kept once its cooldown is over, unless it is kept for good: longer
#: than every window read back (Meta's budget hour, the 24 h of budgets refused as too low,
#: the oscillation window of at most 30 days, ``Settings.oscillation_window_hours``).
KEPT_AFTER_COOLDOWN = timedelta(days=31)
#: The action whose intents its next run reads, however long ago its latest run was.
_READ_AGAIN_ACTIONS = frozenset({"rebalance_budget"})


def expires_at(
    *, cooling_from: datetime, cooldown_minutes: int, counted: bool, action: str
) -> datetime | None:
    """When an intent may go (its ``expires_at``), or None when it is kept
    for good: an intent a task's ``execution_count_limit`` counts (``counted``), or one of an
    action whose next run reads it back."""
    if counted or action in _READ_AGAIN_ACTIONS:
        return None
    return cooling_from + timedelta(minutes=cooldown_minutes) + KEPT_AFTER_COOLDOWN


# Why a failed budget intent failed, when Meta said so (the engine reads them back).
BUDGET_LIMITED = "meta_budget_change_limit"
BUDGET_TOO_LOW = "at_min_budget"  # Meta answered "Your Budget Is Too Low"
# Meta's answer to the write was lost (a timeout, a reset connection, a 5xx without its body):
# it may have landed. The intent stays pending, flagged ``record_unconfirmed``, until settled.
WRITE_UNCONFIRMED = "write_unconfirmed"
# The reason a (task, entity) pair is skipped once the task changed the entity as often as
# its ``execution_count_limit`` allows.
EXECUTION_COUNT_LIMIT = "execution_count_limit"


@dataclass(frozen=True)
class AppliedChange:
    """A budget change the engine made: when (its job's time) and the value it wrote."""

    at: datetime
    target: Any


@dataclass(frozen=True)
class PastChange:
    """A change of one entity's field some rule made (its intent ``done``) or may have made
    (still ``pending``): what the change budget and oscillation detection count."""

    at: datetime  # the job's time of the intent
    batch_id: str
    rule_id: str
    task_id: str
    entity_id: str
    entity_name: str | None
    field: str
    before: Any
    target: Any
    on_oscillation: str | None = None

    @classmethod
    def from_mongo(cls, doc: Document) -> PastChange:
        """Build from an ``action_intents`` document."""
        return cls(
            at=doc["created_at"],
            batch_id=doc["batch_id"],
            rule_id=str(doc.get("rule_id")),
            task_id=doc["task_id"],
            entity_id=doc["entity_id"],
            entity_name=doc.get("entity_name"),
            field=doc["field"],
            before=doc.get("before"),
            target=doc.get("target"),
            on_oscillation=doc.get("on_oscillation"),
        )


@dataclass(frozen=True)
class Intent:
    """A write the engine is about to make (or made), keyed by batch + task + entity."""

    id: Any
    batch_id: str
    task_id: str
    entity_id: str
    field: str
    before: Any
    target: Any
    status: IntentStatus
    created: bool  # False: the intent existed already (a redelivered job)
    created_at: datetime | None = None
    response: Any = None  # Meta's answer to the write, once done
    schedule: dict[str, Any] | None = None  # a budget schedule's window and value, as sent

    @classmethod
    def from_mongo(cls, doc: Document, *, created: bool) -> Intent:
        """Build from an ``action_intents`` document."""
        return cls(
            id=doc["_id"],
            batch_id=doc["batch_id"],
            task_id=doc["task_id"],
            entity_id=doc["entity_id"],
            field=doc["field"],
            before=doc.get("before"),
            target=doc.get("target"),
            status=doc["status"],
            created=created,
            created_at=doc.get("created_at"),
            response=doc.get("response"),
            schedule=doc.get("schedule"),
        )


@dataclass(frozen=True)
class Resolution:
    """How one pending intent is settled: its new status and what it keeps."""

    intent_id: Any
    status: IntentStatus
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BudgetHistory:
    """What the engine's intents say about some entities' budgets (one query, see
    :meth:`IntentStore.budget_history`).

    Attributes:
        changes: entity → the budget changes the engine made since the window's start, oldest first.
        blocked_until: entity → until when Meta blocks its budget (it answered code 17).
        too_low: (entity, field) → the highest budget Meta refused as too low.
    """

    changes: dict[str, list[AppliedChange]] = field(default_factory=dict)
    blocked_until: dict[str, datetime] = field(default_factory=dict)
    too_low: dict[tuple[str, str], Any] = field(default_factory=dict)


def _key(doc: Document) -> tuple[str, str, str]:
    return doc["batch_id"], doc["task_id"], doc["entity_id"]


def _since(doc: Document, since: datetime) -> bool:
    """True when the intent was resolved at or after ``since``."""
    resolved = doc.get("resolved_at")
    return isinstance(resolved, datetime) and resolved >= since


def _resolution(status: IntentStatus, now: datetime, fields: dict[str, Any]) -> dict[str, Any]:
    extra = {"applied_at": now} if status == "done" else {}
    return {"$set": {"status": status, "resolved_at": now, **extra, **fields}}


class IntentStore:
    """Action intents: recorded before the write, resolved (compare-and-set) with Meta's answer."""

    def __init__(self, db: Database) -> None:
        self._intents = db[c.ACTION_INTENTS]
        self.fences = FenceStore(db)
        self.fence: Fence | None = None  # set on a store under a lock's fence

    def under(self, fence: Fence) -> IntentStore:
        """This store with its transitions fenced by ``fence`` (see the module): what a
        holder of the account's write lock records and settles through."""
        fenced = copy.copy(self)
        fenced.fence = fence
        return fenced

    async def take_fence(self, account: str) -> Fence:
        """A new fence for an acquisition of ``account``'s write lock; every pending intent
        of the account is handed to it, so no older holder can move one any more."""
        fence = await self.fences.take(account)
        older = {
            "status": "pending",
            "account": account,
            "holder_fence": {"$not": {"$gte": fence.value}},
        }
        # Looked up first: an account has a pending intent only while a write is in flight or
        # its holder died, and a read does not queue behind the collection's other writes the
        # way an update does on the embedded server (one writer per collection at a time).
        # An intent recorded after this look under an older fence is caught by its recorder's
        # own check after the insert (the fence taken above is newer), as after the update.
        if await self._intents.find_one(older, {"_id": 1}) is None:
            return fence
        await self._intents.update_many(
            older, {"$set": {"holder_fence": fence.value}}, hint=PENDING_INTENTS_INDEX
        )
        return fence

    async def begin(self, intent: Document, *, now: datetime) -> Intent:
        """Insert a pending intent; if one exists for the key, return it instead."""
        return (await self.begin_many([intent], now=now))[0]

    async def begin_many(self, intents: Sequence[Document], *, now: datetime) -> list[Intent]:
        """Insert pending intents in one command, in order; an existing one for a key is
        returned instead (``created`` False) — another delivery of the batch recorded it.

        Under a fence, the intents carry it, and the fence is checked before and after the
        insert (:class:`~ruleengine.errors.Fenced`: nothing recorded may be sent)."""
        fenced = {} if self.fence is None else self._fenced_fields(self.fence)
        docs = [
            {**i, **fenced, "status": "pending", "created_at": now, "applied_at": None}
            for i in intents
        ]
        if not docs:
            return []
        await self._check_fence()
        recorded = await self._insert(docs)
        await self._check_fence()
        return recorded

    @staticmethod
    def _fenced_fields(fence: Fence) -> dict[str, int]:
        # lock_fence: the fence it was recorded under; holder_fence: the one that may move it
        return {"lock_fence": fence.value, "holder_fence": fence.value}

    async def _check_fence(self) -> None:
        if self.fence is not None:
            await self.fences.check(self.fence)

    async def _insert(self, docs: list[Document]) -> list[Intent]:
        taken = await insert_new(self._intents, docs)
        if not taken:
            return [Intent.from_mongo(doc, created=True) for doc in docs]
        keys = [_key(docs[i]) for i in taken]
        query = {
            "$or": [dict(zip(("batch_id", "task_id", "entity_id"), k, strict=True)) for k in keys]
        }
        existing = {_key(doc): doc async for doc in self._intents.find(query)}
        return [
            Intent.from_mongo(existing[_key(doc)], created=False)
            if i in taken
            else Intent.from_mongo(doc, created=True)
            for i, doc in enumerate(docs)
        ]

    async def get(self, batch_id: str, task_id: str, entity_id: str) -> Intent | None:
        """The intent of (batch, task, entity), if one was recorded."""
        doc = await self._intents.find_one(
            {"batch_id": batch_id, "task_id": task_id, "entity_id": entity_id}
        )
        return None if doc is None else Intent.from_mongo(doc, created=False)

    async def get_many(
        self, batch_id: str, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], Intent]:
        """(task, entity) → the intent of the batch recorded for it, for those that have one."""
        found = await self.of_keys((batch_id, task, entity) for task, entity in keys)
        return {(task, entity): intent for (_, task, entity), intent in found.items()}

    async def of_keys(
        self, keys: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Intent]:
        """(batch, task, entity) → the intent recorded for it, for those that have one: one
        query however many batches (the follow-ups of one job each record under their own)."""
        wanted = set(keys)
        if not wanted:
            return {}
        batches = sorted({b for b, _, _ in wanted})
        query = {
            "batch_id": batches[0] if len(batches) == 1 else {"$in": batches},
            "entity_id": {"$in": sorted({e for _, _, e in wanted})},
        }
        found: dict[tuple[str, str, str], Intent] = {}
        async for doc in self._intents.find(query):
            key = (doc["batch_id"], doc["task_id"], doc["entity_id"])
            if key in wanted:
                found[key] = Intent.from_mongo(doc, created=False)
        return found

    async def settled_of(
        self, batch_id: str, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], Document]:
        """(task, entity) → the batch's intent for it, for those no longer pending."""
        wanted = set(keys)
        if not wanted:
            return {}
        query = {
            "batch_id": batch_id,
            "entity_id": {"$in": sorted({e for _, e in wanted})},
            "status": {"$ne": "pending"},
        }
        found: dict[tuple[str, str], Document] = {}
        async for doc in self._intents.find(query):
            if (key := (doc["task_id"], doc["entity_id"])) in wanted:
                found[key] = doc
        return found

    async def resolve(
        self,
        intent_id: Any,
        *,
        status: IntentStatus,
        now: datetime,
        expected: IntentStatus = "pending",
        **fields: Any,
    ) -> bool:
        """Move an intent from ``expected`` to ``status``; False when it was not ``expected``.

        ``done`` records when it was applied (Meta's answer goes in ``fields``),
        ``failed`` the error or reason.
        """
        await self._check_fence()
        query = {"_id": intent_id, "status": expected}
        return await self._move(query, _resolution(status, now, fields), count=1) == 1

    async def _move(self, query: Mapping[str, Any], update: Document, *, count: int) -> int:
        """Apply ``update`` to the intents ``query`` finds; how many moved. Under a fence
        (checked by the caller just before), only intents it holds move, and a shortfall
        is looked into: a newer holder's acquisition took them (Fenced), or someone
        settled them first."""
        if self.fence is None:
            return int((await self._intents.update_many(query, update)).modified_count)
        held = {**query, "holder_fence": self.fence.value}
        moved = int((await self._intents.update_many(held, update)).modified_count)
        if moved < count:
            await self._check_fence()
        return moved

    async def resolve_many(self, resolutions: Sequence[Resolution], *, now: datetime) -> int:
        """Settle pending intents (each a compare-and-set on ``pending``); how many were still
        pending and are now settled. Intents settled alike (the same status and fields — most
        writes answer ``{"success": true}``) are settled by one command."""
        alike: dict[bytes, list[Resolution]] = defaultdict(list)
        for resolution in resolutions:
            key = orjson.dumps(
                [resolution.status, resolution.fields],
                option=orjson.OPT_SORT_KEYS,
                default=str,
            )
            alike[key].append(resolution)
        settled = 0
        # no fence check first: under a fence only intents it holds move, and a shortfall
        # is looked into (_move) — a newer holder's acquisition took them over
        for group in alike.values():
            first = group[0]
            ids = [r.intent_id for r in group]
            query = {"_id": {"$in": ids}, "status": "pending"}
            update = _resolution(first.status, now, first.fields)
            settled += await self._move(query, update, count=len(ids))
        return settled

    async def note(self, intent_id: Any, **fields: Any) -> None:
        """Add ``fields`` to a pending intent without settling it (e.g. an unanswered write).
        Never fenced: what Meta answered a write already sent is kept for whoever settles it."""
        await self._intents.update_one({"_id": intent_id, "status": "pending"}, {"$set": fields})

    async def unconfirmed(self, intent_id: Any, *, error: dict[str, Any]) -> None:
        """Meta's answer to this pending intent's write was lost: keep the error, and flag the
        intent ``record_unconfirmed`` — its batch's record says ``write_unconfirmed`` — until
        whoever settles it has corrected that record (:meth:`record_corrected`)."""
        await self.note(intent_id, error=error, record_unconfirmed=True)

    async def flag_unconfirmed(self, intent_ids: Sequence[Any]) -> None:
        """These intents' writes were sent, and their batch's records say ``write_unconfirmed``
        (a holder fenced out before it could settle them): flag them ``record_unconfirmed``,
        pending or already settled, so whoever settles them — or the reaper's repair, when that
        settler dies before the record — corrects the records. Never fenced, as :meth:`note`."""
        if intent_ids:
            await self._intents.update_many(
                {"_id": {"$in": list(intent_ids)}}, {"$set": {"record_unconfirmed": True}}
            )

    async def record_corrected(self, intent_id: Any) -> None:
        """The record of a settled intent's write says what the write did: drop the flag."""
        await self._intents.update_one(
            {"_id": intent_id, "status": {"$ne": "pending"}}, {"$unset": {"record_unconfirmed": ""}}
        )

    async def uncorrected(self, *, limit: int = 100) -> list[Document]:
        """Settled intents still flagged ``record_unconfirmed``: their settler stopped (a
        SIGKILL, MongoDB gone) before correcting the record of their batch."""
        query = {"record_unconfirmed": True, "status": {"$ne": "pending"}}
        return [d async for d in self._intents.find(query).limit(limit)]

    async def pending(self, *, batch_ids: Sequence[str]) -> list[Document]:
        """Pending intents of some batches."""
        query = {"status": "pending", "batch_id": {"$in": list(batch_ids)}}
        return [d async for d in self._intents.find(query)]

    async def orphaned(self, *, started_before: datetime, limit: int = 1000) -> list[Document]:
        """Pending intents whose job started before ``started_before`` (their owner is gone)."""
        query = {"status": "pending", "created_at": {"$lt": started_before}}
        cursor = self._intents.find(query).sort("created_at").limit(limit)
        return [d async for d in cursor]

    async def latest_of_task(
        self, rule_id: str, task_id: str, *, action: str, other_than: str
    ) -> list[Document]:
        """Every intent of the task in the latest other batch where it did ``action`` (what
        a ``rebalance_budget`` left its group, :func:`ruleengine.rules.plan.rebalance.owed`).

        Latest by the account's write-lock fence it was recorded under, which only grows
        from one holder to the next — no clock, so no host's step reorders two runs — and
        by ``created_at`` among intents recorded before fences were."""
        query = {"rule_id": rule_id, "task_id": task_id, "action": action}
        cursor = (
            self._intents.find({**query, "batch_id": {"$ne": other_than}})
            .sort([("lock_fence", -1), ("created_at", -1)])
            .limit(1)
        )
        last = [d async for d in cursor]
        if not last:
            return []
        return [d async for d in self._intents.find({**query, "batch_id": last[0]["batch_id"]})]

    async def fences_of(
        self, entity_id: str, batch_ids: Iterable[str]
    ) -> dict[tuple[str, str], int | None]:
        """(batch id, task id) → the write-lock fence each intent of ``entity_id`` in those
        batches was recorded under (None: recorded outside a lock), by the unique index."""
        query = {"batch_id": {"$in": list(dict.fromkeys(batch_ids))}, "entity_id": entity_id}
        projection = {"batch_id": 1, "task_id": 1, "lock_fence": 1}
        return {
            (str(d["batch_id"]), str(d["task_id"])): d.get("lock_fence")
            async for d in self._intents.find(query, projection)
        }

    async def copies_of(self, entity_id: str) -> set[str]:
        """The copies of ``entity_id`` the engine's intents name (what each copy made)."""
        query = {"entity_id": entity_id, "field": "copies", "response": {"$ne": None}}
        found: set[str] = set()
        async for doc in self._intents.find(query, {"response": 1}):
            response = doc.get("response")
            if isinstance(response, dict):
                found.update(str(i) for i in response.get("copied_ids") or [])
                if response.get("copied_id"):
                    found.add(str(response["copied_id"]))
        return found

    async def schedules_of(self, entity_id: str, *, other_than: Any) -> frozenset[str]:
        """The budget schedules of ``entity_id`` other intents than ``other_than`` made (their
        ids, as Meta answered them): a schedule found at Meta is one intent's, never two."""
        query = {
            "entity_id": entity_id,
            "field": "budget_schedules",
            "schedule.op": "create",
            "response.id": {"$exists": True},
            "_id": {"$ne": other_than},
        }
        found = {
            str(doc["response"]["id"])
            async for doc in self._intents.find(query, {"response": 1})
            if isinstance(doc.get("response"), dict)
        }
        return frozenset(found)

    async def for_batch(self, batch_id: str) -> list[Document]:
        """Every intent of a batch."""
        return [d async for d in self._intents.find({"batch_id": batch_id}).sort("_id")]

    async def pending_elsewhere(
        self, entity_ids: Sequence[str], *, other_than: str | None
    ) -> list[Document]:
        """Pending intents on these entities left by *other* batches than ``other_than``
        (None: by any batch — a caller acting for several batches tells them apart)."""
        # status first: the embedded server looks the first clause up (the pending intents,
        # few), not each entity's every intent
        query: Document = {"status": "pending", "entity_id": {"$in": list(entity_ids)}}
        if other_than is not None:
            query["batch_id"] = {"$ne": other_than}
        return [d async for d in self._intents.find(query)]

    async def budget_history(
        self, entity_ids: Sequence[str], *, now: datetime, too_low_since: datetime
    ) -> BudgetHistory:
        """The budget facts of some entities the write path checks before a budget write,
        in two queries: the engine's changes in the last hour, Meta's blocks (code 17) still in
        force, and the budgets Meta refused as too low since ``too_low_since``."""
        if not entity_ids:
            return BudgetHistory()
        budget = {"entity_id": {"$in": list(entity_ids)}, "field": {"$in": BUDGET_FIELDS}}
        fields = {"entity_id": 1, "field": 1, "status": 1, "reason": 1, "target": 1}
        history = BudgetHistory(changes=defaultdict(list))
        # two queries, no $or: the changes applied in the hour (a range of the index's last
        # key), and the refusals kept on what was never applied (applied_at null)
        applied = budget | {"applied_at": {"$gte": hour_ago(now)}}
        async for doc in self._intents.find(applied, fields | {"applied_at": 1, "changed": 1}):
            if doc.get("status") == "done" and doc.get("changed") is True:
                history.changes[doc["entity_id"]].append(
                    AppliedChange(doc["applied_at"], doc.get("target"))
                )
        refused = budget | {
            "applied_at": None,
            "status": "failed",
            "reason": {"$in": [BUDGET_LIMITED, BUDGET_TOO_LOW]},
        }
        async for doc in self._intents.find(refused, fields | {"allowed_at": 1, "resolved_at": 1}):
            entity = doc["entity_id"]
            if doc.get("reason") == BUDGET_LIMITED:
                allowed = doc.get("allowed_at")
                if isinstance(allowed, datetime) and allowed > now:
                    blocked = history.blocked_until.get(entity)
                    history.blocked_until[entity] = max(blocked or allowed, allowed)
            elif isinstance(target := doc.get("target"), int) and _since(doc, too_low_since):
                key = (entity, doc["field"])
                history.too_low[key] = max(history.too_low.get(key, target), target)
        for changes in history.changes.values():
            changes.sort(key=lambda change: change.at)
        return history

    async def recent_changes(
        self, entity_ids: Sequence[str], fields: Sequence[str], *, since: datetime
    ) -> list[PastChange]:
        """Changes of these entities' ``fields`` by every rule since ``since`` (the job's time of
        each intent): intents ``done``, or still ``pending`` (their write may have landed),
        oldest first. What the change budget and oscillation detection count."""
        if not entity_ids or not fields:
            return []
        query = {
            "entity_id": {"$in": list(entity_ids)},
            "field": {"$in": list(fields)},
            "status": {"$in": list(FIRED)},
            "created_at": {"$gte": since},
        }
        projection = {
            k: 1
            for k in (
                "batch_id",
                "rule_id",
                "task_id",
                "entity_id",
                "entity_name",
                "field",
                "before",
                "target",
                "status",
                "created_at",
                "on_oscillation",
            )
        }
        cursor = self._intents.find(query, projection).sort([("created_at", 1), ("_id", 1)])
        return [PastChange.from_mongo(d) async for d in cursor]

    async def cooling(
        self,
        rule_id: str,
        pairs: Iterable[tuple[str, str]],
        *,
        now: datetime,
        longest_minutes: int,
        other_than: str,
    ) -> dict[tuple[str, str], datetime]:
        """(task, entity) → until, for the pairs whose fired intents still cool them down.

        ``now`` is by MongoDB's clock (the job's ``db_now``), as each intent's ``cooling_from``
        is: a step of a worker's clock neither shortens nor stretches a cooldown. (An intent
        recorded before intents had ``cooling_from`` was given its ``created_at`` at start,
        :func:`ruleengine.store.db.ensure_indexes`.) Intents of the batch ``other_than`` are
        ignored: a redelivered batch meets its own intents on the write path
        (``already_applied``), not as a cooldown.

        One query, on the (rule, cooling_from) index: the rule's intents of the longest
        cooldown's window, whatever its history before; the pairs are picked out here.
        """
        wanted = set(pairs)
        if not wanted or longest_minutes <= 0:
            return {}
        since = now - timedelta(minutes=longest_minutes)
        query = {"rule_id": rule_id, "cooling_from": {"$gt": since}}
        projection = dict.fromkeys(
            ("task_id", "entity_id", "status", "batch_id", "cooling_from", "cooldown_minutes"), 1
        )
        active: dict[tuple[str, str], datetime] = {}
        async for doc in self._intents.find(query, projection):
            key = (doc.get("task_id"), doc.get("entity_id"))
            if key not in wanted or doc.get("status") not in FIRED:
                continue
            if doc.get("batch_id") == other_than:
                continue
            until = doc["cooling_from"] + timedelta(minutes=doc.get("cooldown_minutes") or 0)
            if until > now and (key not in active or until > active[key]):
                active[key] = until
        return active

    async def drop_expired(self, *, now: datetime) -> int:
        """Delete the intents whose ``expires_at`` has passed; how many.

        Not a TTL index: the embedded server's TTL monitor walks every document of the
        collection under its global lock each minute (1.4 s at 21,000 intents), where this
        range of a sparse index (intents kept for good have no entry) reads only what
        expired."""
        return int((await self._intents.delete_many({"expires_at": {"$lt": now}})).deleted_count)

    async def db_time(self) -> datetime:
        """MongoDB's clock now: what cooldowns are stamped (``cooling_from``) and compared with."""
        return await server_time(self._intents.database)

    async def execution_counts(
        self, rule_id: str, pairs: Iterable[tuple[str, str]], *, other_than: str
    ) -> dict[tuple[str, str], int]:
        """(task, entity) → how many times the task changed the entity, ever (the pairs
        with at least one).

        Counted over every version of the rule: intents that are ``done``, and those still
        ``pending`` (their write may have landed). Intents of the batch ``other_than`` are
        left out: a redelivered batch meets its own on the write path (``already_applied``).
        One aggregation (on the (rule, task, entity, status) index in MongoDB).
        """
        wanted = set(pairs)
        if not wanted:
            return {}
        pipeline = execution_count_pipeline(rule_id, wanted, other_than=other_than)
        counts: dict[tuple[str, str], int] = {}
        async for doc in await self._intents.aggregate(pipeline):
            key = (doc["_id"]["t"], doc["_id"]["e"])
            if key in wanted:
                counts[key] = int(doc["n"])
        return counts


def execution_count_pipeline(
    rule_id: str, pairs: Iterable[tuple[str, str]], *, other_than: str
) -> list[dict[str, Any]]:
    """The aggregation :meth:`IntentStore.execution_counts` runs."""
    wanted = set(pairs)
    match = {
        "rule_id": rule_id,
        "task_id": {"$in": sorted({task for task, _ in wanted})},
        "entity_id": {"$in": sorted({entity for _, entity in wanted})},
        "status": {"$in": list(FIRED)},
        "batch_id": {"$ne": other_than},
    }
    return [
        {"$match": match},
        {"$group": {"_id": {"t": "$task_id", "e": "$entity_id"}, "n": {"$sum": 1}}},
    ]


def hour_ago(now: datetime) -> datetime:
    """``now`` minus one hour (the window of Meta's ad-set budget-change limit)."""
    return now - timedelta(hours=1)
