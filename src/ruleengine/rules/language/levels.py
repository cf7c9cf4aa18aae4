"""What each level of a rule can read and do: ads have rankings, and no budget or bid.

Checks the rule model runs once it knows the rule's ``level`` (campaign, ad set or ad),
each raising a :class:`~ruleengine.rules.language.validation.PathError` whose message names the
level
the rule needs: Meta ranks ads only (``quality_ranking`` …); an ad has no budget, no bid
and no children, so the budget actions, the budget metrics and a deep copy are refused on
ads, naming the ad set that holds the budget. Also the value check of a ranking condition:
one label of :data:`~ruleengine.rules.language.catalog.RANKING_SCALE`. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ruleengine.rules.basics import RANGE_OPERATORS
from ruleengine.rules.language.action_types import BUDGET_ACTIONS, SCHEDULE_ACTIONS
from ruleengine.rules.language.catalog import (
    BUDGET_FIELDS,
    RANKING_SCALE,
    RANKING_UNKNOWN,
    MetricSpec,
    Source,
)
from ruleengine.rules.language.validation import PathError

#: The Graph fields of the budget metrics (``daily_budget``, ``budget_remaining`` …).
BUDGET_METRIC_FIELDS: Final = frozenset(BUDGET_FIELDS.values())


def metric_levels(spec: MetricSpec) -> tuple[str, ...]:
    """The levels a metric can be read at: rankings on ads, budgets above them."""
    if spec.ranking:
        return ("ad",)
    if spec.field in BUDGET_METRIC_FIELDS or spec.source is Source.DERIVED:
        return ("campaign", "adset")
    return ("campaign", "adset", "ad")


def check_metric_levels(sides: Sequence[tuple[str, MetricSpec]], level: str, where: str) -> None:
    """Each (field name, metric) of a condition can be read at ``level``."""
    for name, spec in sides:
        if level in metric_levels(spec):
            continue
        if spec.ranking:
            raise PathError(
                f"{where}.{name}",
                f'Meta ranks ads only: \'{spec.name}\' needs "level": "ad", not "{level}"',
            )
        raise PathError(
            f"{where}.{name}",
            f"an ad has no budget: '{spec.name}' reads its ad set's (or campaign's);"
            ' write the rule with "level": "adset"',
        )


def check_ad_action(action: Any, where: str) -> None:
    """An ad has no budget and no bid (its ad set has) and no children to copy deeply."""
    if action.type in BUDGET_ACTIONS | SCHEDULE_ACTIONS:
        raise PathError(
            f"{where}.type",
            f"'{action.type}' changes a budget, and an ad has none: its ad set (or campaign)"
            ' holds the budget; write the rule with "level": "adset"',
        )
    if action.type == "duplicate" and action.deep_copy:
        raise PathError(
            f"{where}.deep_copy",
            "an ad has no children to copy: leave deep_copy out at level ad",
        )


def ranking_value(raw: Any, metric: str, operator: str | None) -> str:
    """A ranking's label, checked: one of :data:`RANKING_SCALE`, with an ordered operator.

    Raises:
        ValueError: a range operator, or a value off the scale (``UNKNOWN`` included).
    """
    scale = ", ".join(RANKING_SCALE)
    if operator in RANGE_OPERATORS:
        raise ValueError(f"{metric} takes one label ({scale}), not a range; use <= or >=")
    if not isinstance(raw, str) or raw not in RANKING_SCALE:
        unknown = " (UNKNOWN matches nothing: Meta ranks an ad only with enough impressions)"
        hint = unknown if raw == RANKING_UNKNOWN else ""
        raise ValueError(f"{metric} is compared with one of {scale}, not {raw!r:.40}{hint}")
    return raw
