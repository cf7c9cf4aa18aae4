"""A held-out (task, entity): the change the task would have made, planned from the live
value, and nothing written (no intent either).

The task's holdout (:mod:`ruleengine.rules.impact.holdout`) decides which entities are held out;
here each one's would-be change is planned exactly as a run plans it (the task's own
guards included), so that its record says ``held_out`` with before → after, and carries
the cooldown the change would have started: later runs leave it alone as long as they
would have left a changed entity alone.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from ruleengine.acting.results import (
    ACT_FAILURES,
    ActResult,
    JobRun,
    failure_result,
    read_live,
    target_of,
    with_task_guards,
    would_do,
)
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import TaskVerdict
from ruleengine.rules.impact.holdout import HELD_OUT
from ruleengine.rules.language.action_types import DuplicateAction, NotifyAction
from ruleengine.rules.language.model import Task

#: What a would-be change may come back as and still be a decision held out.
_WOULD: frozenset[str] = frozenset({"would_apply", "awaiting_approval"})


async def held_out_result(
    run: JobRun, entity: Entity, task: Task, verdict: TaskVerdict | None, *, max_change_pct: float
) -> ActResult:
    """``held_out`` with the change the task would have made now (or what stopped it: a
    change that would change nothing, a refusal, a failed read, as a run would say)."""
    action = task.action
    if isinstance(action, NotifyAction | DuplicateAction):
        field = "notify" if isinstance(action, NotifyAction) else "copies"
        return _held(ActResult("would_apply", None, field), task, run)
    try:
        target = await target_of(action, run, max_change_pct=max_change_pct, verdict=verdict)
        target = with_task_guards(target, task, run)
        live = await read_live(run.reader, run, entity, target.reads)
        result = would_do(target.planner(live))
    except ACT_FAILURES as exc:
        return failure_result(exc)
    if result.outcome not in _WOULD:
        return result
    return _held(result, task, run)


def _held(result: ActResult, task: Task, run: JobRun) -> ActResult:
    # from the job's start by MongoDB's clock, as a change's cooldown is (its cooling_from)
    minutes = task.cooldown_minutes
    until = run.cooldown_now + timedelta(minutes=minutes) if minutes else None
    return dataclasses.replace(result, outcome=HELD_OUT, reason=None, until=until)
