"""Rules in MongoDB: versions only on change, compare-and-set pointer moves, the due query."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from flow import budget_rule
from ruleengine.errors import ConflictError, NotFoundError
from ruleengine.store.db import Database
from ruleengine.store.ruledocs import RuleDoc
from ruleengine.store.rules import RuleStore

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


async def due_docs(store: RuleStore, now: datetime) -> list[RuleDoc]:
    due = await store.due(now)
    assert due.broken == []
    return [doc for doc, _ in due.ready]


async def test_identical_resave_creates_no_version(db: Database) -> None:
    store = RuleStore(db)
    first = await store.save(budget_rule(), now=NOW, author="a", source="test")
    again = await store.save(budget_rule(), now=NOW, author="a", source="test")
    assert (first.created, first.rule.version) == (True, 1)
    assert (again.created, again.new_version, again.rule.version) == (False, False, 1)
    assert len(await store.versions(first.rule.id)) == 1


async def test_a_change_creates_the_next_version_and_keeps_history(db: Database) -> None:
    store = RuleStore(db)
    first = await store.save(budget_rule(), now=NOW, author="a", source="test")
    second = await store.save(budget_rule(percent=25), now=NOW, author="b", source="api")
    assert second.rule.version == 2
    versions = await store.versions(first.rule.id)
    assert [v.version for v in versions] == [2, 1]
    assert versions[0].author == "b"
    assert versions[1].definition["tasks"][0]["action"]["percent"] == 20


async def test_rollback_moves_the_pointer_without_a_new_version(db: Database) -> None:
    store = RuleStore(db)
    rule_id = (await store.save(budget_rule(), now=NOW, author="a", source="t")).rule.id
    await store.save(budget_rule(percent=30), now=NOW, author="a", source="t")
    rolled = (await store.rollback(rule_id, 1, now=NOW)).rule
    assert (rolled.version, rolled.latest_version) == (1, 2)
    assert rolled.rule().tasks[0].action.percent == 20  # type: ignore[union-attr]
    third = await store.save(budget_rule(percent=40), now=NOW, author="a", source="t")
    assert third.rule.version == 3


async def test_two_concurrent_rollbacks_exactly_one_wins(db: Database) -> None:
    store = RuleStore(db)
    rule_id = (await store.save(budget_rule(), now=NOW, author="a", source="t")).rule.id
    await store.save(budget_rule(percent=30), now=NOW, author="a", source="t")
    await store.save(budget_rule(percent=40), now=NOW, author="a", source="t")
    results = await asyncio.gather(
        store.rollback(rule_id, 1, now=NOW, expected_version=3),
        store.rollback(rule_id, 2, now=NOW, expected_version=3),
        return_exceptions=True,
    )
    wins = [r for r in results if not isinstance(r, BaseException)]
    losses = [r for r in results if isinstance(r, ConflictError)]
    assert len(wins) == 1
    assert len(losses) == 1
    assert "version" in str(losses[0])
    assert (await store.get(rule_id)).version == wins[0].rule.version


async def test_save_with_a_stale_expected_version_conflicts(db: Database) -> None:
    store = RuleStore(db)
    rule_id = (await store.save(budget_rule(), now=NOW, author="a", source="t")).rule.id
    await store.save(budget_rule(percent=30), now=NOW, author="a", source="t")
    with pytest.raises(ConflictError, match="not 1"):
        await store.save(
            budget_rule(percent=50),
            now=NOW,
            author="a",
            source="t",
            rule_id=rule_id,
            expected_version=1,
        )


async def test_unknown_rule_and_version_are_not_found(db: Database) -> None:
    store = RuleStore(db)
    with pytest.raises(NotFoundError):
        await store.get("nope")
    rule_id = (await store.save(budget_rule(), now=NOW, author="a", source="t")).rule.id
    with pytest.raises(NotFoundError, match="no version 9"):
        await store.rollback(rule_id, 9, now=NOW)


async def test_due_query_honours_status_time_and_date_range(db: Database) -> None:
    store = RuleStore(db)
    due = (await store.save(budget_rule("due"), now=NOW, author="a", source="t")).rule
    paused = (
        await store.save(budget_rule("paused", status="PAUSED"), now=NOW, author="a", source="t")
    ).rule
    future = (
        await store.save(
            budget_rule("not yet", schedule={"mode": "timetable", "slots": {"tue": ["12:00"]}}),
            now=NOW,
            author="a",
            source="t",
        )
    ).rule
    over = (
        await store.save(
            budget_rule("over", date_range={"start": "2026-11-01", "end": "2026-11-30"}),
            now=NOW,
            author="a",
            source="t",
        )
    ).rule
    later = (
        await store.save(
            budget_rule("later", date_range={"start": "2026-12-02"}),
            now=NOW,
            author="a",
            source="t",
        )
    ).rule
    assert {d.name for d in await due_docs(store, NOW)} == {"due"}
    assert {paused.id, future.id, over.id, later.id}.isdisjoint(
        {d.id for d in await due_docs(store, NOW)}
    )
    tomorrow = NOW + timedelta(days=1, hours=3)
    assert {d.name for d in await due_docs(store, tomorrow)} == {"due", "not yet", "later"}
    assert due.next_execute_at == NOW


async def test_advance_is_a_compare_and_set_on_next_execute_at(db: Database) -> None:
    store = RuleStore(db)
    rule = (await store.save(budget_rule(), now=NOW, author="a", source="t")).rule
    assert rule.next_execute_at is not None
    nxt = NOW + timedelta(minutes=15)
    assert await store.advance(
        rule.id, expected_next=rule.next_execute_at, next_execute_at=nxt, now=NOW
    )
    assert not await store.advance(
        rule.id, expected_next=rule.next_execute_at, next_execute_at=nxt, now=NOW
    )
    stored = await store.get(rule.id)
    assert (stored.next_execute_at, stored.last_execute_at) == (nxt, NOW)
    assert stored.version == 1


async def test_pause_and_activate(db: Database) -> None:
    store = RuleStore(db)
    rule = (await store.save(budget_rule(), now=NOW, author="a", source="t")).rule
    paused = (await store.set_status(rule.id, "PAUSED", now=NOW)).rule
    assert paused.status == "PAUSED"
    assert await due_docs(store, NOW) == []
    later = NOW + timedelta(hours=2)
    active = (await store.set_status(rule.id, "ACTIVE", now=later)).rule
    assert (active.status, active.next_execute_at) == ("ACTIVE", later)
    assert len(await store.versions(rule.id)) == 1


async def test_renaming_onto_an_existing_name_conflicts(db: Database) -> None:
    store = RuleStore(db)
    await store.save(budget_rule("a"), now=NOW, author="x", source="t")
    b = (await store.save(budget_rule("b"), now=NOW, author="x", source="t")).rule
    with pytest.raises(ConflictError, match="already exists"):
        await store.save(budget_rule("a", percent=5), now=NOW, author="x", source="t", rule_id=b.id)
