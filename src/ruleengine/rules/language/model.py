"""The rule format: rules, tasks, conditions and filters (actions and schedules have modules
of their own: :mod:`ruleengine.rules.language.action_types`,
:mod:`ruleengine.rules.language.schedule`).

Validation is strict and complete; :func:`parse_rule` turns every problem into a
:class:`~ruleengine.errors.FieldError` carrying the JSON path of the field
(``tasks[0].conditions[1].metric``) and a human message (the wording and the paths are
:mod:`ruleengine.rules.language.validation`'s). Pass ``accounts`` or ``webhooks`` to also check
references against what is registered/configured.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

import orjson
from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from ruleengine.errors import FieldError, RuleValidationError
from ruleengine.rules.advantage import advantage_fields
from ruleengine.rules.basics import (
    RANGE_OPERATORS,
    Level,
    Operator,
    Period,
    RuleModel,
    Status,
    is_account_id,
    timezone_problem,
)
from ruleengine.rules.impact.holdout import Holdout
from ruleengine.rules.language.action_types import (
    ACTION_TYPES,
    ADSET_ACTIONS,
    BUDGET_ACTIONS,
    SCHEDULE_ACTIONS,
    SPEND_LIMIT_ACTIONS,
    Action,
    check_then,
)
from ruleengine.rules.language.approval import Approval
from ruleengine.rules.language.catalog import MetricSpec, Source, UnknownMetricError, resolve_metric
from ruleengine.rules.language.levels import check_ad_action, check_metric_levels, ranking_value
from ruleengine.rules.language.money import (
    CURRENT_FORMAT,
    MIGRATE_HINT,
    MONEY_FIELDS,
    amounts,
    amounts_in,
    currency_problems,
    document_format,
)
from ruleengine.rules.language.per_currency import is_per_currency, per_currency
from ruleengine.rules.language.schedule import DateRange, Schedule
from ruleengine.rules.language.validation import PathError, field_errors

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
# Meta's effective_status values, as its listing edges take them in filtering.
EFFECTIVE_STATUSES = frozenset(
    {
        "ACTIVE",
        "PAUSED",
        "DELETED",
        "PENDING_REVIEW",
        "DISAPPROVED",
        "PREAPPROVED",
        "PENDING_BILLING_INFO",
        "CAMPAIGN_PAUSED",
        "ARCHIVED",
        "ADSET_PAUSED",
        "IN_PROCESS",
        "WITH_ISSUES",
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
    "ad": frozenset(
        {
            "id",
            "name",
            "effective_status",
            "ad.id",
            "ad.name",
            "adset.id",
            "adset.name",
            "campaign.id",
            "campaign.name",
        }
    ),
}


# ---------------------------------------------------------------- conditions


def _check_metric(name: str) -> str:
    try:
        resolve_metric(name)
    except UnknownMetricError as exc:
        raise ValueError(str(exc)) from None
    return name


class _MetricRef(RuleModel):
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


def _range_bound(raw: Any, where: str) -> float:
    # bool is an int to Python, and "5" a number to pydantic's lax mode: a bound is a number
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise PathError(where, f"a range bound must be a number, not {raw!r:.40}")
    if not math.isfinite(raw):
        raise PathError(where, "a range bound must be a finite number")
    return float(raw)


def _range_value(raw: Any, operator: str) -> list[float]:
    """``[low, high]`` of a range operator, checked: two finite numbers, low ≤ high."""
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise ValueError(f"operator {operator} takes [low, high], two numbers, e.g. [100, 200]")
    low, high = _range_bound(raw[0], "[0]"), _range_bound(raw[1], "[1]")
    if low > high:
        raise ValueError(f"low {low:g} > high {high:g}; write [low, high] with low ≤ high")
    return [low, high]


_NUMBER: TypeAdapter[float] = TypeAdapter(Annotated[float, Field(allow_inf_nan=False)])


def _plain_value(raw: Any, operator: str | None) -> float | list[float] | None:
    """A condition's number, or ``[low, high]`` for a range operator."""
    if operator in RANGE_OPERATORS:
        return _range_value(raw, operator)
    if isinstance(raw, list | tuple):
        if operator is None:
            return None  # the operator's own error says what is wrong
        raise ValueError(
            f"operator {operator} takes one number; IN_RANGE and NOT_IN_RANGE take [low, high]"
        )
    try:
        return _NUMBER.validate_python(raw)
    except ValidationError as exc:  # one message, not one per member of the union
        raise ValueError(str(exc.errors()[0]["msg"])) from None


