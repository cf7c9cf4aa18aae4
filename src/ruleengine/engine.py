"""The body of ``evaluate_account``: cooldown → fetch → evaluate → act → record.

One job evaluates one rule (the version it was dispatched with) on one ad
account's entities. Every (entity, task) ends in exactly one execution record
that says what the engine saw, decided and did, with a trace of the 4 stages.
The batch row is upserted on ``batch_id`` first (a redelivery counts as a second
execution of the same batch) and closed with counts, Graph cost and duration.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import PyMongoError

from ruleengine.actions import ActionExecutor, ActResult, IntentSettler, JobRun
from ruleengine.constants import STAGES
from ruleengine.errors import ErrorReport
from ruleengine.followups import FollowupScheduler, Origin
from ruleengine.locks import AccountLocks
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.http import READ_WRITE, Cost, GraphSession
from ruleengine.meta.insights import InsightsResult, fetch_insights
from ruleengine.meta.reader import GraphReader, RetryPolicy
from ruleengine.meta.writer import GraphWriter
from ruleengine.notify import Notifier
from ruleengine.payload import EvaluateJob
from ruleengine.rules.entity import Entity, currency_offset
from ruleengine.rules.evaluate import EvalContext, TaskVerdict, evaluate_task
from ruleengine.rules.fetch import custom_metric_names, fetch_groups
from ruleengine.rules.model import Rule, Task
from ruleengine.settings import Settings
from ruleengine.sheets import CustomMetricTable, SheetsError, SheetsReader
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.intents import IntentStore
from ruleengine.store.records import (
    BatchCounts,
    BatchStart,
    BatchStore,
    ExecutionStore,
    record_key,
)
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.5


@dataclass
class Engine:
    """What evaluations need from the worker process (built once in its startup hook)."""

    settings: Settings
    session: GraphSession
    batches: BatchStore
    executions: ExecutionStore
    intents: IntentStore
    credentials: CredentialStore
    errors: ErrorLog
    executor: ActionExecutor
    sheets: SheetsReader | None = None
    worker: str = "worker"
    followups: FollowupScheduler | None = None
    rules: RuleStore | None = None

    def graph(self, cost: Cost) -> tuple[GraphReader, BatchReader, GraphWriter]:
        """Per-job Graph clients sharing the process session, counting into ``cost``."""
        view = self.session.view(cost=cost)
        reader = GraphReader.from_settings(view)
        s = self.settings
        policy = RetryPolicy(s.read_retry_waits_s, rate_limit_cap_s=s.rate_limit_max_wait_s)
        batch = BatchReader(view, policy=policy, concurrency=s.graph_concurrency)
        return reader, batch, GraphWriter(view, self.errors)


def build_engine(settings: Settings, *, db: Database, redis: Any, worker: str = "worker") -> Engine:
    """The engine with every store and client it needs (worker startup, web preview)."""
    errors = ErrorLog(db)
    intents, batches = IntentStore(db), BatchStore(db)
    executor = ActionExecutor(
        settings,
        intents=intents,
        settler=IntentSettler(intents, batches, orphan_after_s=settings.orphan_after_s),
        locks=AccountLocks(
            redis, ttl_s=settings.write_lock_ttl_s, wait_s=settings.write_lock_wait_s
        ),
        notifier=Notifier(settings, errors),
    )
    sheets = None
    if settings.sheets_credentials_file is not None:
        sheets = SheetsReader(
            credentials_file=settings.sheets_credentials_file,
            api_url=settings.sheets_api_url,
            cache_s=settings.sheets_cache_s,
            call_interval_s=settings.sheets_call_interval_s,
        )
    return Engine(
        settings=settings,
        session=GraphSession(settings, methods=READ_WRITE),
        batches=batches,
        executions=ExecutionStore(db),
        intents=intents,
        credentials=CredentialStore(db, load_key(settings)),
        errors=errors,
        executor=executor,
        sheets=sheets,
        worker=worker,
        followups=FollowupScheduler(db, queue=redis),
        rules=RuleStore(db),
    )


async def close_engine(engine: Engine) -> None:
    """Close the engine's clients."""
    await engine.session.close()
    await engine.executor.notifier.close()
    if engine.sheets is not None:
        await engine.sheets.close()


