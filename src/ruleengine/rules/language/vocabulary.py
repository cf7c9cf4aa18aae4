"""The rule builder's vocabulary: every name a rule may use, with a label and a description.

One JSON-ready document built from the catalogue (:mod:`ruleengine.rules.language.catalog`) and the
rule format (:mod:`ruleengine.rules.language.model`): the metrics in groups (concrete dotted names
for
the common action types, and one ``pattern`` entry per list field for any other), the
periods, the condition and filter operators, the filter fields per level, the effective
statuses, the action kinds, the follow-ups and the timezones. ``GET /api/rules/vocabulary``
answers it (:mod:`ruleengine.web.api.vocabulary`); the browser form builds its menus from it.

Descriptions speak as Ads Manager's column help does. Every name :func:`known_names` lists
has one in :data:`METRIC_TEXTS` (a test keeps it so).
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args
from zoneinfo import available_timezones

from ruleengine.rules.basics import LEVELS, Operator
from ruleengine.rules.language.action_types import (
    ACTION_TYPES,
    ADSET_ACTIONS,
    BUDGET_ACTIONS,
    SCHEDULE_ACTIONS,
    FollowUpDo,
)
from ruleengine.rules.language.catalog import (
    _LIST_FIELDS,
    RANKING_SCALE,
    resolve_metric,
    scaling_direction,
)
from ruleengine.rules.language.levels import metric_levels
from ruleengine.rules.language.model import FILTER_FIELDS, FilterOperator, rule_json_schema

Unit = Literal["money", "count", "ratio", "percent", "multiple", "hours", "hour", "ranking"]
UNITS: Final = frozenset(get_args(Unit))
_RATIO_NOTE = "A ratio of the period, not an average of its days."
_CURRENCY = "in the account currency"

#: Every name :func:`~ruleengine.rules.language.catalog.known_names` lists → (label, unit,
#: description).
METRIC_TEXTS: Final[dict[str, tuple[str, Unit, str]]] = {
    # plain Insights fields
    "spend": (
        "Amount spent",
        "money",
        f"What Meta charged for the period's delivery, {_CURRENCY}.",
    ),
    "social_spend": (
        "Amount spent (social)",
        "money",
        "The part of the amount spent on ads shown with social information (e.g. a friend"
        f" liked the Page), {_CURRENCY}.",
    ),
    "cpm": (
        "CPM (cost per 1,000 impressions)",
        "money",
        f"Amount spent ÷ impressions × 1,000, {_CURRENCY}. {_RATIO_NOTE}",
    ),
    "cpp": (
        "Cost per 1,000 Accounts Center accounts reached",
        "money",
        f"Amount spent ÷ reach × 1,000, {_CURRENCY}. {_RATIO_NOTE}",
    ),
    "cpc": (
        "CPC (all)",
        "money",
        f"Amount spent ÷ clicks (all), {_CURRENCY}. {_RATIO_NOTE}",
    ),
    "cost_per_inline_link_click": (
        "CPC (cost per link click)",
        "money",
        f"Amount spent ÷ link clicks, {_CURRENCY}. {_RATIO_NOTE}",
    ),
    "cost_per_unique_click": (
        "Cost per unique click (all)",
        "money",
        f"Amount spent ÷ unique clicks (all), {_CURRENCY}. {_RATIO_NOTE}",
    ),
    "impressions": (
        "Impressions",
        "count",
        "The number of times the ads were on screen in the period.",
    ),
    "reach": (
        "Reach",
        "count",
        "The number of Accounts Center accounts that saw the ads at least once in the period"
        " (estimated; people are not added up across days).",
    ),
    "results": (
        "Results",
        "count",
        "The number of results: what each ad set optimises for (its optimisation goal) —"
        " purchases, leads, link clicks, reach … Each campaign, ad set or ad is evaluated"
        " against its own indicator, which Rule Logs show with what the condition saw; a"
        " campaign whose ad sets optimise for different things has no single result (no data).",
    ),
    "cost_per_result": (
        "Cost per result",
        "money",
        f"Amount spent ÷ results, {_CURRENCY}, for each entity's own result indicator (its ad"
        f" sets' optimisation goal). {_RATIO_NOTE}",
    ),
    "quality_ranking": (
        "Quality ranking",
        "ranking",
        "How the ad's perceived quality compares with ads competing for the same audience:"
        " BELOW_AVERAGE_10 (bottom 10 %) < BELOW_AVERAGE_20 < BELOW_AVERAGE_35 < AVERAGE <"
        " ABOVE_AVERAGE. Ads only; UNKNOWN (too few impressions) matches no comparison.",
    ),
    "engagement_rate_ranking": (
        "Engagement rate ranking",
        "ranking",
        "How the ad's expected engagement rate compares with ads competing for the same"
        " audience, on the same scale as the quality ranking. Ads only; UNKNOWN matches no"
        " comparison.",
    ),
    "conversion_rate_ranking": (
        "Conversion rate ranking",
        "ranking",
        "How the ad's expected conversion rate compares with ads of the same optimisation goal"
        " competing for the same audience, on the same scale as the quality ranking. Ads only;"
        " UNKNOWN matches no comparison.",
    ),
    "frequency": (
        "Frequency",
        "ratio",
        f"The average number of times each account saw the ads: impressions ÷ reach. {_RATIO_NOTE}",
    ),
    "clicks": (
        "Clicks (all)",
        "count",
        "Every click on the ads: links, the profile, reactions, comments, expanding media.",
    ),
    "unique_clicks": (
        "Unique clicks (all)",
        "count",
        "The number of accounts that clicked the ads (estimated).",
    ),
    "inline_link_clicks": (
        "Link clicks",
        "count",
        "Clicks on links of the ads that lead to destinations or experiences, on or off Meta.",
    ),
    "unique_inline_link_clicks": (
        "Unique link clicks",
        "count",
        "The number of accounts that clicked a link of the ads (estimated).",
    ),
    "ctr": (
        "CTR (all)",
        "percent",
        f"Clicks (all) ÷ impressions × 100. {_RATIO_NOTE}",
    ),
    "unique_ctr": (
        "Unique CTR (all)",
        "percent",
        f"Unique clicks (all) ÷ reach × 100. {_RATIO_NOTE}",
    ),
    "inline_link_click_ctr": (
        "CTR (link click-through rate)",
        "percent",
        f"Link clicks ÷ impressions × 100. {_RATIO_NOTE}",
    ),
    "unique_link_clicks_ctr": (
        "Unique CTR (link click-through rate)",
        "percent",
        f"Unique link clicks ÷ reach × 100. {_RATIO_NOTE}",
    ),
    # list fields: one action type picked out of each
    "actions.<action_type>": (
        "Results of an action type",
        "count",
        "The number of actions of the chosen type attributed to the ads in the period, under"
        " the account's attribution setting.",
    ),
    "unique_actions.<action_type>": (
        "Unique results of an action type",
        "count",
        "The number of accounts that took an action of the chosen type (estimated).",
    ),
    "conversions.<action_type>": (
        "Conversions of a type",
        "count",
        "The number of conversions of the chosen type (custom conversions and standard events"
        " reported as conversions) attributed to the ads in the period.",
    ),
    "action_values.<action_type>": (
        "Value of an action type",
        "money",
        f"The total value the pixel, app or offline events reported for actions of the chosen"
        f" type, {_CURRENCY}.",
    ),
    "conversion_values.<action_type>": (
        "Value of a conversion type",
        "money",
        f"The total value reported for conversions of the chosen type, {_CURRENCY}.",
    ),
    "cost_per_action_type.<action_type>": (
        "Cost per result of an action type",
        "money",
        f"Amount spent ÷ actions of the chosen type, {_CURRENCY}. {_RATIO_NOTE}",
    ),
    "cost_per_unique_action_type.<action_type>": (
        "Cost per unique result of an action type",
        "money",
        f"Amount spent ÷ accounts that took an action of the chosen type, {_CURRENCY}."
        f" {_RATIO_NOTE}",
    ),
    "cost_per_conversion.<action_type>": (
        "Cost per conversion of a type",
        "money",
        f"Amount spent ÷ conversions of the chosen type, {_CURRENCY}. {_RATIO_NOTE}",
    ),
    "purchase_roas.<action_type>": (
        "Purchase ROAS (return on ad spend)",
        "multiple",
        f"Purchase value ÷ amount spent, for the chosen purchase type. {_RATIO_NOTE}",
    ),
    "website_purchase_roas.<action_type>": (
        "Website purchase ROAS",
        "multiple",
        f"Website purchase value (from the pixel) ÷ amount spent. {_RATIO_NOTE}",
    ),
    "mobile_app_purchase_roas.<action_type>": (
        "Mobile app purchase ROAS",
        "multiple",
        f"In-app purchase value ÷ amount spent. {_RATIO_NOTE}",
    ),
    # special keys: read now, not for a period
    "current_hour": (
        "Current hour",
        "hour",
        "The hour of the day now in the ad account's timezone, 0 to 23.",
    ),
    "hours_left_today": (
        "Hours left today",
        "hours",
        "Hours until midnight in the ad account's timezone, when daily budgets reset.",
    ),
    "custom:<name>": (
        "Custom metric",
        "ratio",
        "A number for each campaign or ad set read from the rule's Google Sheet"
        " (custom_metrics), in the column of that name.",
    ),
    "daily_budget": (
        "Daily budget",
        "money",
        f"The campaign's or ad set's daily budget now, {_CURRENCY}.",
    ),
    "lifetime_budget": (
        "Lifetime budget",
        "money",
        f"The campaign's or ad set's lifetime budget now, {_CURRENCY}.",
    ),
    "remaining_budget": (
        "Remaining budget",
        "money",
        f"What is left of the budget now, as Meta reports it (budget_remaining), {_CURRENCY}.",
    ),
    "age_hours": (
        "Hours since creation",
        "hours",
        "Hours since the campaign or ad set was created.",
    ),
    "hours_since_creation": (
        "Hours since creation (Meta's name)",
        "hours",
        "The same as age_hours, under the name Meta's Ad Rules use.",
    ),
    "budget_spent_pct": (
        "Daily budget spent so far",
        "percent",
        "Today's amount spent ÷ daily budget × 100, in the ad account's day.",
    ),
    "budget_utilization": (
        "Spend against the daily budget over a period",
        "percent",
        "The period's amount spent ÷ (daily budget × its days) × 100 (default: today). Meta"
        " may spend up to 75 % over a daily budget on a day, never over 7 × it in a calendar"
        " week (Sunday to Saturday): today reads up to 175, the week (this_week_sun_today) 100"
        " at most by Saturday; a rolling 7 days may read a little over 100.",
    ),
    "estimated_budget_spending_percentage": (
        "Estimated daily budget spent by midnight",
        "percent",
        "Today's amount spent, projected to the whole day at its pace so far, ÷ daily budget"
        " × 100 (no data early in the day).",
    ),
}

#: The action types offered by name, with a label for many (plural) and for one.
ACTION_TYPE_NAMES: Final[dict[str, tuple[str, str]]] = {
    "omni_purchase": ("Purchases", "purchase"),
    "purchase": ("Purchase events", "purchase event"),
    "add_to_cart": ("Adds to cart", "add to cart"),
    "initiate_checkout": ("Checkouts initiated", "checkout initiated"),
    "lead": ("Leads", "lead"),
    "complete_registration": ("Registrations completed", "registration completed"),
    "link_click": ("Link clicks", "link click"),
    "landing_page_view": ("Landing page views", "landing page view"),
    "view_content": ("Content views", "content view"),
    "mobile_app_install": ("App installs", "app install"),
}
#: The concrete dotted names listed per list field (the rest through its pattern entry).
_CONCRETE: Final[dict[str, tuple[str, ...]]] = {
    "actions": tuple(ACTION_TYPE_NAMES),
    "action_values": ("omni_purchase", "purchase", "add_to_cart", "initiate_checkout"),
    "cost_per_action_type": (
        "omni_purchase",
        "purchase",
        "add_to_cart",
        "initiate_checkout",
        "lead",
        "complete_registration",
        "link_click",
        "landing_page_view",
        "mobile_app_install",
    ),
    "purchase_roas": ("omni_purchase",),
    "website_purchase_roas": ("offsite_conversion.fb_pixel_purchase",),
    "mobile_app_purchase_roas": ("app_custom_event.fb_mobile_purchase",),
}

#: The metric groups, in the order the form offers them.
GROUPS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "Spend and cost",
        (
            "spend",
            "social_spend",
            "cpm",
            "cpp",
            "cpc",
            "cost_per_inline_link_click",
            "cost_per_unique_click",
        ),
    ),
    ("Delivery", ("impressions", "reach", "frequency")),
    (
        "Clicks",
        (
            "clicks",
            "unique_clicks",
            "inline_link_clicks",
            "unique_inline_link_clicks",
            "ctr",
            "unique_ctr",
            "inline_link_click_ctr",
            "unique_link_clicks_ctr",
        ),
    ),
    ("Conversions", ("actions", "unique_actions", "conversions")),
    (
        "Value and ROAS",
        (
            "action_values",
            "conversion_values",
            "purchase_roas",
            "website_purchase_roas",
            "mobile_app_purchase_roas",
        ),
    ),
    ("Results", ("results", "cost_per_result")),
    (
        "Cost per result",
        ("cost_per_action_type", "cost_per_unique_action_type", "cost_per_conversion"),
    ),
    ("Rankings (ads)", ("quality_ranking", "engagement_rate_ranking", "conversion_rate_ranking")),
    (
        "Budget",
        (
            "daily_budget",
            "lifetime_budget",
            "remaining_budget",
            "budget_spent_pct",
            "estimated_budget_spending_percentage",
            "budget_utilization",
        ),
    ),
    ("Time", ("current_hour", "hours_left_today", "age_hours", "hours_since_creation")),
    ("Custom", ("custom:<name>",)),
)

#: Every period the rule format takes → its label, in the order the form offers them.
#: ``last_Nd`` ends yesterday (as Ads Manager's "Last N days"); ``last_N_days`` includes
#: today; ``last_nd_A_B`` runs from A days ago to B days ago (today is 0 days ago).
PERIOD_LABELS: Final[dict[str, str]] = {
    "today": "Today",
    "yesterday": "Yesterday",
    "last_2d": "Last 2 days",
    "last_3d": "Last 3 days",
    "last_7d": "Last 7 days",
    "last_14d": "Last 14 days",
    "last_28d": "Last 28 days",
    "last_30d": "Last 30 days",
    "last_90d": "Last 90 days",
    "last_2_days": "Last 2 days (including today)",
    "last_3_days": "Last 3 days (including today)",
    "last_7_days": "Last 7 days (including today)",
    "last_14_days": "Last 14 days (including today)",
    "last_28_days": "Last 28 days (including today)",
    "last_30_days": "Last 30 days (including today)",
    "this_week_mon_today": "This week (Monday to today)",
    "this_week_sun_today": "This week (Sunday to today)",
    "this_month": "This month",
    "last_month": "Last month",
    "maximum": "Maximum (all the data Meta has)",
    "last_nd_14_8": "Days 14 to 8 ago",
    "last_nd_30_8": "Days 30 to 8 ago",
    "last_nd_60_8": "Days 60 to 8 ago",
    "last_nd_120_8": "Days 120 to 8 ago",
    "last_nd_180_8": "Days 180 to 8 ago",
    "last_nd_lifetime_8": "Lifetime up to 8 days ago",
    "last_nd_60_29": "Days 60 to 29 ago",
    "last_nd_120_29": "Days 120 to 29 ago",
    "last_nd_180_29": "Days 180 to 29 ago",
    "last_nd_lifetime_29": "Lifetime up to 29 days ago",
}
#: Other spellings the rule format takes for a period → the period they mean. None today:
#: ``last_N_days`` includes today and ``last_Nd`` does not, so neither names the other.
PERIOD_ALIASES: Final[dict[str, str]] = {}

OPERATOR_LABELS: Final[dict[str, str]] = {
    ">": "is greater than",
    ">=": "is at least",
    "<": "is less than",
    "<=": "is at most",
    "==": "equals",
    "!=": "does not equal",
    "IN_RANGE": "is between",
    "NOT_IN_RANGE": "is not between",
}
FILTER_OPERATOR_LABELS: Final[dict[str, str]] = {
    "EQUAL": "is",
    "NOT_EQUAL": "is not",
    "GREATER_THAN": "is greater than",
    "GREATER_THAN_OR_EQUAL": "is at least",
    "LESS_THAN": "is less than",
    "LESS_THAN_OR_EQUAL": "is at most",
    "IN": "is any of",
    "NOT_IN": "is none of",
    "CONTAIN": "contains",
    "NOT_CONTAIN": "does not contain",
}

#: Meta's objectives (the outcome-based ones every new campaign has).
OBJECTIVES: Final = (
    "OUTCOME_AWARENESS",
    "OUTCOME_TRAFFIC",
    "OUTCOME_ENGAGEMENT",
    "OUTCOME_LEADS",
    "OUTCOME_APP_PROMOTION",
    "OUTCOME_SALES",
)
#: The effective_status values a campaign, an ad set and an ad can have.
LEVEL_STATUSES: Final[dict[str, tuple[str, ...]]] = {
    "campaign": ("ACTIVE", "PAUSED", "IN_PROCESS", "WITH_ISSUES", "ARCHIVED", "DELETED"),
    "adset": (
        "ACTIVE",
        "PAUSED",
        "CAMPAIGN_PAUSED",
        "IN_PROCESS",
        "WITH_ISSUES",
        "ARCHIVED",
        "DELETED",
    ),
    "ad": (
        "ACTIVE",
        "PAUSED",
        "ADSET_PAUSED",
        "CAMPAIGN_PAUSED",
        "PENDING_REVIEW",
        "DISAPPROVED",
        "PREAPPROVED",
        "PENDING_BILLING_INFO",
        "IN_PROCESS",
        "WITH_ISSUES",
        "ARCHIVED",
        "DELETED",
    ),
}
LEVEL_LABELS: Final[dict[str, str]] = {"campaign": "Campaigns", "adset": "Ad sets", "ad": "Ads"}
#: Filter field → (label, kind), per level; the field names are FILTER_FIELDS'.
_FILTER_TEXTS: Final[dict[str, dict[str, tuple[str, str]]]] = {
    "campaign": {
        "name": ("Name", "text"),
        "id": ("ID", "id"),
        "effective_status": ("Delivery status", "status"),
        "objective": ("Objective", "choice"),
        "campaign.name": ("Campaign name", "text"),
        "campaign.id": ("Campaign ID", "id"),
    },
    "adset": {
        "name": ("Name", "text"),
        "id": ("ID", "id"),
        "effective_status": ("Delivery status", "status"),
        "adset.name": ("Ad set name", "text"),
        "adset.id": ("Ad set ID", "id"),
        "campaign.name": ("Campaign name", "text"),
        "campaign.id": ("Campaign ID", "id"),
        "campaign.objective": ("Campaign objective", "choice"),
    },
    "ad": {
        "name": ("Name", "text"),
        "id": ("ID", "id"),
        "effective_status": ("Delivery status", "status"),
        "ad.name": ("Ad name", "text"),
        "ad.id": ("Ad ID", "id"),
        "adset.name": ("Ad set name", "text"),
        "adset.id": ("Ad set ID", "id"),
        "campaign.name": ("Campaign name", "text"),
        "campaign.id": ("Campaign ID", "id"),
    },
}
ACTION_LABELS: Final[dict[str, str]] = {
    "pause": "Pause",
    "activate": "Activate",
    "increase_budget": "Increase daily budget by %",
    "decrease_budget": "Decrease daily budget by %",
    "set_budget": "Set daily budget",
    "rename": "Rename",
    "append_to_name": "Add text to the end of the name",
    "prepend_to_name": "Add text to the start of the name",
    "duplicate": "Duplicate",
    "notify": "Send a notification",
    "change_bid": "Change bid",
    "scale_to_target": "Scale budget towards a target",
    "rebalance_budget": "Rebalance budget among the matched, by a metric",
    "set_spend_limit": "Set an ad set's spend cap or minimum spend target",
    "increase_spend_limit": "Increase an ad set's spend cap or minimum spend target by %",
    "decrease_spend_limit": "Decrease an ad set's spend cap or minimum spend target by %",
    "schedule_budget": "Schedule a higher daily budget for a window",
}
FOLLOWUP_LABELS: Final[dict[str, str]] = {
    "activate": "Activate",
    "pause": "Pause",
    "restore_budget": "Restore the budget",
    "restore_name": "Restore the name",
    "notify": "Send a notification",
}


def _metric(name: str, template: str | None = None) -> dict[str, Any]:
    """One metric entry; ``template`` is the known name a concrete dotted name comes from."""
    label, unit, description = METRIC_TEXTS[template or name]
    pattern = "<" in name
    spec = resolve_metric(name.replace("<action_type>", "x").replace("<name>", "x"))
    entry = {
        "name": name,
        "label": label,
        "description": description,
        "unit": unit,
        "needs_period": spec.needs_period,
        "target": scaling_direction(spec),
        "pattern": pattern,
        "levels": list(metric_levels(spec)),
    }
    if spec.ranking:
        entry["scale"] = list(RANKING_SCALE)
    if template is not None:
        entry.update(_concrete_texts(name))
    return entry


def _action_levels(action_type: str) -> list[str]:
    if action_type in ADSET_ACTIONS:
        return ["adset"]
    if action_type in BUDGET_ACTIONS | SCHEDULE_ACTIONS:
        return ["campaign", "adset"]
    return list(LEVELS)


def _concrete_texts(name: str) -> dict[str, str]:
    field, _, action_type = name.partition(".")
    many, one = ACTION_TYPE_NAMES.get(action_type, ("Purchases", "purchase"))
    if field == "actions":
        return {
            "label": many,
            "description": f"The number of {many.lower()} attributed to the ads in the period,"
            f" under the account's attribution setting (action type {action_type}).",
        }
    if field == "action_values":
        return {
            "label": f"{one.capitalize()} value",
            "description": f"The total value reported for {many.lower()} ({action_type}),"
            f" {_CURRENCY}.",
        }
    if field == "cost_per_action_type":
        return {
            "label": f"Cost per {one}",
            "description": f"Amount spent ÷ {many.lower()} ({action_type}), {_CURRENCY}."
            f" {_RATIO_NOTE}",
        }
    labels = {
        "purchase_roas": "ROAS (purchases)",
        "website_purchase_roas": "Website purchase ROAS",
        "mobile_app_purchase_roas": "Mobile app purchase ROAS",
    }
    return {"label": labels[field]}


def _group_metrics(names: tuple[str, ...]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for name in names:
        if name in _LIST_FIELDS:
            template = f"{name}.<action_type>"
            entries.extend(_metric(f"{name}.{t}", template) for t in _CONCRETE.get(name, ()))
            entries.append(_metric(template))
        else:
            entries.append(_metric(name))
    return entries


def _filter_fields(level: str) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = []
    for field, (label, kind) in _FILTER_TEXTS[level].items():
        entry: dict[str, Any] = {"field": field, "label": label, "kind": kind}
        if kind == "status":
            entry["values"] = list(LEVEL_STATUSES[level])
        elif kind == "choice":
            entry["values"] = list(OBJECTIVES)
        fields.append(entry)
    return fields


def _timezones() -> list[str]:
    return sorted(z for z in available_timezones() if not z.startswith(("posix/", "right/")))


def vocabulary() -> dict[str, Any]:
    """The rule builder's vocabulary, JSON-ready (see docs/api.md, ``/api/rules/vocabulary``)."""
    return {
        "schema": rule_json_schema(),
        "levels": [{"value": v, "label": label} for v, label in LEVEL_LABELS.items()],
        "metrics": [{"group": g, "metrics": _group_metrics(names)} for g, names in GROUPS],
        "action_types": list(ACTION_TYPE_NAMES),
        "periods": [{"value": v, "label": label} for v, label in PERIOD_LABELS.items()],
        "period_aliases": dict(PERIOD_ALIASES),
        "operators": [{"value": v, "label": OPERATOR_LABELS[v]} for v in get_args(Operator)],
        "filter_operators": [
            {"value": v, "label": FILTER_OPERATOR_LABELS[v]} for v in get_args(FilterOperator)
        ],
        "filter_fields": {level: _filter_fields(level) for level in FILTER_FIELDS},
        "effective_statuses": {level: list(LEVEL_STATUSES[level]) for level in FILTER_FIELDS},
        "action_kinds": [
            {
                "type": t,
                "label": ACTION_LABELS[t],
                "levels": _action_levels(t),
            }
            for t in ACTION_TYPES
        ],
        "followups": [{"value": v, "label": FOLLOWUP_LABELS[v]} for v in get_args(FollowUpDo)],
        "timezones": _timezones(),
    }
