"""The write path's reads of intents give the answers their meaning asks for, whatever the
history around them: cooldowns (a rule's intents in the longest cooldown's window) and an
entity's budget facts (Meta's hourly limit, its blocks, budgets refused as too low).

For random intents — every status, fields, times on both sides of each window, other
rules, tasks, batches and entities — :meth:`IntentStore.cooling` and
:meth:`IntentStore.budget_history` return exactly what a plain reading of the definitions
over the same documents returns (:func:`expected_cooling`, :func:`expected_budget`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruleengine import constants as c
from ruleengine.store.db import (
    COOLING_INDEX,
    UNCONFIRMED_INDEX,
    Database,
    ensure_indexes,
    index_name,
)
from ruleengine.store.intents import FIRED, IntentStore
from ruleengine.writes.meta_limits import BUDGET_LIMITED, BUDGET_TOO_LOW

NOW = datetime(2026, 11, 24, 17, 0, tzinfo=UTC)
LONGEST = 60  # minutes
TOO_LOW_SINCE = NOW - timedelta(hours=24)
ENTITIES = ["e1", "e2", "e3"]
PAIRS = [("t1", "e1"), ("t1", "e2"), ("t2", "e1")]

# around each window's edge: the cooldowns' and the hour's (now), the too-low day's (24 h ago)
minutes = st.one_of(st.integers(-90, 90), st.integers(-24 * 60 - 20, -24 * 60 + 20)).map(
    lambda m: NOW + timedelta(minutes=m)
)


@st.composite
def intents(draw: st.DrawFn) -> dict[str, Any]:
    """One intent as the engine stores them, of the rule or another, at any time."""
    status = draw(st.sampled_from(["pending", "done", "failed"]))
    created = draw(minutes)
    doc: dict[str, Any] = {
        "batch_id": draw(st.sampled_from(["other", "other", "own"])),  # numbered below
        "rule_id": draw(st.sampled_from(["r", "r", "other"])),
        "task_id": draw(st.sampled_from(["t1", "t2"])),
        "entity_id": draw(st.sampled_from(ENTITIES)),
        "field": draw(st.sampled_from(["daily_budget", "lifetime_budget", "status"])),
        "status": status,
        "created_at": created,
        "cooling_from": created + timedelta(seconds=draw(st.integers(-90, 90))),
        "cooldown_minutes": draw(st.sampled_from([0, 15, 60])),
        "target": draw(st.integers(100, 10_000)),
        "applied_at": None,
    }
    if status == "done":
        doc["applied_at"] = created + timedelta(seconds=draw(st.integers(0, 600)))
        doc["changed"] = draw(st.booleans())
    if status != "pending":
        doc["resolved_at"] = created + timedelta(seconds=draw(st.integers(0, 600)))
    if status == "failed":
        doc["reason"] = draw(st.sampled_from([BUDGET_LIMITED, BUDGET_TOO_LOW, "graph_error"]))
        if doc["reason"] == BUDGET_LIMITED:
            doc["allowed_at"] = draw(minutes)
    return doc


def expected_cooling(docs: list[dict[str, Any]]) -> dict[tuple[str, str], datetime]:
    """(task, entity) → until, from the definition: fired intents of the rule but of the
    batch ``own``, cooling from ``cooling_from`` for their task's minutes."""
    since = NOW - timedelta(minutes=LONGEST)
    active: dict[tuple[str, str], datetime] = {}
    for doc in docs:
        key = (doc["task_id"], doc["entity_id"])
        if doc["rule_id"] != "r" or key not in PAIRS or doc["status"] not in FIRED:
            continue
        if doc["batch_id"] == "own" or doc["cooling_from"] <= since:
            continue
        until = doc["cooling_from"] + timedelta(minutes=doc["cooldown_minutes"])
        if until > NOW:
            active[key] = max(active.get(key, until), until)
    return active


