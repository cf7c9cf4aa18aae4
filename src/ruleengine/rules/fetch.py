"""Fetch planning, pure: the least Insights data that decides a rule.

Conditions (and their ``compare_to`` metrics, and the metric a ``scale_to_target``
action scales by) are grouped by period; inside a group each Insights field is asked
for once (``actions.purchase`` and
``actions.lead`` both need ``actions``). Special keys never go into the request,
except that ``budget_spent_pct`` and ``estimated_budget_spending_percentage``
need today's ``spend``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ruleengine.rules.language.action_types import RebalanceBudgetAction, ScaleToTargetAction
from ruleengine.rules.language.catalog import PERIOD_SPEND_KEYS, MetricSpec, Source, resolve_metric
from ruleengine.rules.language.model import Rule, Task


def _pairs(tasks: Iterable[Task]) -> Iterable[tuple[str | None, MetricSpec]]:
    for task in tasks:
        for condition in task.conditions:
            yield condition.period, condition.spec
            if condition.compare_to is not None:
                yield condition.compare_period, condition.compare_to.spec
        if isinstance(task.action, ScaleToTargetAction | RebalanceBudgetAction):
            # fetched in the same Insights batch as the conditions
            yield task.action.period, resolve_metric(task.action.metric)


def fetch_groups(rule: Rule, tasks: Iterable[Task] | None = None) -> dict[str, list[str]]:
    """period → sorted, de-duplicated Insights fields needed by ``tasks`` (default: all)."""
    groups: dict[str, set[str]] = {}
    for period, spec in _pairs(rule.tasks if tasks is None else tasks):
        if spec.source is Source.INSIGHTS and period and spec.field:
            groups.setdefault(period, set()).add(spec.field)
        elif spec.source is Source.DERIVED and spec.field:
            own = period if spec.name in PERIOD_SPEND_KEYS and period else "today"
            groups.setdefault(own, set()).add(spec.field)
    return {period: sorted(fields) for period, fields in sorted(groups.items())}


def custom_metric_names(rule: Rule) -> list[str]:
    """The ``custom:<name>`` names a rule uses (without the prefix)."""
    names = {spec.field for _, spec in _pairs(rule.tasks) if spec.source is Source.CUSTOM}
    return sorted(n for n in names if n)
