"""The rule format: pydantic models for rules, tasks, conditions, actions and schedules.

Validation is strict and complete; :func:`parse_rule` turns every problem into a
:class:`~ruleengine.errors.FieldError` carrying the JSON path of the field
(``tasks[0].conditions[1].metric``) and a human message (the wording and the paths are
:mod:`ruleengine.rules.validation`'s). Pass ``accounts`` or ``webhooks`` to also check
references against what is registered/configured.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date, time
from typing import Annotated, Any, Final, Literal
from zoneinfo import ZoneInfo

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ruleengine.errors import FieldError, RuleValidationError
from ruleengine.rules.catalog import MetricSpec, Source, UnknownMetricError, resolve_metric
from ruleengine.rules.template import check_template
from ruleengine.rules.validation import PathError, field_errors

Level = Literal["campaign", "adset"]
Status = Literal["ACTIVE", "PAUSED"]
Operator = Literal[">", ">=", "<", "<=", "==", "!="]
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
Period = Literal[
    "today",
    "yesterday",
    "last_3d",
    "last_7d",
    "last_14d",
    "last_28d",
    "last_30d",
    "last_90d",
    "this_month",
    "last_month",
    "this_week_mon_today",
    "maximum",
]
FilterOperator = Literal[
    "EQUAL",
    "NOT_EQUAL",
    "GREATER_THAN",
    "GREATER_THAN_OR_EQUAL",
    "LESS_THAN",
    "LESS_THAN_OR_EQUAL",
    "IN",
    "NOT_IN",
    "CONTAIN",
    "NOT_CONTAIN",
]
EFFECTIVE_STATUSES = frozenset(
    {
        "ACTIVE",
        "PAUSED",
        "DELETED",
        "ARCHIVED",
        "IN_PROCESS",
        "WITH_ISSUES",
        "CAMPAIGN_PAUSED",
        "ADSET_PAUSED",
        "PENDING_REVIEW",
        "DISAPPROVED",
    }
)
# Fields Meta accepts in ``filtering`` for each listing edge.
FILTER_FIELDS: dict[str, frozenset[str]] = {
    "campaign": frozenset(
        {"id", "name", "effective_status", "objective", "campaign.id", "campaign.name"}
    ),
    "adset": frozenset(
        {
            "id",
            "name",
            "effective_status",
            "adset.id",
            "adset.name",
            "campaign.id",
            "campaign.name",
            "campaign.objective",
        }
    ),
}
RENAME_PLACEHOLDERS = frozenset({"name", "date", "rule"})
NOTIFY_PLACEHOLDERS = frozenset(
    {
        "rule",
        "task",
        "level",
        "account",
        "entity_id",
        "entity_name",
        "action",
        "before",
        "after",
        "conditions",
        "date",
        "time",
    }
)
# Patterns are used with fullmatch and ASCII digits: "$" also matches before a trailing
# newline, and "\d" matches any script's digits ("०८:३०"), which int() then accepts.
_HHMM = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")
ACCOUNT_ID = re.compile(r"act_[0-9]{1,30}")

# The largest budget a rule may name, in minor units: 10^12 is ten billion in a two-decimal
# currency (and a trillion rupiah), far above any real daily budget and well inside BSON's
# int64, so a typo is refused instead of reaching Meta or MongoDB.
MAX_BUDGET: Final = 10**12
# Dates a date_range may hold: any timezone's midnight of these is a valid UTC instant.
FIRST_DATE: Final = date(2000, 1, 1)
LAST_DATE: Final = date(2999, 12, 31)
MAX_TIMEZONE_LENGTH: Final = 255


class _Model(BaseModel):
    # NaN and infinities ("NaN", "Infinity" as strings) compare false with everything and
    # serialise as null: refuse them rather than store a rule that silently never matches.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def timezone_problem(value: str) -> str | None:
    """Why ``value`` is not a usable IANA timezone, or None when it is."""
    problem = f"unknown timezone '{value[:60]}'; use an IANA name such as 'Asia/Jakarta'"
    if not value or len(value) > MAX_TIMEZONE_LENGTH:
        return problem
    try:
        ZoneInfo(value)
    # zoneinfo reads a file named by the key: a directory, a data file that is not TZif,
    # a name too long for the filesystem each fail differently (OSError, ValueError, …).
    except Exception:
        return problem
    return None


def is_account_id(value: str) -> bool:
    """True for an ad account id such as ``act_123``."""
    return ACCOUNT_ID.fullmatch(value) is not None


def parse_hhmm(value: str) -> time:
    """``"08:30"`` → ``time(8, 30)``."""
    if not _HHMM.fullmatch(value):
        raise ValueError(
            f"'{value}' is not a time of day; write HH:MM in 24-hour form, e.g. '08:30'"
        )
    hour, minute = value.split(":")
    return time(int(hour), int(minute))


# ---------------------------------------------------------------- schedules


class IntervalSchedule(_Model):
    """Run every ``every_minutes``, measured from the previous *scheduled* time (no drift)."""

    mode: Literal["interval"]
    every_minutes: int = Field(ge=1, le=525_600)


class TimetableSchedule(_Model):
    """Run at fixed local times on a 7-day grid, e.g. ``{"mon": ["08:00", "12:30"]}``."""

    mode: Literal["timetable"]
    slots: dict[Weekday, list[str]]

    @field_validator("slots")
    @classmethod
    def _check_slots(cls, slots: dict[Weekday, list[str]]) -> dict[Weekday, list[str]]:
        for day, times in slots.items():
            for index, value in enumerate(times):
                try:
                    parse_hhmm(value)
                except ValueError as exc:
                    raise PathError(f"{day}[{index}]", str(exc)) from None
        if not any(slots.values()):
            raise ValueError('a timetable needs at least one slot, e.g. {"mon": ["08:00"]}')
        return {day: sorted(set(slots[day])) for day in WEEKDAYS if slots.get(day)}


Schedule = Annotated[IntervalSchedule | TimetableSchedule, Field(discriminator="mode")]


class DateRange(_Model):
    """Inclusive dates, in the rule's timezone, outside which the rule is not dispatched."""

    start: date | None = None
    end: date | None = None

    @field_validator("start", "end")
    @classmethod
    def _bounded(cls, value: date | None) -> date | None:
        if value is not None and not FIRST_DATE <= value <= LAST_DATE:
            raise ValueError(
                f"{value} is out of range; use a date between {FIRST_DATE} and {LAST_DATE}"
            )
        return value

    @model_validator(mode="after")
    def _ordered(self) -> DateRange:
        if self.start and self.end and self.end < self.start:
            raise PathError("end", f"end {self.end} is before start {self.start}")
        return self


