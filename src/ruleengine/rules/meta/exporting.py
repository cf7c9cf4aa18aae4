"""Our rules → Meta's Ad Rules (``POST act_…/adrules_library`` bodies), with what cannot go.

A rule becomes, for each of its ad accounts, one Meta rule per task (tasks are independent
in both engines): ``level`` → ``entity_type``; filters → Meta's metadata filters; conditions
→ Insights filters with the one ``time_preset`` they share; the action →
``execution_spec`` (``change_bid`` by a percentage → ``CHANGE_BID``, ``scale_to_target`` →
a budget change towards a ``target_field``); ``cooldown_minutes`` → ``action_frequency``,
``execution_count_limit`` → the execution option of that name; the schedule →
``schedule_spec`` in the ad account's timezone; money to minor units (an amount given per
currency: the account's own, :meth:`~ruleengine.rules.language.model.Rule.in_currency`). What Meta
cannot
say is a :class:`~ruleengine.rules.meta.vocab.Problem` with the JSON path in our rule,
never dropped: conditions over different periods (a Meta rule has one ``time_preset``), a
comparison of two metrics, ≥/≤, most actions but pause/activate/notify/budget and bid
changes, a bid set to an amount, …

``match: any`` becomes one Meta rule per condition when that is equivalent: the action
sets a status, so two branches passing do what one does. A ``then`` that re-activates
(or pauses) at a time of day becomes a second Meta rule with a ``CUSTOM`` schedule. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR
from typing import Any, Final

from ruleengine.errors import NoAmountForCurrency
from ruleengine.rules.basics import WEEKDAYS, parse_hhmm
from ruleengine.rules.language.action_types import (
    ChangeBidAction,
    FollowUp,
    NotifyAction,
    PercentBudgetAction,
    RebalanceBudgetAction,
    ScaleToTargetAction,
    ScheduleBudgetAction,
    StatusAction,
)
from ruleengine.rules.language.model import Condition, Filter, Rule, Task
from ruleengine.rules.language.money import to_minor
from ruleengine.rules.language.per_currency import bare
from ruleengine.rules.language.schedule import IntervalSchedule, Schedule
from ruleengine.rules.meta.rebalance import rebalance_to_meta
from ruleengine.rules.meta.vocab import (
    BID_EXECUTION,
    BUDGET_EXECUTION_OF_LEVEL,
    ID_FIELDS,
    LEVEL_TO_ENTITY_TYPE,
    OPERATORS_TO_META,
    OUR_DEFAULT_STATUS,
    PERIOD_TO_PRESET,
    RULE_EFFECTIVE_STATUSES,
    MetaAccount,
    Problem,
    Report,
    fail,
    is_money,
    meta_field_of,
    tidy,
)

#: Our always-true condition (what a Meta rule without conditions imports as).
_ALWAYS: Final = ("current_hour", ">=", 0.0)
_META_DAYS: Final = {day: (index + 1) % 7 for index, day in enumerate(WEEKDAYS)}  # sun = 0
_HALF_HOURS: Final = 48
_INTERVALS: Final = {30: "SEMI_HOURLY", 60: "HOURLY"}
#: Our actions that are Meta's changes (``change_spec``), which alone take
#: ``action_frequency`` and ``execution_count_limit``.
_CHANGES: Final = (PercentBudgetAction, ChangeBidAction, ScaleToTargetAction)
_FILTER_OPERATORS: Final = frozenset(
    {"EQUAL", "NOT_EQUAL", "IN", "NOT_IN", "CONTAIN", "NOT_CONTAIN", "GREATER_THAN", "LESS_THAN"}
)


@dataclass
class ExportedRule:
    """One Meta rule for one ad account: the ``POST act_…/adrules_library`` parameters."""

    account: str
    body: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"account": self.account, **self.body}


@dataclass
class Exported:
    """The Meta rules a rule became, and what could not be expressed."""

    rules: list[ExportedRule] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when nothing was left out (warnings aside)."""
        return not any(p.severity == "error" for p in self.problems)


