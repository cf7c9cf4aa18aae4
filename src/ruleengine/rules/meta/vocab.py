"""What Meta's Ad Rules and our rule language share: metrics, periods, operators, money.

The vocabulary of :mod:`ruleengine.rules.meta.importing` and :mod:`ruleengine.rules.meta.exporting`,
kept in one place so that the two directions cannot drift apart: a Meta filter field and
the catalogue metric it means, Meta's ``time_preset`` and our period, Meta's operators and
ours, Meta's change actions and the levels they act on, and the account currency's offset.
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, get_args

from ruleengine.rules.basics import Period
from ruleengine.rules.entity import currency_offset
from ruleengine.rules.language.catalog import UnknownMetricError, resolve_metric

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One construct that does not map.

    Attributes:
        path: where it is, as a JSON path in the rule being converted
            (``evaluation_spec.filters[2]`` in a Meta rule, ``tasks[0].conditions[1]`` in ours).
        what: the construct, as written (shortened).
        why: why it does not map, and what to do about it.
        severity: ``error`` — the rule (or that part of it) is not converted;
            ``warning`` — converted, but not exactly: review it.
    """

    path: str
    what: str
    why: str
    severity: Severity = "error"

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return asdict(self)

    def line(self) -> str:
        """``path: what — why`` on one line, marked when it is a warning."""
        mark = "" if self.severity == "error" else "(warning) "
        return f"{mark}{self.path}: {self.what} — {self.why}"


class Unmapped(Exception):
    """Raised inside a conversion step; the converter records the problem and goes on."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.line())
        self.problem = problem


class Report:
    """A conversion's problems: each step runs through :meth:`_try`, which records what it
    raises and goes on, so that one conversion reports everything at once."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def _try(self, step: Any, *args: Any) -> Any:
        try:
            return step(*args)
        except Unmapped as exc:
            self.problems.append(exc.problem)
            return None

    def warn(self, path: str, what: Any, why: str) -> None:
        self.problems.append(Problem(path, shown(what), why, "warning"))


def fail(path: str, what: Any, why: str) -> Unmapped:
    """An :class:`Unmapped` error for ``path``."""
    return Unmapped(Problem(path, shown(what), why))


