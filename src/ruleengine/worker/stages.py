"""The read-only stages of an evaluation, shared by the worker and the preview.

One evaluation is one rule (the version it was dispatched with) on one ad
account's entities: every (entity, task) goes through the timed stages
``cooldown`` → ``fetch`` → ``evaluate`` → ``act`` and ends in exactly one
execution record saying what the engine saw, decided and did. This module holds
the first three stages and the record; *acting* is the subclass's:
:class:`ruleengine.worker.job.JobEvaluation` writes (the worker),
:class:`ruleengine.worker.preview.PreviewEvaluation` only says what it would do. Nothing
here can write to Meta: :class:`Reading`'s session allows GET, the Batch API of
GETs and ``REPORT`` (starting an async Insights report run, which changes no ad
object) at most.

(Over 400 lines: the stages and the record they end in are one pipeline.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ruleengine.accounts.facts import AccountFacts
from ruleengine.acting.holdout import held_out_result
from ruleengine.acting.results import ActResult, JobRun, reads_the_account
from ruleengine.constants import STAGES
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.errors import ErrorReport, ListingExpired, NoAmountForCurrency
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.http import Cost, GraphSession
from ruleengine.meta.insights import InsightsResult, LargeAccounts, fetch_insights
from ruleengine.meta.pacing import InsightsPacer
from ruleengine.meta.reader import GraphReader, RetryPolicy
from ruleengine.meta.reports import ReportRunner
from ruleengine.rules.entity import Entity, currency_offset
from ruleengine.rules.evaluate import EvalContext, TaskVerdict, evaluate_task
from ruleengine.rules.fetch import custom_metric_names, fetch_groups
from ruleengine.rules.impact.holdout import is_held_out
from ruleengine.rules.language.metric_table import CustomMetricTable, SheetsError
from ruleengine.rules.language.model import Rule, Task
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.intents import EXECUTION_COUNT_LIMIT, IntentStore
from ruleengine.store.records import record_key
from ruleengine.worker.sheets import SheetsReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Readers:
    """One job's Graph readers: objects, Batch API reads, async Insights reports."""

    reader: GraphReader
    batch: BatchReader
    reports: ReportRunner


@dataclass
class Reading:
    """What the read-only stages need: Graph, tokens, intents (for cooldowns), sheets.

    ``sleep`` is how every Graph wait is taken (retries, Insights pacing, report polls);
    tests pass a recorder.
    """

    settings: Settings
    session: GraphSession
    credentials: CredentialStore
    intents: IntentStore
    errors: ErrorLog
    sheets: SheetsReader | None
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, kw_only=True)

    def readers(self, cost: Cost) -> Readers:
        """Per-job readers sharing the process's session, counting into ``cost``."""
        view = self.session.view(cost=cost)
        s = self.settings
        policy = RetryPolicy(
            s.read_retry_waits_s, rate_limit_cap_s=s.rate_limit_max_wait_s, sleep=self.sleep
        )
        pacer = InsightsPacer(
            view,
            slowdown_pct=s.insights_throttle_slowdown_pct,
            max_wait_s=min(s.insights_throttle_wait_s, s.rate_limit_max_wait_s),
            sleep=self.sleep,
        )
        batch = BatchReader(view, policy=policy, concurrency=s.graph_concurrency, pacer=pacer)
        reports = ReportRunner(
            view,
            policy=policy,
            poll_first_s=s.insights_report_poll_s,
            max_wait_s=s.insights_report_max_wait_s,
            pacer=pacer,
        )
        return Readers(GraphReader.from_settings(view, sleep=self.sleep), batch, reports)

    async def close(self) -> None:
        """Close the Graph session and the sheets client."""
        await self.session.close()
        if self.sheets is not None:
            await self.sheets.close()


def sheets_reader(settings: Settings) -> SheetsReader | None:
    """The custom-metrics sheets client, when a Google credentials file is configured."""
    if settings.sheets_credentials_file is None:
        return None
    return SheetsReader(
        credentials_file=settings.sheets_credentials_file,
        api_url=settings.sheets_api_url,
        cache_s=settings.sheets_cache_s,
        call_interval_s=settings.sheets_call_interval_s,
    )


