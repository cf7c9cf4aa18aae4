"""Evaluations stored compactly: one document per (batch, chunk of ≤ 1,000 entities).

A run evaluates every (entity, task) of its listing; most of them do nothing (not matched,
no data, still cooling down). Those are not worth a document each: a batch keeps what every
pair saw in its **chunks** — one ``evaluations`` document per ≤ :data:`CHUNK_ENTITIES`
entities, holding the entity ids (uncompressed and indexed, for the entity timeline) and the
rows, one per pair, BSON-encoded and compressed (LZMA2), with what rows share factored out —
what every row of the run holds alike (batch, rule, account, scheduled and evaluated times, each
task's action and match, the stages every pair waited for), the entity as listed (once per
entity, not once per task), and each task's conditions as its first row saw them (a row keeps
what its own conditions saw that differs: mostly the values). An execution record — one
document per pair, with before → after, Meta's answer, intent and follow-up — is kept in
``executions`` for the pairs where something happened or was attempted (:func:`acted`); a
chunk holds those pairs' rows too, so a batch whose records were never written (its worker
died between the two writes) is still whole, and the reaper writes the records from it. Such
a record is slim (:func:`slim`): it keeps what finds it and what queries filter on, the rest
is the row's (written from the same record a moment before), and readers put the two
together (:func:`assemble`).

:func:`encode` and :func:`decode` are pure and exact: decoding a batch's chunks gives back
every record its run built, field for field (tests/store/test_evaluations.py).

(Over 300 lines: the format, its reader for every question the product asks of it — a batch
page, an entity's evaluations, an account's conditions for the lag learner — and the store.)
"""

from __future__ import annotations

import lzma
import re
import zlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import bson
from bson.codec_options import CodecOptions
from pymongo import DESCENDING, UpdateOne

from ruleengine import constants as c
from ruleengine.store.db import Database, Document, insert_new

#: Entities per chunk: a chunk stays far below MongoDB's 16 MiB with room for wide rows.
CHUNK_ENTITIES: Final = 1000
#: Chunks of a batch looked up at first (a batch of up to 8,000 entities: one query).
FIRST_LOOK: Final = 8
#: The layout of ``rows_z`` (bumped if it ever changes; readers know every one they meet):
#: 1 — a row per pair holding its entity and conditions whole; 2 — the entities as listed
#: once per chunk (``e``, by position in ``entity_ids``: a row's ``i``), each task's
#: conditions as its first row saw them (``f``; a row's ``c`` holds what its own differ by),
#: a derived field kept where it is not what it derives to, ``entity_ids`` as numbers where
#: they are ids written out (:func:`_as_number`); LZMA2 where 1 had zlib (28 % smaller
#: again, for ~2 ms more per thousand rows written, ~0.7 ms more per thousand read).
FORMAT: Final = 2
#: Every format :func:`decode` reads (chunks expire; until then any of them may be met).
READABLE: Final = frozenset({1, 2})
#: Fields every record of a run holds alike (factored out of the rows).
RUN_FIELDS: Final = (
    "batch_id",
    "delivery",
    "rule_id",
    "rule_name",
    "rule_version",
    "account",
    "level",
    "scheduled_at",
    "created_at",
)
#: Fields of each task alike for every entity (kept once per task).
TASK_FIELDS: Final = ("action", "match")
#: A row leaves out a field that holds its usual value (restored on decoding).
DEFAULTS: Final[dict[str, Any]] = {
    "reason": None,
    "field": None,
    "before": None,
    "after": None,
    "requested": None,
    "clamped_by": [],
    "oscillation": None,
    "action_metric": None,
    "next_execute_at": None,
    "error": None,
    "response": None,
    "followup": None,
    "approval_id": None,
}
#: Fields a row keeps only where they are not what they follow from (:func:`_derived`).
DERIVED: Final = ("key", "executed", "duration_s", "task_id")
#: A row's own names (a record's fields of these names are kept by a whole row, ``!``).
ROW_NAMES: Final = frozenset({"t", "i", "c", "!"})
#: Pre-fetch skips: nothing was attempted for these (a chunk row is the whole story).
QUIET_REASONS: Final = frozenset({"next_execute_not_reached", "execution_count_limit"})
#: What an acting pair's execution record keeps of itself when its row is in a chunk (a
#: **slim** record): what finds it and what queries of records filter on — its key, batch,
#: rule, task and entity, its outcome and time (and ``next_execute_at`` where it is set; a
#: record's ``kind`` where it has one). Everything else is the row's, which the run wrote from
#: this very record just before; whatever corrects the record later (a settling) writes
#: the fields it changes into it, and those win over the row. The record names its chunk
#: (:data:`IN_CHUNK`) and readers put the two back together (:func:`assemble`).
SLIM_KEEPS: Final = (
    "key",
    "batch_id",
    "rule_id",
    "task_id",
    "entity_id",
    "outcome",
    "created_at",
    "kind",
)
#: The field of a slim record that holds the number of its batch's chunk with the rest.
IN_CHUNK: Final = "in_chunk"
#: A chunk's ``records`` when its acting pairs' records are slim.
SLIM: Final = "slim"
#: An id :func:`_as_number` stores as a number: written out, without a leading zero, in int64.
_DIGITS: Final = re.compile(r"[1-9][0-9]{0,17}")
#: No value at all (what a field is compared with when decoding would not give it back).
_UNSAID: Final = object()
_CODEC: Final[CodecOptions[Document]] = CodecOptions(tz_aware=True, tzinfo=UTC)
#: ``rows_z`` of format 2: raw LZMA2 (no container: a chunk's format says what it is).
_LZMA: Final[dict[str, Any]] = {
    "format": lzma.FORMAT_RAW,
    "filters": [{"id": lzma.FILTER_LZMA2, "preset": 0}],
}


