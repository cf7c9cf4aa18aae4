"""A batch's evaluations in chunks give back exactly what per-entity records held.

For generated runs — entities, tasks, outcomes of every kind, conditions with numbers and
missing values, stage times, follow-ups and approvals, a redelivery's merged records — what
the chunks decode to (:mod:`ruleengine.store.evaluations`, through MongoDB) equals what the
old layout stored and read back, one document per (entity, task); a batch's rows and counts
are the same with both layouts, and with a mix of both.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId, json_util
from bson.json_util import CANONICAL_JSON_OPTIONS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruleengine import constants as c
from ruleengine.store import evaluations
from ruleengine.store.db import Database
from ruleengine.store.evaluations import (
    CHUNK_ENTITIES,
    FORMAT,
    acted,
    decode,
    encode,
    slim,
    stored,
)
from ruleengine.store.records import DECISIONS, BatchCounts, ExecutionStore

NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
OUTCOMES = [
    ("not_matched", None),
    ("not_matched", "no_data"),
    ("skipped", "next_execute_not_reached"),
    ("skipped", "execution_count_limit"),
    ("applied", None),
    ("failed", "fetch_failed"),
    ("failed", "write_unconfirmed"),
    ("skipped", "no_daily_budget"),
    ("no_change", "already_paused"),
    ("awaiting_approval", "approval_required"),
]
#: What a stored slim record may hold.
SLIM_FIELDS = {"_id", evaluations.IN_CHUNK, "next_execute_at", *evaluations.SLIM_KEEPS}
numbers = st.one_of(st.none(), st.integers(-(10**9), 10**9), st.floats(allow_nan=False, width=64))
stage = st.floats(0, 100, allow_nan=False).map(lambda x: round(x, 6))


@st.composite
def condition(draw: st.DrawFn) -> dict[str, Any]:
    metric = draw(st.sampled_from(["spend", "purchase_roas.omni_purchase", "ctr", "actions.lead"]))
    found: dict[str, Any] = {
        "metric": metric,
        "period": draw(st.sampled_from(["today", "last_7d", "yesterday"])),
        "operator": draw(st.sampled_from([">", "<", "IN_RANGE"])),
        "value": draw(st.one_of(st.integers(0, 500), st.lists(st.integers(0, 9), min_size=2))),
        "actual": draw(numbers),
        "passed": draw(st.booleans()),
    }
    if draw(st.booleans()):
        found["reason"] = "no_data"
    return found


@st.composite
def run(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The records of one run, in evaluation order (entity × task)."""
    batch = draw(st.sampled_from(["r1-act_1001-20261201T1800", "b|odd key", "approval:x"]))
    tasks = draw(st.lists(st.sampled_from(["scale", "pause", "tell"]), min_size=1, unique=True))
    actions = {t: {"type": draw(st.sampled_from(["pause", "increase_budget"]))} for t in tasks}
    cooldown, fetch = draw(stage), draw(stage)
    entities = draw(st.integers(1, 12))
    records = []
    for n in range(entities):
        # an id written out (Meta's), one too long for a number, one that is not a number's text
        prefix = draw(st.sampled_from(["", "", "9" * 17, "0", "x-"]))
        entity = f"{prefix}{draw(st.integers(1, 10**15))}{n}"
        name = draw(st.text(max_size=12))
        for task in tasks:
            outcome, reason = draw(st.sampled_from(OUTCOMES))
            evaluated = outcome != "skipped" or reason not in ("next_execute_not_reached",)
            trace = {"cooldown": cooldown, "fetch": fetch, "evaluate": draw(stage)}
            trace["act"] = draw(stage) if acted({"outcome": outcome, "reason": reason}) else 0.0
            record: dict[str, Any] = {
                "key": f"{batch}|{task}|{entity}",
                "batch_id": batch,
                "delivery": draw(st.sampled_from([1, 1, 2])),
                "rule_id": "r1",
                "rule_name": "Scale winners",
                "rule_version": 3,
                "account": "act_1001",
                "level": "campaign",
                "task_id": task,
                "entity_id": entity,
                "entity_name": name,
                "entity": {"id": entity, "name": name, "daily_budget": draw(numbers)},
                "outcome": outcome,
                "executed": outcome == "applied",
                "reason": reason,
                "action": actions[task],
                "field": "daily_budget" if outcome == "applied" else None,
                "before": draw(st.integers(1, 10**7)) if outcome == "applied" else None,
                "after": draw(st.integers(1, 10**7)) if outcome == "applied" else None,
                "requested": None,
                "clamped_by": draw(st.sampled_from([[], ["max_budget"]])),
                "oscillation": None,
                "match": "all",
                "passed": draw(st.sampled_from([True, False])) if evaluated else None,
                "conditions": draw(st.lists(condition(), max_size=3)) if evaluated else [],
                "action_metric": None,
                "next_execute_at": NOW + timedelta(minutes=draw(st.integers(1, 600)))
                if reason == "next_execute_not_reached"
                else None,
                "error": {"code": 100, "message": "x"} if outcome == "failed" else None,
                "response": {"success": True} if outcome == "applied" else None,
                "followup": draw(st.sampled_from([None, {"key": "f", "status": "waiting"}])),
                "approval_id": None,
                "trace": trace,
                "duration_s": round(sum(trace.values()), 6),
                "scheduled_at": NOW,
                "created_at": NOW + timedelta(seconds=draw(st.integers(0, 3))),
            }
            if draw(st.integers(0, 9)) == 0:
                record["recovered_by"] = "redelivery"  # a merged record carries more fields
            records.append(record)
    return records