@dataclass
class Summary:
    """What an evaluation did, returned to arq and used by tests and the preview."""

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
    reason: str | None = None  # why the whole job failed, when a reason code says it
    outcomes: Counter[str] = field(default_factory=Counter)  # outcome → evaluations
    actions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (type, outcome) → n
    graph_errors: Counter[str] = field(default_factory=Counter)  # Meta error code → n


@dataclass
class Pair:
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
    approval: str | None = None  # the id of the proposal this pair made or waits on


class Stopwatch:
    """Seconds since the last lap."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def lap(self) -> float:
        """Seconds since the previous lap (or the start), and start the next one."""
        now = time.perf_counter()
        elapsed, self.started = now - self.started, now
        return elapsed


class Evaluation:
    """One evaluation: the read-only stages; subclasses act and keep what they must."""

    function = "engine.evaluate_account"  # the error log's group for failures
    run_ctx: JobRun
    graph: Readers
    offset: int = 100
    account_today: date | None = None  # the ad account's date (Insights days are its days)
    account_tz: ZoneInfo  # the clock keys' timezone: Meta's day ends at the account's midnight

    def __init__(self, reading: Reading, job: EvaluateJob, *, now: datetime) -> None:
        self.reading = reading
        self.job = job
        self.rule: Rule = job.parsed_rule()
        self.entities: list[Entity] = job.entities  # a stored listing: loaded by the stages
        self.now = now
        self.cost = Cost()
        self.stage_totals = dict.fromkeys(STAGES, 0.0)
        self.delivery = 1  # which delivery of the batch this is (execute_count)
        #: MongoDB's clock as read once for the job, and the monotonic clock then (JobRun)
        self.store_read: tuple[datetime, float] | None = None
        self._actions: dict[str, dict[str, Any]] = {}  # each task's action, as records hold it
        # each entity as records hold it: one snapshot shared by the records of all its tasks
        # (read only, as the actions are)
        self._snapshots: dict[str, dict[str, Any]] = {}

    async def run(self) -> Summary:
        """Evaluate, act, keep; never raises for a problem of the job's own."""
        started = time.perf_counter()
        summary = Summary(batch_id=self.job.batch_id, status="RUNNING")
        await self._begin()
        try:
            pairs = await self._evaluate_all()
            summary = self._summarise(pairs)
            await self._keep(pairs, summary)
        except Exception as exc:  # a bug or an outage: record it, never crash the worker
            summary.status, summary.error = "FAILED", f"{type(exc).__name__}: {exc}"
            known = exc if isinstance(exc, ListingExpired | NoAmountForCurrency) else None
            summary.reason = known.reason if known is not None else None
            log.exception("batch %s failed", self.job.batch_id)
            await self._report(exc)
        summary.duration_s = time.perf_counter() - started
        summary.cost = self.cost.as_dict()
        await self._end(summary)
        return summary

    # ---------------------------------------------------------------- what subclasses add

    async def _begin(self) -> None:
        """Before the stages (the worker opens its batch row)."""

    async def _act(self, passing: list[Pair]) -> None:
        """The ``act`` stage for the pairs whose task passed."""
        raise NotImplementedError

    async def _keep(self, pairs: list[Pair], summary: Summary) -> None:
        """After the stages: keep the records (the worker stores them, a preview returns them)."""

    async def _end(self, summary: Summary) -> None:
        """After everything, also after a failure (the worker closes its batch row)."""

    async def _fetch_progress(self, percent: float) -> None:
        """How far the async Insights reports of the ``fetch`` stage are (the worker shows it)."""

    async def _load_entities(self) -> list[Entity]:
        """The job's entities (the worker loads a stored listing here)."""
        return self.job.entities

    # ---------------------------------------------------------------- stages

    async def _evaluate_all(self) -> list[Pair]:
        self.entities = await self._load_entities()
        self.run_ctx = await self._job_run()
        pairs = [Pair(entity, task) for entity in self.entities for task in self.rule.tasks]
        watch = Stopwatch()
        await self._apply_cooldowns(pairs)
        self._stage("cooldown", watch.lap(), pairs)
        live = [p for p in pairs if p.reason is None]
        insights, custom = await self._fetch_reading_ahead(live)
        self._stage("fetch", watch.lap(), pairs)
        await self._evaluate_stage(live, insights, custom)
        passing = [p for p in live if p.verdict and p.verdict.passed]
        await self._hold_out([p for p in passing if self._is_held_out(p)])
        await self._act([p for p in passing if p.result is None])
        return pairs

    async def _fetch_reading_ahead(
        self, pairs: list[Pair]
    ) -> tuple[InsightsResult, dict[str, Callable[[str], float | None]]]:
        """The ``fetch`` stage; a rule whose actions read the ad account (a budget's
        currency and minimum) has it read meanwhile, so the act stage does not wait for it."""
        facts = self.run_ctx.facts
        if (
            not pairs
            or facts is None
            or not any(reads_the_account(t.action) for t in self.rule.tasks)
        ):
            return await self._fetch(pairs)
        fetched, _ = await asyncio.gather(self._fetch(pairs), facts.ad_account())
        return fetched

    def _is_held_out(self, pair: Pair) -> bool:
        return is_held_out(self.job.rule_id, pair.task.id, pair.entity.id, pair.task.holdout)

    async def _hold_out(self, pairs: list[Pair]) -> None:
        """Held-out pairs: their would-be change planned from the live value, nothing written
        (:mod:`ruleengine.acting.holdout`)."""
        max_change_pct = self.reading.settings.max_budget_change_pct
        for pair in pairs:
            started = time.perf_counter()
            pair.result = await held_out_result(
                self.run_ctx, pair.entity, pair.task, pair.verdict, max_change_pct=max_change_pct
            )
            self._timed(pair, started)

    async def _job_run(self) -> JobRun:
        # A token Meta refused is not used again: the run fails here, without a Graph call.
        account, token = await self.reading.credentials.account_and_token(self.job.token_ref)
        # amounts given per currency: this account's own, for every stage and record of the
        # job (NoAmountForCurrency when the rule gives none in its currency: nothing runs)
        self.rule = self.rule.in_currency(account.currency)
        self.graph = self.reading.readers(self.cost)
        self.offset = currency_offset(account.currency)
        self.account_today = _local_date(self.now, account.timezone)
        self.account_tz = ZoneInfo(account.timezone)
        db_now, ticks = await self._store_read()
        facts = AccountFacts(self.graph.reader, account=account, token=token, now=db_now)
        return JobRun(
            batch_id=self.job.batch_id,
            rule_id=self.job.rule_id,
            rule_version=self.job.rule_version,
            rule=self.rule,
            account=self.job.account,
            token=token,
            now=self.now,
            reader=self.graph.reader,
            facts=facts,
            db_now=db_now,
            db_ticks=ticks,
            batch=self.graph.batch,
        )

    async def _store_read(self) -> tuple[datetime, float]:
        """MongoDB's clock, read once per job (the worker reads it as it opens the batch row),
        and this host's monotonic clock at that moment."""
        if self.store_read is None:
            self.store_read = (await self.reading.intents.db_time(), time.monotonic())
        return self.store_read

    def _stage(self, name: str, seconds: float, pairs: list[Pair]) -> None:
        """A shared stage: every pair waited for it."""
        self.stage_totals[name] += seconds
        for pair in pairs:
            pair.trace[name] = seconds

    async def _apply_cooldowns(self, pairs: list[Pair]) -> None:
        keyed = {(p.task.id, p.entity.id): p for p in pairs if p.task.cooldown_minutes > 0}
        active = await self.reading.intents.cooling(
            self.job.rule_id,
            keyed,
            now=self.run_ctx.cooldown_now,
            longest_minutes=max((t.cooldown_minutes for t in self.rule.tasks), default=0),
            other_than=self.job.batch_id,
        )
        for key, until in active.items():
            keyed[key].reason, keyed[key].until = "next_execute_not_reached", until
        await self._apply_count_limits([p for p in pairs if p.reason is None])

    async def _apply_count_limits(self, pairs: list[Pair]) -> None:
        """Pairs whose task changed the entity as often as its ``execution_count_limit``
        allows are skipped before anything is fetched (counted from the intents, ever)."""
        limited = {(p.task.id, p.entity.id): p for p in pairs if p.task.execution_count_limit}
        if not limited:
            return
        counts = await self.reading.intents.execution_counts(
            self.job.rule_id, limited, other_than=self.job.batch_id
        )
        for key, pair in limited.items():
            limit = pair.task.execution_count_limit
            if limit is not None and counts.get(key, 0) >= limit:
                pair.reason = EXECUTION_COUNT_LIMIT

    async def _fetch(
        self, pairs: list[Pair]
    ) -> tuple[InsightsResult, dict[str, Callable[[str], float | None]]]:
        tasks = {p.task.id: p.task for p in pairs}.values()
        entity_ids = list(dict.fromkeys(p.entity.id for p in pairs))
        groups = fetch_groups(self.rule, tasks)
        settings = self.reading.settings
        insights = await fetch_insights(
            self.graph.batch,
            strategy=settings.insights_strategy,
            account_id=self.job.account,
            level=self.rule.level,
            entity_ids=entity_ids,
            groups=groups,
            token=self.run_ctx.token,
            large=LargeAccounts(
                reports=self.graph.reports,
                async_threshold=settings.insights_async_threshold,
                min_ids=settings.insights_min_ids_per_request,
                today=self.account_today,
                on_progress=self._fetch_progress,
            ),
        )
        for pair in pairs:
            error = insights.errors.get(pair.entity.id)
            if error is not None:
                pair.reason, pair.error = "fetch_failed", error.as_dict()
        return insights, await self._custom_lookups(pairs)

    async def _custom_lookups(self, pairs: list[Pair]) -> dict[str, Callable[[str], float | None]]:
        sheet = self.rule.custom_metrics
        if sheet is None or not custom_metric_names(self.rule) or not pairs:
            return {}
        table: CustomMetricTable | None = None
        if self.reading.sheets is None:
            await self._report(
                SheetsError("custom metrics need RULEENGINE_SHEETS_CREDENTIALS_FILE")
            )
        else:
            try:
                table = await self.reading.sheets.load(
                    sheet.spreadsheet_id, worksheet=sheet.worksheet, key=sheet.key
                )
            except SheetsError as exc:
                await self._report(exc)
        if table is None:
            return {}  # every custom metric is then "no data"
        entities = {p.entity.id: p.entity for p in pairs}.values()
        return {entity.id: _lookup(table, entity) for entity in entities}

    async def _evaluate_stage(
        self,
        pairs: list[Pair],
        insights: InsightsResult,
        custom: dict[str, Callable[[str], float | None]],
    ) -> None:
        """The ``evaluate`` stage; a worker runs it on its loop (its jobs are its work)."""
        self._evaluate(pairs, insights, custom)

    def _evaluate(
        self,
        pairs: list[Pair],
        insights: InsightsResult,
        custom: dict[str, Callable[[str], float | None]],
    ) -> None:
        tz = self.account_tz  # not the rule's: Meta's day and daily budgets reset there
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

    def _timed(self, pair: Pair, started: float) -> None:
        """Charge the ``act`` stage of ``pair`` since ``started``."""
        pair.trace["act"] = time.perf_counter() - started
        self.stage_totals["act"] += pair.trace["act"]

    # ---------------------------------------------------------------- records

    def record(self, pair: Pair) -> dict[str, Any]:
        """The execution record of one (entity, task)."""
        outcome, reason = outcome_of(pair)
        result = pair.result
        action = self._actions.get(pair.task.id)
        if action is None:  # one per task: a run's records of a task share it (read only)
            action = pair.task.action.model_dump(mode="json", exclude_none=True)
            self._actions[pair.task.id] = action
        entity = self._snapshots.get(pair.entity.id)
        if entity is None:
            entity = self._snapshots[pair.entity.id] = pair.entity.snapshot()
        trace = {k: round(v, 6) for k, v in pair.trace.items()}
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
            "entity": entity,
            "outcome": outcome,
            "executed": outcome == "applied",
            "reason": reason,
            "action": action,
            "field": result.field if result else None,
            "before": result.before if result else None,
            "after": result.after if result else None,
            "requested": result.requested if result else None,
            "clamped_by": result.clamped_by if result else [],
            "schedule": result.schedule if result else None,
            "oscillation": result.oscillation if result else None,
            "match": pair.task.match,
            "passed": pair.verdict.passed if pair.verdict else None,
            "conditions": [c.as_record() for c in pair.verdict.conditions] if pair.verdict else [],
            "action_metric": _action_metric(pair.verdict),
            "next_execute_at": (
                pair.until or (result.until if result else None) or self._cooldown_until(pair)
            ),
            "error": (result.error if result else None) or pair.error,
            "response": result.response if result else None,
            "followup": pair.followup,
            "approval_id": pair.approval,
            "trace": trace,
            "duration_s": round(sum(trace.values()), 6),  # the sum of the stages as shown
            "scheduled_at": self.job.scheduled_at,
            "created_at": self.now,
        }

    def _cooldown_until(self, pair: Pair) -> datetime | None:
        if pair.result is None or not pair.result.fired or not pair.task.cooldown_minutes:
            return None
        # the cooldown runs from the job's start by MongoDB's clock (its intent's cooling_from)
        return self.run_ctx.cooldown_now + timedelta(minutes=pair.task.cooldown_minutes)

    def _summarise(self, pairs: list[Pair]) -> Summary:
        outcomes = [outcome_of(p)[0] for p in pairs]
        fetch_failures = sum(p.reason == "fetch_failed" for p in pairs)
        status = "FAILED" if pairs and fetch_failures == len(pairs) else "DONE"
        return Summary(
            batch_id=self.job.batch_id,
            status=status,
            evaluated=sum(p.verdict is not None for p in pairs),
            affected=len({p.entity.id for p in pairs if p.verdict and p.verdict.passed}),
            applied=outcomes.count("applied"),
            failed=outcomes.count("failed"),
            error=_first_error(pairs) if status == "FAILED" else None,
            outcomes=Counter(outcomes),
            actions=Counter((p.task.action.type, p.result.outcome) for p in pairs if p.result),
            graph_errors=Counter(_error_codes(pairs)),
        )

    async def _report(self, exc: BaseException) -> None:
        await self.reading.errors.report(
            ErrorReport.of(
                exc,
                function=self.function,
                params={
                    "batch_id": self.job.batch_id,
                    "rule_id": self.job.rule_id,
                    "account": self.job.account,
                },
                context={"rule_version": self.job.rule_version},
            )
        )


