"""Running a due follow-up (the ``run_followup`` job of the workers).

The timer fired: claim the follow-up for this generation (a replaced or
already-handled one does nothing), re-check the live state and act through the
same intent + instrumented-writer path as every action, then record an
execution record linked to the batch of the original action, with how late it
ran.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ruleengine.actions import ActResult, JobRun
from ruleengine.constants import STAGES
from ruleengine.errors import RuleEngineError
from ruleengine.followups import FollowupDoc
from ruleengine.meta.http import Cost
from ruleengine.rules.entity import Entity
from ruleengine.rules.model import Rule
from ruleengine.store.credentials import token_ref

if TYPE_CHECKING:
    from ruleengine.engine import Engine

log = logging.getLogger(__name__)

_STATUS = {"applied": "done", "no_change": "done", "skipped": "skipped", "failed": "failed"}


async def run_followup(engine: Engine, payload: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """Run one follow-up timer; returns what happened (for arq's log and the metrics)."""
    key, generation = str(payload["key"]), int(payload["generation"])
    scheduler = engine.followups
    assert scheduler is not None, "follow-ups need the engine's FollowupScheduler"
    doc = await scheduler.claim(key, generation, now=now)
    if doc is None:
        current = await scheduler.get(key)
        superseded = current is not None and current.generation != generation
        status = "superseded" if superseded else "already_handled"
        log.info("follow-up %s generation %d: %s, nothing to do", key, generation, status)
        return {"key": key, "status": status}
    late_s = max(0.0, (now - doc.due_at).total_seconds())
    started = time.perf_counter()
    try:
        result = await _act(engine, doc, now=now)
    except RuleEngineError as exc:  # the rule version or the token cannot be found
        result = ActResult("failed", "cannot_run", error={"message": str(exc)})
    status = _STATUS.get(result.outcome, "failed")
    await scheduler.finish(doc, status, reason=result.reason, now=now, late_s=late_s)
    await engine.executions.upsert_many(
        [_record(doc, result, now, late_s, time.perf_counter() - started)]
    )
    log.info(
        "follow-up %s (%s) %s%s, %.0fs late",
        key,
        doc.do,
        status,
        f": {result.reason}" if result.reason else "",
        late_s,
    )
    return {"key": key, "status": status, "reason": result.reason, "late_s": late_s}


async def _act(engine: Engine, doc: FollowupDoc, *, now: datetime) -> ActResult:
    assert engine.rules is not None
    version = await engine.rules.version(doc.rule_id, doc.rule_version)
    rule = Rule.model_validate({**version.definition, "status": "ACTIVE"})
    token = await engine.credentials.token(token_ref(doc.account))
    reader, _batch, writer = engine.graph(Cost())
    run = JobRun(
        batch_id=f"followup:{doc.id}:{doc.generation}",
        rule_id=doc.rule_id,
        rule_version=doc.rule_version,
        rule=rule,
        account=doc.account,
        token=token,
        now=now,
        reader=reader,
        writer=writer,
    )
    return await engine.executor.follow_up(run, Entity(id=doc.entity_id, name=doc.entity_name), doc)


def _record(
    doc: FollowupDoc, result: ActResult, now: datetime, late_s: float, act_s: float
) -> dict[str, Any]:
    return {
        "key": f"followup|{doc.id}|{doc.generation}",
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
        "error": result.error,
        "response": result.response,
        "conditions": [],
        "due_at": doc.due_at,
        "late_s": round(late_s, 3),
        "trace": dict.fromkeys(STAGES, 0.0) | {"act": round(act_s, 6)},
        "duration_s": round(act_s, 6),
        "created_at": now,
    }
