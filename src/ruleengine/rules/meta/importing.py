"""Meta's Ad Rules → our rule documents (format 2), with a report of what does not map.

A Meta rule (``POST act_…/adrules_library`` form, or as Meta reads it back: numbers as
strings, an ``id`` per spec) becomes one rule document of one task:

* ``entity_type`` → ``level`` (else the level of the budget action, else the caller's
  ``level``); object-field filters → ``filters``; Insights and special-key filters →
  ``conditions``, each with the rule's ``time_preset`` as its period; no
  ``effective_status`` filter → Meta's implicit one, written out;
* ``schedule_spec`` → an interval (``HOURLY``, ``SEMI_HOURLY``) or a timetable in the ad
  account's timezone (``DAILY`` is midnight; ``CUSTOM`` entries become slots);
* ``execution_spec`` → the action (``CHANGE_BUDGET``/``CHANGE_CAMPAIGN_BUDGET`` by a
  percentage → ``increase_budget``/``decrease_budget``, towards a ``target_field`` →
  ``scale_to_target``; ``CHANGE_BID`` by a percentage → ``change_bid``),
  ``action_frequency`` → ``cooldown_minutes``, ``execution_count_limit`` → the task's
  ``execution_count_limit``;
* money (``spent``, ``cpc``, a ``change_spec`` amount or limit …) from minor units to the
  account currency's units.

Whatever does not map is a :class:`~ruleengine.rules.meta.vocab.Problem` with the JSON
path in Meta's rule: an ``error`` leaves the rule out (a rule with a condition or limit
dropped would act on more than Meta's did), a ``warning`` says where the import differs.
Nothing raises on bad input: hostile JSON gives problems, never an exception. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from ruleengine.errors import RuleValidationError
from ruleengine.rules.basics import WEEKDAYS
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.meta.filters import MetaFilters, list_at, object_at
from ruleengine.rules.meta.rebalance import EXECUTION as REBALANCE
from ruleengine.rules.meta.rebalance import directed_metric, rebalance_from_meta
from ruleengine.rules.meta.vocab import (
    BID_EXECUTION,
    BUDGET_EXECUTIONS,
    CHANGE_EXECUTIONS,
    ENTITY_TYPES,
    EXECUTION_COUNT_LIMIT,
    MetaAccount,
    Problem,
    Report,
    fail,
    from_minor,
    integer,
    is_money,
    number,
    shown,
    tidy,
)

TASK_ID: Final = "meta"
#: The condition of a Meta rule without one (every matched object): always true.
ALWAYS: Final[dict[str, Any]] = {"metric": "current_hour", "operator": ">=", "value": 0}
_MINUTES_PER_DAY: Final = 1440
_STEP: Final = 30
#: Meta's days (0 = Sunday) as our weekday names.
_DAYS: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_UNDOCUMENTED = (
    " is in Meta's ad rules reference and SDK (mid-2026) as an execution type only: Meta"
    " documents no behaviour for it, and ruleengine has no such action"
)
_NOT_OURS: Final[dict[str, str]] = {
    "ROTATE": "ruleengine has no ad rotation (it pauses and activates ads by their numbers)",
    "PING_ENDPOINT": "Meta calls the app's webhook subscription on a trigger; ruleengine's"
    " notify action posts to a configured webhook on a schedule",
    "UPDATE_LAX_BUDGET": "UPDATE_LAX_BUDGET" + _UNDOCUMENTED,
    "UPDATE_LAX_DURATION": "UPDATE_LAX_DURATION" + _UNDOCUMENTED,
    "AD_RECOMMENDATION_APPLY": "AD_RECOMMENDATION_APPLY applies Meta's own ad recommendations;"
    " ruleengine reads no recommendations and has no such action",
    "DCO": "DCO (dynamic creative optimisation) changes creatives; ruleengine changes no creative",
    "UPDATE_CREATIVE": "UPDATE_CREATIVE changes an ad's creative; ruleengine changes no creative",
}


@dataclass
class Imported:
    """One Meta rule, converted: the rule document (None when an error left it out) and the
    report of everything that did not map."""

    index: int
    meta_id: str | None
    name: str
    rule: dict[str, Any] | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        """The problems that left the rule out."""
        return [p for p in self.problems if p.severity == "error"]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the API answers)."""
        return {
            "index": self.index,
            "meta_id": self.meta_id,
            "name": self.name,
            "mapped": self.rule is not None,
            "rule": self.rule,
            "problems": [p.as_dict() for p in self.problems],
        }