def shown(value: Any, limit: int = 80) -> str:
    """A value as it appears in a report: JSON-ish, shortened."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class MetaAccount:
    """The ad account a Meta rule belongs to: its id, currency and timezone.

    ``timezone`` is None when it is not known (a file imported for an account that is
    not registered, without ``--timezone``).
    """

    id: str
    currency: str
    timezone: str | None = None

    @property
    def offset(self) -> int:
        """Minor units per currency unit (100 for USD cents, 1 for JPY)."""
        return currency_offset(self.currency)


# ---------------------------------------------------------------- operators

#: Meta's operators on numbers and ours. Meta has no ≥ or ≤.
METRIC_OPERATORS: Final[dict[str, str]] = {
    "GREATER_THAN": ">",
    "LESS_THAN": "<",
    "EQUAL": "==",
    "NOT_EQUAL": "!=",
    "IN_RANGE": "IN_RANGE",
    "NOT_IN_RANGE": "NOT_IN_RANGE",
}
OPERATORS_TO_META: Final = {ours: meta for meta, ours in METRIC_OPERATORS.items()}
#: Meta's operators on object fields that our ``filters`` take with the same meaning.
FILTER_OPERATORS: Final = frozenset(
    {"EQUAL", "NOT_EQUAL", "IN", "NOT_IN", "CONTAIN", "NOT_CONTAIN", "GREATER_THAN", "LESS_THAN"}
)
#: Object fields a Meta rule filters on that are filters of ours (which level takes which
#: is :data:`ruleengine.rules.language.model.FILTER_FIELDS`).
FILTER_FIELDS: Final = frozenset(
    {
        "id",
        "name",
        "effective_status",
        "objective",
        "campaign.id",
        "campaign.name",
        "campaign.objective",
        "adset.id",
        "adset.name",
        "ad.id",
        "ad.name",
    }
)
ID_FIELDS: Final = frozenset({"id", "campaign.id", "adset.id", "ad.id"})

# ---------------------------------------------------------------- levels

ENTITY_TYPES: Final[dict[str, str]] = {"CAMPAIGN": "campaign", "ADSET": "adset", "AD": "ad"}
LEVEL_TO_ENTITY_TYPE: Final = {level: meta for meta, level in ENTITY_TYPES.items()}
#: Meta's budget actions and the level each applies to.
BUDGET_EXECUTIONS: Final[dict[str, str]] = {
    "CHANGE_BUDGET": "adset",
    "CHANGE_CAMPAIGN_BUDGET": "campaign",
}
BUDGET_EXECUTION_OF_LEVEL: Final = {level: meta for meta, level in BUDGET_EXECUTIONS.items()}
#: Meta's bid action; bids are ad sets' (``bid_amount``).
BID_EXECUTION: Final = "CHANGE_BID"
#: Every execution type that takes a ``change_spec`` and the level it acts on.
CHANGE_EXECUTIONS: Final[dict[str, str]] = {**BUDGET_EXECUTIONS, BID_EXECUTION: "adset"}
#: Meta's ``execution_count_limit``: "the maximum number of times a budget/bid change action
#: is taken for each ad object of the rule" (its execution spec page) — our task option of
#: the same name, counted per (rule, task, entity); it takes the same bounds.
EXECUTION_COUNT_LIMIT: Final = (1, 1_000_000)

# ---------------------------------------------------------------- effective_status

#: What Meta adds to a rule without an ``effective_status`` filter when it evaluates it
#: (docs/sandbox.md, after Meta's evaluation spec page): ``UNPAUSE`` rules look at
#: everything not deleted or archived, every other rule at active objects and objects
#: in review.
IMPLICIT_STATUS: Final[dict[str, tuple[str, list[str]]]] = {
    "UNPAUSE": ("NOT_IN", ["ARCHIVED", "DELETED"]),
    "*": ("IN", ["ACTIVE", "PENDING_REVIEW"]),
}
#: What our listing holds without an ``effective_status`` filter, as a Meta filter.
OUR_DEFAULT_STATUS: Final = ("NOT_IN", ["ARCHIVED", "DELETED"])
#: The ``effective_status`` values Meta's rules take (ours also know IN_PROCESS, WITH_ISSUES).
RULE_EFFECTIVE_STATUSES: Final = frozenset(
    {
        "ACTIVE",
        "PAUSED",
        "ADSET_PAUSED",
        "CAMPAIGN_PAUSED",
        "PENDING_REVIEW",
        "ARCHIVED",
        "DELETED",
        "DISAPPROVED",
        "PREAPPROVED",
        "PENDING_BILLING_INFO",
    }
)

# ---------------------------------------------------------------- periods

#: Meta's ``time_preset`` → our period: the same name in lower case, but ``LIFETIME``.
PRESETS: Final[dict[str, str]] = {
    ("LIFETIME" if period == "maximum" else period.upper()): period
    for period in get_args(Period)
    if period not in ("last_90d", "last_month")  # Insights presets Meta's rules lack
}
PERIOD_TO_PRESET: Final = {period: preset for preset, period in PRESETS.items()}

# ---------------------------------------------------------------- metrics

#: Meta's Insights filter fields whose meaning is one catalogue metric (the period is the
#: rule's ``time_preset``). Action counts and costs are mapped by :func:`metric_of`.
INSIGHTS_METRICS: Final[dict[str, str]] = {
    "impressions": "impressions",
    "reach": "reach",
    "clicks": "clicks",
    "unique_clicks": "unique_clicks",
    "spent": "spend",
    "cpc": "cpc",
    "cpm": "cpm",
    "cpp": "cpp",
    "ctr": "ctr",
    "frequency": "frequency",
    "cost_per_unique_click": "cost_per_unique_click",
    # the ad set's optimisation event, per object: ours is read per entity the same way
    "results": "results",
    "cost_per": "cost_per_result",
    "website_purchase_roas": "website_purchase_roas.offsite_conversion.fb_pixel_purchase",
    "mobile_app_purchase_roas": "mobile_app_purchase_roas.app_custom_event.fb_mobile_purchase",
}
#: Meta fields that carry their own period, whatever the ``time_preset``.
FIXED_PERIOD_METRICS: Final[dict[str, tuple[str, str]]] = {
    "today_spent": ("spend", "today"),
    "yesterday_spent": ("spend", "yesterday"),
    "lifetime_spent": ("spend", "maximum"),
    "lifetime_impressions": ("impressions", "maximum"),
}
#: Meta's action fields → the action type Insights reports them under.
ACTION_TYPES: Final[dict[str, str]] = {
    "mobile_app_install": "mobile_app_install",
    "link_click": "link_click",
    "post_engagement": "post_engagement",
    "post_reaction": "post_reaction",
    "post_comment": "comment",
    "post": "post",
    "like": "like",
    "video_view": "video_view",
}
_ACTION_FIELD_OF_TYPE: Final = {action: field for field, action in ACTION_TYPES.items()}
#: Dotted Meta fields whose whole name is an Insights action type.
DOTTED_ACTION_PREFIXES: Final = ("offsite_conversion.", "app_custom_event.", "offline_conversion.")
#: Object fields and special keys, read without a period; the same names in our catalogue.
SPECIAL_METRICS: Final = frozenset(
    {
        "hours_since_creation",
        "estimated_budget_spending_percentage",
        "daily_budget",
        "lifetime_budget",
    }
)
#: Meta fields we know and cannot express, with the reason.
UNMAPPED_METRICS: Final[dict[str, str]] = {
    "cpa": "Meta's cost per action of the ad set's optimisation event; name the action"
    " instead, e.g. cost_per_action_type.offsite_conversion.fb_pixel_purchase",
    "result_rate": "Meta's results per impression (the ad set's optimisation event)",
    "audience_reached_percentage": "Meta's estimate of the audience reached; Insights has"
    " no such field",
    "daily_ratio_spent": "Meta does not document the scale of this ratio; use budget_spent_pct",
    "lifetime_ratio_spent": "Meta does not document the scale of this ratio",
    "unique_impressions": "not an Insights field; use reach",
}
#: Prefixes of our dotted metrics that map back to Meta's action fields.
_ACTIONS = "actions."
_COST_PER_ACTION = "cost_per_action_type."
_ROAS_TO_META: Final = {ours: meta for meta, ours in INSIGHTS_METRICS.items()}


def metric_of(field: str) -> tuple[str, str | None]:
    """The catalogue metric a Meta filter field means, and its fixed period (or None).

    Raises:
        KeyError: the field is not one we map (the caller reports it).
    """
    if field in FIXED_PERIOD_METRICS:
        return FIXED_PERIOD_METRICS[field]
    if field in INSIGHTS_METRICS:
        return INSIGHTS_METRICS[field], None
    if field in SPECIAL_METRICS:
        return field, None
    cost = field.startswith("cost_per_")
    base = field.removeprefix("cost_per_")
    action = ACTION_TYPES.get(base) or (base if base.startswith(DOTTED_ACTION_PREFIXES) else None)
    if action is None:
        raise KeyError(field)
    metric = f"{_COST_PER_ACTION if cost else _ACTIONS}{action}"
    try:
        resolve_metric(metric)
    except UnknownMetricError:
        raise KeyError(field) from None
    return metric, None


def meta_field_of(metric: str) -> str | None:
    """The Meta filter field of a catalogue metric (read for the rule's time_preset), or None."""
    if metric in _ROAS_TO_META:
        return _ROAS_TO_META[metric]
    if metric in INSIGHTS_METRICS.values():
        return next(meta for meta, ours in INSIGHTS_METRICS.items() if ours == metric)
    if metric in SPECIAL_METRICS:
        return metric
    if metric == "age_hours":
        return "hours_since_creation"
    for prefix, cost in ((_ACTIONS, ""), (_COST_PER_ACTION, "cost_per_")):
        if metric.startswith(prefix):
            action = metric.removeprefix(prefix)
            if action in _ACTION_FIELD_OF_TYPE:
                return cost + _ACTION_FIELD_OF_TYPE[action]
            if action.startswith(DOTTED_ACTION_PREFIXES):
                return cost + action
    return None


def is_money(metric: str) -> bool:
    """True when a metric's values are amounts of the account currency."""
    return resolve_metric(metric).money


# ---------------------------------------------------------------- money

_DECIMALS = 6  # enough for any currency, few enough to absorb 12.34 × 100 = 1233.999…


def from_minor(value: float, offset: int) -> float | int:
    """Minor units → currency units, an int when whole (``50000`` cents → ``500``)."""
    return tidy(value / offset)


def tidy(value: float) -> float | int:
    """``500.0`` → ``500``; other numbers as they are (rounded to 10⁻⁶ of a unit)."""
    rounded = round(value, _DECIMALS)
    return int(rounded) if rounded.is_integer() else rounded


def number(raw: Any, path: str) -> float:
    """A number, or a numeric string as Meta reads rules back.

    Raises:
        Unmapped: anything else (booleans, NaN, infinities included).
    """
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise fail(path, raw, "not a number")
    try:
        value = float(raw)
    except ValueError:
        raise fail(path, raw, "not a number") from None
    if not math.isfinite(value):
        raise fail(path, raw, "not a finite number")
    return value


def integer(raw: Any, path: str, *, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high`` (numeric strings too)."""
    value = number(raw, path)
    if not value.is_integer() or not low <= value <= high:
        raise fail(path, raw, f"not a whole number from {low} to {high}")
    return int(value)