def expected_budget(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The budget facts of ``ENTITIES``, from the definition."""
    changes: dict[str, list[tuple[datetime, int]]] = {}
    blocked: dict[str, datetime] = {}
    too_low: dict[tuple[str, str], int] = {}
    for doc in docs:
        if doc["field"] not in ("daily_budget", "lifetime_budget"):
            continue
        entity = doc["entity_id"]
        if doc["status"] == "done":
            if doc.get("changed") and doc["applied_at"] >= NOW - timedelta(hours=1):
                changes.setdefault(entity, []).append((doc["applied_at"], doc["target"]))
        elif doc["status"] == "failed" and doc["reason"] == BUDGET_LIMITED:
            if doc["allowed_at"] > NOW:
                blocked[entity] = max(blocked.get(entity, doc["allowed_at"]), doc["allowed_at"])
        elif doc["status"] == "failed" and doc["reason"] == BUDGET_TOO_LOW:
            key = (entity, doc["field"])
            if doc["resolved_at"] >= TOO_LOW_SINCE:
                too_low[key] = max(too_low.get(key, doc["target"]), doc["target"])
    return {
        "changes": {e: sorted(c) for e, c in changes.items()},
        "blocked": blocked,
        "too_low": too_low,
    }


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(docs=st.lists(intents(), max_size=40))
async def test_cooldowns_and_budget_facts_read_as_their_definitions(
    db: Database, docs: list[dict[str, Any]]
) -> None:
    collection = db[c.ACTION_INTENTS]
    await collection.delete_many({})
    for n, doc in enumerate(docs):  # unique per (batch, task, entity): the store's own key
        if doc["batch_id"] != "own":
            doc["batch_id"] = f"b{n}"
    unique = {(d["batch_id"], d["task_id"], d["entity_id"]): d for d in docs}
    docs = list(unique.values())
    if docs:
        await collection.insert_many([dict(d) for d in docs])
    store = IntentStore(db)
    cooling = await store.cooling("r", PAIRS, now=NOW, longest_minutes=LONGEST, other_than="own")
    assert cooling == expected_cooling(docs)
    history = await store.budget_history(ENTITIES, now=NOW, too_low_since=TOO_LOW_SINCE)
    got = {
        "changes": {
            e: [(ch.at, ch.target) for ch in changes]
            for e, changes in history.changes.items()
            if changes
        },
        "blocked": dict(history.blocked_until),
        "too_low": dict(history.too_low),
    }
    assert got == expected_budget(docs)


async def test_an_intent_from_before_cooling_from_cools_down_from_its_creation(
    db: Database,
) -> None:
    """Intents recorded before intents had ``cooling_from`` get their ``created_at`` once,
    at the start that creates the cooling index."""
    collection = db[c.ACTION_INTENTS]
    await collection.drop_index(index_name(COOLING_INDEX))
    created = NOW - timedelta(minutes=10)
    await collection.insert_one(
        {
            "batch_id": "old",
            "rule_id": "r",
            "task_id": "t1",
            "entity_id": "e1",
            "status": "done",
            "created_at": created,
            "cooldown_minutes": 30,
        }
    )
    await ensure_indexes(db)
    store = IntentStore(db)
    cooling = await store.cooling("r", PAIRS, now=NOW, longest_minutes=30, other_than="own")
    assert cooling == {("t1", "e1"): created + timedelta(minutes=30)}
    assert index_name(COOLING_INDEX) in await collection.index_information()


async def test_flagged_intents_are_found_by_the_sparse_index_that_replaces_the_full_one(
    db: Database,
) -> None:
    """A store indexed by the flag's first index (an entry for every intent) gets the sparse
    one instead at start; the reaper's look finds exactly the settled intents still flagged."""
    collection = db[c.ACTION_INTENTS]
    await collection.drop_index(UNCONFIRMED_INDEX)
    await collection.create_index("record_unconfirmed")
    base = {"rule_id": "r", "task_id": "t1", "created_at": NOW}
    await collection.insert_many(
        [
            base | {"batch_id": "b1", "entity_id": "e1", "status": "done"},
            base
            | {"batch_id": "b2", "entity_id": "e1", "status": "done", "record_unconfirmed": True},
            base
            | {
                "batch_id": "b3",
                "entity_id": "e1",
                "status": "pending",
                "record_unconfirmed": True,
            },
            base
            | {"batch_id": "b4", "entity_id": "e2", "status": "failed", "record_unconfirmed": True},
        ]
    )
    await ensure_indexes(db)
    indexes = await collection.index_information()
    assert "record_unconfirmed_1" not in indexes
    assert indexes[UNCONFIRMED_INDEX]["sparse"] is True
    store = IntentStore(db)
    assert sorted(d["batch_id"] for d in await store.uncorrected()) == ["b2", "b4"]
    (b2,) = [d for d in await store.uncorrected() if d["batch_id"] == "b2"]
    await store.record_corrected(b2["_id"])
    assert [d["batch_id"] for d in await store.uncorrected()] == ["b4"]