_COUNT_STARTS_AT_ZERO: Final = (
    "the same limit per object, but ruleengine counts the changes it makes from now on: those"
    " Meta's rule already made (GET <rule_id>/history) are not counted — lower the limit by"
    " them if they should be"
)
_PROPORTION: Final = (
    "Meta's docs say only that the budget moves 'proportionally' as the field is above or"
    " below the amount, over an undocumented period; ruleengine moves it to live × metric /"
    " target (target / metric for a cost) over the rule's time_preset, within the limit and"
    " RULEENGINE_MAX_BUDGET_CHANGE_PCT per run (docs/rules.md, scale_to_target)"
)


@dataclass(frozen=True)
class ImportOptions:
    """How to fill what a Meta rule does not say.

    Attributes:
        webhook: the webhook (a name from the settings) that Meta's NOTIFICATION becomes.
        activate: rules enabled at Meta come ``ACTIVE`` (otherwise every rule is PAUSED).
        level: the level of a rule that names objects by id only (no ``entity_type``).
    """

    webhook: str = "meta-rules"
    activate: bool = False
    level: str | None = None


def meta_rules_of(document: Any) -> list[Any]:
    """The Meta rules in a document: one rule, a list of rules, or ``{"data": [...]}``."""
    if isinstance(document, dict) and isinstance(document.get("data"), list):
        return list(document["data"])
    if isinstance(document, list):
        return document
    return [document]


def import_document(
    document: Any, *, account: MetaAccount, options: ImportOptions | None = None
) -> list[Imported]:
    """Every Meta rule of ``document`` converted; names made unique within the document."""
    results = [
        import_rule(raw, account=account, options=options, index=index)
        for index, raw in enumerate(meta_rules_of(document))
    ]
    seen: dict[str, int] = {}
    for result in results:
        if result.rule is None:
            continue
        count = seen[result.name] = seen.get(result.name, 0) + 1
        if count > 1:
            result.name = result.rule["name"] = f"{result.name[:190]} ({count})"
    return results


def import_rule(
    raw: Any, *, account: MetaAccount, options: ImportOptions | None = None, index: int = 0
) -> Imported:
    """One Meta rule as a format-2 rule document, and what did not map. Never raises."""
    opts = options or ImportOptions()
    if not isinstance(raw, dict):
        problem = Problem("$", shown(raw), "a Meta rule is a JSON object")
        return Imported(index, None, f"#{index}", None, [problem])
    converter = _Converter(raw, account, opts)
    meta_id = raw.get("id") if isinstance(raw.get("id"), str | int) else None
    name = converter.name()
    document = converter.convert()
    result = Imported(index, None if meta_id is None else str(meta_id), name, None)
    result.problems = converter.problems
    if document is not None and not result.errors:
        result.rule = _validated(document, result.problems)
    return result


def _validated(document: dict[str, Any], problems: list[Problem]) -> dict[str, Any] | None:
    """The document if it is a valid rule; otherwise its validation errors as problems."""
    try:
        parse_rule(document)
    except RuleValidationError as exc:
        for error in exc.errors:
            why = f"the converted rule is not valid: {error.message}"
            problems.append(Problem(error.path or "$", "converted rule", why))
        return None
    return document