# ---------------------------------------------------------------- conditions


def _check_metric(name: str) -> str:
    try:
        resolve_metric(name)
    except UnknownMetricError as exc:
        raise ValueError(str(exc)) from None
    return name


class _MetricRef(_Model):
    """Something that names a metric of the catalogue."""

    metric: str

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        return _check_metric(value)

    @property
    def spec(self) -> MetricSpec:
        """The catalogue entry of the metric."""
        return resolve_metric(self.metric)


class CompareTo(_MetricRef):
    """The right-hand side of a metric-vs-metric condition: ``multiplier × metric(period)``."""

    period: Period | None = None
    multiplier: float = Field(default=1.0, gt=0)


class Condition(_MetricRef):
    """One test: ``metric(period) <operator> value`` or ``… <operator> compare_to``."""

    period: Period | None = None
    operator: Operator
    value: float | None = None
    compare_to: CompareTo | None = None

    @property
    def compare_period(self) -> Period | None:
        """The period of the comparator metric (defaults to the condition's own)."""
        return self.compare_to.period or self.period if self.compare_to else None

    @model_validator(mode="after")
    def _complete(self) -> Condition:
        if (self.value is None) == (self.compare_to is None):
            raise ValueError("give exactly one of 'value' (a number) or 'compare_to' (a metric)")
        if self.spec.needs_period and self.period is None:
            raise PathError("period", f"required for the Insights metric '{self.metric}'")
        if self.compare_to and self.compare_to.spec.needs_period and self.compare_period is None:
            raise PathError(
                "compare_to.period", f"required for the Insights metric '{self.compare_to.metric}'"
            )
        return self


