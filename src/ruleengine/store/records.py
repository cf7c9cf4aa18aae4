"""What the worker records: batch rows and execution records.

* A **batch** row per (rule, account, scheduled time), upserted on ``batch_id``:
  a redelivered job reuses it and shows ``execute_count`` 2; its counts describe
  what the batch did across deliveries.
* **Execution records**, one per (batch, task, entity) — unique on ``key`` —
  written in bulk and updated, never duplicated, by a redelivery or the reaper.

Action intents and the cooldowns derived from them are in :mod:`ruleengine.store.intents`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from pymongo import DESCENDING, ReplaceOne, UpdateOne

from ruleengine import constants as c
from ruleengine.errors import NotFoundError
from ruleengine.store.batchstats import RuleDurations, rule_durations
from ruleengine.store.db import Database, Document, Page, bump_counter, insert_new
from ruleengine.store.evaluations import (
    IN_CHUNK,
    EvaluationStore,
    acted,
    assemble,
    overlay,
    slim,
)

BatchStatus = Literal["RUNNING", "DONE", "FAILED", "ABANDONED"]
#: The outcomes of a run's record that are a decision a rule's impact compares: a change
#: made, one proposed for approval, and one held out (docs/impact.md).
DECISIONS: Final = ("applied", "awaiting_approval", "held_out")
# Batches whose job ended without writing (all) its records: the reaper recovers them.
_UNRECORDED: tuple[BatchStatus, ...] = ("ABANDONED", "FAILED")


def record_key(batch_id: str, task_id: str, entity_id: str) -> str:
    """The unique key of the execution record of (batch, task, entity)."""
    return f"{batch_id}|{task_id}|{entity_id}"


@dataclass(frozen=True)
class BatchCounts:
    """What a batch did, counted over its execution records (across deliveries)."""

    evaluated: int = 0
    affected: int = 0
    applied: int = 0
    failed: int = 0
    change_budget: int = 0  # changes the change budget clamped or skipped

    @classmethod
    def of(cls, records: Iterable[Document]) -> BatchCounts:
        """Count evaluation records (follow-up records of the batch are not its evaluations)."""
        rows = [r for r in records if r.get("kind") != "followup"]
        return cls(
            evaluated=sum(r.get("passed") is not None for r in rows),
            affected=len({r["entity_id"] for r in rows if r.get("passed")}),
            applied=sum(r.get("outcome") == "applied" for r in rows),
            failed=sum(r.get("outcome") == "failed" for r in rows),
            change_budget=sum("change_budget" in (r.get("clamped_by") or []) for r in rows),
        )

    def as_fields(self) -> dict[str, int]:
        """The batch row's count fields."""
        return {
            "evaluated_count": self.evaluated,
            "affected_count": self.affected,
            "applied_count": self.applied,
            "failed_count": self.failed,
            "change_budget_count": self.change_budget,
        }