def _local_date(now: datetime, timezone: str) -> date | None:
    """``now``'s date in an ad account's timezone (None for a name zoneinfo does not know)."""
    try:
        return now.astimezone(ZoneInfo(timezone)).date()
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _lookup(table: CustomMetricTable, entity: Entity) -> Callable[[str], float | None]:
    def value(metric: str) -> float | None:
        return table.value(entity_id=entity.id, entity_name=entity.name, metric=metric)

    return value


def outcome_of(pair: Pair) -> tuple[str, str | None]:
    """The record's ``outcome`` and ``reason`` for a pair."""
    if pair.reason in ("next_execute_not_reached", EXECUTION_COUNT_LIMIT):
        return "skipped", pair.reason
    if pair.reason is not None:
        return "failed", pair.reason
    if pair.verdict is None or not pair.verdict.passed:
        return "not_matched", _no_data(pair.verdict)
    assert pair.result is not None
    return pair.result.outcome, pair.result.reason


def _action_metric(verdict: TaskVerdict | None) -> dict[str, Any] | None:
    """What a ``scale_to_target`` action scaled by, for its record (None for other actions)."""
    if verdict is None or verdict.action_metric is None:
        return None
    return verdict.action_metric.as_record()


def _no_data(verdict: TaskVerdict | None) -> str | None:
    if verdict and any(c.reason == "no_data" for c in verdict.conditions):
        return "no_data"
    return None


def _error_codes(pairs: list[Pair]) -> list[str]:
    errors = [p.error or (p.result.error if p.result else None) for p in pairs]
    return [str(e.get("code")) for e in errors if e and e.get("code") is not None]


def _first_error(pairs: list[Pair]) -> str | None:
    for pair in pairs:
        if pair.error:
            return str(pair.error.get("message"))
    return None
