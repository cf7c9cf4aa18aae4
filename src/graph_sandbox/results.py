"""Meta's "results": what an ad set optimises for, and how Insights count and name it.

An ad set's ``optimization_goal`` decides its result: purchases on the pixel for
``OFFSITE_CONVERSIONS``, leads for ``LEAD_GENERATION``, people reached for ``REACH`` …
Insights report them in ``results`` and ``cost_per_result`` as a list of
``{"indicator", "values": [{"value", "attribution_windows"}]}``, the indicator naming the
action (``actions:offsite_conversion.fb_pixel_purchase``) or the metric (``reach``); a row
with no result has the indicator and no ``values``, as Meta leaves them out. The same
count is what the learning phase counts (:mod:`graph_sandbox.learning`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from graph_sandbox.delivery import Totals


@dataclass(frozen=True)
class Goal:
    """One optimisation goal: the indicator Insights name its results by, and their count."""

    indicator: str
    count: Callable[[Totals], int]


#: The goals the sandbox delivers for (its ``optimization_goal`` values).
GOALS: Final[dict[str, Goal]] = {
    "OFFSITE_CONVERSIONS": Goal(
        "actions:offsite_conversion.fb_pixel_purchase", lambda t: t.purchases
    ),
    "LEAD_GENERATION": Goal("actions:onsite_conversion.lead_grouped", lambda t: t.leads),
    "REACH": Goal("reach", lambda t: t.reach),
    "IMPRESSIONS": Goal("impressions", lambda t: t.impressions),
    "LINK_CLICKS": Goal("actions:link_click", lambda t: t.link_clicks),
    "LANDING_PAGE_VIEWS": Goal("actions:landing_page_view", lambda t: t.landing_page_views),
}
#: Every value of Meta's ``AdSet.OptimizationGoal`` (SDK 26.x); those not in ``GOALS`` are
#: refused as not simulated.
META_GOALS: Final = (
    "ADVERTISER_SILOED_VALUE",
    "AD_RECALL_LIFT",
    "APP_INSTALLS",
    "APP_INSTALLS_AND_OFFSITE_CONVERSIONS",
    "AUTOMATIC_OBJECTIVE",
    "CONVERSATIONS",
    "DERIVED_EVENTS",
    "ENGAGED_PAGE_VIEWS",
    "ENGAGED_USERS",
    "EVENT_RESPONSES",
    "IMPRESSIONS",
    "IN_APP_VALUE",
    "LANDING_PAGE_VIEWS",
    "LEAD_GENERATION",
    "LINK_CLICKS",
    "MEANINGFUL_CALL_ATTEMPT",
    "MESSAGING_APPOINTMENT_CONVERSION",
    "MESSAGING_DEEP_CONVERSATION_AND_FOLLOW",
    "MESSAGING_PURCHASE_CONVERSION",
    "NONE",
    "OFFSITE_CONVERSIONS",
    "PAGE_LIKES",
    "POST_ENGAGEMENT",
    "PROFILE_AND_PAGE_ENGAGEMENT",
    "PROFILE_VISIT",
    "QUALITY_CALL",
    "QUALITY_LEAD",
    "REACH",
    "REMINDERS_SET",
    "SUBSCRIBERS",
    "THRUPLAY",
    "VALUE",
    "VISIT_INSTAGRAM_PROFILE",
)
#: The goal an ad set of a campaign objective gets when the scenario builds it.
_BY_OBJECTIVE = {"OUTCOME_LEADS": "LEAD_GENERATION", "OUTCOME_AWARENESS": "REACH"}
#: Results carry the attribution they were counted with; the sandbox counts with the default.
ATTRIBUTION_WINDOWS: Final = ("default",)


def default_goal(objective: str) -> str:
    """The optimisation goal of an ad set built under a campaign of ``objective``."""
    return _BY_OBJECTIVE.get(objective, "OFFSITE_CONVERSIONS")


def results_field(
    parts: Iterable[tuple[str, Totals]], *, cost: bool, offset: int = 100
) -> list[dict[str, Any]]:
    """``results`` (or with ``cost``, ``cost_per_result``) of a row made of ``parts``.

    Args:
        parts: ``(optimisation goal, totals)`` of each goal among the row's ad sets, in the
            order the row met them; one entry per indicator.
        cost: Cost per result (spend over the count) instead of the count.
        offset: The account currency's offset (100 for cents, 1 for whole yen).
    """
    entries: list[dict[str, Any]] = []
    for goal_name, totals in parts:
        goal = GOALS[goal_name]
        count = goal.count(totals)
        entry: dict[str, Any] = {"indicator": goal.indicator}
        if count:
            value = f"{totals.spend_cents / offset / count:.6f}" if cost else str(count)
            entry["values"] = [{"value": value, "attribution_windows": list(ATTRIBUTION_WINDOWS)}]
        entries.append(entry)
    return entries