def merge_record(earlier: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The record of (batch, task, entity) after a delivery: what the *batch* did.

    A change applied by an earlier delivery stays the record (a redelivery that
    finds it done adds nothing); a redelivery that finds a done intent without
    a record (its first delivery died before recording) records the change as
    applied, recovered from the intent.
    """
    if earlier is not None and earlier.get("outcome") == "applied":
        return earlier
    if new["reason"] == "already_applied":
        return new | {"outcome": "applied", "executed": True, "recovered_by": "redelivery"}
    return new


@dataclass(frozen=True)
class BatchStart:
    """What is known when a job starts."""

    batch_id: str
    rule_id: str
    rule_name: str
    rule_version: int
    account: str
    level: str
    scheduled_at: datetime
    total: int
    job_id: str | None
    worker: str
    #: when its entities were listed, and the account's write-lock fence read before that
    dispatched_at: datetime | None = None
    listed_fence: int | None = None


class BatchStore:
    """Batch rows (the "benchmark rows" of the Rule Logs and Benchmark screens)."""

    def __init__(self, db: Database) -> None:
        self._batches = db[c.BATCHES]

    async def start(
        self, start: BatchStart, *, now: datetime, store_now: datetime | None = None
    ) -> Document:
        """Upsert the row as RUNNING and count this delivery (``execute_count``).

        ``now`` is the run's time (``started_at``: shown, rolled up by day); ``store_now``
        the same moment by MongoDB's clock (``last_started_at``: what the reaper compares
        with its own reading of that clock; None: ``now``).

        Two deliveries starting the same row at once (two undos of one batch asked together)
        each count one: the count is raised by a compare-and-set (:func:`bump_counter`).
        """
        running = {
            "status": "RUNNING",
            "last_started_at": now if store_now is None else store_now,
            "progress": {"done": 0, "total": start.total},
            "job_id": start.job_id,
            "worker": start.worker,
            "finished_at": None,
            "error": None,
        }
        first = {
            "rule_id": start.rule_id,
            "rule_name": start.rule_name,
            "rule_version": start.rule_version,
            "account": start.account,
            "level": start.level,
            "scheduled_at": start.scheduled_at,
            "started_at": now,
        }
        if start.listed_fence is not None:
            first |= {"dispatched_at": start.dispatched_at, "listed_fence": start.listed_fence}
        return await bump_counter(
            self._batches,
            start.batch_id,
            "execute_count",
            running,
            on_insert=first,
            likely_new=True,
        )

    async def progress(
        self,
        batch_id: str,
        *,
        done: int,
        total: int,
        phase: str | None = None,
        percent: float | None = None,
    ) -> None:
        """Report how far the job has walked its entity list (or, with ``phase`` ``fetch``,
        how far its async Insights reports are, in ``percent``)."""
        progress: dict[str, Any] = {"done": done, "total": total}
        if phase is not None:
            progress |= {"phase": phase, "percent": percent}
        await self._batches.update_one(
            {"_id": batch_id, "status": "RUNNING"}, {"$set": {"progress": progress}}
        )

    async def finish(
        self, batch_id: str, *, status: BatchStatus, now: datetime, **fields: Any
    ) -> None:
        """Close the row with its counts, Graph cost, trace and duration (or error)."""
        await self._batches.update_one(
            {"_id": batch_id}, {"$set": {"status": status, "finished_at": now, **fields}}
        )

    async def link_undo(self, batch_id: str, undo_id: str, *, by: str, now: datetime) -> None:
        """Link a batch and a batch undoing it both ways: ``undos`` lists every undo of the
        batch, ``undone_by`` / ``undone_at`` name its first; the undo row says ``undoes``."""
        await self._batches.update_one({"_id": batch_id}, {"$addToSet": {"undos": undo_id}})
        await self._batches.update_one(
            {"_id": batch_id, "undone_by": None}, {"$set": {"undone_by": undo_id, "undone_at": now}}
        )
        await self._batches.update_one(
            {"_id": undo_id}, {"$set": {"undoes": batch_id, "by": by, "kind": "undo"}}
        )

    async def note_not_undone(self, batch_id: str, executions: list[str]) -> None:
        """Keep on the batch's row which of its executions its undos could not set back."""
        await self._batches.update_one({"_id": batch_id}, {"$set": {"not_undone": executions}})

    async def get(self, batch_id: str) -> Document:
        """One batch row; raises NotFoundError."""
        doc = await self._batches.find_one({"_id": batch_id})
        if doc is None:
            raise NotFoundError(f"batch '{batch_id}' does not exist")
        return doc

    async def status(self, batch_id: str) -> str | None:
        """The status of a batch, None when there is no such row."""
        doc = await self._batches.find_one({"_id": batch_id}, {"status": 1})
        return None if doc is None else str(doc["status"])

    async def listings(self, batch_ids: Iterable[str]) -> dict[str, tuple[int, datetime]]:
        """batch id → (the account's fence read before its listing, when it was listed), for
        the batches of ``batch_ids`` whose job said (a job from before it says nothing)."""
        ids = list(dict.fromkeys(batch_ids))
        found: dict[str, tuple[int, datetime]] = {}
        query = {"_id": {"$in": ids}, "listed_fence": {"$ne": None}}
        async for doc in self._batches.find(query, {"listed_fence": 1, "dispatched_at": 1}):
            found[str(doc["_id"])] = (int(doc["listed_fence"]), doc["dispatched_at"])
        return found

    async def page(self, *, filters: dict[str, Any], limit: int = 50, skip: int = 0) -> Page:
        """Batch rows matching ``filters`` (equality on rule_id/account/status), newest first."""
        query = {k: v for k, v in filters.items() if v is not None}
        cursor = self._batches.find(query).sort("started_at", DESCENDING).skip(skip).limit(limit)
        items = [d async for d in cursor]
        return Page(items=items, total=await self._batches.count_documents(query))

    async def stale_running(self, *, older_than: datetime) -> list[Document]:
        """RUNNING batches whose last delivery started before ``older_than``."""
        cursor = self._batches.find({"status": "RUNNING", "last_started_at": {"$lt": older_than}})
        return [d async for d in cursor]

    async def abandon(self, batch_id: str, *, started_before: datetime, now: datetime) -> bool:
        """Mark a stuck batch ABANDONED (compare-and-set: still RUNNING and still stale)."""
        result = await self._batches.update_one(
            {"_id": batch_id, "status": "RUNNING", "last_started_at": {"$lt": started_before}},
            {
                "$set": {
                    "status": "ABANDONED",
                    "finished_at": now,
                    "error": "worker lost (job timeout passed)",
                }
            },
        )
        return result.modified_count == 1

    async def unrecovered(self, *, limit: int = 100) -> list[Document]:
        """Batches that ended without (all) their records, not yet recovered from their intents.

        ABANDONED: the worker died. FAILED: the job stopped on an error — one from
        MongoDB, say — possibly after some of its writes had landed.
        """
        query = {"status": {"$in": list(_UNRECORDED)}, "recovered_at": None}
        return [d async for d in self._batches.find(query).sort("finished_at").limit(limit)]

    async def mark_recovered(self, batch_id: str, counts: BatchCounts, *, now: datetime) -> None:
        """Record that the reaper turned the batch's intents into records (and recount it)."""
        await self._batches.update_one(
            {"_id": batch_id, "status": {"$in": list(_UNRECORDED)}},
            {"$set": {"recovered_at": now, **counts.as_fields()}},
        )

    async def recount(self, batch_id: str, counts: BatchCounts) -> None:
        """Set a finished batch's counts again (a record of it was corrected)."""
        await self._batches.update_one(
            {"_id": batch_id, "status": {"$ne": "RUNNING"}}, {"$set": counts.as_fields()}
        )

    async def durations(self, *, since: datetime) -> list[RuleDurations]:
        """Per rule: durations and cost of finished batches started since ``since`` (in MongoDB)."""
        return await rule_durations(self._batches, since=since)


