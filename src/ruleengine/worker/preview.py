"""Preview: what would a rule do right now? The worker's own stages, with nothing written.

Lists the rule's entities on each account, then runs the read-only stages of an
evaluation (:mod:`ruleengine.worker.stages`): Insights are fetched and conditions
evaluated for real, and for each entity whose task passed the live value is
re-read and the target planned — but nothing is written to Meta, to the records
or to intents (so no cooldown starts). The answer is the would-be execution records.

The preview's Graph session allows GET, the Batch API of GETs and ``REPORT`` (the
POST that starts an asynchronous Insights report run on a big account, which changes
no ad object), nothing else, and no import path from this module reaches
:mod:`ruleengine.meta.writer` (``tests/test_layers.py`` walks the import graph to prove it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ruleengine.acting.rebalance import Pair as RebalancePair
from ruleengine.acting.rebalance import plan_group, tasks_of, unmoved
from ruleengine.acting.results import (
    ACT_FAILURES,
    ActResult,
    failure_result,
    read_live,
    target_of,
    with_task_guards,
    would_do,
)
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.errors import RuleEngineError
from ruleengine.meta.http import READ_AND_REPORT, GraphSession
from ruleengine.meta.insights import InsightsResult
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.advantage import REASON as ADVANTAGE_REASON
from ruleengine.rules.advantage import refusal_message
from ruleengine.rules.language.action_types import (
    DuplicateAction,
    NotifyAction,
    RebalanceBudgetAction,
)
from ruleengine.rules.language.model import Rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key, token_ref
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.intents import IntentStore
from ruleengine.worker.stages import Evaluation, Pair, Reading, Summary, sheets_reader
from ruleengine.writes.notify import task_message

log = logging.getLogger(__name__)


def open_preview(settings: Settings, *, db: Database) -> Reading:
    """The preview's services: a session that may only read (GETs, Batch API GETs, reports)."""
    return Reading(
        settings=settings,
        session=GraphSession(settings, methods=READ_AND_REPORT),
        credentials=CredentialStore(db, load_key(settings)),
        intents=IntentStore(db),
        errors=ErrorLog(db),
        sheets=sheets_reader(settings),
    )


