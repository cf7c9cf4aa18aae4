"""The cross-rule guards of the write path: the change budget and oscillation holds, and
oscillation detection after a change lands.

Both write paths (:mod:`ruleengine.writes.executor` one change at a time, follow-ups included,
and :mod:`ruleengine.writes.batched`) call :meth:`CrossRuleGuards.look` under the account's
write lock once the plans are made, before any intent is recorded: one query over the
intents of every rule on those entities (24 h, or the oscillation window if longer) and
one over the holds. :meth:`GuardRound.check` then lets each plan through, clamps it
(:mod:`ruleengine.guards.change_budget`) or skips it (``change_budget_exhausted``,
``oscillation_hold``); :meth:`GuardRound.landed`, after Meta applied a change, looks for
an oscillation (:mod:`ruleengine.guards.oscillation`) in what the round saw plus that change, and
when there is one records the ``oscillation`` error group of the entity's field, counts
it, and places a hold if a task involved says ``"on_oscillation": "hold"``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pymongo.errors import PyMongoError

from ruleengine.acting.results import ActKey, ActResult, JobRun, not_applied
from ruleengine.errors import ErrorReport
from ruleengine.guards.change_budget import (
    LIMITED_FIELDS,
    SHARED,
    WINDOW,
    ChangeLimits,
    limit_change,
)
from ruleengine.guards.oscillation import OSCILLATION, OSCILLATION_HOLD, WATCHED_FIELDS, detect
from ruleengine.rules.entity import Entity
from ruleengine.rules.plan.plan import Plan
from ruleengine.settings import Settings
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.holds import HoldStore, HoldView, hold_id
from ruleengine.store.intents import IntentStore, PastChange

log = logging.getLogger(__name__)

FIELDS = tuple(sorted({*LIMITED_FIELDS, *WATCHED_FIELDS}))


def intent_fields(key: ActKey) -> dict[str, Any]:
    """What an intent keeps for the guards besides :func:`~ruleengine.acting.results.intent_doc`."""
    return {"on_oscillation": key.on_oscillation} if key.on_oscillation else {}


class CrossRuleGuards:
    """The guards of one worker process (see the module).

    Args:
        on_oscillation: called with the field of each oscillation found (the metric).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        intents: IntentStore,
        holds: HoldStore,
        errors: ErrorLog,
        on_oscillation: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.intents = intents
        self.holds = holds
        self.errors = errors
        self.on_oscillation = on_oscillation
        self.window = timedelta(hours=settings.oscillation_window_hours)

    async def look(self, run: JobRun, entity_ids: Iterable[str]) -> GuardRound:
        """What the guards need to know about these entities, read under the write lock."""
        ids = sorted(set(entity_ids))
        since = run.store_now() - max(WINDOW, self.window)
        found = await self.intents.recent_changes(ids, FIELDS, since=since)
        changes: dict[tuple[str, str], list[PastChange]] = defaultdict(list)
        for change in found:
            changes[(change.entity_id, change.field)].append(change)
        view = await self.holds.view(ids)
        return GuardRound(self, run, changes, view)


@dataclass
class GuardRound:
    """The guards' view of some entities for one locked section."""

    guards: CrossRuleGuards
    run: JobRun
    changes: dict[tuple[str, str], list[PastChange]]
    holds: HoldView
    limits: ChangeLimits = field(init=False)

    def __post_init__(self) -> None:
        self.limits = ChangeLimits.of(self.guards.settings, self.run.rule)

    def check(self, entity: Entity, plan: Plan) -> Plan | ActResult:
        """The plan, clamped by the change budget; or why it is not made."""
        # a schedule raises the daily budget: a hold on that holds the schedule too
        fields = SHARED.get(plan.field, (plan.field,))
        held = next((f for f in fields if (entity.id, f) in self.holds.active), None)
        if held is not None:
            message = (
                f"{held} of {entity.id} oscillated and is held; clear the hold"
                f" {hold_id(entity.id, held)} (DELETE /api/holds/…) to let it change"
            )
            return not_applied(plan, "skipped", OSCILLATION_HOLD, {"message": message})
        since = self.run.store_now() - WINDOW
        recent = [c for f in fields for c in self.changes.get((entity.id, f), []) if c.at >= since]
        return limit_change(plan, sorted(recent, key=lambda c: c.at), self.limits)

    async def landed(
        self, entity: Entity, key: ActKey, plan: Plan, *, batch_id: str | None = None
    ) -> dict[str, Any] | None:
        """A change Meta applied (recorded under ``batch_id``, the run's when None): the
        oscillation it completes, if any (recorded, counted, held if asked); the flag for its
        execution record."""
        if plan.field not in WATCHED_FIELDS:
            return None
        run = self.run
        now = run.store_now()  # the change's time, as its intent's created_at counts it
        change = PastChange(
            at=now,
            batch_id=batch_id or run.batch_id,
            rule_id=run.rule_id,
            task_id=key.task_id,
            entity_id=entity.id,
            entity_name=entity.name,
            field=plan.field,
            before=plan.before,
            target=plan.after,
            on_oscillation=key.on_oscillation,
        )
        pair = (entity.id, plan.field)
        self.changes[pair] = [*self.changes.get(pair, []), change]
        since = now - self.guards.window
        cleared = self.holds.cleared_at.get(pair)
        if cleared is not None:
            since = max(since, cleared)
        window = [c for c in self.changes[pair] if c.at >= since]
        found = detect(window, threshold=self.guards.settings.oscillation_changes)
        if found is None:
            return None
        context = {
            "entity_id": entity.id,
            "entity_name": entity.name,
            "field": plan.field,
            "account": run.account,
            "rules": found.rules,
            "changes": found.change_rows(),
            "hold": found.hold,
        }
        report = ErrorReport(function=OSCILLATION, message=found.message(), context=context)
        try:
            await self.guards.errors.record(report, now=now, group=hold_id(*pair))
        except PyMongoError:  # the change landed: a broken error log must not fail it
            log.exception("could not record the oscillation of %s", hold_id(*pair))
        if found.hold:
            details = {k: context[k] for k in ("entity_name", "account", "rules", "changes")}
            await self.guards.holds.place(entity.id, plan.field, now=now, details=details)
            self.holds.active.add(pair)
        if self.guards.on_oscillation is not None:
            self.guards.on_oscillation(plan.field)
        log.warning("oscillation: %s", found.message())
        return found.flag()