# ---------------------------------------------------------------- actions and follow-ups

FollowUpDo = Literal["activate", "pause", "restore_budget", "restore_name", "notify"]


class FollowUp(_Model):
    """``then``: a delayed second step, e.g. pause now and re-activate in 2 hours."""

    after_minutes: int | None = Field(default=None, ge=1, le=10_080)
    at_time: str | None = None
    do: FollowUpDo
    webhook: str | None = None
    template: str | None = None

    @field_validator("at_time")
    @classmethod
    def _hhmm(cls, value: str | None) -> str | None:
        if value is not None:
            parse_hhmm(value)
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        return None if value is None else check_template(value, NOTIFY_PLACEHOLDERS)

    @model_validator(mode="after")
    def _when(self) -> FollowUp:
        if (self.after_minutes is None) == (self.at_time is None):
            raise ValueError("give exactly one of 'after_minutes' or 'at_time' (HH:MM)")
        if self.do == "notify" and not self.webhook:
            raise PathError("webhook", "required when 'do' is 'notify'")
        return self


class _Action(_Model):
    then: FollowUp | None = None


class StatusAction(_Action):
    """Set the entity's status."""

    type: Literal["pause", "activate"]


class PercentBudgetAction(_Action):
    """Change the live daily budget by a percentage, clamped to ``min_budget``/``max_budget``."""

    type: Literal["increase_budget", "decrease_budget"]
    percent: float = Field(gt=0, le=1000)
    max_budget: int | None = Field(
        default=None, gt=0, le=MAX_BUDGET, description="minor units (cents)"
    )
    min_budget: int | None = Field(
        default=None, gt=0, le=MAX_BUDGET, description="minor units (cents)"
    )

    @model_validator(mode="after")
    def _bounds(self) -> PercentBudgetAction:
        if self.type == "decrease_budget" and self.percent >= 100:
            raise PathError("percent", "a decrease must be below 100 %; use 'pause' to stop spend")
        if self.min_budget and self.max_budget and self.min_budget > self.max_budget:
            raise PathError(
                "min_budget", f"min_budget {self.min_budget} > max_budget {self.max_budget}"
            )
        return self


class SetBudgetAction(_Action):
    """Set the daily budget to an absolute amount (minor units)."""

    type: Literal["set_budget"]
    amount: int = Field(gt=0, le=MAX_BUDGET, description="minor units (cents)")


class RenameAction(_Action):
    """Rename from a template with ``{name}``, ``{date}``, ``{rule}``."""

    type: Literal["rename"]
    template: str = Field(min_length=1, max_length=400)

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, RENAME_PLACEHOLDERS)


class NameTextAction(_Action):
    """Append or prepend a text to the live name, never twice."""

    type: Literal["append_to_name", "prepend_to_name"]
    text: str = Field(min_length=1, max_length=200)


class DuplicateAction(_Action):
    """Copy the entity through ``POST /{id}/copies``."""

    type: Literal["duplicate"]
    status_option: Literal["ACTIVE", "PAUSED", "INHERITED_FROM_SOURCE"] = "PAUSED"
    rename_suffix: str = " - Copy"
    deep_copy: bool = False


class NotifyAction(_Action):
    """Post a rendered message to a webhook named in the settings."""

    type: Literal["notify"]
    webhook: str = Field(min_length=1)
    template: str = Field(
        default="{rule}: {action} on {entity_name} ({entity_id}) — {conditions}",
        min_length=1,
        max_length=4000,
    )

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, NOTIFY_PLACEHOLDERS)


Action = Annotated[
    StatusAction
    | PercentBudgetAction
    | SetBudgetAction
    | RenameAction
    | NameTextAction
    | DuplicateAction
    | NotifyAction,
    Field(discriminator="type"),
]
ACTION_TYPES = (
    "pause",
    "activate",
    "increase_budget",
    "decrease_budget",
    "set_budget",
    "rename",
    "append_to_name",
    "prepend_to_name",
    "duplicate",
    "notify",
)
BUDGET_ACTIONS = frozenset({"increase_budget", "decrease_budget", "set_budget"})
NAME_ACTIONS = frozenset({"rename", "append_to_name", "prepend_to_name"})