@dataclass
class Summary:
    """What a job did, returned to arq and used by tests and the preview."""

    batch_id: str
    status: str
    evaluated: int = 0
    affected: int = 0
    applied: int = 0
    failed: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    cost: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    error: str | None = None
    outcomes: Counter[str] = field(default_factory=Counter)  # outcome → evaluations
    actions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (type, outcome) → n
    graph_errors: Counter[str] = field(default_factory=Counter)  # Meta error code → n


@dataclass
class _Pair:
    """One (entity, task) on its way to becoming an execution record."""

    entity: Entity
    task: Task
    verdict: TaskVerdict | None = None
    result: ActResult | None = None
    reason: str | None = None  # skip/failure before acting
    until: datetime | None = None  # cooldown
    error: dict[str, Any] | None = None
    trace: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    followup: dict[str, Any] | None = None


class _Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.started = now - self.started, now
        return elapsed


class Evaluation:
    """One run of ``evaluate_account`` (or of a preview, with ``dry_run``)."""

    run_ctx: JobRun
    batch_reader: BatchReader
    offset: int = 100

    def __init__(
        self,
        engine: Engine,
        job: EvaluateJob,
        *,
        now: datetime,
        dry_run: bool = False,
        job_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.job = job
        self.rule: Rule = job.parsed_rule()
        self.now = now
        self.dry_run = dry_run
        self.job_id = job_id
        self.cost = Cost()
        self.stage_totals = dict.fromkeys(STAGES, 0.0)
        self._last_progress = 0.0
        self.delivery = 1  # which delivery of the batch this is (execute_count)

    async def run(self) -> Summary:
        """Evaluate, act, record; never raises for a problem of the job's own."""
        started = time.perf_counter()
        summary = Summary(batch_id=self.job.batch_id, status="RUNNING")
        counts: BatchCounts | None = None
        if not self.dry_run:
            await self._start()
        try:
            pairs = await self._evaluate_all()
            summary = self._summarise(pairs)
            if not self.dry_run:
                counts = BatchCounts.of(await self._store(pairs))
        except Exception as exc:  # a bug or an outage: record it, never crash the worker
            summary.status, summary.error = "FAILED", f"{type(exc).__name__}: {exc}"
            log.exception("batch %s failed", self.job.batch_id)
            await self._report(exc)
        summary.duration_s = time.perf_counter() - started
        summary.cost = self.cost.as_dict()
        if not self.dry_run:
            await self._finish(summary, counts)
        return summary

    # ---------------------------------------------------------------- stages

    async def _evaluate_all(self) -> list[_Pair]:
        self.run_ctx = await self._job_run()
        pairs = [_Pair(entity, task) for entity in self.job.entities for task in self.rule.tasks]
        watch = _Stopwatch()
        await self._apply_cooldowns(pairs)
        self._stage("cooldown", watch.lap(), pairs)
        live = [p for p in pairs if p.reason is None]
        insights, custom = await self._fetch(live)
        self._stage("fetch", watch.lap(), pairs)
        self._evaluate(live, insights, custom)
        await self._act([p for p in live if p.verdict and p.verdict.passed])
        return pairs

    async def _job_run(self) -> JobRun:
        token = await self.engine.credentials.token(self.job.token_ref)
        reader, batch, writer = self.engine.graph(self.cost)
        self.batch_reader = batch
        account = await self.engine.credentials.get(self.job.account)
        self.offset = currency_offset(account.currency)
        return JobRun(
            batch_id=self.job.batch_id,
            rule_id=self.job.rule_id,
            rule_version=self.job.rule_version,
            rule=self.rule,
            account=self.job.account,
            token=token,
            now=self.now,
            reader=reader,
            writer=None if self.dry_run else writer,
        )

    def _stage(self, name: str, seconds: float, pairs: list[_Pair]) -> None:
        """A shared stage: every pair waited for it."""
        self.stage_totals[name] += seconds
        for pair in pairs:
            pair.trace[name] = seconds

    async def _apply_cooldowns(self, pairs: list[_Pair]) -> None:
        keyed = {(p.task.id, p.entity.id): p for p in pairs if p.task.cooldown_minutes > 0}
        active = await self.engine.intents.cooling(
            self.job.rule_id,
            keyed,
            now=self.now,
            longest_minutes=max((t.cooldown_minutes for t in self.rule.tasks), default=0),
            other_than=self.job.batch_id,
        )
        for key, until in active.items():
            keyed[key].reason, keyed[key].until = "next_execute_not_reached", until

    async def _fetch(
        self, pairs: list[_Pair]
    ) -> tuple[InsightsResult, dict[str, Callable[[str], float | None]]]:
        tasks = {p.task.id: p.task for p in pairs}.values()
        entity_ids = list(dict.fromkeys(p.entity.id for p in pairs))
        groups = fetch_groups(self.rule, tasks)
        insights = await fetch_insights(
            self.batch_reader,
            strategy=self.engine.settings.insights_strategy,
            account_id=self.job.account,
            level=self.rule.level,
            entity_ids=entity_ids,
            groups=groups,
            token=self.run_ctx.token,
        )
        for pair in pairs:
            error = insights.errors.get(pair.entity.id)
            if error is not None:
                pair.reason, pair.error = "fetch_failed", error.as_dict()
        return insights, await self._custom_lookups(pairs)

    async def _custom_lookups(self, pairs: list[_Pair]) -> dict[str, Callable[[str], float | None]]:
        sheet = self.rule.custom_metrics
        if sheet is None or not custom_metric_names(self.rule) or not pairs:
            return {}
        table: CustomMetricTable | None = None
        if self.engine.sheets is None:
            await self._report(
                SheetsError("custom metrics need RULEENGINE_SHEETS_CREDENTIALS_FILE")
            )
        else:
            try:
                table = await self.engine.sheets.load(
                    sheet.spreadsheet_id, worksheet=sheet.worksheet, key=sheet.key
                )
            except SheetsError as exc:
                await self._report(exc)
        if table is None:
            return {}  # every custom metric is then "no data"
        lookups: dict[str, Callable[[str], float | None]] = {}
        for entity in {p.entity.id: p.entity for p in pairs}.values():
            lookups[entity.id] = _lookup(table, entity)
        return lookups

    def _evaluate(
        self,
        pairs: list[_Pair],
        insights: InsightsResult,
        custom: dict[str, Callable[[str], float | None]],
    ) -> None:
        tz = self.rule.zone()
        for pair in pairs:
            if pair.reason is not None:
                continue
            started = time.perf_counter()
            ctx = EvalContext(
                entity=pair.entity,
                insights=insights.for_entity(pair.entity.id),
                now=self.now,
                tz=tz,
                custom=custom.get(pair.entity.id),
                currency_offset=self.offset,
            )
            pair.verdict = evaluate_task(pair.task, ctx)
            pair.trace["evaluate"] = time.perf_counter() - started
            self.stage_totals["evaluate"] += pair.trace["evaluate"]

    async def _act(self, passing: list[_Pair]) -> None:
        total = len(self.job.entities)
        done_entities: set[str] = set()
        for pair in passing:
            assert pair.verdict is not None
            started = time.perf_counter()
            pair.result = await self.engine.executor.act(
                self.run_ctx, pair.entity, pair.task, pair.verdict
            )
            await self._follow_up(pair)
            pair.trace["act"] = time.perf_counter() - started
            self.stage_totals["act"] += pair.trace["act"]
            done_entities.add(pair.entity.id)
            await self._progress(len(done_entities), total)

    async def _follow_up(self, pair: _Pair) -> None:
        """Schedule the action's ``then`` (a redelivery only fills in a missing one)."""
        result, then = pair.result, pair.task.action.then
        scheduler = self.engine.followups
        if result is None or not result.fired or then is None or scheduler is None or self.dry_run:
            return
        origin = Origin(
            batch_id=self.job.batch_id,
            rule_id=self.job.rule_id,
            rule_version=self.job.rule_version,
            rule=self.rule,
            task_id=pair.task.id,
            account=self.job.account,
            entity_id=pair.entity.id,
            entity_name=pair.entity.name,
            field=result.field,
            set_value=result.after,
            previous=result.before,
        )
        try:
            doc = await scheduler.schedule(
                origin, then, now=self.now, only_if_missing=result.reason == "already_applied"
            )
        except PyMongoError as exc:  # the action is done and recorded; say what was lost
            log.exception("could not store the follow-up of %s/%s", pair.task.id, pair.entity.id)
            pair.followup = {"error": str(exc)}
            await self._report(exc)
            return
        if doc is not None:
            pair.followup = {
                "key": doc.id,
                "do": doc.do,
                "due_at": doc.due_at,
                "status": doc.status,
                "reason": doc.reason,
            }

    async def _progress(self, done: int, total: int) -> None:
        if self.dry_run or time.perf_counter() - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = time.perf_counter()
        await self.engine.batches.progress(self.job.batch_id, done=done, total=total)

    # ---------------------------------------------------------------- records

    def record(self, pair: _Pair) -> dict[str, Any]:
        """The execution record of one (entity, task)."""
        outcome, reason = _outcome(pair)
        result = pair.result
        action = pair.task.action.model_dump(mode="json", exclude_none=True)
        cooldown_until = self._cooldown_until(pair)
        return {
            "key": record_key(self.job.batch_id, pair.task.id, pair.entity.id),
            "batch_id": self.job.batch_id,
            "delivery": self.delivery,
            "rule_id": self.job.rule_id,
            "rule_name": self.rule.name,
            "rule_version": self.job.rule_version,
            "account": self.job.account,
            "level": self.rule.level,
            "task_id": pair.task.id,
            "entity_id": pair.entity.id,
            "entity_name": pair.entity.name,
            "entity": pair.entity.snapshot(),
            "outcome": outcome,
            "executed": outcome == "applied",
            "reason": reason,
            "action": action,
            "field": result.field if result else None,
            "before": result.before if result else None,
            "after": result.after if result else None,
            "requested": result.requested if result else None,
            "clamped_by": result.clamped_by if result else [],
            "match": pair.task.match,
            "passed": pair.verdict.passed if pair.verdict else None,
            "conditions": [c.as_record() for c in pair.verdict.conditions] if pair.verdict else [],
            "next_execute_at": pair.until or (result.until if result else None) or cooldown_until,
            "error": (result.error if result else None) or pair.error,
            "response": result.response if result else None,
            "followup": pair.followup,
            "trace": {k: round(v, 6) for k, v in pair.trace.items()},
            "duration_s": round(sum(pair.trace.values()), 6),
            "scheduled_at": self.job.scheduled_at,
            "created_at": self.now,
        }

    def _cooldown_until(self, pair: _Pair) -> datetime | None:
        if pair.result is None or not pair.result.fired or not pair.task.cooldown_minutes:
            return None
        return self.now + timedelta(minutes=pair.task.cooldown_minutes)

    async def _store(self, pairs: list[_Pair]) -> list[dict[str, Any]]:
        """Write the records (merged with earlier deliveries'); returns the batch's records."""
        records = [self.record(p) for p in pairs]
        earlier = (
            await self.engine.executions.by_key(self.job.batch_id) if self.delivery > 1 else {}
        )
        merged = [merge_record(earlier.get(r["key"]), r) for r in records]
        await self.engine.executions.upsert_many(
            [r for r in merged if r is not earlier.get(r["key"])]
        )
        return merged

    def _summarise(self, pairs: list[_Pair]) -> Summary:
        outcomes = [_outcome(p)[0] for p in pairs]
        fetch_failures = sum(p.reason == "fetch_failed" for p in pairs)
        status = "FAILED" if pairs and fetch_failures == len(pairs) else "DONE"
        return Summary(
            batch_id=self.job.batch_id,
            status=status,
            evaluated=sum(p.verdict is not None for p in pairs),
            affected=len({p.entity.id for p in pairs if p.verdict and p.verdict.passed}),
            applied=outcomes.count("applied"),
            failed=outcomes.count("failed"),
            records=[self.record(p) for p in pairs] if self.dry_run else [],
            error=_first_error(pairs) if status == "FAILED" else None,
            outcomes=Counter(outcomes),
            actions=Counter((p.task.action.type, p.result.outcome) for p in pairs if p.result),
            graph_errors=Counter(_error_codes(pairs)),
        )

    async def _start(self) -> None:
        row = await self.engine.batches.start(
            BatchStart(
                batch_id=self.job.batch_id,
                rule_id=self.job.rule_id,
                rule_name=self.rule.name,
                rule_version=self.job.rule_version,
                account=self.job.account,
                level=self.rule.level,
                scheduled_at=self.job.scheduled_at,
                total=len(self.job.entities),
                job_id=self.job_id,
                worker=self.engine.worker,
            ),
            now=self.now,
        )
        self.delivery = int(row.get("execute_count") or 1)

    async def _finish(self, summary: Summary, counts: BatchCounts | None) -> None:
        if counts is None:  # the records were not written: count what earlier deliveries did
            counts = BatchCounts.of(
                (await self.engine.executions.by_key(self.job.batch_id)).values()
            )
        await self.engine.batches.finish(
            self.job.batch_id,
            status="FAILED" if summary.status == "FAILED" else "DONE",
            now=self.now + timedelta(seconds=summary.duration_s),
            progress={"done": len(self.job.entities), "total": len(self.job.entities)},
            **counts.as_fields(),
            graph=summary.cost,
            trace={k: round(v, 6) for k, v in self.stage_totals.items()},
            duration_s=round(summary.duration_s, 6),
            error=summary.error,
        )

    async def _report(self, exc: BaseException) -> None:
        await self.engine.errors.report(
            ErrorReport.of(
                exc,
                function="engine.evaluate_account",
                params={
                    "batch_id": self.job.batch_id,
                    "rule_id": self.job.rule_id,
                    "account": self.job.account,
                },
                context={"rule_version": self.job.rule_version},
            )
        )


def merge_record(earlier: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The record of (batch, task, entity) after a delivery: what the *batch* did.

    A change applied by an earlier delivery stays the record (a redelivery that
    finds it done adds nothing); a redelivery that finds a done intent without
    a record (its first delivery died before recording) records the change as
    applied, recovered from the intent.
    """
    if earlier is not None and earlier.get("outcome") == "applied":
        return earlier
    if new["reason"] == "already_applied":
        return new | {"outcome": "applied", "executed": True, "recovered_by": "redelivery"}
    return new


def _lookup(table: CustomMetricTable, entity: Entity) -> Callable[[str], float | None]:
    def value(metric: str) -> float | None:
        return table.value(entity_id=entity.id, entity_name=entity.name, metric=metric)

    return value


def _outcome(pair: _Pair) -> tuple[str, str | None]:
    if pair.reason == "next_execute_not_reached":
        return "skipped", pair.reason
    if pair.reason is not None:
        return "failed", pair.reason
    if pair.verdict is None or not pair.verdict.passed:
        return "not_matched", _no_data(pair.verdict)
    assert pair.result is not None
    return pair.result.outcome, pair.result.reason


def _no_data(verdict: TaskVerdict | None) -> str | None:
    if verdict and any(c.reason == "no_data" for c in verdict.conditions):
        return "no_data"
    return None


def _error_codes(pairs: list[_Pair]) -> list[str]:
    errors = [p.error or (p.result.error if p.result else None) for p in pairs]
    return [str(e.get("code")) for e in errors if e and e.get("code") is not None]


def _first_error(pairs: list[_Pair]) -> str | None:
    for pair in pairs:
        if pair.error:
            return str(pair.error.get("message"))
    return None


async def evaluate_account(
    engine: Engine,
    job: EvaluateJob,
    *,
    now: datetime,
    job_id: str | None = None,
    dry_run: bool = False,
) -> Summary:
    """Run one evaluation (see :class:`Evaluation`)."""
    return await Evaluation(engine, job, now=now, dry_run=dry_run, job_id=job_id).run()