def acted(record: Document) -> bool:
    """True when something happened or was attempted for this (entity, task): it keeps an
    execution record of its own. Not matched (also for lack of data) and the pre-fetch skips
    (cooling down, at the count limit) live in the batch's chunks only."""
    outcome = record.get("outcome")
    if outcome == "not_matched":
        return False
    return not (outcome == "skipped" and record.get("reason") in QUIET_REASONS)


def slim(record: Document, chunk: int) -> Document:
    """The execution record stored for an acting pair whose row is in the batch's ``chunk``
    (:data:`SLIM_KEEPS`; ``next_execute_at`` where it is set: a query looks for one after
    now, which a record without one never matches, as with null)."""
    kept: Document = {k: record[k] for k in SLIM_KEEPS if k in record}
    if record.get("next_execute_at") is not None:
        kept["next_execute_at"] = record["next_execute_at"]
    kept[IN_CHUNK] = chunk
    return kept


def assemble(record: Document, row: Document | None) -> Document:
    """The whole record of a stored one: a slim record put together with its chunk row (the
    record's fields win: they are the ones settled and corrected since), any other as it is.
    A slim record whose chunk is gone (expired a moment before it) is given as it is, with
    the usual values of :data:`DEFAULTS` for what it does not hold, without its marker."""
    if IN_CHUNK not in record:
        return record
    own = {k: v for k, v in record.items() if k != IN_CHUNK}
    if row is None:
        usual = {k: _usual(k) for k in DEFAULTS if k not in own}
        return usual | own
    return {**row, **own}


def _usual(name: str) -> Any:
    """The usual value of a field of :data:`DEFAULTS` (a list of its own for each record)."""
    value = DEFAULTS[name]
    return list(value) if isinstance(value, list) else value


def chunk_id(batch_id: str, number: int) -> str:
    """The ``_id`` of a batch's chunk ``number`` (from 0)."""
    return f"{batch_id}|{number}"


def record_key_of(batch_id: str, task_id: str, entity_id: str) -> str:
    """The unique key of the record of (batch, task, entity) (as :func:`records.record_key`)."""
    return f"{batch_id}|{task_id}|{entity_id}"


@dataclass(frozen=True)
class Chunk:
    """One chunk as stored: its number, entity ids, and the document."""

    number: int
    entity_ids: list[str]
    doc: Document