def _check_then(action: Any) -> None:
    then: FollowUp | None = action.then
    if then is None:
        return
    if then.do == "restore_budget" and action.type not in BUDGET_ACTIONS:
        raise PathError("then.do", "'restore_budget' follows a budget action only")
    if then.do == "restore_name" and action.type not in NAME_ACTIONS:
        raise PathError("then.do", "'restore_name' follows a rename/append/prepend action only")
    if then.do in ("activate", "pause") and action.type in ("notify", "duplicate"):
        raise PathError("then.do", f"'{then.do}' cannot follow '{action.type}'")


# ---------------------------------------------------------------- tasks and rules


class Task(_Model):
    """Conditions folded with ``match`` (all = AND, any = OR) and one action."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    match: Literal["all", "any"] = "all"
    conditions: list[Condition] = Field(min_length=1, max_length=50)
    action: Action
    cooldown_minutes: int = Field(default=0, ge=0, le=525_600)

    @field_validator("action")
    @classmethod
    def _then(cls, action: Any) -> Any:
        _check_then(action)
        return action


class Filter(_Model):
    """One entry of Meta's ``filtering`` parameter."""

    field: str
    operator: FilterOperator
    value: str | float | list[str | float]

    @model_validator(mode="after")
    def _shape(self) -> Filter:
        wants_list = self.operator in ("IN", "NOT_IN")
        if wants_list != isinstance(self.value, list):
            kind = "a list" if wants_list else "a single value"
            raise PathError("value", f"operator {self.operator} takes {kind}")
        if self.field == "effective_status":
            values = self.value if isinstance(self.value, list) else [self.value]
            for index, value in enumerate(values):
                if value not in EFFECTIVE_STATUSES:
                    where = f"value[{index}]" if isinstance(self.value, list) else "value"
                    known = ", ".join(sorted(EFFECTIVE_STATUSES))
                    raise PathError(where, f"unknown effective_status '{value}' (one of {known})")
        return self


class CustomMetricsSheet(_Model):
    """The Google Sheet that holds ``custom:<name>`` values, keyed by entity id or name."""

    spreadsheet_id: str = Field(min_length=1)
    worksheet: str | None = None
    key: Literal["id", "name"] = "id"