class Condition(_MetricRef):
    """One test: ``metric(period) <operator> value`` or ``… <operator> compare_to``.

    ``IN_RANGE`` / ``NOT_IN_RANGE`` take ``value: [low, high]`` (ends included, as Meta's
    Ad Rules operators of the same names) and no ``compare_to``. On a money metric the value
    may be given per currency (``{"USD": 20, "JPY": 3000}``;
    :mod:`ruleengine.rules.language.per_currency`).
    """

    period: Period | None = None
    operator: Operator
    #: A number; ``[low, high]`` for the range operators; a ranking's label for a ranking;
    #: either of the first two per currency on a money metric.
    value: float | list[float] | str | dict[str, float] | dict[str, list[float]] | None = None
    compare_to: CompareTo | None = None

    @property
    def compare_period(self) -> Period | None:
        """The period of the comparator metric (defaults to the condition's own)."""
        return self.compare_to.period or self.period if self.compare_to else None

    @property
    def bounds(self) -> tuple[float, float] | None:
        """``(low, high)`` of a range operator, None for the others."""
        if isinstance(self.value, list):
            return self.value[0], self.value[1]
        return None

    @field_validator("value", mode="wrap")
    @classmethod
    def _value_shape(
        cls, raw: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        operator = info.data.get("operator")  # absent when the operator itself is wrong
        if raw is None:
            return None
        metric = info.data.get("metric")
        if isinstance(raw, dict) and (operator not in RANGE_OPERATORS or is_per_currency(raw)):
            if metric is None:
                return None  # the metric's own error says what is wrong
            if not resolve_metric(metric).money:
                raise ValueError(
                    f"{metric} is not an amount of money: give one value, not one per currency"
                )
            return per_currency(raw, lambda one: _plain_value(one, operator))
        if metric is not None and resolve_metric(metric).ranking:
            return ranking_value(raw, metric, operator)
        return _plain_value(raw, operator)

    @model_validator(mode="after")
    def _complete(self) -> Condition:
        if self.operator in RANGE_OPERATORS:
            if self.compare_to is not None:
                raise PathError(
                    "compare_to",
                    f"operator {self.operator} compares with a fixed [low, high] 'value';"
                    " compare_to is not allowed with it",
                )
            if self.value is None:
                raise PathError("value", f"required: operator {self.operator} takes [low, high]")
        elif (self.value is None) == (self.compare_to is None):
            raise ValueError("give exactly one of 'value' (a number) or 'compare_to' (a metric)")
        if self.spec.ranking and self.compare_to is not None:
            raise PathError(
                "compare_to", f"{self.metric} is compared with a label such as 'AVERAGE'"
            )
        if self.compare_to is not None and self.compare_to.spec.ranking:
            raise PathError(
                "compare_to.metric",
                f"{self.compare_to.metric} is a label, not a number: compare it with a value",
            )
        if self.spec.needs_period and self.period is None:
            raise PathError("period", f"required for the Insights metric '{self.metric}'")
        if self.compare_to and self.compare_to.spec.needs_period and self.compare_period is None:
            raise PathError(
                "compare_to.period", f"required for the Insights metric '{self.compare_to.metric}'"
            )
        return self


# ---------------------------------------------------------------- tasks and rules


class Task(RuleModel):
    """Conditions folded with ``match`` (all = AND, any = OR) and one action."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    match: Literal["all", "any"] = "all"
    conditions: list[Condition] = Field(min_length=1, max_length=50)
    action: Action
    cooldown_minutes: int = Field(default=0, ge=0, le=525_600)
    #: The most times this task may change one entity, ever (Meta's ``execution_count_limit``):
    #: counted from the intents it recorded, across rule versions and restarts.
    execution_count_limit: int | None = Field(default=None, ge=1, le=1_000_000)
    #: "hold": once this entity's field oscillates, stop changing it until the hold is cleared.
    on_oscillation: Literal["hold"] | None = None
    #: Skip budget changes while Meta says the ad set is LEARNING (``in_learning_phase``),
    #: or with ``max_change_pct_while_learning`` limit them to that percentage.
    respect_learning_phase: bool = False
    max_change_pct_while_learning: float | None = Field(default=None, gt=0, le=100)
    #: Planned changes wait for a person's approval (see :class:`Approval`).
    approval: Approval | None = None
    #: A share of the matched entities left unchanged to measure the task (docs/impact.md).
    holdout: Holdout | None = None

    @field_validator("action")
    @classmethod
    def _then(cls, action: Any) -> Any:
        check_then(action)
        return action

    @model_validator(mode="after")
    def _learning_phase(self) -> Task:
        if self.max_change_pct_while_learning is not None and not self.respect_learning_phase:
            raise PathError(
                "max_change_pct_while_learning",
                'limits budget changes while learning only with "respect_learning_phase": true',
            )
        if self.respect_learning_phase and self.action.type not in BUDGET_ACTIONS:
            raise PathError(
                "respect_learning_phase",
                f"only budget actions ({', '.join(sorted(BUDGET_ACTIONS))}) respect the learning"
                f" phase; this task's action is '{self.action.type}'",
            )
        approval = self.approval
        money = BUDGET_ACTIONS | SPEND_LIMIT_ACTIONS | SCHEDULE_ACTIONS
        if approval is not None and approval.on_budget and self.action.type not in money:
            raise PathError(
                "approval.when",
                f"only budget actions ({', '.join(sorted(money))}) change a budget;"
                f' this task\'s action is \'{self.action.type}\': use "when": "always"',
            )
        if self.holdout is not None and self.action.type == "rebalance_budget":
            raise PathError(
                "holdout",
                "a rebalance moves budget between the entities of one run, its total kept: an"
                " entity held out of it would change what the others receive, so it cannot be"
                " measured against a holdout",
            )
        if self.approval is not None and self.action.type == "rebalance_budget":
            raise PathError(
                "approval",
                "a rebalance moves budget between the entities of one run at once; it is not"
                " approved entity by entity (preview it with a dry run instead)",
            )
        if self.approval is not None and self.action.type in ("notify", "duplicate"):
            raise PathError(
                "approval",
                f"'{self.action.type}' has no before and after to approve; approvals gate"
                " status, budget, bid and name changes",
            )
        return self


class Filter(RuleModel):
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


#: Optional fields the versioned definition leaves out while unset (see Rule.definition).
UNSET_LEFT_OUT: dict[str, tuple[str, ...]] = {
    "rule": ("change_budget",),
    "task": (
        "on_oscillation",
        "respect_learning_phase",
        "max_change_pct_while_learning",
        "approval",
        "holdout",
    ),
}


class ChangeBudget(RuleModel):
    """A rule's own limits over every rule's changes of one entity in 24 h (overriding the
    settings of the same names; see docs/rules.md "Rules that fight")."""

    max_daily_budget_change_pct: float | None = Field(default=None, gt=0, le=10_000)
    max_status_changes_per_day: int | None = Field(default=None, ge=1, le=1000)


class CustomMetricsSheet(RuleModel):
    """The Google Sheet that holds ``custom:<name>`` values, keyed by entity id or name."""

    spreadsheet_id: str = Field(min_length=1)
    worksheet: str | None = None
    key: Literal["id", "name"] = "id"


class Rule(RuleModel):
    """A rule: which entities, when, and what to do when conditions pass."""

    name: str = Field(min_length=1, max_length=200)
    # 1: the old format, action budgets in minor units; 2: every amount in currency units
    format: Literal[1, 2] = 1
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
    change_budget: ChangeBudget | None = None

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
        known: Mapping[str, str] | None = (info.context or {}).get("accounts")
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
            hooks = [(f"action.{w}", h) for w, h in _webhooks_of(task.action)]
            for where, hook in hooks + _approval_hook(task):
                if webhooks is not None and hook not in webhooks:
                    raise PathError(
                        f"[{t_index}].{where}",
                        f"webhook '{hook}' is not configured; add it to RULEENGINE_WEBHOOKS"
                        f" (configured: {sorted(webhooks) or 'none'})",
                    )
        return tasks

    @model_validator(mode="after")
    def _whole_minor_units(self) -> Rule:
        if self.format == 1:
            for t_index, task in enumerate(self.tasks):
                for name in MONEY_FIELDS.get(task.action.type, ()):
                    value = getattr(task.action, name)
                    if isinstance(value, dict):
                        raise PathError(
                            f"tasks[{t_index}].action.{name}",
                            f'amounts per currency need "format": {CURRENT_FORMAT}',
                        )
                    if isinstance(value, float) and not value.is_integer():
                        raise PathError(
                            f"tasks[{t_index}].action.{name}",
                            f'{value:g}: a rule without "format": 2 names budgets in whole'
                            ' minor units (cents); write "format": 2 and currency units'
                            " (500.5 = $500.50) instead",
                        )
        return self

    @field_validator("tasks")
    @classmethod
    def _action_levels(cls, tasks: list[Task], info: ValidationInfo) -> list[Task]:
        level = info.data.get("level")
        for index, task in enumerate(tasks):
            if task.respect_learning_phase and level not in (None, "adset"):
                raise PathError(
                    f"[{index}].respect_learning_phase",
                    "Meta reports the learning phase (learning_stage_info) on ad sets only;"
                    f' it needs "level": "adset", not "{level}"',
                )
            if task.action.type in ADSET_ACTIONS and level not in (None, "adset"):
                raise PathError(
                    f"[{index}].action.type",
                    f"'{task.action.type}' changes an ad set's bid_amount;"
                    f' it needs "level": "adset", not "{level}"',
                )
            if level == "ad":
                check_ad_action(task.action, f"[{index}].action")
            for c_index, condition in enumerate(task.conditions):
                sides = [("metric", condition.spec)]
                if condition.compare_to is not None:
                    sides.append(("compare_to.metric", condition.compare_to.spec))
                if level is not None:  # absent when the level itself is wrong
                    check_metric_levels(sides, str(level), f"[{index}].conditions[{c_index}]")
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
        if any(s.source is Source.DERIVED for s in self.metric_specs()):
            wanted.add("daily_budget")
        if self.level == "adset":
            fields.append("campaign_id")
        elif self.level == "ad":
            fields += ["adset_id", "campaign_id"]
        fields += advantage_fields(self.level)  # legacy Advantage+ refuse most actions
        return fields + sorted(wanted - set(fields))

    def definition(self) -> dict[str, Any]:
        """The versioned definition: everything except the operational ``status``.

        A format-1 definition leaves ``format`` out, as every version stored before
        formats existed does, so its checksum and an identical re-save stay the same.
        """
        exclude = {"status"} if self.format != 1 else {"status", "format"}
        definition = self.model_dump(mode="json", exclude=exclude)
        # Optional fields added after rules were stored are left out while unset, so a
        # definition stored before them keeps its checksum and an identical re-save is one.
        for parent, names in [(definition, UNSET_LEFT_OUT["rule"])] + [
            (task, UNSET_LEFT_OUT["task"]) for task in definition["tasks"]
        ]:
            for name in names:
                if parent.get(name) is None or parent.get(name) is False:
                    parent.pop(name, None)
        return definition

    def checksum(self) -> str:
        """sha256 of the canonical JSON of :meth:`definition`."""
        return definition_checksum(self.definition())

    def zone(self) -> ZoneInfo:
        """The rule's timezone."""
        return ZoneInfo(self.timezone)

    def in_currency(self, currency: str) -> Rule:
        """The rule as it runs on an ad account in ``currency``: every amount given per
        currency replaced by that currency's (the worker, the preview, the backtest's replay
        and the export to Meta call it once per account; this rule when it has none).

        Raises:
            NoAmountForCurrency: an amount is given per currency, but not in ``currency``.
        """
        data = self.model_dump(mode="json")
        if not any(isinstance(place.value, dict) for place in amounts(data)):
            return self
        return Rule.model_validate(amounts_in(data, currency))


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


def _approval_hook(task: Task) -> list[tuple[str, str]]:
    if task.approval is not None and task.approval.webhook is not None:
        return [("approval.webhook", task.approval.webhook)]
    return []


def approval_webhook(rule: Rule, task: Task) -> str | None:
    """Where a proposal of ``task`` is announced: its approval's webhook, else the first
    webhook the rule's tasks name (a notify action, a notify follow-up), else none."""
    if task.approval is not None and task.approval.webhook is not None:
        return task.approval.webhook
    for candidate in [task, *rule.tasks]:
        for _where, hook in _webhooks_of(candidate.action):
            return hook
    return None


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
    accounts: Mapping[str, str] | None = None,
    webhooks: set[str] | None = None,
    new: bool = False,
) -> Rule:
    """Validate ``data`` (a dict or JSON bytes/str) into a :class:`Rule`.

    ``accounts``: the registered ad accounts and their currencies (id → ``USD``): the rule
    may name only these, and its amounts must say what they mean on each
    (:func:`~ruleengine.rules.language.money.currency_problems`: per currency where the rule's
    accounts differ in currency). ``new``: ``data`` is a rule being saved (API, CLI), which
    must be of the current format (``"format": 2``); stored format-1 rules still parse
    without it.

    Raises:
        RuleValidationError: listing every problem with its JSON path.
    """
    context = {"accounts": accounts, "webhooks": webhooks}
    errors: list[FieldError] = []
    try:
        if isinstance(data, str | bytes):
            rule = Rule.model_validate_json(data, context=context)
        else:
            rule = Rule.model_validate(data, context=context)
    except ValidationError as exc:
        errors = rule_errors(exc)
        declared = document_format(data)
    else:
        declared = rule.format
        if accounts is not None:
            errors = currency_problems(rule.model_dump(mode="json"), accounts)
    if new and declared == 1:
        errors.insert(0, old_format_error())
    if errors:
        raise RuleValidationError(errors)
    return rule


def old_format_error() -> FieldError:
    """The error of a format-1 document where only the current format is taken."""
    return FieldError(
        "format",
        f'required: "format": {CURRENT_FORMAT}, every amount in the account currency\'s units'
        ' ("max_budget": 500 is $500.00 or ¥500). A document without it is the old format 1,'
        f" whose action budgets are minor units (cents): {MIGRATE_HINT}",
    )


def rule_json_schema() -> dict[str, Any]:
    """The JSON Schema of a rule document."""
    return Rule.model_json_schema()