@dataclass
class Preview:
    """Would-be records per account, and the accounts that could not be previewed."""

    records: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # account → problem
    graph: dict[str, int] = field(default_factory=lambda: {"http_requests": 0, "counted_calls": 0})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the API returns)."""
        would = [r for r in self.records if r["outcome"] == "would_apply"]
        return {
            "records": self.records,
            "errors": self.errors,
            "graph": self.graph,
            "summary": {
                "evaluated": sum(1 for r in self.records if r["passed"] is not None),
                "matched": sum(1 for r in self.records if r["passed"]),
                "would_apply": len(would),
                "would_await_approval": sum(
                    1 for r in self.records if r["outcome"] == "awaiting_approval"
                ),
            },
        }


class PreviewEvaluation(Evaluation):
    """The stages of an evaluation; acting only says what it would do."""

    function = "preview"

    async def _act(self, passing: list[Pair]) -> None:
        rebalancing = [p for p in passing if isinstance(p.task.action, RebalanceBudgetAction)]
        await self._would_rebalance(rebalancing)
        for pair in passing:
            if pair.result is not None:
                continue
            started = time.perf_counter()
            try:
                pair.result = await self._would(pair)
            except ACT_FAILURES as exc:
                pair.result = failure_result(exc)
            self._timed(pair, started)

    async def _would_rebalance(self, pairs: list[Pair]) -> None:
        """Each rebalancing task's group planned at once, as a run plans it."""
        wanted = [RebalancePair(i, p.entity, p.task, p.verdict) for i, p in enumerate(pairs)]
        for group in tasks_of(wanted):
            try:
                plan = await plan_group(
                    self.run_ctx,
                    self.reading.intents,
                    group,
                    max_change_pct=self.reading.settings.max_budget_change_pct,
                )
            except ACT_FAILURES as exc:
                for member in group:
                    pairs[member.index].result = failure_result(exc)
                continue
            moves = {m.id: m for m in plan.moves}
            for member in group:
                move = moves.get(member.entity.id)
                result = plan.refusals.get(member.index)
                if move is not None and move.delta != 0:
                    result = ActResult(
                        "would_apply", None, "daily_budget", move.before, move.after, move.after
                    )
                pairs[member.index].result = unmoved(member, move, result)

    async def _would(self, pair: Pair) -> ActResult:
        run, action = self.run_ctx, pair.task.action
        if isinstance(action, NotifyAction):
            message = task_message(
                run, pair.entity, pair.task, action.template, verdict=pair.verdict
            )
            return ActResult("would_apply", None, "notify", None, message)
        if isinstance(action, DuplicateAction):
            if (kind := pair.entity.legacy_advantage) is not None:
                error = {"message": refusal_message(kind, "duplicate")}
                return ActResult("skipped", ADVANTAGE_REASON, "copies", error=error)
            return ActResult(
                "would_apply", None, "copies", pair.entity.name, f"copy of {pair.entity.id}"
            )
        max_change_pct = self.reading.settings.max_budget_change_pct
        target = await target_of(action, run, max_change_pct=max_change_pct, verdict=pair.verdict)
        # a change that needs approval would wait for one: awaiting_approval, as a run says
        target = with_task_guards(target, pair.task, run)
        live = await read_live(run.reader, run, pair.entity, target.reads)
        return would_do(target.planner(live))

    async def _evaluate_stage(
        self,
        pairs: list[Pair],
        insights: InsightsResult,
        custom: dict[str, Callable[[str], float | None]],
    ) -> None:
        # The web app runs previews: its loop must keep answering meanwhile.
        await asyncio.to_thread(self._evaluate, pairs, insights, custom)

    async def _keep(self, pairs: list[Pair], summary: Summary) -> None:
        summary.records = [self.record(p) for p in pairs]


class PreviewTooBig(RuleEngineError):
    """The rule's accounts hold more entities than one preview evaluates."""


async def preview_rule(
    reading: Reading, rule: Rule, *, rule_id: str, version: int, now: datetime
) -> Preview:
    """Evaluate ``rule`` now on every account, writing nothing anywhere.

    Raises:
        PreviewTooBig: the accounts hold more than ``RULEENGINE_PREVIEW_MAX_ENTITIES``
            entities together (counted as they are listed, before any Insights are read).
    """
    result = Preview()
    reader = GraphReader.from_settings(reading.session.view())
    limit, listed = reading.settings.preview_max_entities, 0
    for account in rule.ad_accounts:
        try:
            token = await reading.credentials.usable_token(token_ref(account))
            entities = await reader.list_for_rule(rule, account, token=token)
        except (RuleEngineError, ValueError) as exc:
            result.errors[account] = str(exc)
            continue
        listed += len(entities)
        if listed > limit:
            raise PreviewTooBig(
                f"the rule's accounts hold more than {limit:,} {rule.level}s to evaluate"
                f" ({listed:,} listed up to {account}), the most a preview evaluates"
                " (RULEENGINE_PREVIEW_MAX_ENTITIES): narrow the rule's filters or accounts, or"
                " run a backtest"
            )
        job = EvaluateJob.of(
            rule,
            batch_id=f"preview-{rule_id}-{account}",
            rule_id=rule_id,
            version=version,
            account=account,
            entities=entities,
            scheduled_at=now,
            dispatched_at=now,
        )
        summary = await PreviewEvaluation(reading, job, now=now).run()
        if summary.error:
            result.errors[account] = summary.error
        result.records.extend(summary.records)
        for key, value in summary.cost.items():
            result.graph[key] = result.graph.get(key, 0) + value
    result.graph["http_requests"] += reader.session.cost.http_requests
    result.graph["counted_calls"] += reader.session.cost.counted_calls
    return result
