"""The metric catalogue: which names a condition may use and where each value comes from.

Three kinds of metric exist:

* plain Insights fields (``spend``, ``ctr`` …),
* dotted keys that pick one action type out of a list field
  (``actions.purchase``, ``purchase_roas.omni_purchase`` …),
* the special keys that are not Insights fields and never go into an Insights
  request (clock, budgets, age, budget spent and its end-of-day estimate,
  ``custom:<name>``); ``hours_since_creation``, Meta's Ad Rules name of ``age_hours``,
  is the same key under a second name.

Whether a missing value means 0 or "no data" depends on the metric: counts and
spend are 0 when Meta returns nothing; ratios and cost-per values are no data.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal


class Source(StrEnum):
    """Where a metric's value comes from."""

    INSIGHTS = "insights"
    CLOCK = "clock"
    ENTITY = "entity"
    CUSTOM = "custom"
    DERIVED = "derived"


class Missing(StrEnum):
    """What a metric is worth when Meta returned nothing for it."""

    ZERO = "zero"
    NO_DATA = "no_data"


@dataclass(frozen=True)
class MetricSpec:
    """How one metric name is resolved.

    Attributes:
        name: the name as written in the rule.
        source: where the value comes from.
        field: the Insights field to request (``actions`` for ``actions.purchase``), if any.
        action_type: the action type picked from a list field, if any.
        missing: what an absent value means.
        money: True when the value is an amount of the account currency.
        ranking: True for Meta's ad rankings, compared on :data:`RANKING_SCALE`, not as numbers.
    """

    name: str
    source: Source
    field: str | None = None
    action_type: str | None = None
    missing: Missing = Missing.NO_DATA
    money: bool = False
    ranking: bool = False

    @property
    def needs_period(self) -> bool:
        """Insights metrics are read for a period; special keys are read "now"."""
        return self.source is Source.INSIGHTS


# Plain numeric Insights fields → what "absent" means and whether it is money.
_COUNT_FIELDS: Final = frozenset(
    {
        "impressions",
        "reach",
        "clicks",
        "unique_clicks",
        "inline_link_clicks",
        "unique_inline_link_clicks",
    }
)
_MONEY_FIELDS: Final = frozenset({"spend", "social_spend"})
_RATIO_FIELDS: Final = frozenset(
    {"frequency", "ctr", "unique_ctr", "inline_link_click_ctr", "unique_link_clicks_ctr"}
)
_MONEY_RATIO_FIELDS: Final = frozenset(
    {"cpc", "cpm", "cpp", "cost_per_inline_link_click", "cost_per_unique_click"}
)

# ``[{indicator, values: [{value}]}]``: what each row's ad sets optimise for (its "result").
RESULT_FIELDS: Final[dict[str, tuple[Missing, bool]]] = {
    "results": (Missing.ZERO, False),
    "cost_per_result": (Missing.NO_DATA, True),
}
#: Meta's ad rankings, worst first; ``UNKNOWN`` (too few impressions) is not on the scale.
RANKING_SCALE: Final = (
    "BELOW_AVERAGE_10",
    "BELOW_AVERAGE_20",
    "BELOW_AVERAGE_35",
    "AVERAGE",
    "ABOVE_AVERAGE",
)
RANKING_UNKNOWN: Final = "UNKNOWN"
#: Rankings Meta computes for ads only.
RANKING_FIELDS: Final = frozenset(
    {"quality_ranking", "engagement_rate_ranking", "conversion_rate_ranking"}
)

# List fields of ``[{action_type, value}]`` → what "absent" means and whether it is money.
_LIST_FIELDS: Final[dict[str, tuple[Missing, bool]]] = {
    "actions": (Missing.ZERO, False),
    "unique_actions": (Missing.ZERO, False),
    "action_values": (Missing.ZERO, True),
    "conversions": (Missing.ZERO, False),
    "conversion_values": (Missing.ZERO, True),
    "cost_per_action_type": (Missing.NO_DATA, True),
    "cost_per_unique_action_type": (Missing.NO_DATA, True),
    "cost_per_conversion": (Missing.NO_DATA, True),
    "purchase_roas": (Missing.NO_DATA, False),
    "website_purchase_roas": (Missing.NO_DATA, False),
    "mobile_app_purchase_roas": (Missing.NO_DATA, False),
}

