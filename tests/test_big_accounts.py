"""A big account through the worker: Insights as async report runs, shown in the batch row."""

from __future__ import annotations

from typing import Any

from flow import WINNER, campaign_rule, engine_for, records, save_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.job import evaluate_account
from ruleengine.worker.preview import open_preview, preview_rule
from support import SANDBOX_NOW, SANDBOX_TOKEN

SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1_000_000}
NEVER_ACTS = campaign_rule({"type": "pause"}, [SPENT, WINNER], name="big")


async def evaluate(settings: Settings, db: Database, batch_id: str, sleep: Any = None) -> Any:
    """Evaluate ``NEVER_ACTS`` on act_1001 as batch ``batch_id``; its summary."""
    async with engine_for(settings, db) as engine:
        if sleep is not None:
            engine.sleep = sleep
        return await evaluate_with(engine, db, batch_id)


async def evaluate_with(engine: Any, db: Database, batch_id: str) -> Any:
    """Evaluate ``NEVER_ACTS`` on act_1001 with ``engine`` as batch ``batch_id``."""
    doc = await save_rule(db, NEVER_ACTS) if batch_id == "sync" else None
    rule = parse_rule(NEVER_ACTS)
    entities = await GraphReader.from_settings(engine.session).list_for_rule(
        rule, "act_1001", token=SANDBOX_TOKEN
    )
    job = EvaluateJob.of(
        rule,
        batch_id=batch_id,
        rule_id=doc.id if doc else "rule-big",
        version=1,
        account="act_1001",
        entities=entities,
        scheduled_at=SANDBOX_NOW,
        dispatched_at=SANDBOX_NOW,
    )
    return await evaluate_account(engine, job, now=SANDBOX_NOW)


def seen(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {r["entity_id"]: [cond["actual"] for cond in r["conditions"]] for r in rows}


async def test_a_big_account_goes_async_with_progress_in_the_batch_row_and_same_numbers(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    synchronous = await evaluate(settings, db, "sync")
    assert synchronous.status == "DONE"
    await sandbox.clear_stats()
    rows_seen: list[dict[str, Any]] = []

    async def sleep(seconds: float) -> None:
        # what the Rule Logs screen would show while the reports run
        row = await db[c.BATCHES].find_one({"_id": "async"})
        assert row is not None
        rows_seen.append(row["progress"])

    big = settings.model_copy(update={"insights_async_threshold": 5})
    summary = await evaluate(big, db, "async", sleep)
    assert summary.status == "DONE"
    assert summary.evaluated == synchronous.evaluated == 12
    assert seen(await records(db, batch_id="async")) == seen(await records(db, batch_id="sync"))
    stats = await sandbox.stats()
    assert stats["calls_by_kind"]["insights"] == 0
    assert stats["calls_by_kind"]["report"] == 2  # today and last_7d
    assert all(p["phase"] == "fetch" and p["total"] == 12 for p in rows_seen)
    percents = [p["percent"] for p in rows_seen]
    assert percents == sorted(percents)
    assert 0 < max(percents) < 100
    row = await db[c.BATCHES].find_one({"_id": "async"})
    assert row is not None
    assert row["progress"] == {"done": 12, "total": 12}
    assert row["graph"]["http_requests"] == summary.cost["http_requests"]


async def test_a_failed_report_run_is_recorded_as_fetch_failed_not_a_crash(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    await sandbox.set_insights(report_outcomes=["Job Failed", "Job Failed"])
    big = settings.model_copy(update={"insights_async_threshold": 5})
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    summary = await evaluate(big, db, "failed", sleep)
    assert sorted(waits) == [2.0, 2.0, 4.0, 4.0]  # both runs polled, backing off, until they failed
    assert summary.status == "FAILED"
    assert "Generating the report failed" in (summary.error or "")
    rows = await records(db, batch_id="failed")
    assert len(rows) == 12
    assert {r["reason"] for r in rows} == {"fetch_failed"}
    assert {(r["error"]["code"], r["error"]["subcode"]) for r in rows} == {(-2, 2490547)}
    assert {r["error"]["kind"] for r in rows} == {"ReportRunError"}
    batch = await db[c.BATCHES].find_one({"_id": "failed"})
    assert batch is not None
    assert batch["status"] == "FAILED"
    assert batch["failed_count"] == 12


async def test_the_preview_of_a_big_account_runs_reports_and_writes_nothing(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    big = settings.model_copy(update={"insights_async_threshold": 5})
    reading = open_preview(big, db=db)

    async def no_wait(seconds: float) -> None:
        pass

    reading.sleep = no_wait
    try:
        preview = await preview_rule(
            reading, parse_rule(NEVER_ACTS), rule_id="r", version=1, now=SANDBOX_NOW
        )
    finally:
        await reading.close()
    assert preview.errors == {}
    assert len(preview.records) == 12
    assert all(r["passed"] is False for r in preview.records)
    assert (await sandbox.stats())["calls_by_kind"]["report"] == 2
    assert await sandbox.writes() == []


async def test_the_worker_slows_down_on_a_full_insights_throttle_and_records_the_refusal(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    await sandbox.set_limits(insights_account_calls_per_hour=2)  # one job's 2 periods fill it
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async with engine_for(settings, db) as engine:
        engine.sleep = sleep
        first = await evaluate_with(engine, db, "t1")
        assert (first.status, waits) == ("DONE", [])
        second = await evaluate_with(engine, db, "t2")
    # at 100 % each Batch API call waits 30 s first; each refusal (4/1504039) waits 30 s more
    assert waits == [30.0, 30.0, 30.0, 30.0, 30.0]
    assert second.status == "FAILED"
    rows = await records(db, batch_id="t2")
    assert {(r["reason"], r["error"]["code"], r["error"]["subcode"]) for r in rows} == {
        ("fetch_failed", 4, 1504039)
    }
