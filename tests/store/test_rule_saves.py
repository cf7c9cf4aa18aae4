"""A save is all or nothing; versions of interrupted saves are repaired when processes start."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from flow import budget_rule, point_cli_at
from ruleengine import constants as c
from ruleengine.cli import main as cli_main
from ruleengine.dispatch import run_dispatcher
from ruleengine.errors import ConflictError
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import ORPHAN_GRACE, RuleStore
from ruleengine.web.app import create_app

NOW = datetime.now(UTC)


async def versions_of(db: Database, rule_id: str) -> list[int]:
    cursor = db[c.RULE_VERSIONS].find({"rule_id": rule_id}).sort("version")
    return [d["version"] async for d in cursor]


async def test_a_save_refused_because_the_name_is_taken_leaves_no_version(db: Database) -> None:
    store = RuleStore(db)
    await store.save(budget_rule("a"), now=NOW, author="x", source="t")
    b = (await store.save(budget_rule("b"), now=NOW, author="x", source="t")).rule

    with pytest.raises(ConflictError, match="already exists"):
        await store.save(budget_rule("a", percent=5), now=NOW, author="x", source="t", rule_id=b.id)

    assert await versions_of(db, b.id) == [1]
    saved = await store.save(
        budget_rule("b", percent=5), now=NOW, author="x", source="t", rule_id=b.id
    )
    assert (saved.new_version, saved.rule.version) == (True, 2)
    assert await versions_of(db, b.id) == [1, 2]


async def test_a_create_refused_because_the_name_is_taken_leaves_no_version(
    db: Database,
) -> None:
    store = RuleStore(db)
    first = (await store.save(budget_rule("a"), now=NOW, author="x", source="t")).rule
    # the name check of save() passed (as when two creates race): the insert is refused
    with pytest.raises(ConflictError, match="already exists"):
        await store._create(budget_rule("a", percent=7), NOW, "x", "t")
    assert await db[c.RULE_VERSIONS].count_documents({}) == 1
    assert await versions_of(db, first.id) == [1]


async def insert_orphan(db: Database, rule_id: str, version: int, *, age: timedelta) -> None:
    """A version a save wrote before dying, ahead of the rule's pointer."""
    await db[c.RULE_VERSIONS].insert_one(
        {
            "rule_id": rule_id,
            "version": version,
            "checksum": "0" * 64,
            "definition": {"name": "half-saved"},
            "created_at": datetime.now(UTC) - age,
            "author": "x",
            "source": "t",
        }
    )


async def test_repair_removes_orphans_and_keeps_young_ones(db: Database) -> None:
    store = RuleStore(db)
    rule = (await store.save(budget_rule("a"), now=NOW, author="x", source="t")).rule
    await insert_orphan(db, rule.id, 2, age=timedelta(hours=1))
    await insert_orphan(db, rule.id, 3, age=timedelta(0))  # a save still in flight
    await insert_orphan(db, "no-such-rule", 1, age=timedelta(hours=1))

    assert await store.repair_orphans(now=datetime.now(UTC)) == 1
    assert await store.repair_orphans(now=datetime.now(UTC)) == 0  # idempotent
    assert await versions_of(db, rule.id) == [1, 3]
    assert await versions_of(db, "no-such-rule") == [1]  # maybe a rule deleted by hand: kept


async def test_an_old_orphan_does_not_block_the_next_save(db: Database) -> None:
    store = RuleStore(db)
    rule = (await store.save(budget_rule("a"), now=NOW, author="x", source="t")).rule
    await insert_orphan(db, rule.id, 2, age=ORPHAN_GRACE * 2)
    saved = await store.save(
        budget_rule("a", percent=5), now=datetime.now(UTC), author="x", source="t", rule_id=rule.id
    )
    assert saved.rule.version == 2
    version = await store.version(rule.id, 2)
    assert version.definition["tasks"][0]["action"]["percent"] == 5


async def test_a_young_orphan_is_someone_elses_save_in_flight(db: Database) -> None:
    store = RuleStore(db)
    rule = (await store.save(budget_rule("a"), now=NOW, author="x", source="t")).rule
    await insert_orphan(db, rule.id, 2, age=timedelta(0))
    with pytest.raises(ConflictError, match="reload the rule and retry"):
        await store.save(budget_rule("a", percent=5), now=datetime.now(UTC), author="x", source="t")


async def test_the_web_app_the_dispatcher_and_the_cli_repair_orphans_when_they_start(
    settings: Settings, db: Database, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RuleStore(db)
    rule = (await store.save(budget_rule("a", percent=3), now=NOW, author="x", source="t")).rule
    await insert_orphan(db, rule.id, 2, age=timedelta(hours=1))
    client: TestClient[web.Request, web.Application] = TestClient(
        TestServer(create_app(settings), host="127.0.0.1")
    )
    await client.start_server()
    await client.close()
    assert await versions_of(db, rule.id) == [1]

    await insert_orphan(db, rule.id, 2, age=timedelta(hours=1))
    assert await run_dispatcher(settings, once=True) == 0
    assert await versions_of(db, rule.id) == [1]

    await insert_orphan(db, rule.id, 2, age=timedelta(hours=1))
    point_cli_at(settings, monkeypatch)
    # the CLI runs its own event loop: run it outside this test's loop
    assert await asyncio.to_thread(cli_main, ["rules", "list"]) == 0
    assert await versions_of(db, rule.id) == [1]