def _writing(record: Document) -> UpdateOne | ReplaceOne[Document]:
    """The operation that makes the stored record with the same key ``record``: a slim one
    replaces it whole (nothing an older, whole record held is left beside the row), another
    sets its fields."""
    if IN_CHUNK in record:
        return ReplaceOne({"key": record["key"]}, record, upsert=True)
    return UpdateOne({"key": record["key"]}, {"$set": record}, upsert=True)


class ExecutionStore:
    """What a batch evaluated: its chunks of evaluations (:mod:`ruleengine.store.evaluations`)
    and an execution record per (entity, task) where something happened or was attempted."""

    def __init__(self, db: Database) -> None:
        self._executions = db[c.EXECUTIONS]
        self.evaluations = EvaluationStore(db)

    async def keep_run(
        self, records: Sequence[Document], *, earlier: Mapping[str, Document]
    ) -> None:
        """Store a run's records (every pair): its chunks first — the whole run — then a
        record for each pair that acted (``earlier``: what former deliveries recorded, kept).
        A worker killed between the two leaves chunks the reaper writes the records from.

        The records are slim (:func:`~ruleengine.store.evaluations.slim`): all but what finds
        them is left to the chunk row written from them, and every reader here puts the two
        back together. A former delivery's record of a pair that did not act this time is
        kept whole as it was read: the new row no longer tells it (a settling may still
        correct it)."""
        first = not earlier and bool(records) and records[0].get("delivery") == 1
        where = await self.evaluations.write(records, first=first)
        mine = [
            slim(r, where[str(r["entity_id"])]) if str(r["entity_id"]) in where else r
            for r in records
            if acted(r) and r is not earlier.get(str(r["key"]))
        ]
        superseded = [
            {k: v for k, v in earlier[key].items() if k != "_id"}
            for r in records
            if not acted(r) and (key := str(r["key"])) in earlier
        ]
        await self.upsert_many([r for r in mine if str(r["key"]) in earlier] + superseded)
        await self._insert_or_replace([r for r in mine if str(r["key"]) not in earlier])

    async def _insert_or_replace(self, records: Sequence[Document]) -> None:
        """Insert records no former delivery wrote (the embedded server inserts several times
        faster than it upserts); one that appeared meanwhile (the reaper completing the batch)
        is replaced as :meth:`upsert_many` would."""
        if not records:
            return
        taken = await insert_new(self._executions, [dict(r) for r in records])
        await self.upsert_many([records[i] for i in sorted(taken)])

    async def rows(self, batch_id: str) -> list[Document]:
        """Every pair of a batch: its record where it has one, its chunk row otherwise (a batch
        of the older layout: its records), in evaluation order."""
        records = await self._find({"batch_id": batch_id}, limit=0)
        return overlay(await self.evaluations.of_batch(batch_id), records)

    async def counts(self, batch_id: str) -> BatchCounts:
        """The batch's counts, over every pair it evaluated (see :meth:`rows`)."""
        return BatchCounts.of(await self.rows(batch_id))

    async def page(
        self, batch_id: str, *, limit: int, offset: int, acted_only: bool = False
    ) -> Page:
        """A page of the batch's rows (all pairs, or those with a record of their own)."""
        rows = await self.rows(batch_id)
        if acted_only:
            rows = [r for r in rows if acted(r) or r.get("kind") == "followup"]
        return Page(items=rows[offset : offset + limit], total=len(rows))

    async def missing_records(self, batch_id: str) -> list[Document]:
        """The rows of a batch's chunks that acted but have no record (its worker died between
        writing its chunks and its records)."""
        evaluations = await self.evaluations.of_batch(batch_id)
        if not evaluations:
            return []
        cursor = self._executions.find({"batch_id": batch_id}, {"key": 1})
        keys = {d["key"] async for d in cursor}
        return [r for r in evaluations if acted(r) and str(r["key"]) not in keys]

    async def upsert_many(self, records: Sequence[Document]) -> None:
        """Write records in bulk over the record with the same ``key``: a whole one sets its
        fields, a slim one replaces it whole (:func:`_writing`)."""
        ops = [_writing(r) for r in records]
        if ops:
            await self._executions.bulk_write(ops, ordered=False)

    async def insert_missing(self, records: Sequence[Document]) -> int:
        """Write the records whose ``key`` has none yet (never overwrite); returns how many."""
        ops = [UpdateOne({"key": r["key"]}, {"$setOnInsert": r}, upsert=True) for r in records]
        if not ops:
            return 0
        return (await self._executions.bulk_write(ops, ordered=False)).upserted_count

    async def get(self, key: str) -> Document | None:
        """The record with ``key``, if any (whole: a slim one with its chunk row)."""
        record = await self._executions.find_one({"key": key})
        return None if record is None else (await self._assembled([record]))[0]

    async def correct(self, key: str, fields: Document) -> None:
        """Change some fields of the record with ``key``."""
        await self._executions.update_one({"key": key}, {"$set": fields})

    async def by_key(self, batch_id: str) -> dict[str, Document]:
        """The batch's records by ``key`` (what earlier deliveries recorded)."""
        records = await self._find({"batch_id": batch_id}, limit=0, ordered=False)
        return {d["key"]: d for d in await self._assembled(records)}

    async def for_batch(self, batch_id: str, *, limit: int = 5000) -> list[Document]:
        """Every record of a batch (``limit`` 0: all), in evaluation order."""
        return await self._assembled(await self._find({"batch_id": batch_id}, limit=limit))

    async def _find(self, query: Document, *, limit: int, ordered: bool = True) -> list[Document]:
        """Stored records as they are (slim ones too), in the order they were written."""
        cursor = self._executions.find(query)
        if ordered:
            cursor = cursor.sort("_id")
        return [d async for d in cursor.limit(limit)]

    async def whole(self, records: list[Document]) -> list[Document]:
        """Records read straight from the collection, whole (a slim one with its chunk row):
        what a check over every record of the store compares."""
        return await self._assembled(records)

    async def _assembled(
        self, records: list[Document], rows: Iterable[Document] = ()
    ) -> list[Document]:
        """Records whole: each slim one put together with its chunk row (from ``rows`` when
        there, else read from the chunks it names)."""
        known = {str(r["key"]): r for r in rows}
        missing = [r for r in records if IN_CHUNK in r and str(r["key"]) not in known]
        if missing:
            known |= await self.evaluations.rows_for(missing)
        return [assemble(r, known.get(str(r["key"]))) for r in records]

    async def held_out_until(
        self,
        rule_id: str,
        pairs: Iterable[tuple[str, str]],
        *,
        now: datetime,
        other_than: str,
    ) -> dict[tuple[str, str], datetime]:
        """(task, entity) → until, for the pairs a holdout kept from a change whose cooldown
        would still run (their ``held_out`` records' ``next_execute_at``; docs/impact.md).
        Records of the batch ``other_than`` are left out (a redelivery meets its own)."""
        wanted = set(pairs)
        if not wanted:
            return {}
        query = {
            "entity_id": {"$in": sorted({entity for _, entity in wanted})},
            "rule_id": rule_id,
            "outcome": "held_out",
            "next_execute_at": {"$gt": now},
            "batch_id": {"$ne": other_than},
        }
        projection = {"task_id": 1, "entity_id": 1, "next_execute_at": 1}
        active: dict[tuple[str, str], datetime] = {}
        async for doc in self._executions.find(query, projection):
            key, until = (doc["task_id"], doc["entity_id"]), doc["next_execute_at"]
            if key in wanted and (key not in active or until > active[key]):
                active[key] = until
        return active

    async def rules_holding_out(self, *, since: datetime) -> list[str]:
        """The rules that held an entity out since ``since`` (the ones whose effect is measured)."""
        query = {"outcome": "held_out", "created_at": {"$gte": since}}
        return sorted(str(r) for r in await self._executions.distinct("rule_id", query))

    async def decisions(self, rule_id: str, *, since: datetime) -> list[Document]:
        """The rule's decisions since ``since`` (what its impact compares), oldest first:
        changes made, proposed for approval and held out, as the runs recorded them (an
        approved change's later write, an undo and a follow-up are not decisions). Of each:
        its key, task, entity, account, rule version, outcome, time and batch. A slim
        record's account and version are its chunk's (read with the chunk's other top-level
        fields, without decoding a row)."""
        query = {
            "rule_id": rule_id,
            "outcome": {"$in": list(DECISIONS)},
            "kind": {"$nin": ["followup", "approval", "undo"]},
            "created_at": {"$gte": since},
        }
        projection = dict.fromkeys(
            (
                "key",
                "task_id",
                "entity_id",
                "account",
                "rule_version",
                "outcome",
                "created_at",
                "batch_id",
                IN_CHUNK,
            ),
            1,
        )
        cursor = self._executions.find(query, projection).sort("created_at", 1)
        records = [d async for d in cursor]
        runs = await self.evaluations.runs_of(r for r in records if IN_CHUNK in r)
        return [
            {k: v for k, v in r.items() if k != IN_CHUNK}
            | {k: v for k, v in runs.get(str(r["batch_id"]), {}).items() if k not in r}
            for r in records
        ]

    async def undone(self, rule_id: str, *, since: datetime) -> set[str]:
        """The keys of the rule's execution records whose change an undo since ``since``
        put back (the undo's own record, outcome ``applied``, names the one it undoes)."""
        query = {
            "rule_id": rule_id,
            "kind": "undo",
            "outcome": "applied",
            "created_at": {"$gte": since},
        }
        cursor = self._executions.find(query, {"undoes": 1})
        return {str(d["undoes"]) async for d in cursor if d.get("undoes")}

    async def for_entity(
        self, entity_id: str, *, since: datetime, limit: int = 2000
    ) -> list[Document]:
        """The entity's evaluations since ``since``, newest first: its records (index
        ``entity_id, created_at``) and the rows of the chunks that hold it (index
        ``entity_ids, created_at``) where it did not act."""
        query = {"entity_id": entity_id, "created_at": {"$gte": since}}
        cursor = self._executions.find(query).sort("created_at", DESCENDING).limit(limit)
        rows = await self.evaluations.for_entity(entity_id, since=since, limit=limit)
        records = await self._assembled([d async for d in cursor], rows)
        quiet = [r for r in rows if not acted(r)]
        both = sorted(records + quiet, key=lambda r: r["created_at"], reverse=True)
        return both[:limit]