def encode(records: Sequence[Document], *, expires_field: str = "created_at") -> list[Chunk]:
    """A run's records (every pair, in evaluation order) as chunk documents.

    Records of one entity stay in one chunk; ``records`` must be of one batch and one run
    (they share :data:`RUN_FIELDS`).
    """
    if not records:
        return []
    first = records[0]
    run = {name: first.get(name) for name in RUN_FIELDS}
    tasks: dict[str, dict[str, Any]] = {}
    firsts: dict[str, list[dict[str, Any]]] = {}
    shared = _shared_trace(records)
    groups = _entity_groups(records)
    chunks: list[Chunk] = []
    for number, start in enumerate(range(0, len(groups), CHUNK_ENTITIES)):
        part = groups[start : start + CHUNK_ENTITIES]
        entity_ids = [group[0]["entity_id"] for group in part]
        numbered = [_as_number(entity_id) for entity_id in entity_ids]
        entities = [_listed(group[0]) for group in part]
        common = _Common(run, tasks, firsts, shared, _ids_of(numbered), entities)
        rows = [_row(r, i, common) for i, group in enumerate(part) for r in group]
        payload = {"r": rows, "e": entities, "f": firsts}
        metrics = sorted({str(c.get("metric")) for g in part for r in g for c in _conds(r)})
        doc = {
            "_id": chunk_id(str(run["batch_id"]), number),
            "format": FORMAT,
            "chunk": number,
            **run,
            "tasks": tasks,
            "trace": shared,
            "entity_ids": numbered,
            "metrics": metrics,
            "rows": len(rows),
            "evaluated": sum(r.get("passed") is not None for g in part for r in g),
            "rows_z": bson.Binary(lzma.compress(bson.encode(payload), **_LZMA)),
        }
        chunks.append(Chunk(number, entity_ids, doc))
    for chunk in chunks:  # every task seen anywhere is described in every chunk
        chunk.doc["tasks"] = tasks
    return chunks


def decode(doc: Document, *, entity_id: str | None = None) -> list[Document]:
    """The records a chunk holds (those of ``entity_id`` only, when given), exactly as the
    run built them."""
    payload = stored(doc)
    common = _Common(
        run={name: doc.get(name) for name in RUN_FIELDS},
        tasks=doc.get("tasks") or {},
        firsts=payload.get("f") or {},
        shared=doc.get("trace") or {},
        entity_ids=_ids_of(doc.get("entity_ids") or []),
        entities=list(payload.get("e") or []),
    )
    rows: list[Document] = payload["r"]
    if entity_id is not None:
        rows = [row for row in rows if _entity_of(row, common) == entity_id]
    return [_record(row, common) for row in rows]


def stored(doc: Document) -> Document:
    """A chunk's ``rows_z`` as stored: its rows (``r``) and, from format 2 on, its entities as
    listed (``e``) and each task's first conditions (``f``)."""
    if doc.get("format") not in READABLE:
        raise ValueError(f"evaluation chunk {doc.get('_id')!r} has an unknown format")
    packed = doc["rows_z"]
    raw = zlib.decompress(packed) if doc["format"] == 1 else lzma.decompress(packed, **_LZMA)
    return bson.decode(raw, codec_options=_CODEC)


@dataclass(frozen=True)
class _Common:
    """What the rows of a chunk share (factored out of them)."""

    run: dict[str, Any]
    tasks: dict[str, dict[str, Any]]  # task id → its action and match
    firsts: dict[str, list[dict[str, Any]]]  # task id → the conditions its first row saw
    shared: dict[str, float]  # the stage times every pair waited for alike
    entity_ids: list[Any]  # of the chunk, in order (a row's ``i`` is a position in it)
    entities: list[Any]  # the entity as listed, by the same position (None: not a dict)
    #: task id → what a row of it holds unless it says otherwise (encoding only)
    usual: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the shapes of rows checked to decode back to their record (encoding only, :func:`_row`)
    checked: set[tuple[Any, ...]] = field(default_factory=set)


def _as_number(entity_id: Any) -> Any:
    """An entity id as a chunk's ``entity_ids`` holds it from format 2 on: a number where the
    id is one written out (Meta's ids are: 12 bytes in BSON where the text takes 24), as it is
    otherwise."""
    if isinstance(entity_id, str) and _DIGITS.fullmatch(entity_id):
        return int(entity_id)
    return entity_id


def _ids_of(stored_ids: Iterable[Any]) -> list[Any]:
    """A chunk's entity ids as the rows' records hold them (a number is the id written out;
    a row whose record held a number keeps its own ``entity_id``)."""
    return [str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in stored_ids]


def ids_query(entity_id: str) -> Any:
    """What finds a chunk holding ``entity_id`` in ``entity_ids``: the id as a number (format
    2), or as text (format 1, or an id that is no number)."""
    number = _as_number(entity_id)
    return entity_id if number is entity_id else {"$in": [number, entity_id]}


