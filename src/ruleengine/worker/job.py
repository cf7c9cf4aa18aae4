"""The body of ``evaluate_account``: cooldown → fetch → evaluate → act → record, with writes.

The read-only stages are :mod:`ruleengine.worker.stages`'s; here the worker acts
through the write path (:mod:`ruleengine.writes.executor`), schedules follow-ups, and
keeps what happened. The batch row is upserted on ``batch_id`` first (a
redelivery counts as a second execution of the same batch; it also keeps when the
entities were listed and the account's finished write-lock fence, ``listed_fence``) and
closed with counts, Graph cost and duration. Every evaluated (entity, task) goes into the
batch's evaluation chunks (:mod:`ruleengine.store.evaluations`); an execution record —
slim, the rest left to its chunk row — is kept only where something happened or was
attempted (:meth:`~ruleengine.store.records.ExecutionStore.keep_run`), merged with what
an earlier delivery recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import PyMongoError

from ruleengine.accounts.currency import keep_finding
from ruleengine.accounts.token_state import record_refusal, refusal
from ruleengine.approvals.proposing import announce, open_result, open_results, propose
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.followups.scheduling import Origin
from ruleengine.meta.insights import InsightsResult
from ruleengine.meta.writer import GraphWriter
from ruleengine.rules.entity import Entity
from ruleengine.store.credentials import TokenState
from ruleengine.store.records import BatchCounts, BatchStart, merge_record
from ruleengine.worker.deps import Engine
from ruleengine.worker.stages import Evaluation, Pair, Summary
from ruleengine.writes.executor import writes_a_field

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.5


class JobEvaluation(Evaluation):
    """One run of ``evaluate_account``: the stages, then writes, follow-ups and records."""

    def __init__(
        self, engine: Engine, job: EvaluateJob, *, now: datetime, job_id: str | None = None
    ) -> None:
        super().__init__(engine, job, now=now)
        self.engine = engine
        self.job_id = job_id
        self.writer = GraphWriter(engine.session.view(cost=self.cost), engine.errors)
        self.counts: BatchCounts | None = None
        # the first progress update comes PROGRESS_EVERY_S in: a quick job's row is closed,
        # with its whole progress, before anyone could have watched it move
        self._last_progress = time.perf_counter()
        self._refused: TokenState | None = None  # a token error met so far

    async def _begin(self) -> None:
        db_now, _ = await self._store_read()  # the row's start by MongoDB's clock (the reaper's)
        row = await self.engine.batches.start(
            BatchStart(
                batch_id=self.job.batch_id,
                rule_id=self.job.rule_id,
                rule_name=self.rule.name,
                rule_version=self.job.rule_version,
                account=self.job.account,
                level=self.rule.level,
                scheduled_at=self.job.scheduled_at,
                total=self.job.entity_count,
                job_id=self.job_id,
                worker=self.engine.worker,
                dispatched_at=self.job.dispatched_at,
                listed_fence=self.job.listed_fence,
            ),
            now=self.now,
            store_now=db_now,
        )
        self.delivery = int(row.get("execute_count") or 1)

    async def _apply_cooldowns(self, pairs: list[Pair]) -> None:
        """Cooldowns from the intents, and from the changes a holdout kept back: a held-out
        entity is left alone as long as the change would have cooled it down."""
        await super()._apply_cooldowns(pairs)
        keyed = {
            (p.task.id, p.entity.id): p
            for p in pairs
            if p.reason is None and p.task.holdout is not None and p.task.cooldown_minutes
        }
        held = await self.engine.executions.held_out_until(
            self.job.rule_id, keyed, now=self.run_ctx.cooldown_now, other_than=self.job.batch_id
        )
        for key, until in held.items():
            keyed[key].reason, keyed[key].until = "next_execute_not_reached", until

    async def _load_entities(self) -> list[Entity]:
        """The job's entities, or the stored listing it refers to (ListingExpired if gone)."""
        ref = self.job.listing
        if ref is None:
            return self.job.entities
        return await self.engine.snapshots.load(
            ref, account=self.job.account, level=self.rule.level
        )

    async def _act(self, passing: list[Pair]) -> None:
        """Pairs with an open proposal wait; the others act; changes that need approval are
        proposed (:mod:`ruleengine.approvals.proposing`)."""
        gated = [p for p in passing if p.task.approval is not None]
        if gated:
            found = await self.engine.approvals.open_for(
                self.job.rule_id, [(p.task.id, p.entity.id) for p in gated]
            )
            results = open_results(self.job.batch_id, found)
            for pair in gated:
                key = (pair.task.id, pair.entity.id)
                if key in results:
                    pair.result, pair.approval = results[key], found[key]["_id"]
                    await self._announce(pair, found[key])  # if a crash left it unannounced
        await self._act_pairs([p for p in passing if p.result is None])
        for pair in gated:
            result = pair.result
            if result and result.outcome == "awaiting_approval" and pair.approval is None:
                await self._propose(pair)

    async def _announce(self, pair: Pair, doc: dict[str, Any]) -> None:
        await announce(
            self.engine.approvals,
            self.engine.executor.notifier,
            self.run_ctx,
            pair.task,
            doc,
            base_url=self.engine.settings.public_url,
        )

    async def _propose(self, pair: Pair) -> None:
        assert pair.result is not None
        doc = await propose(
            self.engine.approvals,
            self.engine.executor.notifier,
            self.run_ctx,
            pair.entity,
            pair.task,
            pair.result,
            base_url=self.engine.settings.public_url,
        )
        pair.approval = doc["_id"]
        if doc.get("batch_id") != self.job.batch_id:  # another run proposed it first
            pair.result = open_result(self.job.batch_id, doc)

    async def _act_pairs(self, passing: list[Pair]) -> None:
        total = self.job.entity_count
        done_entities: set[str] = set()
        refused = self._refused
        batched = [p for p in passing if self._batched(p)] if refused is None else []
        if batched:
            refused = await self._act_batched(batched)
            done_entities.update(p.entity.id for p in batched)
            await self._progress(len(done_entities), total)
        messages = [p for p in passing if p.task.action.type == "notify"]
        if messages and refused is None:  # a message goes out without the account's token
            await self._notify(messages)
            done_entities.update(p.entity.id for p in messages)
            await self._progress(len(done_entities), total)
        for pair in passing:
            assert pair.verdict is not None
            if pair.result is not None:
                continue
            if refused is not None:  # every call with this token would fail the same way
                pair.reason, pair.error = "token_refused", refused.model_dump(mode="json")
                continue
            started = time.perf_counter()
            pair.result = await self.engine.executor.act(
                self.run_ctx, self.writer, pair.entity, pair.task, pair.verdict
            )
            refused = refusal(pair.result.error, token=self.run_ctx.token, now=self.now)
            await self._follow_up(pair)
            self._timed(pair, started)
            done_entities.add(pair.entity.id)
            await self._progress(len(done_entities), total)

    def _batched(self, pair: Pair) -> bool:
        """True when the pair's write goes in a Batch API call with the job's others."""
        if pair.task.action.type == "rebalance_budget":  # a task's group is planned at once
            return True
        return self.engine.settings.write_batch_size > 1 and writes_a_field(pair.task)

    async def _act_batched(self, pairs: list[Pair]) -> TokenState | None:
        """Status, budget and name writes of the job in Batch API calls; the token error met."""
        started = time.perf_counter()
        results = await self.engine.executor.act_many(
            self.run_ctx,
            self.writer,
            [(p.entity, p.task) for p in pairs],
            [p.verdict for p in pairs],
        )
        refused: TokenState | None = None
        for pair, result in zip(pairs, results, strict=True):
            pair.result = result
            refused = refused or refusal(result.error, token=self.run_ctx.token, now=self.now)
            await self._follow_up(pair)
        self._shared_act(pairs, started)
        return refused

    async def _notify(self, pairs: list[Pair]) -> None:
        """The job's messages, a chunk at a time (:func:`ruleengine.writes.notify.send_many`)."""
        started = time.perf_counter()
        results = await self.engine.executor.notify_many(
            self.run_ctx, [(p.entity, p.task, p.verdict) for p in pairs]
        )
        for pair, result in zip(pairs, results, strict=True):
            pair.result = result
            await self._follow_up(pair)
        self._shared_act(pairs, started)

    def _shared_act(self, pairs: list[Pair], started: float) -> None:
        """Charge the ``act`` stage since ``started`` to ``pairs`` acted on together: each
        pair's act time is its share."""
        elapsed = time.perf_counter() - started
        for pair in pairs:
            pair.trace["act"] = elapsed / len(pairs)
        self.stage_totals["act"] += elapsed

    async def _fetch(
        self, pairs: list[Pair]
    ) -> tuple[InsightsResult, dict[str, Callable[[str], float | None]]]:
        insights, custom = await super()._fetch(pairs)
        for error in insights.errors.values():
            self._refused = self._refused or refusal(error, token=self.run_ctx.token, now=self.now)
        return insights, custom

    async def _record_refusal(self, pairs: list[Pair]) -> None:
        """Keep the first token error this run met on the account
        (:mod:`ruleengine.accounts.token_state`)."""
        for pair in pairs:
            error = pair.error or (pair.result.error if pair.result else None)
            state = await record_refusal(
                self.engine.credentials,
                self.job.account,
                error,
                token=self.run_ctx.token,
                now=self.now,
            )
            if state is not None:
                return

    async def _keep_account_finding(self) -> None:
        """Keep what this run's read of the ad account said of its registered currency and
        timezone (see :mod:`ruleengine.accounts.currency`)."""
        facts = self.run_ctx.facts
        if facts is None:
            return
        await keep_finding(
            self.engine.credentials,
            self.engine.errors,
            facts.registered,
            facts.read,
            now=self.now,
            context={"batch_id": self.job.batch_id, "rule_id": self.job.rule_id},
        )

    async def _follow_up(self, pair: Pair) -> None:
        """Schedule the action's ``then`` (a redelivery only fills in a missing one)."""
        result, then = pair.result, pair.task.action.then
        if result is None or not result.fired or then is None:
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
            doc = await self.engine.followups.schedule(
                origin,
                then,
                now=self.now,
                offset=self.run_ctx.offset,
                only_if_missing=result.reason == "already_applied",
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

    async def _fetch_progress(self, percent: float) -> None:
        """Show the async Insights reports' progress in the batch row while they run."""
        total = self.job.entity_count
        await self.engine.batches.progress(
            self.job.batch_id, done=0, total=total, phase="fetch", percent=round(percent, 1)
        )

    async def _progress(self, done: int, total: int) -> None:
        if time.perf_counter() - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = time.perf_counter()
        await self.engine.batches.progress(self.job.batch_id, done=done, total=total)

    async def _keep(self, pairs: list[Pair], summary: Summary) -> None:
        """Keep the run — its chunks, and a record for each pair that acted (merged with
        earlier deliveries') — and count the batch from every pair."""
        await self._record_refusal(pairs)
        await self._keep_account_finding()
        settlement = self.engine.executor.settler.settlement
        records = await settlement.settled_meanwhile(
            self.job.batch_id, [self.record(p) for p in pairs]
        )
        executions = self.engine.executions
        earlier = await executions.by_key(self.job.batch_id) if self.delivery > 1 else {}
        merged = [merge_record(earlier.get(r["key"]), r) for r in records]
        await executions.keep_run(merged, earlier=earlier)
        self.counts = BatchCounts.of(merged)

    async def _end(self, summary: Summary) -> None:
        counts = self.counts
        if counts is None:  # the records were not written: count what earlier deliveries did
            counts = await self.engine.executions.counts(self.job.batch_id)
        await self.engine.batches.finish(
            self.job.batch_id,
            status="FAILED" if summary.status == "FAILED" else "DONE",
            now=self.now + timedelta(seconds=summary.duration_s),
            progress={"done": self.job.entity_count, "total": self.job.entity_count},
            **counts.as_fields(),
            graph=summary.cost,
            trace={k: round(v, 6) for k, v in self.stage_totals.items()},
            duration_s=round(summary.duration_s, 6),
            error=summary.error,
            **({"reason": summary.reason} if summary.reason else {}),
        )


async def evaluate_account(
    engine: Engine, job: EvaluateJob, *, now: datetime, job_id: str | None = None
) -> Summary:
    """Run one evaluation of a job (see :class:`JobEvaluation`)."""
    return await JobEvaluation(engine, job, now=now, job_id=job_id).run()
