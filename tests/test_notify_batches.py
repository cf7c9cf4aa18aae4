"""A job's messages go out a chunk at a time (``writes/notify.py``: ``send_many``).

Each (batch, task, entity) is told at most once: a chunk's intents are recorded in one
insert before its messages go out and settled after them; a worker SIGKILLed while a
chunk's message is in flight leaves that chunk's intents pending, and whoever settles them
gives them up (``unverifiable``) rather than send a message twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from pydantic import SecretStr

from flow import (
    campaign_rule,
    dispatch,
    kill,
    reap,
    records,
    save_rule,
    start_worker,
    wait_for,
    work,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.writes.notify import NOTIFY_CHUNK
from test_write_batches import big_account

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
CAMPAIGNS = 2 * NOTIFY_CHUNK + 5  # three chunks, the last one short


class Hook:
    """A local webhook named ``ops``; it can hold the message number ``hold_at`` unanswered."""

    def __init__(self, hold_at: int | None = None) -> None:
        self.received: list[str] = []
        self.hold_at = hold_at
        self.release = asyncio.Event()

    async def receive(self, request: web.Request) -> web.Response:
        self.received.append((await request.json())["text"])
        if len(self.received) == self.hold_at:
            await self.release.wait()  # the sender is killed meanwhile
        return web.json_response({"ok": True})


@pytest.fixture
async def hook() -> AsyncIterator[tuple[Hook, str]]:
    receiver = Hook(hold_at=NOTIFY_CHUNK + 3)  # the 3rd message of the second chunk
    app = web.Application()
    app.router.add_post("/hook", receiver.receive)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield receiver, f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    finally:
        receiver.release.set()
        await runner.cleanup()


def notify_rule() -> dict[str, Any]:
    data = campaign_rule(
        {"type": "notify", "webhook": "ops", "template": "{entity_id}"},
        [ALWAYS],
        cooldown_minutes=60,
    )
    data["ad_accounts"] = ["act_2001"]
    return data


async def intents(db: Database, **query: Any) -> list[dict[str, Any]]:
    return [d async for d in db[c.ACTION_INTENTS].find(query)]


async def test_a_job_tells_each_entity_once_a_chunk_at_a_time(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, hook: tuple[Hook, str]
) -> None:
    receiver, url = hook
    receiver.hold_at = None
    await big_account(sandbox, db, settings, CAMPAIGNS)
    wired = settings.model_copy(update={"webhooks": {"ops": SecretStr(url)}})
    rule = await save_rule(db, notify_rule())
    await dispatch(wired, db)
    await work(wired)
    assert sorted(receiver.received) == sorted(set(receiver.received))
    assert len(receiver.received) == CAMPAIGNS
    told = await intents(db, rule_id=rule.id)
    assert Counter(i["status"] for i in told) == {"done": CAMPAIGNS}
    applied = await records(db, rule_id=rule.id, outcome="applied")
    assert sorted(r["entity_id"] for r in applied) == sorted(receiver.received)
    # the cooldown holds: the next run tells nobody
    await dispatch(wired, db, now=datetime.now(UTC) + timedelta(minutes=15))
    await work(wired)
    assert len(receiver.received) == CAMPAIGNS


async def test_a_worker_killed_with_a_message_in_flight_tells_no_entity_twice(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    hook: tuple[Hook, str],
    tmp_path: Path,
) -> None:
    receiver, url = hook
    await big_account(sandbox, db, settings, CAMPAIGNS)
    rule = await save_rule(db, notify_rule())
    start = datetime.now(UTC)
    await dispatch(settings, db, now=start)
    webhooks = orjson.dumps({"ops": url}).decode()
    worker = start_worker(settings, tmp_path / "worker.log", webhooks=webhooks)
    try:  # the worst moment: a chunk recorded, some of it told, one message in flight
        await wait_for(lambda: _received(receiver, NOTIFY_CHUNK + 3), timeout_s=60)
    finally:
        kill(worker)
    receiver.release.set()
    first = await intents(db, rule_id=rule.id)
    assert Counter(i["status"] for i in first) == {"done": NOTIFY_CHUNK, "pending": NOTIFY_CHUNK}
    told = set(receiver.received)
    assert len(told) == len(receiver.received) == NOTIFY_CHUNK + 3
    await redis.delete(c.QUEUE_NAME)  # the dead worker's job would block an in-process burst
    await reap(settings, db, redis, now=start + timedelta(hours=1))
    # the chunk in flight is given up, told or not: a message is never sent twice
    pending = {i["entity_id"] for i in first if i["status"] == "pending"}
    settled = {i["entity_id"]: i for i in await intents(db, rule_id=rule.id)}
    assert {(settled[e]["status"], settled[e].get("reason")) for e in pending} == {
        ("failed", "unverifiable")
    }
    assert len(receiver.received) == NOTIFY_CHUNK + 3
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None and batch["status"] == "ABANDONED"


async def _received(receiver: Hook, count: int) -> bool:
    return len(receiver.received) >= count
