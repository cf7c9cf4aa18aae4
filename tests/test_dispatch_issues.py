"""A stored rule that no longer validates is set aside; the dispatcher goes on with the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ruleengine import constants as c
from ruleengine.dispatching.sweep import Dispatcher
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
Clock = Callable[[], datetime]


def rule_data(name: str, accounts: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "level": "campaign",
        "ad_accounts": accounts,
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": "pause",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "pause"},
            }
        ],
    }


async def save(db: Database, name: str, accounts: list[str]) -> str:
    result = await RuleStore(db).save(
        parse_rule(rule_data(name, accounts)), now=T0, author="t", source="t"
    )
    return result.rule.id


# Ways a rule document is broken by hand (or by a tz database that lost a zone).
POISONS: dict[str, dict[str, Any]] = {
    "unknown timezone": {"$set": {"definition.timezone": "Mars/Olympus"}},
    "no tasks": {"$unset": {"definition.tasks": ""}},
    "action without percent": {"$set": {"definition.tasks.0.action": {"type": "increase_budget"}}},
    "document without created_at": {"$unset": {"created_at": ""}},
}


@pytest.fixture
async def dispatcher(
    settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> AsyncIterator[Callable[[Clock], Dispatcher]]:
    made: list[tuple[Dispatcher, GraphSession]] = []

    def make(clock: Clock) -> Dispatcher:
        session = GraphSession(settings)
        made.append(
            (
                Dispatcher(
                    settings,
                    db=db,
                    queue=connect_queue(settings),
                    reader=GraphReader.from_settings(session),
                    clock=clock,
                ),
                session,
            )
        )
        return made[-1][0]

    yield make
    for made_dispatcher, session in made:
        await session.close()
        await made_dispatcher.queue.aclose()


@pytest.mark.parametrize("poison", list(POISONS))
async def test_a_poison_rule_is_set_aside_and_the_others_are_dispatched(
    poison: str, dispatcher: Callable[[Clock], Dispatcher], db: Database, redis: Any
) -> None:
    good = await save(db, "Good", ["act_1001", "act_1002"])
    bad = await save(db, "Bad", ["act_1003"])
    await db[c.RULES].update_one({"_id": bad}, POISONS[poison])

    now = T0
    made = dispatcher(lambda: now)
    report = await made.tick()

    assert report is not None
    assert (report.due, report.set_aside) == (2, 1)
    assert (report.jobs, report.advanced, report.held_back) == (2, 1, 0)
    job_ids = [j.decode() for j in await redis.zrange(c.QUEUE_NAME, 0, -1)]
    assert len(job_ids) == 2 and all(good in j for j in job_ids)
    stored = await db[c.RULES].find_one({"_id": bad})
    assert stored is not None
    assert stored["status"] == "HAS_ISSUES"
    assert stored["issue"]["at"] == T0
    assert stored["issue"]["message"]
    group = await db[c.ERROR_LOG].find_one({"function": "dispatch.load_rule"})
    assert group is not None and group["count"] == 1
    assert group["samples"][0]["context"] == {"rule_id": bad}
    # Set aside, it is no longer due: the next tick neither retries nor reports it again.
    now = T0 + timedelta(minutes=15)
    again = await made.tick()
    assert again is not None and (again.due, again.set_aside) == (1, 0)
    group = await db[c.ERROR_LOG].find_one({"function": "dispatch.load_rule"})
    assert group is not None and group["count"] == 1


async def test_the_issue_names_the_field(
    dispatcher: Callable[[Clock], Dispatcher], db: Database
) -> None:
    bad = await save(db, "Bad", ["act_1003"])
    await db[c.RULES].update_one({"_id": bad}, POISONS["unknown timezone"])
    await dispatcher(lambda: T0).tick()
    stored = await db[c.RULES].find_one({"_id": bad})
    assert stored is not None
    assert "timezone" in stored["issue"]["message"]
    assert "Mars/Olympus" in stored["issue"]["message"]


async def test_nothing_raised_inside_a_tick_ends_the_loop(
    dispatcher: Callable[[Clock], Dispatcher], db: Database, redis: Any
) -> None:
    await save(db, "Good", ["act_1001"])
    stop = asyncio.Event()
    calls = 0

    def clock() -> datetime:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the clock broke")
        stop.set()  # the second tick is the last one
        return T0

    await asyncio.wait_for(dispatcher(clock).run(stop), timeout=30)

    assert await redis.zcard(c.QUEUE_NAME) == 1  # the tick after the failure dispatched
    group = await db[c.ERROR_LOG].find_one({"function": "dispatch.tick"})
    assert group is not None
    assert "the clock broke" in group["samples"][0]["message"]