# Budget fields as Meta names them on the campaign / ad set object.
BUDGET_FIELDS: Final[dict[str, str]] = {
    "daily_budget": "daily_budget",
    "lifetime_budget": "lifetime_budget",
    "remaining_budget": "budget_remaining",
}

CUSTOM_PREFIX: Final = "custom:"
SPECIAL_KEYS: Final = (
    "current_hour",
    "hours_left_today",
    "custom:<name>",
    "daily_budget",
    "lifetime_budget",
    "remaining_budget",
    "age_hours",
    "hours_since_creation",
    "budget_spent_pct",
    "estimated_budget_spending_percentage",
    "budget_utilization",
)
#: Meta's Ad Rules names that mean exactly one of ours.
AGE_KEYS: Final = frozenset({"age_hours", "hours_since_creation"})
#: Keys computed from today's ``spend`` and the daily budget.
SPEND_KEYS: Final = frozenset(
    {"budget_spent_pct", "estimated_budget_spending_percentage", "budget_utilization"}
)
#: Spend keys read over the condition's own period (default ``today``), not today alone.
PERIOD_SPEND_KEYS: Final = frozenset({"budget_utilization"})

# fullmatch, not match with "$": "$" also matches before a trailing newline
_ACTION_TYPE_RE: Final = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)*")
_CUSTOM_NAME_RE: Final = re.compile(r"[a-z0-9_]{1,64}")


def _special(name: str) -> MetricSpec | None:
    if name in ("current_hour", "hours_left_today"):
        return MetricSpec(name, Source.CLOCK, missing=Missing.NO_DATA)
    if name in BUDGET_FIELDS:
        return MetricSpec(name, Source.ENTITY, field=BUDGET_FIELDS[name], money=True)
    if name in AGE_KEYS:
        return MetricSpec(name, Source.ENTITY, field="created_time")
    if name in SPEND_KEYS:
        return MetricSpec(name, Source.DERIVED, field="spend")
    return None


def _plain(name: str) -> MetricSpec | None:
    if name in _COUNT_FIELDS:
        return MetricSpec(name, Source.INSIGHTS, field=name, missing=Missing.ZERO)
    if name in _MONEY_FIELDS:
        return MetricSpec(name, Source.INSIGHTS, field=name, missing=Missing.ZERO, money=True)
    if name in _RATIO_FIELDS:
        return MetricSpec(name, Source.INSIGHTS, field=name)
    if name in _MONEY_RATIO_FIELDS:
        return MetricSpec(name, Source.INSIGHTS, field=name, money=True)
    if name in RESULT_FIELDS:
        missing, money = RESULT_FIELDS[name]
        return MetricSpec(name, Source.INSIGHTS, field=name, missing=missing, money=money)
    if name in RANKING_FIELDS:
        return MetricSpec(name, Source.INSIGHTS, field=name, ranking=True)
    return None


def _dotted(name: str) -> MetricSpec | None:
    field, dot, action_type = name.partition(".")
    if not dot or field not in _LIST_FIELDS:
        return None
    if not _ACTION_TYPE_RE.fullmatch(action_type):
        raise UnknownMetricError(
            f"'{action_type}' is not a valid action type in '{name}'"
            " (lower-case letters, digits, '_' and '.', e.g. 'omni_purchase')"
        )
    missing, money = _LIST_FIELDS[field]
    return MetricSpec(name, Source.INSIGHTS, field, action_type, missing, money)


# Names people write that Meta spells differently.
_HINTS: Final = {
    "roas": "purchase_roas.omni_purchase",
    "purchases": "actions.omni_purchase",
    "purchase": "actions.omni_purchase",
    "revenue": "action_values.omni_purchase",
    "cpa": "cost_per_action_type.omni_purchase",
    "budget": "daily_budget",
    "age": "age_hours",
    "hour": "current_hour",
    "result": "results",
    "cpr": "cost_per_result",
    "ranking": "quality_ranking",
}


class UnknownMetricError(ValueError):
    """A metric name that the catalogue does not know; the message suggests the nearest one."""


def known_names() -> list[str]:
    """Every plain metric name, list field and special key (for messages and docs)."""
    plain = (
        _COUNT_FIELDS
        | _MONEY_FIELDS
        | _RATIO_FIELDS
        | _MONEY_RATIO_FIELDS
        | RESULT_FIELDS.keys()
        | RANKING_FIELDS
    )
    return sorted(plain) + sorted(f"{f}.<action_type>" for f in _LIST_FIELDS) + list(SPECIAL_KEYS)


