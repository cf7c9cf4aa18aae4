"""Meta's ``REBALANCE_BUDGET`` ↔ our ``rebalance_budget`` (meta_import's and meta_export's part).

Meta's ``rebalance_spec`` (``{type, target_field, target_count, is_cross_campaign,
is_inverse}``) has five types. Four move budget *out of* the matched ad sets into ad sets
the rule did not match (``EVEN``, ``PROPORTIONAL``, ``INVERSE_PROPORTIONAL`` pausing the
matched ones, ``NO_PAUSE_PROPORTIONAL`` without pausing): ruleengine has no action that
gives budget to entities a rule did not match, so they stay errors. The fifth,
``MATCHED_ONLY_PROPORTIONAL``, redistributes the budgets of the matched ad sets among
themselves by ``target_field`` — what ``rebalance_budget`` does, with its caps: it is the
one both directions map. ``is_inverse`` (more budget to a lower value) must agree with the
metric's direction in our catalogue (a cost is better low). Pure.
"""

from __future__ import annotations

from typing import Any, Final

from ruleengine.rules.language.action_types import RebalanceBudgetAction
from ruleengine.rules.language.catalog import resolve_metric, scaling_direction
from ruleengine.rules.meta.vocab import (
    PERIOD_TO_PRESET,
    UNMAPPED_METRICS,
    Report,
    fail,
    meta_field_of,
    metric_of,
)

EXECUTION: Final = "REBALANCE_BUDGET"
MATCHED_ONLY: Final = "MATCHED_ONLY_PROPORTIONAL"
_ELSEWHERE: Final = (
    "Meta moves the budget of the matched ad sets to other ad sets of the campaign (or"
    " account) that the rule did not match{pause}; ruleengine's rebalance_budget moves budget"
    " among the matched entities only (Meta's MATCHED_ONLY_PROPORTIONAL)"
)
_PROPORTION: Final = (
    "Meta redistributes the matched ad sets' pooled budget in proportion to target_field, all"
    " at once; ruleengine moves budget from the worst to the best by the metric, at most"
    " max_change_percent (default 20) of each budget per run, the total kept to the cent"
    " (docs/rules.md, rebalance_budget)"
)
_WITHIN_CAMPAIGN: Final = (
    "Meta rebalances within each campaign unless is_cross_campaign is true; ruleengine"
    " rebalances across every ad set the rule matched (filter on one campaign to keep it"
    " within it)"
)


def rebalance_from_meta(report: Report, raw: Any, path: str, preset: str | None) -> dict[str, Any]:
    """A ``rebalance_spec`` (at ``path``) as our action; raises Unmapped for what cannot map."""
    if not isinstance(raw, dict):
        raise fail(path, raw, "a rebalance_spec is a JSON object")
    kind = raw.get("type")
    if kind != MATCHED_ONLY:
        pause = "" if kind == "NO_PAUSE_PROPORTIONAL" else " and pauses the matched ones"
        raise fail(f"{path}.type", kind, _ELSEWHERE.format(pause=pause))
    unknown = sorted(set(raw) - {"type", "target_field", "is_cross_campaign", "is_inverse"})
    if unknown:
        why = (
            "Meta gives budget to this many ad sets only; ruleengine rebalances every matched one"
            if unknown[0] == "target_count"
            else "not a rebalance_spec field ruleengine knows"
        )
        raise fail(f"{path}.{unknown[0]}", raw[unknown[0]], why)
    metric, period = directed_metric(
        raw.get("target_field"),
        f"{path}.target_field",
        preset,
        neither="ruleengine ranks by a metric where higher is better or by a cost; {metric} is"
        " neither",
        no_period="no time_preset: ruleengine reads the field over the rule's",
    )
    lower_better = scaling_direction(resolve_metric(metric)) == "lower"
    if bool(raw.get("is_inverse", False)) != lower_better:
        better = "lower" if lower_better else "higher"
        raise fail(
            f"{path}.is_inverse",
            raw.get("is_inverse", False),
            f"ruleengine ranks {metric} {better}-is-better (its catalogue); Meta's rule gives"
            f" more budget to the {'higher' if lower_better else 'lower'} values",
        )
    if raw.get("is_cross_campaign") is not True:
        report.warn(f"{path}.is_cross_campaign", raw.get("is_cross_campaign"), _WITHIN_CAMPAIGN)
    report.warn(path, f"{MATCHED_ONLY} {raw.get('target_field')}", _PROPORTION)
    return {"type": "rebalance_budget", "metric": metric, "period": period}


def directed_metric(
    field: Any, path: str, preset: str | None, *, neither: str, no_period: str
) -> tuple[str, str]:
    """Meta's ``target_field`` (``path``) as our metric and period, for an action that ranks
    or scales by it: the metric must have a better direction (higher, or a cost). ``neither``
    is the refusal's reason when it has none, ``no_period`` when the rule has no period."""
    if not isinstance(field, str) or field in UNMAPPED_METRICS:
        why = UNMAPPED_METRICS.get(field) if isinstance(field, str) else None
        raise fail(path, field, why or "not an Insights field name")
    try:
        metric, fixed = metric_of(field)
    except KeyError:
        raise fail(path, field, "no metric of ruleengine's catalogue means this") from None
    if scaling_direction(resolve_metric(metric)) is None:
        raise fail(path, field, neither.format(metric=metric))
    period = fixed or preset
    if period is None:
        raise fail(path, field, no_period)
    return metric, period


def rebalance_to_meta(
    report: Report, action: RebalanceBudgetAction, level: str, path: str
) -> dict[str, Any]:
    """Our action as Meta's ``execution_spec``; raises Unmapped for what Meta cannot say."""
    if level != "adset":
        raise fail(f"{path}.type", action.type, "Meta's REBALANCE_BUDGET moves ad set budgets")
    for name in ("min_budget", "max_budget"):
        if getattr(action, name) is not None:
            raise fail(
                f"{path}.{name}",
                getattr(action, name),
                "Meta's rebalance_spec has no budget bounds: its rule would move budgets past it",
            )
    meta_field = meta_field_of(action.metric)
    if meta_field is None:
        raise fail(f"{path}.metric", action.metric, "Meta's rules have no such field")
    if action.period not in PERIOD_TO_PRESET:
        raise fail(f"{path}.period", action.period, "Meta's rules have no such time_preset")
    report.warn(
        f"{path}.max_change_percent",
        action.max_change_percent,
        "Meta's rebalance has no cap on one move: its rule redistributes the matched ad sets'"
        " budgets in proportion to the field at once",
    )
    spec = {
        "type": MATCHED_ONLY,
        "target_field": meta_field,
        "is_cross_campaign": True,
        "is_inverse": scaling_direction(resolve_metric(action.metric)) == "lower",
    }
    return {
        "execution_type": EXECUTION,
        "execution_options": [{"field": "rebalance_spec", "value": spec, "operator": "EQUAL"}],
    }
