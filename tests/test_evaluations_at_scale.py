"""Records at agency scale: a batch stores a document per acting entity and a few chunks.

A batch of 5,000 ad sets where 3 act keeps 3 execution records and 5 chunks of evaluations,
and the API shows all 5,000 with the values each condition saw, page by page. A worker
SIGKILLed after writing its chunks and before its records leaves a batch the reaper
completes: every entity once, counted once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from flow import campaign_rule, dispatch, engine_for, reap, records, save_rule, worker_env
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.evaluations import FORMAT, acted
from ruleengine.store.evaluations import stored as stored_rows
from ruleengine.web.app import create_app
from ruleengine.worker.job import evaluate_account
from support import SANDBOX_NOW, SANDBOX_TOKEN

BIG = "act_2001"


async def big_account(settings: Settings, db: Database, sandbox: SandboxAdmin) -> None:
    await sandbox.reset(
        scenario="bench", accounts=1, campaigns_per_account=1000, adsets_per_campaign=5
    )
    await sandbox.set_clock(SANDBOX_NOW)
    await CredentialStore(db, load_key(settings)).add(BIG, SANDBOX_TOKEN, now=datetime.now(UTC))


def age_rule(threshold: float) -> dict[str, Any]:
    """Pause the ad sets older than ``threshold`` hours (an ad set's own field: no Insights)."""
    condition = {"metric": "age_hours", "operator": ">", "value": threshold}
    return campaign_rule(
        {"type": "pause"},
        [condition],
        level="adset",
        ad_accounts=[BIG],
        name=f"older than {threshold}",
    )


async def listed_job(engine: Any, rule: dict[str, Any], batch_id: str, rule_id: str) -> EvaluateJob:
    parsed = parse_rule(rule)
    from ruleengine.meta.reader import GraphReader

    entities = await GraphReader.from_settings(engine.session).list_for_rule(
        parsed, BIG, token=SANDBOX_TOKEN
    )
    return EvaluateJob.of(
        parsed,
        batch_id=batch_id,
        rule_id=rule_id,
        version=1,
        account=BIG,
        entities=entities,
        scheduled_at=SANDBOX_NOW,
        dispatched_at=SANDBOX_NOW,
    )


async def test_a_batch_of_5000_where_3_act_keeps_3_records_and_shows_all_5000(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    await big_account(settings, db, sandbox)
    async with engine_for(settings, db) as engine:
        never = await listed_job(engine, age_rule(10**9), "look", "r-look")
        assert (await evaluate_account(engine, never, now=SANDBOX_NOW)).evaluated == 5000
        ages = sorted(row["conditions"][0]["actual"] for row in await records(db, batch_id="look"))
        assert ages[-4] < ages[-3]  # three ad sets are older than all the others
        job = await listed_job(engine, age_rule(ages[-4]), "big", "r-big")
        summary = await evaluate_account(engine, job, now=SANDBOX_NOW)
    assert (summary.evaluated, summary.applied) == (5000, 3)
    stored = [d async for d in db[c.EXECUTIONS].find({"batch_id": "big"})]
    assert len(stored) == 3  # slim: what they saw is in their chunks, and shown below
    assert all("conditions" not in d and 0 <= d["in_chunk"] < 5 for d in stored)
    assert await db[c.EVALUATIONS].count_documents({"batch_id": "big"}) == 5
    async for chunk in db[c.EVALUATIONS].find({"batch_id": "big"}):
        kept = stored_rows(chunk)  # no row kept whole, each ad set as listed once
        assert chunk["format"] == FORMAT and len(kept["e"]) == 1000 and len(kept["r"]) == 1000
        assert not any("!" in row or "entity" in row or "conditions" in row for row in kept["r"])
    batch = await db[c.BATCHES].find_one({"_id": "big"})
    assert batch is not None
    assert (batch["evaluated_count"], batch["applied_count"]) == (5000, 3)

    app = create_app(settings)
    async with TestClient(TestServer(app)) as client:
        seen: dict[str, float] = {}
        for offset in range(0, 5000, 1000):
            page = await (
                await client.get(f"/api/batches/big/executions?limit=1000&offset={offset}")
            ).json()
            assert (page["total"], page["offset"], len(page["items"])) == (5000, offset, 1000)
            for item in page["items"]:
                seen[item["entity_id"]] = item["conditions"][0]["actual"]
        assert len(seen) == 5000 and sorted(seen.values()) == ages
        acted = await (await client.get("/api/batches/big/executions?acted=1")).json()
        assert acted["total"] == 3
        assert {i["outcome"] for i in acted["items"]} == {"applied"}
        assert all(i["conditions"][0]["actual"] > ages[-4] for i in acted["items"])


_KILLED_BEFORE_RECORDS = """
import os, signal, sys
from ruleengine.store import records

async def die(self, docs, **_):
    if docs:  # the run's chunks are written: die before its records are
        os.kill(os.getpid(), signal.SIGKILL)

records.ExecutionStore.upsert_many = die  # records a former delivery wrote
records.ExecutionStore._insert_or_replace = die  # the run's new records
sys.argv = ["arq", "ruleengine.jobs.WorkerSettings", "--burst"]
from arq.cli import cli
cli()
"""


async def test_a_worker_killed_between_its_chunks_and_records_leaves_a_batch_the_reaper_completes(
    settings: Settings, db: Database, redis: Any, accounts: list[str], tmp_path: Path
) -> None:
    always = {"metric": "current_hour", "operator": ">=", "value": 0}
    rule = await save_rule(db, campaign_rule({"type": "pause"}, [always], name="everything"))
    await dispatch(settings, db)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.run(
            [sys.executable, "-c", _KILLED_BEFORE_RECORDS],
            env=worker_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    assert worker.returncode == -signal.SIGKILL, log.read_text()
    chunks = [d async for d in db[c.EVALUATIONS].find({"rule_id": rule.id})]
    assert chunks and await db[c.EXECUTIONS].count_documents({"rule_id": rule.id}) == 0
    pairs = sum(ch["rows"] for ch in chunks)
    (batch_id,) = {ch["batch_id"] for ch in chunks}

    await reap(settings, db, redis, now=datetime.now(UTC) + timedelta(hours=2))
    batch = await db[c.BATCHES].find_one({"_id": batch_id})
    assert batch is not None and batch["status"] == "ABANDONED" and batch["recovered_at"]
    rows = await records(db, batch_id=batch_id)
    assert len(rows) == pairs == len({(r["task_id"], r["entity_id"]) for r in rows})
    kept = [d async for d in db[c.EXECUTIONS].find({"batch_id": batch_id})]
    assert len(kept) == len({d["key"] for d in kept}) == sum(acted(r) for r in rows)
    assert {d["recovered_by"] for d in kept} == {"reaper"}
    applied = sum(r["outcome"] == "applied" for r in rows)
    assert (batch["applied_count"], batch["evaluated_count"]) == (applied, pairs)
    # and a later pass adds nothing
    await reap(settings, db, redis, now=datetime.now(UTC) + timedelta(hours=3))
    assert await db[c.EXECUTIONS].count_documents({"batch_id": batch_id}) == len(kept)
