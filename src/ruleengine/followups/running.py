"""Running a due follow-up (the ``run_followup`` job of the workers).

The timer fired: claim the follow-up for this generation (a replaced or
already-handled one does nothing), re-check the live state and act through the
same intent + instrumented-writer path as every action
(:meth:`~ruleengine.writes.executor.ActionExecutor.apply`), then record an execution
record linked to the batch of the original action, with how late it ran.

A batch's follow-ups are due at one time: the job whose timer fires first also claims the
others of its batch that are due (up to :data:`RUN_TOGETHER`, each in its own generation,
once); it drops their timers, and a timer that fires all the same finds its follow-up
taken. Their field writes (resume, pause, a budget put back) go out together through the
batched write path (:mod:`ruleengine.writes.batched`): one hold of the account's lock, the
live values read in Batch API calls, the writes sent in them — each still recorded under its
own follow-up's intent (:func:`~ruleengine.store.followups.followup_batch`), so a follow-up
run again (a job killed, its follow-ups released) finds what it did. Messages go one at a
time. The follow-ups are then closed in one command and recorded in one, each with its own
outcome and lateness. One claim, one read of the rule version and of the account serve
them all, where each used to be a job of its own, and then a hold of the lock of its own.

The re-check: a follow-up skips with ``changed_by_someone_else`` when the field
the original action changed no longer holds the value it left, and with
``entity_gone`` when the entity no longer exists.
"""

from __future__ import annotations

import contextlib
import logging
import time
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ruleengine import constants as c
from ruleengine.accounts.facts import AccountFacts
from ruleengine.acting.results import (
    ACT_FAILURES,
    ActKey,
    ActResult,
    JobRun,
    Target,
    failure_result,
    read_live,
    refused,
)
from ruleengine.clocks import offset as clock_offset
from ruleengine.constants import STAGES
from ruleengine.errors import RuleEngineError
from ruleengine.followups.scheduling import TIMER_TOLERANCE_MS
from ruleengine.meta.errors import GraphError
from ruleengine.meta.http import Cost
from ruleengine.meta.writer import GraphWriter
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.model import Rule
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import Refused, follow_up_target, live_value, plan_follow_up
from ruleengine.store.credentials import Account, token_ref
from ruleengine.store.followups import (
    WAITING,
    Finished,
    FollowupDoc,
    followup_batch,
    followup_record_key,
)
from ruleengine.writes.batched import FieldChange
from ruleengine.writes.executor import ActionExecutor
from ruleengine.writes.lock import turn
from ruleengine.writes.notify import MessageContext, render, send_once

if TYPE_CHECKING:
    from ruleengine.worker.deps import Engine

log = logging.getLogger(__name__)

#: Follow-ups one job runs: its own and, due with it, others of the same batch.
RUN_TOGETHER = 25
#: How long a timer waits for another to claim its batch's follow-ups (a few commands), and
#: how long a turn outlives a holder that died holding it.
CLAIM_TURN_WAIT_S = 5.0
CLAIM_TURN_TTL_S = 10.0
_STATUS = {"applied": "done", "no_change": "done", "skipped": "skipped", "failed": "failed"}
# Meta's answers for an object that no longer exists (deleted, or never visible).
_GONE_CODES = frozenset({100, 803})


