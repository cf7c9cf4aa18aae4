"""The ``backtests`` collection: a backtest's life, its expiry, big results, no tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson

from ruleengine import constants as c
from ruleengine.store.backtests import (
    PLAIN_MAX_BYTES,
    RESTARTED,
    BacktestStore,
    decode_result,
)
from ruleengine.store.db import Database

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TOKEN = "EAAGsecretTOKENthatMustNeverLeak0123456789"


@dataclass(frozen=True)
class Step:
    days_done: int
    days_total: int
    stage: str


async def test_a_backtest_moves_from_queued_to_done(db: Database) -> None:
    store = BacktestStore(db)
    doc = await store.create(request={"rule_name": "r", "days": 3}, days_total=3, now=NOW)
    assert doc["status"] == "queued"
    assert doc["expires_at"] == NOW + timedelta(days=7)

    assert await store.start(doc["_id"], now=NOW)
    assert not await store.start(doc["_id"], now=NOW)  # once
    await store.progress(doc["_id"], Step(1, 3, "replay"), now=NOW + timedelta(seconds=1))
    got = await store.get(doc["_id"], now=NOW)
    assert got is not None
    assert got["progress"] == {"days_done": 1, "days_total": 3, "stage": "replay"}
    assert got["updated_at"] == NOW + timedelta(seconds=1)

    assert await store.finish(doc["_id"], {"days": 3, "runs": 5}, now=NOW + timedelta(seconds=2))
    got = await store.get(doc["_id"], now=NOW)
    assert got is not None
    assert got["status"] == "done"
    assert decode_result(got) == {"days": 3, "runs": 5}
    assert got["progress"] == {"days_done": 3, "days_total": 3, "stage": "done"}
    # closed: neither a late failure nor a late progress changes it
    assert not await store.fail(doc["_id"], "late", now=NOW)
    await store.progress(doc["_id"], Step(2, 3, "replay"), now=NOW)
    again = await store.get(doc["_id"], now=NOW)
    assert again is not None
    assert (again["status"], again["progress"]["stage"]) == ("done", "done")


async def test_get_refuses_unknown_and_expired(db: Database) -> None:
    store = BacktestStore(db)
    doc = await store.create(request={}, days_total=1, now=NOW)
    assert await store.get("nope", now=NOW) is None
    assert await store.get(doc["_id"], now=NOW + timedelta(days=7) - timedelta(seconds=1))
    assert await store.get(doc["_id"], now=NOW + timedelta(days=7)) is None


async def test_interrupt_unfinished_fails_queued_and_running_only(db: Database) -> None:
    store = BacktestStore(db)
    queued = await store.create(request={}, days_total=1, now=NOW)
    running = await store.create(request={}, days_total=1, now=NOW)
    await store.start(running["_id"], now=NOW)
    done = await store.create(request={}, days_total=1, now=NOW)
    await store.finish(done["_id"], {}, now=NOW)

    assert await store.interrupt_unfinished(now=NOW) == 2

    statuses = {d["_id"]: (d["status"], d["error"]) async for d in db[c.BACKTESTS].find({})}
    assert statuses[queued["_id"]] == ("failed", RESTARTED)
    assert statuses[running["_id"]] == ("failed", RESTARTED)
    assert statuses[done["_id"]] == ("done", None)


async def test_a_big_result_is_kept_compressed(db: Database) -> None:
    store = BacktestStore(db)
    doc = await store.create(request={}, days_total=90, now=NOW)
    fires = [
        {"entity_id": str(120210000000000 + i), "task": "t", "after": i} for i in range(90_000)
    ]
    result = {"days": 90, "fires": fires}
    assert len(orjson.dumps(result)) > PLAIN_MAX_BYTES
    await store.finish(doc["_id"], result, now=NOW)
    raw = await db[c.BACKTESTS].find_one({"_id": doc["_id"]})
    assert raw is not None
    assert raw["result"] is None
    assert len(raw["result_z"]) < PLAIN_MAX_BYTES
    assert decode_result(raw) == result


async def test_tokens_never_reach_the_collection(db: Database) -> None:
    store = BacktestStore(db)
    doc = await store.create(request={"rule": {"name": f"r {TOKEN}"}}, days_total=1, now=NOW)
    await store.fail(doc["_id"], f"GET /act_1001/insights?access_token={TOKEN} failed", now=NOW)
    other = await store.create(request={}, days_total=1, now=NOW)
    await store.finish(other["_id"], {"caveats": [TOKEN], "access_token": "x"}, now=NOW)
    text = orjson.dumps([d async for d in db[c.BACKTESTS].find({})], default=str).decode()
    assert TOKEN not in text