async def stored_alone(db: Database, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as the old layout kept them: one document each, read back."""
    table = db["old_layout"]
    await table.delete_many({})
    await table.insert_many([dict(r) for r in records])
    return [{k: v for k, v in d.items() if k != "_id"} async for d in table.find().sort("_id")]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=run())
async def test_chunks_decode_to_exactly_what_each_record_held(
    db: Database, records: list[dict[str, Any]]
) -> None:
    await db[c.EVALUATIONS].delete_many({})
    store = ExecutionStore(db)
    await store.evaluations.write(records)
    decoded = await store.evaluations.of_batch(records[0]["batch_id"])
    assert decoded == await stored_alone(db, records)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=run())
async def test_slim_records_read_back_whole_through_every_reader(
    db: Database, records: list[dict[str, Any]]
) -> None:
    """An acting pair's stored record leaves what its chunk row holds for good to the row;
    every reader gives back the very record the run built."""
    await db[c.EVALUATIONS].delete_many({})
    await db[c.EXECUTIONS].delete_many({})
    store = ExecutionStore(db)
    await store.keep_run(records, earlier={})
    batch = records[0]["batch_id"]
    acting = [r for r in records if acted(r)]
    assert plain(await store.rows(batch)) == records
    assert plain(await store.for_batch(batch)) == acting
    assert plain((await store.by_key(batch)).values()) == acting
    for record in acting[:3]:
        assert plain([await store.get(record["key"]) or {}]) == [record]
    entity = records[-1]["entity_id"]  # its timeline: its chunk rows and its records, whole
    timeline = await store.for_entity(entity, since=NOW - timedelta(days=1))
    assert sorted(plain(timeline), key=lambda r: r["key"]) == sorted(
        (r for r in records if r["entity_id"] == entity), key=lambda r: r["key"]
    )
    # the rule's decisions for its impact: each with its account and rule version, which
    # its record leaves out
    fields = ("key", "task_id", "entity_id", "account", "rule_version", "outcome", "created_at")
    changes = await store.decisions("r1", since=NOW - timedelta(days=1))
    assert sorted(tuple(d[k] for k in fields) for d in changes) == sorted(
        tuple(r[k] for k in fields) for r in acting if r["outcome"] in DECISIONS
    )
    stored = [d async for d in db[c.EXECUTIONS].find({"batch_id": batch})]
    assert len(stored) == len(acting)
    for doc in stored:  # slim: what finds the record, the rest is its row's
        assert evaluations.IN_CHUNK in doc and set(doc) <= SLIM_FIELDS
    # a redelivery rewrites the chunks from the records read back whole, and changes nothing
    earlier = await store.by_key(batch)
    merged = [earlier.get(r["key"], r) for r in records]
    await store.keep_run(merged, earlier=earlier)
    assert plain(await store.rows(batch)) == records
    # a delivery over records kept whole (as before records were slim) leaves them slim
    await db[c.EXECUTIONS].delete_many({})
    await store.upsert_many(acting)
    await store.keep_run([dict(r) for r in records], earlier=await store.by_key(batch))
    stored = [d async for d in db[c.EXECUTIONS].find({"batch_id": batch})]
    assert len(stored) == len(acting)
    assert all(set(doc) <= SLIM_FIELDS for doc in stored)
    assert plain(await store.rows(batch)) == records


def plain(docs: Any) -> list[dict[str, Any]]:
    """Documents without MongoDB's ``_id``."""
    return [{k: v for k, v in d.items() if k != "_id"} for d in docs]


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without ``_id``, in an order both layouts give alike (time, entity, task)."""
    return sorted(
        plain(rows), key=lambda r: (r["created_at"], r["entity_id"], str(r.get("task_id")))
    )


async def test_a_settled_slim_record_keeps_its_correction_and_its_chunk_fields(
    db: Database,
) -> None:
    store = ExecutionStore(db)
    records = _fixed_run()
    records[0] |= {"outcome": "failed", "reason": "write_unconfirmed", "executed": False}
    await store.keep_run(records, earlier={})
    await store.correct("b|t|1", {"outcome": "applied", "reason": None, "executed": True})
    whole = await store.get("b|t|1")
    assert whole is not None and whole["outcome"] == "applied" and whole["reason"] is None
    assert whole["conditions"] == [] and whole["trace"] == {"evaluate": 0.0}
    assert whole["passed"] is True
    assert await store.counts("b") == BatchCounts(evaluated=3, affected=1, applied=1, failed=0)
    # a record whose chunk is gone (expired a moment before it) still reads, as it is stored
    await db[c.EVALUATIONS].delete_many({})
    alone = await store.get("b|t|1")
    assert alone is not None and alone["outcome"] == "applied" and "conditions" not in alone
    assert evaluations.IN_CHUNK not in alone


@settings(max_examples=40, deadline=None)
@given(records=run())
def test_encoding_is_exact_without_a_server(records: list[dict[str, Any]]) -> None:
    chunks = encode(records)
    assert [r for chunk in chunks for r in decode(chunk.doc)] == records


def not_matched(batch: str, entities: int, *, tasks: tuple[str, ...]) -> list[dict[str, Any]]:
    """A run's records where nothing matched: entity ``n`` saw ``n`` spent, for each task."""
    return [
        {
            "key": f"{batch}|{task}|{n}",
            "batch_id": batch,
            "task_id": task,
            "entity_id": str(n),
            "outcome": "not_matched",
            "reason": None,
            "passed": False,
            "conditions": [{"metric": "spend", "actual": n}],
            "trace": {"evaluate": 0.0},
            "created_at": NOW,
        }
        for n in range(entities)
        for task in tasks
    ]


async def test_a_batch_of_more_entities_than_a_chunk_keeps_each_entity_in_one_chunk(
    db: Database,
) -> None:
    entities = CHUNK_ENTITIES + 7
    records = not_matched("b", entities, tasks=("a", "b"))
    chunks = encode(records)
    assert [len(ch.entity_ids) for ch in chunks] == [CHUNK_ENTITIES, 7]
    assert [ch.doc["rows"] for ch in chunks] == [2 * CHUNK_ENTITIES, 14]
    store = ExecutionStore(db)
    await store.evaluations.write(records)
    assert await db[c.EVALUATIONS].count_documents({"batch_id": "b"}) == 2
    one = await store.evaluations.for_entity("1003", since=NOW - timedelta(days=1), limit=10)
    assert [(r["task_id"], r["conditions"][0]["actual"]) for r in one] == [("a", 1003), ("b", 1003)]
    # a redelivery that listed fewer entities leaves no chunk of the first behind
    await store.evaluations.write(records[:10])
    assert await db[c.EVALUATIONS].count_documents({"batch_id": "b"}) == 1


async def test_a_batch_of_many_chunks_is_read_whole_and_in_order_by_their_ids(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's chunks are looked up by ``_id``, a few first, then ever more: 13 chunks of 2
    entities come back in order through looks of 1, 8 and 64; a redelivery of 3 chunks
    deletes the other 10."""
    monkeypatch.setattr(evaluations, "CHUNK_ENTITIES", 2)
    monkeypatch.setattr(evaluations, "FIRST_LOOK", 1)
    records = not_matched("b", 25, tasks=("a",))
    store = ExecutionStore(db)
    await store.evaluations.write(records, first=True)
    assert await db[c.EVALUATIONS].count_documents({"batch_id": "b"}) == 13
    assert [r["entity_id"] for r in await store.evaluations.of_batch("b")] == [
        str(n) for n in range(25)
    ]
    assert await store.evaluations.has_batch("b")
    assert not await store.evaluations.has_batch("b|0")
    await store.evaluations.write(records[:5])
    left = [d["_id"] async for d in db[c.EVALUATIONS].find({"batch_id": "b"}).sort("chunk", 1)]
    assert left == ["b|0", "b|1", "b|2"]
    assert len(await store.evaluations.of_batch("b")) == 5


@pytest.mark.parametrize("layout", ["chunks", "records", "mixed"])
async def test_rows_and_counts_are_the_same_whichever_layout_holds_the_batch(
    db: Database, layout: str
) -> None:
    records = _fixed_run()
    store = ExecutionStore(db)
    if layout in ("chunks", "mixed"):
        await store.keep_run(records, earlier={})
    if layout in ("records", "mixed"):
        await store.upsert_many(records)  # the old layout: a record for every pair
    rows = [{k: v for k, v in r.items() if k != "_id"} for r in await store.rows("b")]
    assert rows == records
    assert (
        await store.counts("b")
        == BatchCounts.of(records)
        == BatchCounts(evaluated=3, affected=1, applied=1, failed=0)
    )
    acting = [d async for d in db[c.EXECUTIONS].find({"batch_id": "b"})]
    assert len(acting) == (1 if layout == "chunks" else 3)
    assert isinstance(acting[0]["_id"], ObjectId)


def _fixed_run() -> list[dict[str, Any]]:
    base = {"batch_id": "b", "rule_id": "r", "created_at": NOW, "trace": {"evaluate": 0.0}}
    return [
        base | {"key": "b|t|1", "task_id": "t", "entity_id": "1", "outcome": "applied",
                "reason": None, "passed": True, "conditions": []},
        base | {"key": "b|t|2", "task_id": "t", "entity_id": "2", "outcome": "not_matched",
                "reason": None, "passed": False, "conditions": []},
        base | {"key": "b|t|3", "task_id": "t", "entity_id": "3", "outcome": "not_matched",
                "reason": "no_data", "passed": False, "conditions": []},
    ]  # fmt: skip


def _history() -> list[list[dict[str, Any]]]:
    """Three runs of a rule on three campaigns, two tasks, over a day: conversions seen."""
    runs = []
    for hour in range(3):
        at = NOW - timedelta(hours=10 - 4 * hour)
        batch = f"r-act_1001-{hour}"
        rows = []
        for n, entity in enumerate(("111", "222", "333")):
            for task, metric in (("pause", "actions.omni_purchase"), ("scale", "spend")):
                outcome = "applied" if (task, n, hour) == ("pause", 1, 1) else "not_matched"
                trace = {"cooldown": 0.1, "fetch": 0.2, "evaluate": 0.001 * n, "act": 0.0}
                rows.append(
                    {
                        "key": f"{batch}|{task}|{entity}",
                        "batch_id": batch,
                        "delivery": 1,
                        "rule_id": "r",
                        "rule_name": "Pause losers",
                        "rule_version": 1,
                        "account": "act_1001",
                        "level": "campaign",
                        "task_id": task,
                        "entity_id": entity,
                        "entity_name": f"Campaign {entity}",
                        "entity": {"id": entity, "daily_budget": "5000"},
                        "outcome": outcome,
                        "executed": outcome == "applied",
                        "reason": None,
                        "action": {"type": "pause"},
                        "field": "status" if outcome == "applied" else None,
                        "before": "ACTIVE" if outcome == "applied" else None,
                        "after": "PAUSED" if outcome == "applied" else None,
                        "requested": None,
                        "clamped_by": [],
                        "oscillation": None,
                        "match": "all",
                        "passed": outcome == "applied",
                        "conditions": [
                            {"metric": metric, "period": "last_3d", "operator": "<",
                             "value": 2, "actual": float(n + hour)}
                        ],
                        "action_metric": None,
                        "next_execute_at": None,
                        "error": None,
                        "response": None,
                        "followup": None,
                        "approval_id": None,
                        "trace": trace,
                        "duration_s": round(sum(trace.values()), 6),
                        "scheduled_at": at,
                        "created_at": at,
                    }
                )  # fmt: skip
        runs.append(rows)
    return runs


async def test_the_timeline_and_the_lag_learners_reading_are_the_same_with_either_layout(
    db: Database,
) -> None:
    from ruleengine.backtest.lag_fit import _read_range
    from ruleengine.store.db import ensure_indexes
    from ruleengine.web.api.entities import build_timeline

    old = db.client[f"{db.name}_old"]
    await ensure_indexes(old)
    try:
        for rows in _history():
            await ExecutionStore(old).upsert_many(rows)  # one document per pair
            await ExecutionStore(db).keep_run(rows, earlier={})  # chunks and acting records
        since = NOW - timedelta(days=2)

        for entity in ("111", "222", "333"):
            before = await ExecutionStore(old).for_entity(entity, since=since)
            after = await ExecutionStore(db).for_entity(entity, since=since)
            assert comparable(after) == comparable(before) and len(after) == 6
            timeline_before = build_timeline(entity, before, since=since)
            timeline_after = build_timeline(entity, after, since=since)
            for timeline in (timeline_before, timeline_after):
                for execution in timeline["executions"]:
                    execution.pop("id")
            assert timeline_after == timeline_before
        for limit in (100, 6, 3):  # whole runs: rows of one instant are not ranked among themselves
            read_before = await _read_range(old, "act_1001", "campaign", since, NOW, limit)
            read_after = await _read_range(db, "act_1001", "campaign", since, NOW, limit)
            assert comparable(read_after) == comparable(read_before)
            assert len(read_after) == min(limit, 9)
    finally:
        await db.client.drop_database(f"{db.name}_old")


def first_format() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Chunks as format 1 stored them (zlib; a row per pair with its entity and conditions
    whole; a record kept whole), written by the code of that format, and the records they
    were written from (tests/fixtures/evaluations/chunk_format1.json)."""
    path = Path(__file__).parent.parent / "fixtures" / "evaluations" / "chunk_format1.json"
    options = CANONICAL_JSON_OPTIONS.with_options(tz_aware=True, tzinfo=UTC)
    data = json_util.loads(path.read_text(), json_options=options)
    return data["chunks"], data["records"]


async def test_chunks_of_the_first_format_read_as_before_beside_those_of_the_second(
    db: Database,
) -> None:
    """Chunks written before format 2 stay readable until they expire: a batch of format 1
    and one of format 2 in one store give every reader — the batch's rows, a slim record,
    the entity timeline, the lag learner — what one document per pair gives."""
    from ruleengine.backtest.lag_fit import _read_range
    from ruleengine.store.db import ensure_indexes

    chunks, older = first_format()
    assert {chunk["format"] for chunk in chunks} == {1} and FORMAT == 2
    assert any("!" in row for row in stored(chunks[0])["r"])  # a row kept whole, as it was
    newer = _history()[2]
    old = db.client[f"{db.name}_old"]
    await ensure_indexes(old)
    try:
        for rows in (older, newer):
            await ExecutionStore(old).upsert_many(rows)  # one document per pair
        await db[c.EVALUATIONS].insert_many(chunks)
        store = ExecutionStore(db)
        await store.upsert_many([slim(r, 0) for r in older if acted(r)])
        await store.keep_run(newer, earlier={})
        assert (await db[c.EVALUATIONS].find_one({"batch_id": newer[0]["batch_id"]}) or {})[
            "format"
        ] == 2
        assert plain(await store.rows(older[0]["batch_id"])) == older
        assert plain(await store.rows(newer[0]["batch_id"])) == newer
        for record in (r for r in older if acted(r)):
            assert plain([await store.get(record["key"]) or {}]) == [record]
        since = NOW - timedelta(days=2)

        for entity in ("111", "222", "333"):
            before = await ExecutionStore(old).for_entity(entity, since=since)
            after = await store.for_entity(entity, since=since)
            assert comparable(after) == comparable(before) and len(after) == 4
        read_before = await _read_range(old, "act_1001", "campaign", since, NOW, 100)
        read_after = await _read_range(db, "act_1001", "campaign", since, NOW, 100)
        assert comparable(read_after) == comparable(read_before) and len(read_after) == 6
    finally:
        await db.client.drop_database(f"{db.name}_old")


def test_a_run_as_the_worker_builds_it_keeps_each_entity_once_and_no_row_whole() -> None:
    """What makes format 2 smaller holds for a worker's run: its entities are stored once
    each (not once per task), no row holds its entity or its conditions whole, and none is
    kept whole."""
    for rows in _history():
        (chunk,) = encode(rows)
        kept = stored(chunk.doc)
        assert len(kept["e"]) == 3 and len(kept["r"]) == 6 and set(kept["f"]) == {"pause", "scale"}
        assert not any({"!", "entity", "conditions", "entity_id"} & set(row) for row in kept["r"])
        assert decode(chunk.doc) == rows


async def test_a_redelivery_that_clears_what_the_first_recorded_leaves_none_of_it(
    db: Database,
) -> None:
    """A first delivery recorded a failed write with Meta's error; the redelivery finds it
    applied, with no error: its slim record and the row written with it tell that, and
    nothing of the first delivery's error is read back."""
    store = ExecutionStore(db)
    rows = _history()[1]
    (applied,) = [r for r in rows if r["outcome"] == "applied"]
    error = {"code": 2, "message": "Service temporarily unavailable"}
    failed = applied | {"outcome": "failed", "reason": "write_unconfirmed", "executed": False}
    first = [failed | {"error": error} if r is applied else r for r in rows]
    await store.keep_run(first, earlier={})
    doc = await db[c.EXECUTIONS].find_one({"key": applied["key"]})
    assert doc is not None and set(doc) <= SLIM_FIELDS and doc["outcome"] == "failed"
    assert (await store.get(applied["key"]) or {})["error"] == error
    again = [r | {"delivery": 2} for r in rows]
    await store.keep_run(again, earlier=await store.by_key(applied["batch_id"]))
    doc = await db[c.EXECUTIONS].find_one({"key": applied["key"]})
    assert doc is not None and set(doc) <= SLIM_FIELDS and doc["outcome"] == "applied"
    assert plain(await store.rows(applied["batch_id"])) == again
    assert plain([await store.get(applied["key"]) or {}]) == [again[rows.index(applied)]]


async def test_a_record_a_redelivery_does_not_act_on_again_reads_as_it_was_recorded(
    db: Database,
) -> None:
    """The first delivery's write went unanswered; the redelivery finds the entity no longer
    matching. The first delivery's record is the one a settling corrects (it looks for
    ``write_unconfirmed``): it keeps reading as recorded, not as the new row says."""
    store = ExecutionStore(db)
    rows = _history()[1]
    (applied,) = [r for r in rows if r["outcome"] == "applied"]
    error = {"code": 2, "message": "Service temporarily unavailable"}
    failed = applied | {
        "outcome": "failed",
        "reason": "write_unconfirmed",
        "executed": False,
        "error": error,
    }
    await store.keep_run([failed if r is applied else r for r in rows], earlier={})
    quiet = applied | {"outcome": "not_matched", "passed": False, "field": None}
    again = [(quiet if r is applied else r) | {"delivery": 2} for r in rows]
    await store.keep_run(again, earlier=await store.by_key(applied["batch_id"]))
    assert plain([await store.get(applied["key"]) or {}]) == [failed]
    assert (await db[c.EVALUATIONS].find_one({"batch_id": applied["batch_id"]}) or {})[
        "delivery"
    ] == 2


def test_a_row_of_another_shape_is_checked_on_its_own() -> None:
    """Encoding decodes the first row of each shape to check it and trusts the rest of that
    shape: a later row of the same task whose record lacks a field decoding would add, or
    holds its stage times in another order, is checked on its own and decodes exactly."""
    rows = _history()[1]
    odd = {k: v for k, v in rows[-1].items() if k != "error"}
    reordered = dict(rows[-2])
    reordered["trace"] = dict(reversed(list(reordered["trace"].items())))
    run = [*rows[:-2], reordered, odd]
    (chunk,) = encode(run)
    assert decode(chunk.doc) == run
    kept = stored(chunk.doc)["r"]
    assert "!" in kept[-1] and not any("!" in row for row in kept[:-1])