async def run_followup(engine: Engine, payload: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """Run one follow-up timer, and the follow-ups of the same batch due with it (up to
    :data:`RUN_TOGETHER`); returns what happened (for arq's log and the metrics)."""
    key, generation = str(payload["key"]), int(payload["generation"])
    store = engine.followups.store
    async with _claiming(engine, payload.get("batch_id")):
        # a read first: the timers of a batch fire together, and those whose follow-up the
        # first of them took write nothing (the claim stays the compare-and-set it was)
        current = await store.get(key)
        waits = _waits(current, generation)
        # the claim is stamped by MongoDB's clock: the reaper releases a claim left running
        # by a dead worker by that clock, whatever this host's says
        db_now, ticks = (await engine.intents.db_time(), time.monotonic()) if waits else (now, 0.0)
        doc = await store.claim(key, generation, now=db_now) if waits else None
        if doc is None:
            if _waits(current, generation):  # another claimed it between the two: look again
                current = await store.get(key)
            superseded = current is not None and current.generation != generation
            status = "superseded" if superseded else "already_handled"
            log.info("follow-up %s generation %d: %s, nothing to do", key, generation, status)
            return {"key": key, "status": status}
        # a batch's follow-ups are due at one time: those of the lead's batch due by now on
        # MongoDB's clock (give or take how far a host's timers may run ahead of it) run in
        # this job, their writes together; a timer fired early runs its own follow-up only
        due_by = db_now + timedelta(milliseconds=TIMER_TOLERANCE_MS)
        siblings = await store.claim_siblings(
            doc, due_by=due_by, now=db_now, limit=RUN_TOGETHER - 1
        )
    await engine.followups.cancel_timers([s.job_id for s in siblings])
    shared = _Shared(engine, now=now, db_now=db_now, db_ticks=ticks)
    outcome, *together = await _run_all(shared, [doc, *siblings])
    if together:
        outcome["together"] = together
    return outcome


def _waits(doc: FollowupDoc | None, generation: int) -> bool:
    """True when ``doc`` is in ``generation`` and waits to be run."""
    return doc is not None and doc.generation == generation and doc.status in WAITING


def _claiming(engine: Engine, batch_id: Any) -> AbstractAsyncContextManager[bool]:
    """The turn of a timer to claim its batch's follow-ups. A batch's timers fire at one
    time, and workers take many at once: each claiming its own first would run the batch as
    many jobs, each writing to the one account — waiting on its lock, holding workers'
    slots. The first to come claims the batch's due follow-ups with the turn; the others
    wait until it is given back and find theirs taken. Timers armed before timers carried
    their batch claim without waiting."""
    if not isinstance(batch_id, str):
        return contextlib.nullcontext(False)
    key = c.FOLLOWUP_CLAIM_PREFIX + batch_id
    return turn(engine.followups.redis, key, ttl_s=CLAIM_TURN_TTL_S, wait_s=CLAIM_TURN_WAIT_S)


class _Shared:
    """What the follow-ups run in one job share: the clocks, each rule version and each
    account's token, read once."""

    def __init__(self, engine: Engine, *, now: datetime, db_now: datetime, db_ticks: float) -> None:
        self.engine = engine
        self.now = now
        self.db_now = db_now
        self.db_ticks = db_ticks  # the monotonic clock when db_now was read
        self._versions: dict[tuple[str, int], Rule] = {}
        self._accounts: dict[str, tuple[Account, str]] = {}

    async def rule(self, rule_id: str, version: int) -> Rule:
        if (rule_id, version) not in self._versions:
            doc = await self.engine.rules.version(rule_id, version)
            rule = Rule.model_validate({**doc.definition, "status": "ACTIVE"})
            self._versions[(rule_id, version)] = rule
        return self._versions[(rule_id, version)]

    async def account(self, account_id: str) -> tuple[Account, str]:
        if account_id not in self._accounts:
            credentials = self.engine.credentials
            self._accounts[account_id] = await credentials.account_and_token(token_ref(account_id))
        return self._accounts[account_id]


async def _run_all(shared: _Shared, docs: list[FollowupDoc]) -> list[dict[str, Any]]:
    """Act on claimed follow-ups, close them and record what they did; what happened to
    each, in order. Their status, budget and bid writes go out together through the batched
    write path (one hold of the account's lock, the live values read in Batch API calls, the
    writes sent in them), each under its own follow-up's intent; messages one at a time."""
    engine, now = shared.engine, shared.now
    # due_at is by MongoDB's clock: how late is measured there too, whatever this host's says
    late = {
        doc.id: max(0.0, (now - clock_offset(now, shared.db_now) - doc.due_at).total_seconds())
        for doc in docs
    }
    together = engine.settings.write_batch_size > 1
    acted = await _write_together(shared, [d for d in docs if together and d.do != "notify"])
    for doc in docs:
        if doc.id not in acted:
            started = time.perf_counter()
            result = await _act_alone(shared, doc)
            acted[doc.id] = (result, time.perf_counter() - started)
    finished: list[Finished] = []
    records: list[dict[str, Any]] = []
    for doc in docs:
        result, act_s = acted[doc.id]
        status = _STATUS.get(result.outcome, "failed")
        finished.append(Finished(doc, status, result.reason, late[doc.id]))
        records.append(_record(doc, result, now, late[doc.id], act_s))
    await engine.followups.store.finish_many(finished, now=now)  # closed, then recorded
    await engine.executions.upsert_many(records)
    for f in finished:
        log.info(
            "follow-up %s (%s) %s%s, %.0fs late",
            f.doc.id,
            f.doc.do,
            f.status,
            f": {f.reason}" if f.reason else "",
            f.late_s,
        )
    return [
        {"key": f.doc.id, "status": f.status, "reason": f.reason, "late_s": f.late_s}
        for f in finished
    ]


async def _write_together(
    shared: _Shared, docs: list[FollowupDoc]
) -> dict[str, tuple[ActResult, float]]:
    """Follow-up id → the result of its write and its share of the time they took, for
    follow-ups that change a field: those of one account and rule version at once."""
    groups: dict[tuple[str, str, int], list[FollowupDoc]] = {}
    for doc in docs:
        groups.setdefault((doc.account, doc.rule_id, doc.rule_version), []).append(doc)
    out: dict[str, tuple[ActResult, float]] = {}
    executor = shared.engine.executor
    max_change_pct = executor.settings.max_budget_change_pct
    for group in groups.values():
        started = time.perf_counter()
        try:
            run, writer = await _job_run(shared, group[0])
        except RuleEngineError as exc:  # the rule version or the token cannot be found
            results = [_cannot_run(exc)] * len(group)
        else:
            changes = [
                FieldChange(
                    _entity(doc),
                    _act_key(doc),
                    _target(doc, max_change_pct=max_change_pct),
                    batch_id=followup_batch(doc.id, doc.generation),
                )
                for doc in group
            ]
            results = [_gone(r) for r in await executor.batched.apply(run, writer, changes)]
        share = (time.perf_counter() - started) / len(group)
        out |= {doc.id: (result, share) for doc, result in zip(group, results, strict=True)}
    return out


async def _act_alone(shared: _Shared, doc: FollowupDoc) -> ActResult:
    """One follow-up on its own (a message; any when writes are not batched)."""
    try:
        run, writer = await _job_run(shared, doc)
    except RuleEngineError as exc:
        return _cannot_run(exc)
    return await follow_up(shared.engine.executor, run, writer, _entity(doc), doc)


def _cannot_run(exc: RuleEngineError) -> ActResult:
    return ActResult("failed", "cannot_run", error={"message": str(exc)})


def _gone(result: ActResult) -> ActResult:
    """A live read Meta answered with "no such object": the entity is gone (as
    :func:`follow_up` says of one raised)."""
    code = (result.error or {}).get("code")
    if result.reason == "live_read_failed" and code in _GONE_CODES:
        return ActResult("skipped", "entity_gone", error=result.error)
    return result


def _entity(doc: FollowupDoc) -> Entity:
    return Entity(id=doc.entity_id, name=doc.entity_name)


def _act_key(doc: FollowupDoc) -> ActKey:
    """What a follow-up's intent is recorded under (in its own batch)."""
    return ActKey(f"{doc.task_id}:then", f"then:{doc.do}")


async def _job_run(shared: _Shared, doc: FollowupDoc) -> tuple[JobRun, GraphWriter]:
    """The run a follow-up acts in (recorded under its own batch), and its writer."""
    engine, now = shared.engine, shared.now
    rule = await shared.rule(doc.rule_id, doc.rule_version)
    account, token = await shared.account(doc.account)
    reader, batch_reader, writer = engine.graph(Cost())
    facts = AccountFacts(reader, account=account, token=token, now=shared.db_now)
    run = JobRun(
        batch_id=followup_batch(doc.id, doc.generation),
        rule_id=doc.rule_id,
        rule_version=doc.rule_version,
        rule=rule,
        account=doc.account,
        token=token,
        now=now,
        reader=reader,
        facts=facts,
        db_now=shared.db_now,
        batch=batch_reader,
        db_ticks=shared.db_ticks,
    )
    return run, writer


async def follow_up(
    executor: ActionExecutor, run: JobRun, writer: GraphWriter, entity: Entity, doc: FollowupDoc
) -> ActResult:
    """Carry out a follow-up after re-checking the live state it expects."""
    key = _act_key(doc)
    try:
        if doc.do == "notify":
            return await _notify(executor, run, entity, key, doc)
        target = _target(doc, max_change_pct=executor.settings.max_budget_change_pct)
        return await executor.apply(run, writer, entity, key, target)
    except ACT_FAILURES as exc:
        if isinstance(exc, GraphError) and exc.code in _GONE_CODES:
            return ActResult("skipped", "entity_gone", error=exc.as_dict())
        return failure_result(exc)


def _target(doc: FollowupDoc, *, max_change_pct: float) -> Target:
    """What the follow-up writes, planned so that a change made meanwhile is left alone
    (:func:`ruleengine.rules.plan.targets.plan_follow_up`, as the backtest's replay plans it)."""
    target = follow_up_target(doc.do, previous=doc.previous)

    def plan(live: dict[str, Any]) -> Plan | ActResult:
        planned = plan_follow_up(
            doc.do,
            live,
            action_field=doc.field,
            action_left=doc.set_value,
            previous=doc.previous,
            max_change_pct=max_change_pct,
        )
        if isinstance(planned, Refused):
            return refused(planned, current=live_value(live, target.field))
        return planned

    return Target(target.field, target.reads, plan)


async def _notify(
    executor: ActionExecutor, run: JobRun, entity: Entity, key: ActKey, doc: FollowupDoc
) -> ActResult:
    await read_live(run.reader, run, entity, ["name"])  # the entity must still exist
    template = doc.template or "{rule}: follow-up on {entity_name} ({entity_id})"
    context = MessageContext(
        rule=run.rule.name,
        task=doc.task_id,
        level=run.rule.level,
        account=run.account,
        entity_id=entity.id,
        entity_name=entity.name,
        action=key.action_type,
        before=doc.previous,
        after=doc.set_value,
        field=doc.field,
        account_name=run.facts.registered.name if run.facts else None,
        currency=run.facts.registered.currency if run.facts else None,
    )
    message = render(template, context.values(now=run.now, tz=run.rule.zone()))
    assert doc.webhook is not None  # the model requires it for "notify"
    return await send_once(
        executor.notifier,
        executor.intents,
        run,
        entity,
        key,
        webhook=doc.webhook,
        message=message,
        context={"followup": doc.id},
    )


def _record(
    doc: FollowupDoc, result: ActResult, now: datetime, late_s: float, act_s: float
) -> dict[str, Any]:
    return {
        "key": followup_record_key(doc.id, doc.generation),
        "batch_id": doc.batch_id,  # linked to the execution that created the follow-up
        "kind": "followup",
        "followup_key": doc.id,
        "generation": doc.generation,
        "rule_id": doc.rule_id,
        "rule_name": doc.rule_name,
        "rule_version": doc.rule_version,
        "account": doc.account,
        "level": doc.level,
        "task_id": doc.task_id,
        "entity_id": doc.entity_id,
        "entity_name": doc.entity_name,
        "outcome": result.outcome,
        "executed": result.outcome == "applied",
        "reason": result.reason,
        "action": {"type": f"then:{doc.do}"},
        "field": result.field,
        "before": result.before,
        "after": result.after,
        "clamped_by": result.clamped_by,
        "oscillation": result.oscillation,
        "error": result.error,
        "response": result.response,
        "conditions": [],
        "due_at": doc.due_at,
        "late_s": round(late_s, 3),
        "trace": dict.fromkeys(STAGES, 0.0) | {"act": round(act_s, 6)},
        "duration_s": round(act_s, 6),
        "created_at": now,
    }