def _listed(record: Document) -> Document | None:
    entity = record.get("entity")
    return entity if isinstance(entity, dict) else None


def _entity_of(row: Document, common: _Common) -> Any:
    """The entity id of a stored row (whichever format holds it)."""
    if "!" in row:
        return row["!"].get("entity_id")
    if "entity_id" in row or "i" not in row:
        return row.get("entity_id")
    return common.entity_ids[row["i"]]


def _entity_groups(records: Sequence[Document]) -> list[list[Document]]:
    """Records grouped by entity, in the order entities first appear."""
    groups: dict[str, list[Document]] = {}
    for record in records:
        groups.setdefault(str(record["entity_id"]), []).append(record)
    return list(groups.values())


def _shared_trace(records: Sequence[Document]) -> dict[str, float]:
    """Stage times every record holds alike (the shared stages, cooldown and fetch)."""
    traces = [r.get("trace") or {} for r in records]
    first = traces[0]
    return {k: v for k, v in first.items() if all(t.get(k) == v for t in traces)}


def _conds(record: Document) -> list[dict[str, Any]]:
    conditions = record.get("conditions")
    return [x for x in conditions if isinstance(x, dict)] if isinstance(conditions, list) else []


def _same(value: Any, other: Any) -> bool:
    """Equal and of one type (``1``, ``1.0`` and ``True`` are equal, and not the same)."""
    return value is other or (type(value) is type(other) and value == other)


def _row(record: Document, index: int, common: _Common) -> Document:
    """The row of one record: what differs from the run, its task, its entity as listed and
    the usual values — or, should that not decode back to the very record, the record
    itself (``!``)."""
    task_id = str(record.get("task_id"))
    usual = common.usual.get(task_id)
    if usual is None:  # a task is described by its first row (in whichever chunk)
        described = common.tasks.setdefault(task_id, {k: record.get(k) for k in TASK_FIELDS})
        common.firsts.setdefault(task_id, _conds(record))
        usual = common.usual[task_id] = {**common.run, **described, **DEFAULTS}
    listed, entity_id = common.entities[index], common.entity_ids[index]
    row: Document = {"t": task_id, "i": index}
    for name, value in record.items():
        if name in usual:
            expected = usual[name]
        else:
            expected = _expected(name, record, task_id, listed, entity_id)
        if value is expected or (type(value) is type(expected) and value == expected):
            continue  # (:func:`_same`, inline: every field of every row comes here)
        if name == "_id":
            continue
        if name == "conditions" and (compact := _compact(value, common.firsts[task_id])):
            row["c"] = compact
            continue
        row[name] = value
    trace = record.get("trace")
    if isinstance(trace, dict):
        row["trace"] = {k: v for k, v in trace.items() if common.shared.get(k) != v}
    kept = {k: v for k, v in record.items() if k != "_id"}
    if ROW_NAMES & kept.keys():
        return _whole(record, task_id, index)
    # Whether a row decodes back to its record depends on its shape only: a field is left out
    # of the row only where it holds what decoding gives it (of one type, equal), a
    # condition only where its keys cover its first's, and the rest is which fields the
    # record has that decoding adds (the run's, the task's, DEFAULTS, the derived ones, the
    # entity as listed) and the order of its stage times (``duration_s`` is their sum). The
    # first row of each shape is decoded and compared; the others of that shape are alike.
    shape = (task_id, tuple(kept), tuple(row), _trace_shape(trace), _listed_shape(listed))
    if shape not in common.checked:
        if _record(row, common) != kept:
            return _whole(record, task_id, index)
        common.checked.add(shape)
    return row


def _trace_shape(trace: Any) -> Any:
    return tuple(trace) if isinstance(trace, dict) else type(trace)


def _listed_shape(listed: Document | None) -> Any:
    return None if listed is None else "name" in listed


def _expected(
    name: str, record: Document, task_id: str, listed: Document | None, entity_id: Any
) -> Any:
    """What decoding gives a field of neither the run, the task nor :data:`DEFAULTS`
    (:data:`_UNSAID`: nothing — the row keeps it)."""
    if name in DERIVED:
        return _derived(name, record, task_id)
    if name == "entity_id":
        return entity_id
    if listed is not None and name == "entity":
        return listed
    if listed is not None and name == "entity_name":
        return listed.get("name", _UNSAID)
    return _UNSAID