class Rule(_Model):
    """A rule: which entities, when, and what to do when conditions pass."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    status: Status = "ACTIVE"
    level: Level
    ad_accounts: list[str] = Field(min_length=1, max_length=200)
    filters: list[Filter] = Field(default_factory=list, max_length=20)
    schedule: Schedule
    date_range: DateRange | None = None
    timezone: str = "UTC"
    custom_metrics: CustomMetricsSheet | None = None
    tasks: list[Task] = Field(min_length=1, max_length=20)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        problem = timezone_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("ad_accounts")
    @classmethod
    def _accounts(cls, values: list[str], info: ValidationInfo) -> list[str]:
        known: set[str] | None = (info.context or {}).get("accounts")
        seen: set[str] = set()
        for index, value in enumerate(values):
            if not is_account_id(value):
                raise PathError(f"[{index}]", f"'{value}' is not an ad account id like 'act_123'")
            if value in seen:
                raise PathError(f"[{index}]", f"'{value}' is listed twice")
            if known is not None and value not in known:
                raise PathError(
                    f"[{index}]",
                    f"ad account '{value}' is not registered; add it with"
                    f" 'ruleengine accounts add {value}'",
                )
            seen.add(value)
        return values

    @field_validator("filters")
    @classmethod
    def _filters(cls, filters: list[Filter], info: ValidationInfo) -> list[Filter]:
        level = info.data.get("level")
        if level is None:
            return filters
        allowed = FILTER_FIELDS[level]
        for index, item in enumerate(filters):
            if item.field not in allowed:
                raise PathError(
                    f"[{index}].field",
                    f"'{item.field}' cannot filter {level}s; use one of {sorted(allowed)}",
                )
        return filters

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, tasks: list[Task], info: ValidationInfo) -> list[Task]:
        seen: set[str] = set()
        webhooks: set[str] | None = (info.context or {}).get("webhooks")
        has_sheet = info.data.get("custom_metrics") is not None
        for t_index, task in enumerate(tasks):
            if task.id in seen:
                raise PathError(f"[{t_index}].id", f"task id '{task.id}' is used twice")
            seen.add(task.id)
            for c_index, condition in enumerate(task.conditions):
                if not has_sheet and _uses_custom(condition):
                    raise PathError(
                        f"[{t_index}].conditions[{c_index}].metric",
                        "custom metrics need the rule's 'custom_metrics' sheet"
                        ' ({"spreadsheet_id": ...})',
                    )
            for where, hook in _webhooks_of(task.action):
                if webhooks is not None and hook not in webhooks:
                    raise PathError(
                        f"[{t_index}].action.{where}",
                        f"webhook '{hook}' is not configured; add it to RULEENGINE_WEBHOOKS"
                        f" (configured: {sorted(webhooks) or 'none'})",
                    )
        return tasks

    # ---- derived views

    def metric_specs(self) -> list[MetricSpec]:
        """Every metric any condition of any task refers to (comparators included)."""
        specs: list[MetricSpec] = []
        for task in self.tasks:
            for condition in task.conditions:
                specs.append(condition.spec)
                if condition.compare_to:
                    specs.append(condition.compare_to.spec)
        return specs

    def filtering(self) -> list[dict[str, Any]]:
        """The filters as Meta's ``filtering`` parameter."""
        return [f.model_dump(mode="json") for f in self.filters]

    def entity_fields(self) -> list[str]:
        """Object fields the entity listing must ask for (budgets only when referenced)."""
        fields = ["id", "name", "created_time", "effective_status", "status"]
        wanted = {s.field for s in self.metric_specs() if s.source is Source.ENTITY and s.field}
        if any(s.name == "budget_spent_pct" for s in self.metric_specs()):
            wanted.add("daily_budget")
        if self.level == "adset":
            fields.append("campaign_id")
        return fields + sorted(wanted - set(fields))

    def definition(self) -> dict[str, Any]:
        """The versioned definition: everything except the operational ``status``."""
        return self.model_dump(mode="json", exclude={"status"})

    def checksum(self) -> str:
        """sha256 of the canonical JSON of :meth:`definition`."""
        return definition_checksum(self.definition())

    def zone(self) -> ZoneInfo:
        """The rule's timezone."""
        return ZoneInfo(self.timezone)


def _uses_custom(condition: Condition) -> bool:
    metrics = [condition.spec] + ([condition.compare_to.spec] if condition.compare_to else [])
    return any(m.source is Source.CUSTOM for m in metrics)


def _webhooks_of(action: Any) -> list[tuple[str, str]]:
    hooks: list[tuple[str, str]] = []
    if action.type == "notify":
        hooks.append(("webhook", action.webhook))
    if action.then is not None and action.then.webhook:
        hooks.append(("then.webhook", action.then.webhook))
    return hooks


def definition_checksum(definition: dict[str, Any]) -> str:
    """sha256 hex of ``definition`` serialised with sorted keys."""
    canonical = orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


# The union members pydantic names in an error's location, which users never wrote.
_UNION_TAGS = {
    "action": frozenset(ACTION_TYPES),
    "schedule": frozenset({"interval", "timetable"}),
}


def rule_errors(exc: ValidationError) -> list[FieldError]:
    """The problems of a rule that failed validation, as JSON paths and messages."""
    return field_errors(exc, union_tags=_UNION_TAGS)


def parse_rule(
    data: Any,
    *,
    accounts: set[str] | None = None,
    webhooks: set[str] | None = None,
) -> Rule:
    """Validate ``data`` (a dict or JSON bytes/str) into a :class:`Rule`.

    Raises:
        RuleValidationError: listing every problem with its JSON path.
    """
    context = {"accounts": accounts, "webhooks": webhooks}
    try:
        if isinstance(data, str | bytes):
            return Rule.model_validate_json(data, context=context)
        return Rule.model_validate(data, context=context)
    except ValidationError as exc:
        raise RuleValidationError(rule_errors(exc)) from None


def rule_json_schema() -> dict[str, Any]:
    """The JSON Schema of a rule document."""
    return Rule.model_json_schema()
