"""Replay, pure: what a rule would have done on one ad account over instants of the past.

A backtest (:mod:`ruleengine.backtest.service`) hands in the rule, the account's entities as
listed today, their history (:mod:`ruleengine.rules.replay.rows`) and the instants the
rule would have run (:func:`run_instants`). :func:`replay` then does what the worker
does at each instant, with the engine's own pure pieces: conditions are evaluated by
:func:`~ruleengine.rules.evaluate.evaluate_task`, targets planned by
:mod:`~ruleengine.rules.plan.plan` and :mod:`~ruleengine.rules.plan.scaling` — on a simulated
state instead of Meta's. What an action changes (status, daily budget, bid, name) is
what later runs see, and so are the guards the live engine keeps:

* a task's cooldown, from the instant it fired; its ``execution_count_limit`` (counted
  from the start of the backtest);
* every clamp of the planners, the engine-wide ``max_budget_change_pct``, the account's
  minimum daily budget, and Meta's 4 budget changes per ad set per rolling hour;
* follow-ups (``then``): due after the action, run before the first instant at or after
  their due time, skipped when the field no longer holds what the action left — as the
  live follow-up re-checks it;
* filters on fields the replay changes (status, budget, name): an entity a simulated
  pause takes out of an ``effective_status IN [ACTIVE]`` rule is no longer evaluated.

As live, every task of a run is evaluated on the state the run started with, then the
actions are planned one after the other, each from the state the previous one left
(the worker re-reads the live value before each write).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

import numpy as np

from ruleengine.rules.basics import MAX_BUDGET
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import EvalContext, TaskVerdict, evaluate_task
from ruleengine.rules.filtering import LocalFilter, wire
from ruleengine.rules.impact.holdout import HELD_OUT, is_held_out
from ruleengine.rules.language.action_types import (
    ChangeBidAction,
    DuplicateAction,
    FollowUp,
    NameTextAction,
    NotifyAction,
    PercentBudgetAction,
    RenameAction,
    ScaleToTargetAction,
    ScheduleBudgetAction,
    SetBudgetAction,
    StatusAction,
)
from ruleengine.rules.language.model import Rule, Task
from ruleengine.rules.language.money import amount_scale
from ruleengine.rules.language.schedule import (
    IntervalSchedule,
    active_window,
    in_window,
    next_local_time,
    next_slot,
)
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import (
    PlanContext,
    Refused,
    budget_refusal,
    follow_up_target,
    plan_change,
    plan_follow_up,
)
from ruleengine.rules.replay.masks import MaskBuilder
from ruleengine.rules.replay.rows import RawHistory, RowBuilder, Share

#: Fields a simulated action changes: filters on them are re-checked after each change.
SIMULATED_FIELDS: Final = frozenset(
    {"status", "effective_status", "name", "daily_budget", "lifetime_budget", "bid_amount"}
)
BUDGET_WINDOW: Final = timedelta(hours=1)


def run_instants(rule: Rule, *, since: datetime, until: datetime) -> list[datetime]:
    """The instants in ``[since, until)`` the rule would have run at (aware UTC).

    An interval schedule counts from ``since`` (the live one counts from when the rule
    was turned on, which a backtest does not know); a timetable runs at its local slots.
    The rule's ``date_range`` is honoured.
    """
    tz = rule.zone()
    window = active_window(rule.date_range, tz)
    found: list[datetime] = []
    if isinstance(rule.schedule, IntervalSchedule):
        step = timedelta(minutes=rule.schedule.every_minutes)
        at = since.astimezone(UTC)
        while at < until:
            if in_window(at, window):
                found.append(at)
            at += step
        return found
    at = next_slot(rule.schedule, after=since - timedelta(microseconds=1), tz=tz)
    while at < until:
        if in_window(at, window):
            found.append(at)
        at = next_slot(rule.schedule, after=at, tz=tz)
    return found


@dataclass(frozen=True)
class AccountHistory:
    """One ad account as a replay needs it.

    Attributes:
        account: ``act_…``.
        tz: the ad account's timezone (its days are Meta's reporting days).
        currency: its currency (the rule's amounts given per currency are picked by it).
        currency_offset: minor units per currency unit.
        min_daily_budget: the account's minimum daily budget (minor units), if known.
        items: today's listing of the rule's entities, as Graph sent them (id → fields).
        history: the account's history.
        needs: period → the (field, action type) pairs a row must hold.
    """

    account: str
    tz: ZoneInfo
    currency: str
    currency_offset: int
    min_daily_budget: int | None
    items: Mapping[str, Mapping[str, Any]]
    history: RawHistory
    needs: Mapping[str, frozenset[tuple[str, str | None]]]


@dataclass(frozen=True)
class ReplayOptions:
    """The engine-wide guards the replay applies as the worker would."""

    max_budget_change_pct: float = 50.0
    budget_changes_per_hour: int = 4


@dataclass
class Fire:
    """One action the rule would have taken (or a follow-up it would have run).

    ``values``: condition → the number this view's evaluation read (``"<metric> <period>"``);
    ``other``: the same conditions read with the other view's numbers (None: one view only).
    """

    time: datetime
    account: str
    entity_id: str
    entity_name: str
    task: str
    action: str
    field: str | None
    before: Any
    after: Any
    values: dict[str, float | str | None] = dataclasses.field(default_factory=dict)
    other: dict[str, float | str | None] | None = None
    followup: bool = False

    @property
    def key(self) -> tuple[datetime, str, str, str, str]:
        """What identifies a fire across views."""
        return self.time, self.account, self.entity_id, self.task, self.action


@dataclass
class _Pending:
    due: datetime
    then: FollowUp
    field: str | None
    left: Any  # the value the action left
    previous: Any  # the value before it


@dataclass
class _State:
    """One entity as the replay has changed it."""

    item: dict[str, Any]
    entity: Entity
    eligible: bool = True
    cooling: dict[str, datetime] = dataclasses.field(default_factory=dict)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    budget_changes: list[datetime] = dataclasses.field(default_factory=list)
    pending: dict[str, _Pending] = dataclasses.field(default_factory=dict)
    version: int = 0  # bumped by every change: plans of state-only actions may change


@dataclass
class ReplayResult:
    """What one account's replay did."""

    runs: int = 0
    fires: list[Fire] = dataclasses.field(default_factory=list)
    blocked: dict[str, int] = dataclasses.field(default_factory=dict)  # reason → actions not taken
    start: dict[str, dict[str, Any]] = dataclasses.field(
        default_factory=dict
    )  # entity → fields at start
    end: dict[str, dict[str, Any]] = dataclasses.field(
        default_factory=dict
    )  # entity → fields at end


def _live_filter(rule: Rule) -> LocalFilter | None:
    """The rule's filters on fields the replay changes (the others held for today's listing)."""
    entries = [
        entry
        for entry in wire(rule.filtering())
        if str(entry["field"]).rpartition(".")[0] in ("", rule.level)
        and str(entry["field"]).rpartition(".")[2] in SIMULATED_FIELDS
    ]
    return LocalFilter(rule.level, entries) if entries else None


def _values(verdict: TaskVerdict) -> dict[str, float | str | None]:
    return {
        f"{c.metric} {c.period}" if c.period else c.metric: c.actual for c in verdict.conditions
    }


class Replay:
    """One account's replay (see the module docstring).

    Entities do not interact (Meta's limits and every guard are per entity), so the
    replay walks one entity at a time through the instants its tasks may pass at
    (:mod:`ruleengine.rules.replay.masks`) and the follow-ups it has due — not through
    every instant.

    Args:
        rule: the rule (its amounts given per currency are the account's own here, as the
            worker picks them: :meth:`~ruleengine.rules.language.model.Rule.in_currency`).
        account: the account's entities and history.
        options: the engine-wide guards.
        instants: the instants the rule runs at (aware UTC, in order).
        until: the end of the backtest (follow-ups due before it run).
        share: the lag curve for as-seen numbers (None: matured numbers).
        other_share: the other view's curve, to read a fire's conditions both ways
            (``False``: no other view).
    """

    def __init__(
        self,
        rule: Rule,
        account: AccountHistory,
        options: ReplayOptions,
        *,
        instants: Sequence[datetime],
        until: datetime,
        share: Share | None = None,
        other_share: Share | bool | None = False,
        rule_id: str | None = None,
    ) -> None:
        self.rule = rule.in_currency(account.currency)
        self.rule_id = rule_id  # a stored rule's: what its holdouts draw with (a draft: none)
        self.account = account
        self.options = options
        self.instants = list(instants)
        self.until = until
        self.filter = _live_filter(self.rule)
        self.scale = amount_scale(self.rule.format, account.currency_offset)
        self.share = share
        self.other_share = other_share
        self.ids = list(account.items)
        self.states = {
            entity_id: _State(dict(item), Entity.model_validate(item))
            for entity_id, item in account.items.items()
        }
        self.result = ReplayResult(
            runs=len(self.instants),
            start={e: self._shown(s) for e, s in self.states.items()},
        )
        for state in self.states.values():
            state.eligible = self._eligible(state)
        self.done = 0
        self._masks: list[tuple[Any, bool]] | None = None

    def _task_masks(self) -> list[tuple[Any, bool]]:
        if self._masks is None:
            builder = MaskBuilder(
                self.ids, self.account.history, self.instants, self.account.tz, self.share
            )
            self._masks = [builder.task(task) for task in self.rule.tasks]
        return self._masks

    def step(self, count: int) -> int:
        """Replay the next ``count`` entities; how many are left."""
        masks = self._task_masks() if self.instants else []
        for row in range(self.done, min(len(self.ids), self.done + count)):
            entity_id = self.ids[row]
            candidates = [mask[row] for mask, _ in masks]
            complete = [known for _, known in masks]
            _Walk(self, entity_id, self.states[entity_id], candidates, complete).run()
            self.done = row + 1
        return len(self.ids) - self.done

    def finish(self) -> ReplayResult:
        """What the replay did, fires in time order, every entity's fields at the end."""
        self.result.fires.sort(key=lambda f: (f.time, f.entity_id, f.task))
        self.result.end = {e: self._shown(s) for e, s in self.states.items()}
        return self.result

    def run(self) -> ReplayResult:
        """Replay every entity, and finish."""
        self.step(len(self.ids))
        return self.finish()

    # ---------------------------------------------------------------- evaluation

    def verdict(self, entity_id: str, entity: Entity, task: Task, at: datetime) -> TaskVerdict:
        """The engine's verdict on ``task`` at ``at``, from this view's numbers."""
        return self._evaluate(entity_id, entity, task, at, self.share)

    def _evaluate(
        self, entity_id: str, entity: Entity, task: Task, at: datetime, share: Share | None
    ) -> TaskVerdict:
        builder = RowBuilder(
            self.account.history.entity(entity_id),
            self.account.needs,
            self.account.tz,
            share,
        )
        ctx = EvalContext(
            entity=entity,
            insights=builder.rows(at),
            now=at,
            tz=self.account.tz,
            currency_offset=self.account.currency_offset,
        )
        return evaluate_task(task, ctx)

    def other_values(
        self, entity_id: str, entity: Entity, task: Task, at: datetime
    ) -> dict[str, float | str | None] | None:
        """The fire's conditions read with the other view's numbers."""
        if self.other_share is False:
            return None
        share = self.other_share if callable(self.other_share) else None
        return _values(self._evaluate(entity_id, entity, task, at, share))

    def due(self, then: FollowUp, at: datetime) -> datetime:
        """When a follow-up of an action taken at ``at`` falls due."""
        if then.after_minutes is not None:
            return at + timedelta(minutes=then.after_minutes)
        assert then.at_time is not None
        return next_local_time(then.at_time, after=at, tz=self.rule.zone())

    def plan(
        self, state: _State, action: Any, verdict: TaskVerdict | None, at: datetime
    ) -> Plan | str | None:
        """The plan from the simulated state; None for an action that changes no field
        (notify, duplicate) or whose effect the replay does not simulate (a budget schedule:
        the spend of its window); a reason text when the action could not run. Planned by
        :func:`~ruleengine.rules.plan.targets.plan_change`, as the live write path plans it;
        ``verdict`` is read by ``scale_to_target`` only (its metric)."""
        if isinstance(action, NotifyAction | DuplicateAction | ScheduleBudgetAction):
            return None
        budgets = isinstance(action, PercentBudgetAction | SetBudgetAction | ScaleToTargetAction)
        plannable = budgets and budget_refusal(self.rule.level, state.item) is None
        if plannable and self.budget_limited(state, at):
            return "meta_budget_change_limit"
        reading = verdict.action_metric if verdict is not None else None
        ctx = PlanContext(
            level=self.rule.level,
            rule_name=self.rule.name,
            today=at.astimezone(self.rule.zone()).date(),
            offset=self.account.currency_offset,
            scale=self.scale,
            max_change_pct=self.options.max_budget_change_pct,
            account_minimum=self.account.min_daily_budget,
            metric=reading.actual if reading is not None else None,
        )
        planned = plan_change(action, state.item, ctx)
        if isinstance(planned, Refused):
            return planned.reason
        return self._beyond_any_budget(planned) if budgets else planned

    def _beyond_any_budget(self, planned: Plan | str | None) -> Plan | str | None:
        """A target past the largest budget a rule may name is one Meta would refuse: the
        replay stops raising there (a rule raising without a ``max_budget`` would otherwise
        grow a budget without end)."""
        ceiling = MAX_BUDGET * self.account.currency_offset
        if isinstance(planned, Plan) and isinstance(planned.after, int) and planned.after > ceiling:
            return "beyond_any_budget"
        return planned

    def budget_limited(self, state: _State, at: datetime) -> bool:
        """Meta's limit: an ad set takes 4 budget changes in a rolling hour."""
        if self.rule.level != "adset":
            return False
        recent = [t for t in state.budget_changes if t > at - BUDGET_WINDOW]
        state.budget_changes = recent
        return len(recent) >= self.options.budget_changes_per_hour

    def change(self, state: _State, field_name: str, value: Any, at: datetime) -> None:
        """Set a field of the simulated entity (what later runs see)."""
        state.item[field_name] = value
        if field_name == "status":
            state.item["effective_status"] = value
        if field_name == "daily_budget":
            state.budget_changes.append(at)
        state.entity = Entity.model_validate(state.item)
        state.eligible = self._eligible(state)
        state.version += 1

    def _eligible(self, state: _State) -> bool:
        return self.filter is None or self.filter.keep(state.item)

    def fire(self, fire: Fire) -> None:
        """Keep one fire."""
        self.result.fires.append(fire)

    def block(self, reason: str) -> None:
        """Count an action that passed but could not be taken."""
        self.result.blocked[reason] = self.result.blocked.get(reason, 0) + 1

    def follow_up(self, entity_id: str, state: _State, task_id: str, pending: _Pending) -> None:
        """Run one follow-up at its due time, re-checking the field as the live one does."""
        then, at = pending.then, pending.due
        if then.do == "notify":
            self._fire_followup(entity_id, state, task_id, then.do, at, None, None, None)
            return
        target = follow_up_target(then.do, previous=pending.previous)
        field_name = target.field
        current = state.item.get(field_name)
        if field_name == "daily_budget" and self.budget_limited(state, at):
            return
        planned = plan_follow_up(
            then.do,
            state.item,
            action_field=pending.field,
            action_left=pending.left,
            previous=pending.previous,
            max_change_pct=self.options.max_budget_change_pct,
        )
        if isinstance(planned, Refused) or not planned.changes:
            return  # what the action left was changed since, or nothing is left to do
        value = planned.after
        self.change(state, field_name, value, at)
        self._fire_followup(entity_id, state, task_id, then.do, at, field_name, current, value)

    def _fire_followup(
        self,
        entity_id: str,
        state: _State,
        task_id: str,
        do: str,
        at: datetime,
        field_name: str | None,
        before: Any,
        after: Any,
    ) -> None:
        self.fire(
            Fire(
                at,
                self.account.account,
                entity_id,
                str(state.item.get("name", "")),
                task_id,
                f"then:{do}",
                field_name,
                before,
                after,
                followup=True,
            )
        )

    @staticmethod
    def _shown(state: _State) -> dict[str, Any]:
        item = state.item
        return {
            "status": item.get("status"),
            "daily_budget": item.get("daily_budget"),
            "name": item.get("name"),
        }


def _state_only(action: Any) -> bool:
    """True when the action's plan depends on the entity's state alone: a plan that
    changes nothing keeps changing nothing until the state changes."""
    if isinstance(action, RenameAction):
        return "{date}" not in action.template
    return isinstance(
        action,
        StatusAction | PercentBudgetAction | SetBudgetAction | ChangeBidAction | NameTextAction,
    )


class _Walk:
    """One entity through the instants its tasks may pass at, and its follow-ups."""

    def __init__(
        self,
        replay: Replay,
        entity_id: str,
        state: _State,
        candidates: list[Any],
        complete: list[bool],
    ) -> None:
        self.replay = replay
        self.entity_id = entity_id
        self.state = state
        self.candidates = candidates
        self.complete = complete
        self.tasks = replay.rule.tasks
        # task index → the state version at which its plan changed nothing (or -1: never again)
        self.dormant: dict[int, int] = {}
        self._active: Any = None

    def _quiet(self, index: int) -> bool:
        version = self.dormant.get(index)
        return version is not None and version in (-1, self.state.version)

    def _next_candidate(self, position: int) -> int | None:
        if self._active is None:
            live = [c for i, c in enumerate(self.candidates) if not self._quiet(i)]
            self._active = np.logical_or.reduce(live) if live else None
        if self._active is None:
            return None
        found = np.flatnonzero(self._active[position:])
        return position + int(found[0]) if found.size else None

    def _changed(self) -> None:
        self._active = None

    def run(self) -> None:
        instants = self.replay.instants
        position = 0
        while True:
            index = self._next_candidate(position) if position < len(instants) else None
            at = instants[index] if index is not None else None
            pending = min(self.state.pending.items(), key=lambda kv: kv[1].due, default=None)
            if (
                pending is not None
                and pending[1].due < self.replay.until
                and (at is None or pending[1].due <= at)
            ):
                task_id, item = pending
                del self.state.pending[task_id]
                version = self.state.version
                self.replay.follow_up(self.entity_id, self.state, task_id, item)
                if self.state.version != version:
                    self._changed()
                position = bisect_left(instants, item.due)
                continue
            if index is None or at is None:
                return
            self._visit(index, at)
            position = index + 1

    def _visit(self, index: int, at: datetime) -> None:
        state = self.state
        if not state.eligible:  # filtered out until a follow-up changes it back
            for i in range(len(self.tasks)):
                self.dormant.setdefault(i, state.version)
                if self.dormant[i] != -1:
                    self.dormant[i] = state.version
            self._changed()
            return
        start = state.entity  # every task is evaluated on the state the run started with
        due = [
            i
            for i, task in enumerate(self.tasks)
            if self.candidates[i][index] and self._may_run(task, at)
        ]
        for i in due:
            # a task quiet when the run began is still tried: an earlier task of this run
            # may have changed the state its plan depends on (_act skips it otherwise)
            self._act(i, self.tasks[i], start, at)

    def _may_run(self, task: Task, at: datetime) -> bool:
        until = self.state.cooling.get(task.id)
        if until is not None and at < until:
            return False
        limit = task.execution_count_limit
        return limit is None or self.state.counts.get(task.id, 0) < limit

    def _act(self, index: int, task: Task, start: Entity, at: datetime) -> None:
        state, replay, action = self.state, self.replay, task.action
        if self._quiet(index):
            return
        verdict: TaskVerdict | None = None

        def confirmed() -> TaskVerdict | None:
            nonlocal verdict
            if verdict is None:
                verdict = replay.verdict(self.entity_id, start, task, at)
            return verdict if verdict.passed else None

        # a task with a condition on the simulated state has no mask of its own: read its
        # verdict first; a masked one only when its plan changes something
        needs_verdict = not self.complete[index] or isinstance(action, ScaleToTargetAction)
        if needs_verdict and confirmed() is None:
            return
        planned = replay.plan(state, action, verdict, at)
        if isinstance(planned, str):
            if confirmed() is not None:
                replay.block(planned)
            return
        if planned is not None and not planned.changes:
            if _state_only(action):
                self.dormant[index] = state.version
                self._changed()
            return
        final = confirmed()
        if final is None:
            return
        if self._held_out(task, at):
            return
        fire = Fire(
            at,
            replay.account.account,
            self.entity_id,
            str(state.item.get("name", "")),
            task.id,
            action.type,
            planned.field if planned is not None else None,
            planned.before if planned is not None else None,
            planned.after if planned is not None else None,
            values=_values(final),
            other=replay.other_values(self.entity_id, start, task, at),
        )
        if planned is not None:
            replay.change(state, planned.field, planned.after, at)
            self._changed()
        replay.fire(fire)
        self._fired(index, task, fire, at)

    def _held_out(self, task: Task, at: datetime) -> bool:
        """True when the task's holdout keeps this entity from the change, as the live engine
        does (docs/impact.md): nothing changes, the cooldown runs, no fire is counted."""
        replay = self.replay
        if replay.rule_id is None or not is_held_out(
            replay.rule_id, task.id, self.entity_id, task.holdout
        ):
            return False
        replay.block(HELD_OUT)
        if task.cooldown_minutes:
            self.state.cooling[task.id] = at + timedelta(minutes=task.cooldown_minutes)
        return True

    def _fired(self, index: int, task: Task, fire: Fire, at: datetime) -> None:
        """What a fire leaves for later runs: a cooldown, a count, a follow-up."""
        state, replay = self.state, self.replay
        if task.cooldown_minutes:
            state.cooling[task.id] = at + timedelta(minutes=task.cooldown_minutes)
        state.counts[task.id] = state.counts.get(task.id, 0) + 1
        limit = task.execution_count_limit
        if limit is not None and state.counts[task.id] >= limit:
            self.dormant[index] = -1
            self._changed()
        then = task.action.then
        if then is not None:
            state.pending[task.id] = _Pending(
                replay.due(then, at), then, fire.field, fire.after, fire.before
            )