def _whole(record: Document, task_id: str, index: int) -> Document:
    return {"t": task_id, "i": index, "!": {k: v for k, v in record.items() if k != "_id"}}


def _compact(conditions: Any, firsts: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """What each condition saw that differs from its task's first row, or None when the
    conditions cannot be told that way (then the row keeps them whole)."""
    if not isinstance(conditions, list):
        return None
    out = []
    for n, condition in enumerate(conditions):
        base = firsts[n] if n < len(firsts) else {}
        if not isinstance(condition, dict) or base.keys() - condition.keys():
            return None
        out.append({k: v for k, v in condition.items() if k not in base or not _same(v, base[k])})
    return out


def _derived(name: str, record: Document, task_id: str) -> Any:
    if name == "key":
        return record_key_of(str(record.get("batch_id")), task_id, str(record.get("entity_id")))
    if name == "executed":
        return record.get("outcome") == "applied"
    if name == "duration_s":
        trace = record.get("trace")
        return round(sum(trace.values()), 6) if isinstance(trace, dict) else None
    return task_id


def _record(row: Document, common: _Common) -> Document:
    if "!" in row:  # kept whole
        return dict(row["!"])
    task_id = str(row["t"])
    described = common.tasks.get(task_id) or {}
    record: Document = dict(common.run)
    record |= {k: described[k] for k in TASK_FIELDS if k in described}
    record |= {k: _usual(k) for k in DEFAULTS}
    if "i" in row:  # format 2: the entity as listed, once per chunk
        index = row["i"]
        record["entity_id"] = common.entity_ids[index]
        listed = common.entities[index] if index < len(common.entities) else None
        if listed is not None:
            record["entity"] = dict(listed)
            if "name" in listed:
                record["entity_name"] = listed["name"]
    for name, value in row.items():
        if name not in ROW_NAMES:
            record[name] = value
    if "c" in row:
        firsts = common.firsts.get(task_id) or []
        record["conditions"] = [
            _condition(firsts[n] if n < len(firsts) else {}, seen)
            for n, seen in enumerate(row["c"])
        ]
    if "trace" in row:
        record["trace"] = {**common.shared, **row["trace"]}
    record["task_id"] = task_id
    for name in DERIVED:
        if name not in row:
            record[name] = _derived(name, record, task_id)
    return record


def _condition(first: dict[str, Any], seen: dict[str, Any]) -> dict[str, Any]:
    """A condition as its row saw it: its task's first, with what differed."""
    return {k: seen.get(k, v) for k, v in first.items()} | {
        k: v for k, v in seen.items() if k not in first
    }


class EvaluationStore:
    """The ``evaluations`` collection: chunks of a batch's evaluations."""

    def __init__(self, db: Database) -> None:
        self._chunks = db[c.EVALUATIONS]

    async def write(self, records: Sequence[Document], *, first: bool = False) -> dict[str, int]:
        """Store a run's records as its chunks (replacing a former delivery's); the number
        of the chunk each entity is in.

        The chunks say ``records: "slim"``: their batch's execution records leave what the
        rows hold to them (:func:`slim`), so a reader of conditions (the lag learner) reads
        every row of these chunks, where older chunks' acting rows are in their records.

        ``first``: the batch's first delivery, which no chunk was written for before — its
        chunks are inserted (one command; a chunk found there all the same is replaced),
        with nothing to delete after them."""
        chunks = encode(records)
        if not chunks:
            return {}
        docs = [ch.doc | {"records": SLIM} for ch in chunks]
        where = {entity: ch.number for ch in chunks for entity in ch.entity_ids}
        if first:
            taken = await insert_new(self._chunks, [dict(d) for d in docs])
            await self._replace([docs[i] for i in sorted(taken)])
            return where
        await self._replace(docs)
        batch_id = str(records[0]["batch_id"])
        # a former delivery with more chunks (more entities listed then) leaves none behind
        former = [d["_id"] async for d in self._of_batch(batch_id, start=len(chunks), only_id=True)]
        if former:
            await self._chunks.delete_many({"_id": {"$in": former}})
        return where

    async def _replace(self, docs: Sequence[Document]) -> None:
        if docs:
            ops = [UpdateOne({"_id": d["_id"]}, {"$set": d}, upsert=True) for d in docs]
            await self._chunks.bulk_write(ops, ordered=False)

    async def of_batch(self, batch_id: str) -> list[Document]:
        """Every record the batch's chunks hold, in evaluation order."""
        return [r async for doc in self._of_batch(batch_id) for r in decode(doc)]

    async def _of_batch(
        self, batch_id: str, *, start: int = 0, only_id: bool = False
    ) -> AsyncIterator[Document]:
        """The batch's chunks from number ``start`` on, in order, looked up by ``_id``
        (``<batch_id>|<number>``, numbered from 0 without gaps): the first
        :data:`FIRST_LOOK` in one query, then ever more while each look comes back full. No
        index of their own is written with every chunk; the embedded server finds a list of
        ``_id`` by its index (2 ms at 5,000 batches), where it walks every chunk for a range
        of them."""
        projection = {"_id": 1} if only_id else None
        number, size = start, FIRST_LOOK
        while True:
            ids = [chunk_id(batch_id, n) for n in range(number, number + size)]
            found = await self._chunks.find({"_id": {"$in": ids}}, projection).to_list()
            for doc in sorted(found, key=lambda d: ids.index(d["_id"])):
                yield doc
            if len(found) < size:
                return
            number, size = number + size, size * 8

    async def rows_for(self, records: Iterable[Document]) -> dict[str, Document]:
        """The chunk rows of slim records, by ``key``: the chunks they name, in one query."""
        slims = [r for r in records if IN_CHUNK in r]
        if not slims:
            return {}
        keys = {str(r["key"]) for r in slims}
        entities = {str(r["entity_id"]) for r in slims}
        ids = _chunk_ids(slims)
        only = next(iter(entities)) if len(entities) == 1 else None
        rows: dict[str, Document] = {}
        async for doc in self._chunks.find({"_id": {"$in": ids}}):
            for row in decode(doc, entity_id=only):
                if str(row["key"]) in keys:
                    rows[str(row["key"])] = row
        return rows

    async def runs_of(self, records: Iterable[Document]) -> dict[str, Document]:
        """batch → its ad account and rule version (``account``, ``rule_version``), for the
        batches of some slim records: from their chunks' top-level fields (one query, no row
        decoded)."""
        ids = _chunk_ids(records)
        if not ids:
            return {}
        fields = {"batch_id": 1, "account": 1, "rule_version": 1}
        found = self._chunks.find({"_id": {"$in": ids}}, fields)
        return {
            str(d["batch_id"]): {"account": d["account"], "rule_version": d.get("rule_version")}
            async for d in found
        }

    async def has_batch(self, batch_id: str) -> bool:
        """True when the batch stored its evaluations in chunks."""
        return await self._chunks.find_one({"_id": chunk_id(batch_id, 0)}, {"_id": 1}) is not None

    async def for_entity(self, entity_id: str, *, since: datetime, limit: int) -> list[Document]:
        """An entity's evaluations since ``since``, newest first, by the (entity_ids,
        created_at) index: only the chunks that hold the entity are read (the id as a number
        and as text, :func:`ids_query`: 6 ms at 3,000 chunks, 4 ms for one form). No hint: the
        embedded server walks a hinted multikey index by scanning every chunk (761 ms at
        3,000 chunks, 6 ms unhinted), where its planner looks this shape up."""
        query = {"entity_ids": ids_query(entity_id), "created_at": {"$gte": since}}
        cursor = self._chunks.find(query).sort("created_at", DESCENDING).limit(limit)
        return [r async for doc in cursor for r in decode(doc, entity_id=entity_id)]


def _chunk_ids(slims: Iterable[Document]) -> list[str]:
    """The ``_id`` of each chunk some slim records name, once each, in order."""
    return sorted({chunk_id(str(r["batch_id"]), int(r[IN_CHUNK])) for r in slims})


def overlay(evaluations: Iterable[Document], records: Iterable[Document]) -> list[Document]:
    """A batch's rows: each pair's execution record where it has one (a slim one put
    together with the row), its chunk row otherwise, in evaluation order (records the chunks
    do not know — an older layout, a follow-up's record — come after, in their own order)."""
    by_key = {str(r["key"]): r for r in records}
    rows = []
    for row in evaluations:
        record = by_key.pop(str(row["key"]), None)
        rows.append(row if record is None else assemble(record, row))
    return rows + [assemble(r, None) for r in by_key.values()]