def export_rule(rule: Rule, *, accounts: dict[str, MetaAccount]) -> Exported:
    """``rule`` as Meta rules, for each of its ad accounts found in ``accounts``."""
    result = Exported()
    for index, account_id in enumerate(rule.ad_accounts):
        account = accounts.get(account_id)
        if account is None:
            result.problems.append(
                Problem(
                    f"ad_accounts[{index}]",
                    account_id,
                    "its currency is not known: register the account or give --currency",
                )
            )
            continue
        try:  # Meta's rules are per account: each gets its own currency's amounts
            own = rule.in_currency(account.currency)
        except NoAmountForCurrency as exc:
            what = f"{account_id} ({account.currency})"
            result.problems.append(Problem(exc.path, what, str(exc)))
            continue
        exporter = _Exporter(own, account)
        bodies = exporter.rules()
        result.rules += [ExportedRule(account_id, body) for body in bodies]
        result.problems += [p for p in exporter.problems if p not in result.problems]
    return result


class _Exporter(Report):
    def __init__(self, rule: Rule, account: MetaAccount) -> None:
        super().__init__()
        self.rule = rule
        self.account = account

    def rules(self) -> list[dict[str, Any]]:
        rule = self.rule
        if rule.date_range is not None:
            self.problems.append(
                Problem("date_range", "date_range", "Meta's rules have no dates to run between")
            )
        if rule.change_budget is not None:
            why = "Meta's rules have no change budget across rules; it stays behind"
            self.warn("change_budget", rule.change_budget.model_dump(exclude_none=True), why)
        filters = self._try(self._filters)
        schedule = self._try(self._schedule, rule.schedule, "schedule")
        bodies: list[dict[str, Any]] = []
        for index, task in enumerate(rule.tasks):
            made = self._try(self._task, task, f"tasks[{index}]", filters, schedule)
            bodies += made or []
        if filters is None or schedule is None:
            return []
        return bodies

    # ---- filters and schedule

    def _filters(self) -> list[dict[str, Any]]:
        entity_type = LEVEL_TO_ENTITY_TYPE[self.rule.level]
        out: list[dict[str, Any]] = [
            {"field": "entity_type", "value": entity_type, "operator": "EQUAL"}
        ]
        for index, item in enumerate(self.rule.filters):
            out.append(_filter(item, f"filters[{index}]"))
        if not any(f.field == "effective_status" for f in self.rule.filters):
            # Meta would add its own (active and in review); ours lists paused ones too
            operator, values = OUR_DEFAULT_STATUS
            out.append({"field": "effective_status", "value": list(values), "operator": operator})
        return out

    def _schedule(self, schedule: Schedule, path: str) -> dict[str, Any]:
        if isinstance(schedule, IntervalSchedule):
            kind = _INTERVALS.get(schedule.every_minutes)
            if kind is None:
                raise fail(
                    f"{path}.every_minutes",
                    schedule.every_minutes,
                    "Meta runs rules every 30 or 60 minutes, daily at midnight, or at set"
                    " half hours (use a timetable)",
                )
            return {"schedule_type": kind}
        self._same_timezone(path)
        minutes: dict[int, list[int]] = {}
        for day, times in schedule.slots.items():
            for time in times:
                at = parse_hhmm(time)
                if at.minute % 30:
                    raise fail(f"{path}.slots.{day}", time, "Meta runs rules on the half hour")
                minutes.setdefault(at.hour * 60 + at.minute, []).append(_META_DAYS[day])
        if minutes == {0: sorted(_META_DAYS.values())}:
            return {"schedule_type": "DAILY"}
        return {"schedule_type": "CUSTOM", "schedule": _custom(minutes)}

    def _same_timezone(self, path: str) -> None:
        if self.account.timezone is not None and self.rule.timezone != self.account.timezone:
            raise fail(
                "timezone",
                self.rule.timezone,
                f"Meta runs {path} times in the ad account's timezone ({self.account.timezone});"
                " set the rule's timezone to it",
            )

    # ---- tasks

    def _task(
        self,
        task: Task,
        path: str,
        filters: list[dict[str, Any]] | None,
        schedule: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        execution = self._execution(task, path)
        branches = self._branches(task, path)
        second = self._try(self._then, task, path, filters) if task.action.then else None
        if execution is None or filters is None or schedule is None:
            return []
        name = self.rule.name if len(self.rule.tasks) == 1 else f"{self.rule.name} [{task.id}]"
        status = "ENABLED" if self.rule.status == "ACTIVE" else "DISABLED"
        bodies = []
        for number, conditions in enumerate(branches, start=1):
            suffix = f" ({number}/{len(branches)})" if len(branches) > 1 else ""
            evaluation = {"evaluation_type": "SCHEDULE", "filters": filters + conditions}
            bodies.append(
                {
                    "name": name + suffix,
                    "status": status,
                    "evaluation_spec": evaluation,
                    "execution_spec": execution,
                    "schedule_spec": schedule,
                }
            )
        if second is not None:
            bodies.append({"name": f"{name} [then]", "status": status, **second})
        return bodies

    def _branches(self, task: Task, path: str) -> list[list[dict[str, Any]]]:
        """The Insights filters of each Meta rule the task becomes (one unless ``any``)."""
        indexed = list(enumerate(task.conditions))
        if task.match == "all" or len(indexed) == 1:
            return [self._conditions(indexed, path, self._target_period(task, path))]
        if not isinstance(task.action, StatusAction) or task.action.then is not None:
            raise fail(
                f"{path}.match",
                "any",
                "one Meta rule per condition would act once per passing condition; that is"
                " the same only for pause and activate",
            )
        return [self._conditions([pair], path) for pair in indexed]

    @staticmethod
    def _target_period(task: Task, path: str) -> tuple[str, str] | None:
        """A ``scale_to_target`` or ``rebalance_budget`` action's period, which is its Meta
        rule's time_preset too."""
        if isinstance(task.action, ScaleToTargetAction | RebalanceBudgetAction):
            return task.action.period, f"{path}.action"
        return None

    def _conditions(
        self, indexed: list[tuple[int, Condition]], path: str, first: tuple[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The Insights filters of ``indexed``; ``first`` is a period they must share (the
        target field's) as ``(period, path of its owner)``."""
        out: list[dict[str, Any]] = []
        for index, condition in indexed:
            where = f"{path}.conditions[{index}]"
            if (condition.metric, condition.operator, condition.value) == _ALWAYS:
                continue
            meta = self._condition(condition, where)
            if condition.spec.needs_period:
                assert condition.period is not None  # the model requires it
                if first is None:
                    first = (condition.period, where)
                elif condition.period != first[0]:
                    raise fail(
                        f"{where}.period",
                        condition.period,
                        f"{first[1]}.period is {first[0]}: a Meta rule has one time_preset for"
                        " all its conditions and its change_spec target_field",
                    )
            out.append(meta)
        if first is not None:
            preset = PERIOD_TO_PRESET.get(first[0])
            if preset is None:
                raise fail(f"{first[1]}.period", first[0], "Meta's rules have no such time_preset")
            out.insert(0, {"field": "time_preset", "value": preset, "operator": "EQUAL"})
        return out

    def _condition(self, condition: Condition, path: str) -> dict[str, Any]:
        if condition.compare_to is not None:
            raise fail(
                f"{path}.compare_to",
                condition.compare_to.metric,
                "Meta compares with fixed values only",
            )
        meta_field = meta_field_of(condition.metric)
        if meta_field is None:
            raise fail(f"{path}.metric", condition.metric, "Meta's rules have no such field")
        operator = OPERATORS_TO_META.get(condition.operator)
        if operator is None:
            raise fail(
                f"{path}.operator",
                condition.operator,
                "Meta has GREATER_THAN and LESS_THAN only (write > or < with the next value)",
            )
        offset = self.account.offset if is_money(condition.metric) else 1
        value: Any
        if condition.bounds is not None:
            low, high = condition.bounds
            value = [_money(low, offset), _money(high, offset)]
        else:
            assert isinstance(condition.value, float | int)
            value = _money(condition.value, offset)
        return {"field": meta_field, "value": value, "operator": operator}

    # ---- actions

    def _execution(self, task: Task, path: str) -> dict[str, Any] | None:
        action = task.action
        options: list[dict[str, Any]] = []
        execution = self._action(action, f"{path}.action", options)
        if execution is None:
            return None
        for name, meta, value in (
            ("cooldown_minutes", "action_frequency", task.cooldown_minutes),
            ("execution_count_limit", "execution_count_limit", task.execution_count_limit),
        ):
            if not value:
                continue
            if not isinstance(action, _CHANGES):
                self.problems.append(
                    Problem(
                        f"{path}.{name}",
                        str(value),
                        f"Meta takes {meta} with budget and bid changes only",
                    )
                )
                return None
            options.append({"field": meta, "value": value, "operator": "EQUAL"})
        self._task_warnings(task, path)
        return execution | ({"execution_options": options} if options else {})

    def _task_warnings(self, task: Task, path: str) -> None:
        """What a task has that Meta's rules do without: exported, with a warning."""
        if task.on_oscillation:
            why = "Meta's rules do not look for oscillation; the hold stays behind"
            self.warn(f"{path}.on_oscillation", task.on_oscillation, why)
        if task.execution_count_limit:
            self.warn(
                f"{path}.execution_count_limit",
                task.execution_count_limit,
                "the same limit per object, but the new Meta rule counts from 0: the changes"
                " this task already made are not counted",
            )
        if task.respect_learning_phase:
            self.warn(
                f"{path}.respect_learning_phase",
                task.respect_learning_phase,
                "Meta's rules do not look at the learning phase: the exported rule changes"
                " budgets while an ad set is learning",
            )
        if task.approval is not None:
            self.warn(
                f"{path}.approval",
                task.approval.model_dump(mode="json", exclude_none=True),
                "Meta's rules cannot wait for a person's approval: the exported rule makes"
                " its changes at once",
            )
        if task.holdout is not None:
            self.warn(
                f"{path}.holdout",
                task.holdout.model_dump(mode="json"),
                "Meta's rules have no holdouts: the exported rule acts on every object it"
                " matches, and its effect is no longer measured",
            )

    def _action(
        self, action: Any, where: str, options: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """The ``execution_spec`` of ``action`` (a change's ``change_spec`` into ``options``)."""
        if isinstance(action, StatusAction):
            execution = {"execution_type": "PAUSE" if action.type == "pause" else "UNPAUSE"}
        elif isinstance(action, NotifyAction):
            self.warn(
                where,
                action.webhook,
                "Meta notifies the rule's owner (or execution option user_ids) in Facebook;"
                " the webhook and the template stay behind",
            )
            execution = {"execution_type": "NOTIFICATION"}
        elif isinstance(action, _CHANGES):
            spec = self._try(self._change_spec, action, where)
            if spec is None:
                return None
            options.append({"field": "change_spec", "value": spec, "operator": "EQUAL"})
            kind = (
                BID_EXECUTION
                if isinstance(action, ChangeBidAction)
                else BUDGET_EXECUTION_OF_LEVEL[self.rule.level]
            )
            execution = {"execution_type": kind}
        elif isinstance(action, RebalanceBudgetAction):
            execution = self._try(rebalance_to_meta, self, action, self.rule.level, where)
        elif isinstance(action, ScheduleBudgetAction):
            why = (
                "Meta's ad rules have no schedule action: their execution types change a budget"
                " at once (CHANGE_BUDGET …), none makes a budget schedule (high-demand period)"
            )
            self.problems.append(Problem(f"{where}.type", action.type, why))
            return None
        else:
            self.problems.append(
                Problem(f"{where}.type", action.type, "Meta's rules have no such action")
            )
            return None
        return execution

    def _change_spec(
        self, action: PercentBudgetAction | ChangeBidAction | ScaleToTargetAction, path: str
    ) -> dict[str, Any]:
        if isinstance(action, ScaleToTargetAction):
            return self._target_spec(action, path)
        if isinstance(action, ChangeBidAction):
            if action.percent is None:
                raise fail(
                    f"{path}.amount",
                    action.amount,
                    "Meta's CHANGE_BID changes a bid by a percentage or by a fixed amount of money"
                    " (an increment); it cannot set a bid to an amount",
                )
            increase, percent = action.direction == "increase", action.percent
            low, high, names = action.min_bid, action.max_bid, ("min_bid", "max_bid")
        else:
            increase, percent = action.type == "increase_budget", action.percent
            low, high, names = action.min_budget, action.max_budget, ("min_budget", "max_budget")
        wrong, bound = (names[0], high) if increase else (names[1], low)
        if getattr(action, wrong) is not None:
            raise fail(
                f"{path}.{wrong}",
                getattr(action, wrong),
                "Meta's change_spec has one limit: a maximum for an increase, a minimum for a"
                " decrease",
            )
        spec: dict[str, Any] = {
            "amount": tidy(percent if increase else -percent),
            "unit": "PERCENTAGE",
        }
        if bound is not None:
            spec["limit"] = to_minor(
                bound, self.account.offset, rounding=ROUND_FLOOR if increase else ROUND_CEILING
            )
        return spec

    def _target_spec(self, action: ScaleToTargetAction, path: str) -> dict[str, Any]:
        """``scale_to_target`` as a budget ``change_spec`` with ``target_field``."""
        meta_field = meta_field_of(action.metric)
        if meta_field is None:
            raise fail(f"{path}.metric", action.metric, "Meta's rules have no such field")
        if action.max_change_percent is not None:
            raise fail(
                f"{path}.max_change_percent",
                action.max_change_percent,
                "Meta's target_field has no cap on one change: its rule would move the budget"
                " further in one run",
            )
        if (action.min_budget is None) != (action.max_budget is None):
            missing = "min_budget" if action.min_budget is None else "max_budget"
            raise fail(
                f"{path}.{missing}",
                "absent",
                "with target_field, Meta's limit is a range [low, high]: give both min_budget"
                " and max_budget, or neither",
            )
        offset = self.account.offset
        spec: dict[str, Any] = {
            "amount": _money(bare(action.target), offset if is_money(action.metric) else 1),
            "target_field": meta_field,
        }
        if action.min_budget is not None and action.max_budget is not None:
            spec["limit"] = [
                to_minor(action.min_budget, offset, rounding=ROUND_CEILING),
                to_minor(action.max_budget, offset, rounding=ROUND_FLOOR),
            ]
        return spec

    def _then(
        self, task: Task, path: str, filters: list[dict[str, Any]] | None
    ) -> dict[str, Any] | None:
        then: FollowUp | None = task.action.then
        assert then is not None
        where = f"{path}.action.then"
        if then.do not in ("activate", "pause") or then.at_time is None:
            raise fail(
                where,
                then.do if then.at_time else f"after_minutes {then.after_minutes}",
                "only a re-activation or pause at a time of day becomes a second Meta rule;"
                " Meta has no per-object delay or restore",
            )
        self._same_timezone(where)
        at = parse_hhmm(then.at_time)
        if at.minute % 30:
            raise fail(f"{where}.at_time", then.at_time, "Meta runs rules on the half hour")
        waiting = ["PAUSED"] if then.do == "activate" else ["ACTIVE"]
        kept = [f for f in filters or [] if f["field"] != "effective_status"]
        status = {"field": "effective_status", "value": waiting, "operator": "IN"}
        self.warn(
            where,
            f"{then.do} at {then.at_time}",
            f"the second Meta rule will {then.do} every matching {self.rule.level} that is"
            f" {waiting[0]} at {then.at_time}, not only those this rule changed",
        )
        kind = "UNPAUSE" if then.do == "activate" else "PAUSE"
        return {
            "evaluation_spec": {"evaluation_type": "SCHEDULE", "filters": [*kept, status]},
            "execution_spec": {"execution_type": kind},
            "schedule_spec": {
                "schedule_type": "CUSTOM",
                "schedule": [{"start_minute": at.hour * 60 + at.minute}],
            },
        }


def _money(value: float, offset: int) -> float | int:
    return tidy(value * offset) if offset != 1 else tidy(value)


def _filter(item: Filter, path: str) -> dict[str, Any]:
    if item.operator not in _FILTER_OPERATORS:
        raise fail(f"{path}.operator", item.operator, "Meta's rules have no such filter operator")
    values: list[Any] = list(item.value) if isinstance(item.value, list) else [item.value]
    if item.field == "effective_status":
        for index, value in enumerate(values):
            if value not in RULE_EFFECTIVE_STATUSES:
                raise fail(f"{path}.value[{index}]", value, "Meta's rules take no such status")
    if item.field in ID_FIELDS:
        values = [int(v) if isinstance(v, str) and v.isdigit() else v for v in values]
    return {
        "field": item.field,
        "value": values if isinstance(item.value, list) else values[0],
        "operator": item.operator,
    }


def _custom(minutes: dict[int, list[int]]) -> list[dict[str, Any]]:
    """CUSTOM entries: a day with every half hour as ``{days}``, the rest per time of day."""
    per_day: dict[int, int] = {}
    for days in minutes.values():
        for day in days:
            per_day[day] = per_day.get(day, 0) + 1
    whole = sorted(day for day, count in per_day.items() if count == _HALF_HOURS)
    entries: list[dict[str, Any]] = [{"days": whole}] if whole else []
    for minute in sorted(minutes):
        days = sorted(set(minutes[minute]) - set(whole))
        if days:
            entries.append({"start_minute": minute, "days": days})
    return entries