class _Converter(Report):
    """One rule's conversion; every step records its problems and goes on."""

    def __init__(self, raw: dict[str, Any], account: MetaAccount, options: ImportOptions) -> None:
        super().__init__()
        self.raw = raw
        self.account = account
        self.options = options

    def name(self) -> str:
        raw = self.raw.get("name")
        if isinstance(raw, str) and raw.strip():
            return raw.strip()[:200]
        meta_id = self.raw.get("id")
        return f"Meta rule {meta_id}" if isinstance(meta_id, str | int) else "Meta rule"

    def convert(self) -> dict[str, Any] | None:
        self._try(self._account_of_rule)
        evaluation = self._try(object_at, self.raw.get("evaluation_spec"), "evaluation_spec")
        execution = self._try(object_at, self.raw.get("execution_spec"), "execution_spec")
        if evaluation is None or execution is None:
            return None
        trigger = self._try(self._evaluation_type, evaluation) is None and self._errors()
        filters = self._try(list_at, evaluation.get("filters"), "evaluation_spec.filters") or []
        execution_type = self._try(self._execution_type, execution)
        level = self._try(self._level, filters, execution_type)
        parts = MetaFilters(self, level, account=self.account).read(filters, execution_type)
        action, options = self._action(execution, execution_type, level, parts.preset)
        # a trigger rule has no schedule_spec: its absence is not another problem
        schedule = None if trigger else self._try(self._schedule)
        if self._errors() or level is None or action is None or schedule is None:
            return None
        task: dict[str, Any] = {
            "id": TASK_ID,
            "match": "all",
            "conditions": parts.conditions or [dict(ALWAYS)],
            "action": action,
        }
        task.update(options)
        return {
            "name": self.name(),
            "format": 2,
            "description": self._description(),
            "status": self._status(),
            "level": level,
            "ad_accounts": [self.account.id],
            "filters": parts.filters,
            "schedule": schedule,
            "timezone": self.account.timezone or "UTC",
            "tasks": [task],
        }

    def _errors(self) -> bool:
        return any(p.severity == "error" for p in self.problems)

    def _description(self) -> str:
        meta_id = self.raw.get("id")
        where = f" of {self.account.id}"
        return (
            f"Imported from Meta ad rule {meta_id}{where}"
            if isinstance(meta_id, str | int)
            else f"Imported from a Meta ad rule{where}"
        )

    def _status(self) -> str:
        status = self.raw.get("status")
        if status not in (None, "ENABLED"):
            self.warn("status", status, "the rule is not enabled at Meta: imported PAUSED")
            return "PAUSED"
        return "ACTIVE" if self.options.activate else "PAUSED"

    def _account_of_rule(self) -> None:
        raw = self.raw.get("account_id")
        if raw is None:
            return
        if str(raw).removeprefix("act_") != self.account.id.removeprefix("act_"):
            raise fail(
                "account_id",
                raw,
                f"the rule belongs to another ad account than {self.account.id}; import it"
                " for its own account",
            )

    def _evaluation_type(self, evaluation: dict[str, Any]) -> bool:
        kind = evaluation.get("evaluation_type")
        trigger = evaluation.get("trigger")
        delivery = isinstance(trigger, dict) and trigger.get("type") == "DELIVERY_INSIGHTS_CHANGE"
        if kind == "TRIGGER" and delivery:
            raise fail(
                "evaluation_spec.trigger.type",
                "DELIVERY_INSIGHTS_CHANGE",
                "DELIVERY_INSIGHTS_CHANGE (Meta's SDK of mid-2026) fires when Meta's delivery"
                " insights of an object change — Meta documents no fields for it; and"
                " ruleengine runs rules on a schedule, not on triggers",
            )
        if kind == "TRIGGER":
            raise fail(
                "evaluation_spec.evaluation_type",
                kind,
                "Meta evaluates trigger rules the moment a metric or field changes;"
                " ruleengine runs rules on a schedule (a SEMI_HOURLY schedule is the nearest)",
            )
        if kind != "SCHEDULE":
            raise fail("evaluation_spec.evaluation_type", kind, "not SCHEDULE or TRIGGER")
        if evaluation.get("trigger") is not None:
            raise fail(
                "evaluation_spec.trigger", evaluation["trigger"], "a trigger on a schedule rule"
            )
        return True

    def _execution_type(self, execution: dict[str, Any]) -> str:
        kind = execution.get("execution_type")
        path = "execution_spec.execution_type"
        if execution.get("is_once_off") in (True, "true", 1):
            raise fail(
                "execution_spec.is_once_off",
                True,
                "is_once_off (Meta's SDK of mid-2026) is a flag Meta documents no meaning for"
                " (once per rule? per object?); ruleengine will not guess how many times"
                " the rule may act — set execution_count_limit on the imported rule yourself",
            )
        if not isinstance(kind, str):
            raise fail(path, kind, "missing or not a string")
        if kind in _NOT_OURS:
            raise fail(path, kind, _NOT_OURS[kind])
        if kind not in ("PAUSE", "UNPAUSE", "NOTIFICATION", REBALANCE, *CHANGE_EXECUTIONS):
            raise fail(path, kind, "an action ruleengine does not have")
        return kind

    def _level(self, filters: list[Any], execution_type: str | None) -> str:
        for index, item in enumerate(filters):
            if isinstance(item, dict) and item.get("field") == "entity_type":
                value, path = item.get("value"), f"evaluation_spec.filters[{index}]"
                if item.get("operator") != "EQUAL" or not isinstance(value, str):
                    raise fail(path, item, "entity_type takes EQUAL and one of CAMPAIGN, ADSET, AD")
                if value not in ENTITY_TYPES:
                    raise fail(f"{path}.value", value, "not one of CAMPAIGN, ADSET, AD")
                return ENTITY_TYPES[value]
        if execution_type in CHANGE_EXECUTIONS:
            return CHANGE_EXECUTIONS[execution_type]
        if execution_type == REBALANCE:
            return "adset"
        if self.options.level is not None and self.options.level in ENTITY_TYPES.values():
            return self.options.level
        raise fail(
            "evaluation_spec.filters",
            "no entity_type",
            "Meta takes the level from the ids the rule names; say which (--level campaign,"
            " adset or ad)",
        )

    # ---- execution

    def _action(
        self, execution: dict[str, Any], kind: str | None, level: str | None, preset: str | None
    ) -> tuple[dict[str, Any] | None, dict[str, int]]:
        """The action, and the task's options (``cooldown_minutes``, ``execution_count_limit``)."""
        options = self._try(
            list_at, execution.get("execution_options", []), "execution_spec.execution_options"
        )
        change: tuple[str, dict[str, Any]] | None = None
        task: dict[str, int] = {}
        for index, raw in enumerate(options or []):
            path = f"execution_spec.execution_options[{index}]"
            found = self._try(self._option, raw, path, kind)
            if found is None:
                continue
            name, value = found
            if name in ("change_spec", "rebalance_spec"):
                change = (f"{path}.value", value)
            elif name == "action_frequency":
                if cooldown := self._try(_cooldown, value, f"{path}.value"):
                    task["cooldown_minutes"] = cooldown
            elif limit := self._try(_count_limit, value, f"{path}.value"):
                task["execution_count_limit"] = limit
                self.warn(path, limit, _COUNT_STARTS_AT_ZERO)
        if kind is None:
            return None, task
        if kind in BUDGET_EXECUTIONS:
            return self._try(self._budget, kind, level, change, preset), task
        if kind == BID_EXECUTION:
            return self._try(self._bid, level, change), task
        if kind == REBALANCE:
            return self._try(self._rebalance, level, change, preset), task
        if kind == "NOTIFICATION":
            return {"type": "notify", "webhook": self.options.webhook}, task
        return {"type": "pause" if kind == "PAUSE" else "activate"}, task

    def _option(self, raw: Any, path: str, kind: str | None) -> tuple[str, Any] | None:
        entry = object_at(raw, path)
        name, value = entry.get("field"), entry.get("value")
        if name == "user_ids":
            self.warn(path, value, self._user_ids_reason(kind))
            return None
        if name in ("change_spec", "action_frequency", "execution_count_limit"):
            if name == "execution_count_limit" and kind not in (None, *CHANGE_EXECUTIONS):
                raise fail(
                    f"{path}.field",
                    name,
                    f"Meta takes execution_count_limit with CHANGE_BUDGET and CHANGE_BID only (its"
                    f" execution spec page); what it does with {kind} is not documented",
                )
            return name, value
        if name == "rebalance_spec" and kind == REBALANCE:
            return name, value
        if name == "rebalance_spec" and kind is None:
            return None  # part of an execution type already reported
        raise fail(f"{path}.field", name, "an execution option ruleengine does not have")

    def _user_ids_reason(self, kind: str | None) -> str:
        if kind == "NOTIFICATION":
            return (
                f"Meta notifies these Facebook users; ruleengine posts the message to the"
                f" webhook '{self.options.webhook}' instead"
            )
        return (
            "Meta e-mails these Facebook users what the rule did; ruleengine records every"
            " action (Rule Logs, /api/executions) and sends no e-mail"
        )

    def _budget(
        self,
        kind: str,
        level: str | None,
        change: tuple[str, dict[str, Any]] | None,
        preset: str | None,
    ) -> dict[str, Any]:
        if level is not None and level != BUDGET_EXECUTIONS[kind]:
            raise fail(
                "execution_spec.execution_type",
                kind,
                f"{kind} changes {BUDGET_EXECUTIONS[kind]} budgets, and the rule looks at {level}s",
            )
        if change is None:
            raise fail("execution_spec.execution_options", kind, f"{kind} needs a change_spec")
        path, raw = change
        spec = object_at(raw, path)
        if "target_field" in spec:
            return self._scale(spec, path, preset)
        if spec.get("unit") == "ACCOUNT_CURRENCY":
            raise fail(
                f"{path}.unit",
                spec["unit"],
                "Meta changes the budget by this fixed amount of money; ruleengine changes a"
                " budget by a percentage, sets it or scales it to a target: a change by a fixed"
                " amount has no action",
            )
        amount, bound = self._percent_change(spec, path, "budget")
        action: dict[str, Any] = {
            "type": "increase_budget" if amount > 0 else "decrease_budget",
            "percent": tidy(abs(amount)),
        }
        if bound is not None:
            action["max_budget" if amount > 0 else "min_budget"] = bound
        return action

    def _rebalance(
        self, level: str | None, spec: tuple[str, Any] | None, preset: str | None
    ) -> dict[str, Any]:
        if level != "adset":
            raise fail("execution_spec.execution_type", REBALANCE, "Meta rebalances ad sets")
        if spec is None:
            raise fail("execution_spec.execution_options", REBALANCE, "needs a rebalance_spec")
        return rebalance_from_meta(self, spec[1], spec[0], preset)

    def _bid(self, level: str | None, change: tuple[str, dict[str, Any]] | None) -> dict[str, Any]:
        if level is not None and level != "adset":
            raise fail(
                "execution_spec.execution_type",
                BID_EXECUTION,
                f"CHANGE_BID changes ad set bids, and the rule looks at {level}s",
            )
        if change is None:
            raise fail(
                "execution_spec.execution_options", BID_EXECUTION, "CHANGE_BID needs a change_spec"
            )
        path, raw = change
        spec = object_at(raw, path)
        if "target_field" in spec:
            raise fail(
                f"{path}.target_field",
                spec["target_field"],
                "Meta moves the bid towards a target value of this field; ruleengine's change_bid"
                " changes a bid by a percentage or sets it, with no target (scale_to_target"
                " moves budgets, not bids)",
            )
        if spec.get("unit") == "ACCOUNT_CURRENCY":
            raise fail(
                f"{path}.unit",
                spec["unit"],
                "Meta changes the bid by this fixed amount of money (an increment); ruleengine's"
                " change_bid amount is the new bid itself, so it is not the same",
            )
        amount, bound = self._percent_change(spec, path, "bid")
        action: dict[str, Any] = {
            "type": "change_bid",
            "percent": tidy(abs(amount)),
            "direction": "increase" if amount > 0 else "decrease",
        }
        if bound is not None:
            action["max_bid" if amount > 0 else "min_bid"] = bound
        return action

    def _percent_change(
        self, spec: dict[str, Any], path: str, what: str
    ) -> tuple[float, float | int | None]:
        """A PERCENTAGE change_spec: the signed percent and its limit in currency units (a
        maximum for an increase, a minimum for a decrease), or None."""
        unknown = sorted(set(spec) - {"amount", "unit", "limit"})
        if unknown:
            raise fail(f"{path}.{unknown[0]}", spec[unknown[0]], "not a change_spec field")
        amount = number(spec.get("amount"), f"{path}.amount")
        if spec.get("unit") != "PERCENTAGE":
            raise fail(f"{path}.unit", spec.get("unit"), "not PERCENTAGE or ACCOUNT_CURRENCY")
        if amount == 0:
            raise fail(f"{path}.amount", spec.get("amount"), "a change of 0 % does nothing")
        if "limit" not in spec:
            return amount, None
        limit = number(spec["limit"], f"{path}.limit")
        if limit <= 0:
            raise fail(f"{path}.limit", spec["limit"], f"a {what} limit must be above 0")
        return amount, from_minor(limit, self.account.offset)

    def _scale(self, spec: dict[str, Any], path: str, preset: str | None) -> dict[str, Any]:
        """A budget ``change_spec`` with ``target_field`` → ``scale_to_target``."""
        unknown = sorted(set(spec) - {"amount", "unit", "limit", "target_field"})
        if unknown:
            raise fail(f"{path}.{unknown[0]}", spec[unknown[0]], "not a change_spec field")
        metric, period = directed_metric(
            spec["target_field"],
            f"{path}.target_field",
            preset,
            neither="ruleengine scales a budget by a metric where higher is better or by a cost;"
            " {metric} is neither, so which way 'proportionally' goes is not known",
            no_period="no time_preset: ruleengine reads the target field over the rule's"
            " time_preset",
        )
        target = number(spec.get("amount"), f"{path}.amount")
        if target <= 0:
            raise fail(f"{path}.amount", spec.get("amount"), "a target must be above 0")
        offset = self.account.offset
        action: dict[str, Any] = {
            "type": "scale_to_target",
            "metric": metric,
            "period": period,
            "target": from_minor(target, offset if is_money(metric) else 1),
        }
        if "limit" in spec:
            raw = spec["limit"]
            if not isinstance(raw, list) or len(raw) != 2:
                raise fail(f"{path}.limit", raw, "with target_field, limit is a range [low, high]")
            low, high = (number(raw[i], f"{path}.limit[{i}]") for i in (0, 1))
            if not 0 < low <= high:
                raise fail(f"{path}.limit", raw, "not a range of budgets 0 < low ≤ high")
            action["min_budget"] = from_minor(low, offset)
            action["max_budget"] = from_minor(high, offset)
        self.warn(path, f"target_field {spec['target_field']}", _PROPORTION)
        return action

    # ---- schedule

    def _schedule(self) -> dict[str, Any]:
        if "schedule_spec" not in self.raw:
            raise fail(
                "schedule_spec",
                "absent",
                "the rule came without its schedule_spec (ask for fields=…,schedule_spec)",
            )
        spec = object_at(self.raw["schedule_spec"], "schedule_spec")
        kind = spec.get("schedule_type")
        if kind == "HOURLY":
            return {"mode": "interval", "every_minutes": 60}
        if kind == "SEMI_HOURLY":
            return {"mode": "interval", "every_minutes": 30}
        if kind == "DAILY":
            return self._timetable({day: ["00:00"] for day in WEEKDAYS})
        if kind != "CUSTOM":
            raise fail(
                "schedule_spec.schedule_type", kind, "not DAILY, HOURLY, SEMI_HOURLY or CUSTOM"
            )
        entries = list_at(spec.get("schedule"), "schedule_spec.schedule")
        if not entries:
            raise fail("schedule_spec.schedule", entries, "a CUSTOM schedule needs entries")
        slots: dict[str, set[str]] = {}
        for index, entry in enumerate(entries):
            for day, time in _entry_slots(entry, f"schedule_spec.schedule[{index}]"):
                slots.setdefault(day, set()).add(time)
        return self._timetable({day: sorted(times) for day, times in slots.items()})

    def _timetable(self, slots: dict[str, list[str]]) -> dict[str, Any]:
        if self.account.timezone is None:
            self.warn(
                "schedule_spec",
                "times of day",
                f"Meta runs them in the timezone of {self.account.id}, which is not known:"
                " UTC assumed (register the account, or give --timezone)",
            )
        ordered = {day: slots[day] for day in WEEKDAYS if slots.get(day)}
        return {"mode": "timetable", "slots": ordered}