#: Attribution windows Meta stopped returning on 2026-01-12, and the nearest that remain: "7-day
#: view (7d_view) and 28-day view (28d_view) attribution windows will no longer be returned
#: [...] 1-day click, 7-day click, 28-day click, 1-day engaged view, and 1-day view will
#: continue to be available" (Meta's blog "Ads Insights API Metric Availability Updates",
#: 2025-10-16).
GONE_WINDOWS: Final = {"7d_view": "7d_click", "28d_view": "28d_click"}


def gone_window(window: str) -> str | None:
    """Why ``window`` (``7d_view``, ``28D_VIEW`` …) cannot be asked for, naming the nearest
    window that still exists; None for a window Meta still returns."""
    lowered = window.lower()
    base = next((g for g in GONE_WINDOWS if lowered.startswith(g)), None)
    if base is None:
        return None
    same_length = GONE_WINDOWS[base]
    return (
        f"Meta stopped returning the {base} attribution window on 2026-01-12 (unified"
        f" attribution is what Insights reads); the nearest window that still exists is 1d_view"
        f" (the only view window left), or {same_length} for the same length"
    )


@functools.lru_cache(maxsize=1024)
def resolve_metric(name: str) -> MetricSpec:
    """Look ``name`` up in the catalogue (a name found is remembered: evaluation resolves
    each condition's metric for every entity).

    Raises:
        UnknownMetricError: with a "did you mean" hint when the name is not known.
    """
    if name.startswith(CUSTOM_PREFIX):
        custom = name[len(CUSTOM_PREFIX) :]
        if not _CUSTOM_NAME_RE.fullmatch(custom):
            raise UnknownMetricError(
                f"custom metric name '{custom}' must be 1-64 characters of a-z, 0-9 and '_'"
            )
        return MetricSpec(name, Source.CUSTOM, field=custom)
    if (gone := gone_window(name.rsplit(".", 1)[-1])) is not None:
        raise UnknownMetricError(f"'{name}': {gone}")
    spec = _special(name) or _plain(name) or _dotted(name)
    if spec is not None:
        return spec
    if name in _LIST_FIELDS:
        raise UnknownMetricError(
            f"'{name}' is a list of action types; pick one, e.g. '{name}.omni_purchase'"
        )
    candidates = [n.split(".<")[0] for n in known_names()]
    hint = [_HINTS[name]] if name in _HINTS else difflib.get_close_matches(name, candidates, n=1)
    suffix = f"; did you mean '{hint[0]}'?" if hint else ""
    raise UnknownMetricError(f"unknown metric '{name}'{suffix}")


# ---------------------------------------------------------------- scaling to a target

#: Metrics where lower is better: what a result costs.
_COST_FIELDS: Final = _MONEY_RATIO_FIELDS | frozenset(
    {
        "cost_per_action_type",
        "cost_per_unique_action_type",
        "cost_per_conversion",
        "cost_per_result",
    }
)
#: Metrics where higher is better: returns, rates and counts of results.
_GAIN_FIELDS: Final = (
    _COUNT_FIELDS
    | (_RATIO_FIELDS - {"frequency"})
    | frozenset(
        {
            "actions",
            "unique_actions",
            "action_values",
            "conversions",
            "conversion_values",
            "purchase_roas",
            "website_purchase_roas",
            "mobile_app_purchase_roas",
            "results",
        }
    )
)


def scaling_direction(spec: MetricSpec) -> Literal["higher", "lower"] | None:
    """Which way is better for a ``scale_to_target`` metric; None when it cannot be a target.

    ``lower`` for costs (``cpc``, ``cpm``, ``cost_per_action_type.<type>`` …): a cost under
    its target raises the budget. ``higher`` for returns, rates and counts (ROAS, CTR,
    ``actions.<type>``, ``action_values.<type>``, impressions …). None for Insights fields
    that are neither — ``spend`` (the budget itself drives it) and ``frequency`` — and
    for every special key and custom metric (not read from Insights for a period).
    """
    if spec.source is not Source.INSIGHTS or spec.field is None:
        return None
    if spec.field in _COST_FIELDS:
        return "lower"
    if spec.field in _GAIN_FIELDS:
        return "higher"
    return None