def _entry_slots(raw: Any, path: str) -> Iterator[tuple[str, str]]:
    """The (weekday, HH:MM) slots of one CUSTOM entry: every half hour of its range."""
    entry = object_at(raw, path)
    unknown = sorted(set(entry) - {"start_minute", "end_minute", "days"})
    if unknown:
        raise fail(f"{path}.{unknown[0]}", entry[unknown[0]], "not a schedule field")
    if "start_minute" not in entry and "days" not in entry:
        raise fail(path, entry, "an entry needs start_minute or days")
    start = _minute(entry.get("start_minute", 0), f"{path}.start_minute")
    if "end_minute" in entry:
        end = _minute(entry["end_minute"], f"{path}.end_minute")
    elif "start_minute" in entry:
        end = start + _STEP  # one run, at start_minute
    else:
        end = _MINUTES_PER_DAY  # days alone: every half hour of the day
    if start >= _MINUTES_PER_DAY or end <= start:
        raise fail(path, entry, "no run time: start_minute must be before end_minute and 1440")
    days = entry.get("days", list(range(7)))
    for index, raw_day in enumerate(list_at(days, f"{path}.days") or [None]):
        day = _DAYS[integer(raw_day, f"{path}.days[{index}]", low=0, high=6)]
        for minute in range(start, min(end, _MINUTES_PER_DAY), _STEP):
            yield day, f"{minute // 60:02d}:{minute % 60:02d}"


def _cooldown(raw: Any, path: str) -> int:
    return integer(raw, path, low=1, high=525_600)


def _count_limit(raw: Any, path: str) -> int:
    low, high = EXECUTION_COUNT_LIMIT
    return integer(raw, path, low=low, high=high)


def _minute(raw: Any, path: str) -> int:
    minute = integer(raw, path, low=0, high=_MINUTES_PER_DAY)
    if minute % _STEP:
        raise fail(path, raw, "Meta's schedule minutes are multiples of 30")
    return minute
