"""Meta's ad rule specs: their enums, their validation, and the form Meta reads them back in.

The enums are those of Meta's Marketing API "Ad Rules" pages and of the ``AdRule*``
classes of Meta's Python SDK. Validation is stricter than "any JSON" and no stricter
than the docs: a shape the docs call wrong is error 100 naming the field by its path
(``evaluation_spec.filters[2].operator``); a field the docs do not list is accepted.
Numbers may arrive as numbers or as numeric strings (the read-back form). Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

from graph_sandbox.errors import GraphError, invalid_param

EVALUATION_TYPES: Final = ("SCHEDULE", "TRIGGER")
FILTER_OPERATORS: Final = (
    "GREATER_THAN",
    "LESS_THAN",
    "EQUAL",
    "NOT_EQUAL",
    "IN_RANGE",
    "NOT_IN_RANGE",
    "IN",
    "NOT_IN",
    "CONTAIN",
    "NOT_CONTAIN",
    "ANY",
    "ALL",
    "NONE",
)
TRIGGER_TYPES: Final = (
    "METADATA_CREATION",
    "METADATA_UPDATE",
    "STATS_MILESTONE",
    "STATS_CHANGE",
    "DELIVERY_INSIGHTS_CHANGE",
)
#: Presets that include today: the only ones trigger rules take.
TODAY_PRESETS: Final = (
    "LIFETIME",
    "TODAY",
    "LAST_2_DAYS",
    "LAST_3_DAYS",
    "LAST_7_DAYS",
    "LAST_14_DAYS",
    "LAST_28_DAYS",
    "LAST_30_DAYS",
    "THIS_MONTH",
    "THIS_WEEK_MON_TODAY",
    "THIS_WEEK_SUN_TODAY",
)
TIME_PRESETS: Final = (
    *TODAY_PRESETS,
    "YESTERDAY",
    "LAST_2D",
    "LAST_3D",
    "LAST_7D",
    "LAST_14D",
    "LAST_28D",
    "LAST_30D",
    "LAST_ND_14_8",
    "LAST_ND_30_8",
    "LAST_ND_60_8",
    "LAST_ND_120_8",
    "LAST_ND_180_8",
    "LAST_ND_LIFETIME_8",
    "LAST_ND_60_29",
    "LAST_ND_120_29",
    "LAST_ND_180_29",
    "LAST_ND_LIFETIME_29",
)
# The evaluation spec page allows only ACCOUNT_DEFAULT; its ROAS page uses 7D_CLICK and
# 1D_VIEW_1D_CLICK. Both are taken.
_ATTRIBUTION_WINDOW = re.compile(
    r"^(ACCOUNT_DEFAULT|(1|7|28)D_(VIEW|CLICK)|1D_VIEW_(1|7|28)D_CLICK)$"
)
ENTITY_TYPES: Final = ("AD", "ADSET", "CAMPAIGN")
RULE_EFFECTIVE_STATUSES: Final = (
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
)
#: ``AdRuleExecutionSpec.ExecutionType`` of the SDK; the docs describe the first nine.
EXECUTION_TYPES: Final = (
    "NOTIFICATION",
    "PAUSE",
    "UNPAUSE",
    "CHANGE_BUDGET",
    "CHANGE_CAMPAIGN_BUDGET",
    "CHANGE_BID",
    "ROTATE",
    "REBALANCE_BUDGET",
    "PING_ENDPOINT",
    "ADD_INTEREST_RELAXATION",
    "ADD_QUESTIONNAIRE_INTERESTS",
    "AD_RECOMMENDATION_APPLY",
    "AUDIENCE_CONSOLIDATION",
    "AUDIENCE_CONSOLIDATION_ASK_FIRST",
    "DCO",
    "INCREASE_RADIUS",
    "UPDATE_CREATIVE",
    "UPDATE_LAX_BUDGET",
    "UPDATE_LAX_DURATION",
)
_SCHEDULE_ONLY = frozenset(
    {"CHANGE_BUDGET", "CHANGE_CAMPAIGN_BUDGET", "CHANGE_BID", "ROTATE", "REBALANCE_BUDGET"}
)
_CHANGES = frozenset({"CHANGE_BUDGET", "CHANGE_CAMPAIGN_BUDGET", "CHANGE_BID"})
#: The level each action applies to, per the execution spec page.
_ACTION_LEVEL = {
    "CHANGE_BUDGET": "ADSET",
    "CHANGE_BID": "ADSET",
    "REBALANCE_BUDGET": "ADSET",
    "CHANGE_CAMPAIGN_BUDGET": "CAMPAIGN",
    "ROTATE": "AD",
}
OPTION_OPERATORS: Final = ("EQUAL", "IN")
#: Each execution option and the actions it goes with (``None``: every schedule action).
_OPTIONS: dict[str, frozenset[str] | None] = {
    "user_ids": None,
    "change_spec": _CHANGES,
    "rebalance_spec": frozenset({"REBALANCE_BUDGET"}),
    "execution_count_limit": _CHANGES,
    "action_frequency": _CHANGES,
}
CHANGE_UNITS: Final = ("ACCOUNT_CURRENCY", "PERCENTAGE")
# The four types the rebalance page lists, and INVERSE_PROPORTIONAL, which its first
# example uses.
REBALANCE_TYPES: Final = (
    "EVEN",
    "PROPORTIONAL",
    "NO_PAUSE_PROPORTIONAL",
    "MATCHED_ONLY_PROPORTIONAL",
    "INVERSE_PROPORTIONAL",
)
SCHEDULE_TYPES: Final = ("DAILY", "HOURLY", "SEMI_HOURLY", "CUSTOM")
#: Statuses a rule can be given; Meta also reports ``DELETED`` and ``HAS_ISSUES``.
WRITABLE_STATUSES: Final = ("ENABLED", "DISABLED")
RULE_STATUSES: Final = (*WRITABLE_STATUSES, "DELETED", "HAS_ISSUES")

#: Insights fields of the evaluation spec page: a rule filtering on one needs a time_preset.
INSIGHTS_FIELDS: Final = frozenset(
    {
        "mobile_app_purchase_roas",
        "website_purchase_roas",
        "impressions",
        "unique_impressions",
        "clicks",
        "unique_clicks",
        "spent",
        "results",
        "cost_per",
        "cpc",
        "cpm",
        "ctr",
        "cpa",
        "cpp",
        "reach",
        "frequency",
        "leadgen",
        "link_ctr",
        "cost_per_unique_click",
        "result_rate",
        "mobile_app_install",
        "cost_per_mobile_app_install",
        "app_custom_event",
        "offline_conversion",
        "offsite_conversion",
        "cost_per_offline_conversion",
        "link_click",
        "cost_per_link_click",
        "like",
        "offsite_engagement",
        "post",
        "post_comment",
        "post_engagement",
        "cost_per_post_engagement",
        "post_like",
        "post_reaction",
        "view_content",
        "video_play",
        "video_view",
        "vote",
        "lifetime_impressions",
        "lifetime_spent",
        "today_spent",
        "yesterday_spent",
        "daily_ratio_spent",
        "lifetime_ratio_spent",
        "audience_reached_percentage",
    }
)
_INSIGHTS_PREFIXES = (
    "app_custom_event.",
    "offline_conversion.",
    "offsite_conversion.",
    "cost_per_",
)

_MILESTONE_MINIMUMS = {
    "impressions": 1000,
    "unique_impressions": 1000,
    "reach": 1000,
    "clicks": 10,
    "unique_clicks": 10,
    "spent": 1000,
    "results": 5,
}
_MOBILE_EVENTS = [
    "achievement_unlocked",
    "activate_app",
    "add_payment_info",
    "add_to_cart",
    "add_to_wishlist",
    "complete_registration",
    "content_view",
    "initiated_checkout",
    "level_achieved",
    "purchase",
    "rate",
    "search",
    "spent_credits",
    "tutorial_completion",
]
_PIXEL_EVENTS = [
    "add_payment_info",
    "add_to_cart",
    "add_to_wishlist",
    "complete_registration",
    "initiate_checkout",
    "lead",
    "other",
    "purchase",
    "search",
    "view_content",
]
#: Fields a STATS_MILESTONE trigger takes (minimum value 1 unless listed above).
MILESTONE_FIELDS: Final = frozenset(
    {
        *_MILESTONE_MINIMUMS,
        "app_custom_event",
        "app_custom_event_other",
        *(f"app_custom_event_fb_mobile_{event}" for event in _MOBILE_EVENTS),
        *(f"offsite_conversion_fb_pixel_{event}" for event in _PIXEL_EVENTS),
        *[
            "leadgen",
            "like",
            "link_click",
            "mobile_app_install",
            "offsite_conversion",
            "offsite_conversion_add_to_cart",
            "offsite_conversion_checkout",
            "offsite_engagement",
            "post",
            "post_comment",
            "post_engagement",
            "post_like",
            "post_reaction",
            "view_content",
            "video_play",
            "video_view",
            "vote",
        ],
    }
)
_STATS_CHANGE_OPERATORS = ("GREATER_THAN", "LESS_THAN", "IN_RANGE", "NOT_IN_RANGE")
_LIST_OPERATORS = frozenset({"IN", "NOT_IN", "ANY", "ALL", "NONE"})
_RANGE_OPERATORS = frozenset({"IN_RANGE", "NOT_IN_RANGE"})
_MINUTES_PER_DAY = 1440


def _fail(path: str, message: str) -> GraphError:
    return invalid_param(f"{path} {message}")


def _one_of(values: tuple[str, ...]) -> str:
    return f"must be one of {{{', '.join(values)}}}"


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "must be a JSON object")
    return value


def _enum(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _fail(path, _one_of(allowed))
    return value


def number(value: Any, path: str) -> float:
    """A number, or a numeric string as rules read back carry them.

    Raises:
        GraphError: 100 naming ``path`` for anything else (booleans included).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail(path, "must be a number")
    try:
        parsed = float(value)
    except ValueError:
        raise _fail(path, "must be a number") from None
    if not math.isfinite(parsed):
        raise _fail(path, "must be a finite number")
    return parsed


def _integer(value: Any, path: str, *, minimum: int) -> int:
    parsed = number(value, path)
    if not parsed.is_integer() or parsed < minimum:
        raise _fail(path, f"must be an integer of at least {minimum}")
    return int(parsed)


def _scalar(value: Any, path: str) -> None:
    if not isinstance(value, str | int | float | bool):
        raise _fail(path, "must be a number, a string or a boolean")


def _filter_value(operator: str, value: Any, path: str) -> None:
    """The value a filter (or trigger) operator takes, as the evaluation spec page lists them."""
    if operator in _RANGE_OPERATORS:
        if not isinstance(value, list) or len(value) != 2:
            raise _fail(path, f"must be a [low, high] pair for {operator}")
        low, high = number(value[0], f"{path}[0]"), number(value[1], f"{path}[1]")
        if low > high:
            raise _fail(path, "must have its low bound first")
    elif operator in _LIST_OPERATORS:
        if not isinstance(value, list) or not value:
            raise _fail(path, f"must be a non-empty list for {operator}")
        for index, item in enumerate(value):
            _scalar(item, f"{path}[{index}]")
    elif operator in ("GREATER_THAN", "LESS_THAN"):
        number(value, path)
    elif operator in ("CONTAIN", "NOT_CONTAIN"):
        if not isinstance(value, str):
            raise _fail(path, f"must be a string for {operator}")
    else:
        _scalar(value, path)


def _condition(
    raw: Any, path: str, *, operators: tuple[str, ...] = FILTER_OPERATORS
) -> tuple[str, str, Any]:
    """A ``{field, value, operator}`` object, checked; its parts."""
    entry = _object(raw, path)
    for key in ("field", "value", "operator"):
        if key not in entry:
            raise _fail(f"{path}.{key}", "is required")
    field = entry["field"]
    if not isinstance(field, str) or not field.strip():
        raise _fail(f"{path}.field", "must be a non-empty string")
    operator = _enum(entry["operator"], f"{path}.operator", operators)
    _filter_value(operator, entry["value"], f"{path}.value")
    return field, operator, entry["value"]


def _is_insights(field: str) -> bool:
    return field in INSIGHTS_FIELDS or field.startswith(_INSIGHTS_PREFIXES)


def validate_evaluation_spec(raw: Any) -> tuple[str, str | None]:
    """Check an ``evaluation_spec``; its evaluation type and its ``entity_type`` (if any).

    Raises:
        GraphError: 100 naming the first field that is wrong.
    """
    spec = _object(raw, "evaluation_spec")
    evaluation_type = _enum(
        spec.get("evaluation_type"), "evaluation_spec.evaluation_type", EVALUATION_TYPES
    )
    filters = spec.get("filters")
    if not isinstance(filters, list):
        raise _fail("evaluation_spec.filters", "must be a list of {field, value, operator}")
    seen: dict[str, Any] = {}
    insights = False
    for index, raw_filter in enumerate(filters):
        path = f"evaluation_spec.filters[{index}]"
        field, operator, value = _condition(raw_filter, path)
        _special_filter(field, operator, value, path, evaluation_type, seen)
        insights = insights or _is_insights(field)
    trigger_type = _trigger(spec.get("trigger"), evaluation_type)
    if "entity_type" not in seen and "id" not in seen:
        raise _fail("evaluation_spec.filters", "must have an entity_type or an id filter")
    preset = seen.get("time_preset")
    needs_preset = insights or trigger_type in ("STATS_MILESTONE", "STATS_CHANGE")
    if needs_preset and preset is None:
        raise _fail("evaluation_spec.filters", "must have a time_preset filter (Insights filters)")
    if evaluation_type == "TRIGGER" and preset is not None and preset not in TODAY_PRESETS:
        raise _fail(
            "evaluation_spec.filters", f"time_preset of a trigger rule {_one_of(TODAY_PRESETS)}"
        )
    if trigger_type == "STATS_MILESTONE" and preset != "LIFETIME":
        raise _fail("evaluation_spec.filters", "time_preset must be LIFETIME for STATS_MILESTONE")
    entity_type = seen.get("entity_type")
    return evaluation_type, entity_type if isinstance(entity_type, str) else None


def _special_filter(
    field: str, operator: str, value: Any, path: str, evaluation_type: str, seen: dict[str, Any]
) -> None:
    """The filters the evaluation spec page gives rules of their own."""
    if field in ("time_preset", "entity_type", "attribution_window"):
        _single_filter(field, operator, value, path, evaluation_type)
        if field in seen:
            raise _fail(path, f"is a second {field} filter: a rule takes one")
        seen[field] = value
    elif field == "effective_status":
        if evaluation_type != "SCHEDULE":
            raise _fail(path, "effective_status filters are only for SCHEDULE rules")
        if operator not in ("IN", "NOT_IN"):
            raise _fail(f"{path}.operator", "must be IN or NOT_IN for effective_status")
        for index, item in enumerate(value):
            _enum(item, f"{path}.value[{index}]", RULE_EFFECTIVE_STATUSES)
    elif field == "id" or field.endswith(".id"):
        if operator not in ("EQUAL", "IN", "NOT_IN"):
            raise _fail(f"{path}.operator", f"must be EQUAL, IN or NOT_IN for {field}")
        if not isinstance(value, list):
            _integer(value, f"{path}.value", minimum=0)
        for index, item in enumerate(value if isinstance(value, list) else []):
            _integer(item, f"{path}.value[{index}]", minimum=0)
        seen.setdefault(field, value)


def _single_filter(field: str, operator: str, value: Any, path: str, evaluation_type: str) -> None:
    """``time_preset``, ``entity_type``, ``attribution_window``: EQUAL, one of Meta's values."""
    if operator != "EQUAL":
        raise _fail(f"{path}.operator", f"must be EQUAL for {field}")
    if field == "time_preset":
        _enum(value, f"{path}.value", TIME_PRESETS)
    elif field == "entity_type":
        _enum(value, f"{path}.value", ENTITY_TYPES)
    elif evaluation_type != "SCHEDULE":
        raise _fail(path, "attribution_window is only for SCHEDULE rules")
    elif not isinstance(value, str) or not _ATTRIBUTION_WINDOW.match(value):
        raise _fail(f"{path}.value", "must be ACCOUNT_DEFAULT or a window like 7D_CLICK")


def _trigger(raw: Any, evaluation_type: str) -> str | None:
    """Check the ``trigger`` (required for, and only for, TRIGGER rules); its type."""
    path = "evaluation_spec.trigger"
    if evaluation_type == "SCHEDULE":
        if raw is not None:
            raise _fail(path, "is only for TRIGGER rules")
        return None
    if raw is None:
        raise _fail(path, "is required for TRIGGER rules")
    trigger = _object(raw, path)
    trigger_type = _enum(trigger.get("type"), f"{path}.type", TRIGGER_TYPES)
    if trigger_type == "METADATA_CREATION":
        return trigger_type
    field = trigger.get("field")
    if not isinstance(field, str) or not field.strip():
        raise _fail(f"{path}.field", f"is required for {trigger_type}")
    if trigger_type == "METADATA_UPDATE" and "operator" not in trigger and "value" not in trigger:
        return trigger_type
    for key in ("operator", "value"):
        if key not in trigger:
            raise _fail(f"{path}.{key}", f"is required for {trigger_type}")
    operator = _enum(trigger["operator"], f"{path}.operator", FILTER_OPERATORS)
    _filter_value(operator, trigger["value"], f"{path}.value")
    if trigger_type == "STATS_MILESTONE":
        _milestone(field, operator, trigger["value"], path)
    elif trigger_type == "STATS_CHANGE" and operator not in _STATS_CHANGE_OPERATORS:
        raise _fail(f"{path}.operator", f"{_one_of(_STATS_CHANGE_OPERATORS)} for STATS_CHANGE")
    return trigger_type


def _milestone(field: str, operator: str, value: Any, path: str) -> None:
    if field not in MILESTONE_FIELDS:
        raise _fail(f"{path}.field", "is not a field STATS_MILESTONE triggers on")
    if operator != "EQUAL":
        raise _fail(f"{path}.operator", "must be EQUAL for STATS_MILESTONE")
    minimum = _MILESTONE_MINIMUMS.get(field, 1)
    if number(value, f"{path}.value") < minimum:
        raise _fail(f"{path}.value", f"must be at least {minimum} for {field}")


def validate_execution_spec(raw: Any, evaluation_type: str, entity_type: str | None) -> str:
    """Check an ``execution_spec`` against the rule's evaluation; its execution type.

    Raises:
        GraphError: 100 naming the first field that is wrong.
    """
    spec = _object(raw, "execution_spec")
    path = "execution_spec.execution_type"
    execution_type = _enum(spec.get("execution_type"), path, EXECUTION_TYPES)
    if evaluation_type == "TRIGGER" and execution_type in _SCHEDULE_ONLY:
        raise _fail(path, f"{execution_type} is only for SCHEDULE rules")
    if evaluation_type == "SCHEDULE" and execution_type == "PING_ENDPOINT":
        raise _fail(path, "PING_ENDPOINT is only for TRIGGER rules")
    level = _ACTION_LEVEL.get(execution_type)
    if level is not None and entity_type is not None and entity_type != level:
        raise _fail(path, f"{execution_type} applies to entity_type {level}, not {entity_type}")
    options = spec.get("execution_options", [])
    if not isinstance(options, list):
        raise _fail(
            "execution_spec.execution_options", "must be a list of {field, value, operator}"
        )
    given = {_option(raw_option, index, execution_type) for index, raw_option in enumerate(options)}
    required = {"CHANGE_BUDGET": "change_spec", "CHANGE_CAMPAIGN_BUDGET": "change_spec"}
    required |= {"CHANGE_BID": "change_spec", "REBALANCE_BUDGET": "rebalance_spec"}
    if execution_type in required and required[execution_type] not in given:
        raise _fail("execution_spec.execution_options", f"must have a {required[execution_type]}")
    return execution_type


def _option(raw: Any, index: int, execution_type: str) -> str:
    path = f"execution_spec.execution_options[{index}]"
    entry = _object(raw, path)
    for key in ("field", "value", "operator"):
        if key not in entry:
            raise _fail(f"{path}.{key}", "is required")
    field = _enum(entry["field"], f"{path}.field", tuple(_OPTIONS))
    _enum(entry["operator"], f"{path}.operator", OPTION_OPERATORS)
    allowed = _OPTIONS[field]
    if allowed is not None and execution_type not in allowed:
        raise _fail(f"{path}.field", f"{field} does not go with {execution_type}")
    value, value_path = entry["value"], f"{path}.value"
    if field == "user_ids":
        if not isinstance(value, list) or not value:
            raise _fail(value_path, "must be a non-empty list of user ids")
        for position, user in enumerate(value):
            _integer(user, f"{value_path}[{position}]", minimum=1)
    elif field == "change_spec":
        change_spec(value, value_path)
    elif field == "rebalance_spec":
        rebalance_spec(value, value_path)
    else:
        _integer(value, value_path, minimum=1)
    return str(field)


def change_spec(raw: Any, path: str) -> None:
    """``{amount, limit, unit, target_field}`` as the change spec page defines it."""
    spec = _object(raw, path)
    unknown = sorted(set(spec) - {"amount", "limit", "unit", "target_field"})
    if unknown:
        raise _fail(
            f"{path}.{unknown[0]}", "is not a change_spec field (amount, limit, unit, target_field)"
        )
    if "amount" not in spec:
        raise _fail(f"{path}.amount", "is required")
    number(spec["amount"], f"{path}.amount")
    target = spec.get("target_field")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        raise _fail(f"{path}.target_field", "must be an Insights field name")
    if "unit" in spec:
        _enum(spec["unit"], f"{path}.unit", CHANGE_UNITS)
    elif target is None:
        raise _fail(f"{path}.unit", "is required unless target_field is given")
    if "limit" in spec:
        if target is not None and isinstance(spec["limit"], list):
            _filter_value("IN_RANGE", spec["limit"], f"{path}.limit")
        else:
            number(spec["limit"], f"{path}.limit")


def rebalance_spec(raw: Any, path: str) -> None:
    """``{type, target_field, target_count, is_cross_campaign, is_inverse}``."""
    spec = _object(raw, path)
    known = {"type", "target_field", "target_count", "is_cross_campaign", "is_inverse"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise _fail(f"{path}.{unknown[0]}", "is not a rebalance_spec field")
    kind = _enum(spec.get("type"), f"{path}.type", REBALANCE_TYPES)
    target = spec.get("target_field")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        raise _fail(f"{path}.target_field", "must be an Insights field name")
    if target is None and (kind != "EVEN" or "target_count" in spec):
        raise _fail(f"{path}.target_field", "is required unless type is EVEN without target_count")
    if "target_count" in spec:
        _integer(spec["target_count"], f"{path}.target_count", minimum=1)
    for flag in ("is_cross_campaign", "is_inverse"):
        if flag in spec and not isinstance(spec[flag], bool):
            raise _fail(f"{path}.{flag}", "must be true or false")


def validate_schedule_spec(raw: Any, evaluation_type: str) -> None:
    """Check a ``schedule_spec``: required for SCHEDULE rules, refused for TRIGGER rules.

    Raises:
        GraphError: 100 naming the first field that is wrong.
    """
    if evaluation_type == "TRIGGER":
        if raw is not None:
            raise _fail("schedule_spec", "is not supported by TRIGGER rules")
        return
    if raw is None:
        raise _fail("schedule_spec", "is required for SCHEDULE rules")
    spec = _object(raw, "schedule_spec")
    schedule_type = _enum(spec.get("schedule_type"), "schedule_spec.schedule_type", SCHEDULE_TYPES)
    entries = spec.get("schedule")
    if schedule_type != "CUSTOM":
        if entries is not None:
            raise _fail("schedule_spec.schedule", "is only for schedule_type CUSTOM")
        return
    if not isinstance(entries, list) or not entries:
        raise _fail("schedule_spec.schedule", "must be a non-empty list for CUSTOM")
    for index, entry in enumerate(entries):
        _schedule_entry(entry, f"schedule_spec.schedule[{index}]")


def _schedule_entry(raw: Any, path: str) -> None:
    entry = _object(raw, path)
    unknown = sorted(set(entry) - {"start_minute", "end_minute", "days"})
    if unknown:
        raise _fail(
            f"{path}.{unknown[0]}", "is not a schedule field (start_minute, end_minute, days)"
        )
    if "start_minute" not in entry and "days" not in entry:
        raise _fail(path, "must have start_minute or days")
    minutes = {}
    for key in ("start_minute", "end_minute"):
        if key in entry:
            minute = _integer(entry[key], f"{path}.{key}", minimum=0)
            if minute % 30 or minute > _MINUTES_PER_DAY:
                raise _fail(f"{path}.{key}", "must be a multiple of 30 between 0 and 1440")
            minutes[key] = minute
    if (
        "start_minute" in minutes
        and minutes.get("end_minute", _MINUTES_PER_DAY) < minutes["start_minute"]
    ):
        raise _fail(f"{path}.end_minute", "must not be before start_minute")
    if "days" in entry:
        days = entry["days"]
        if not isinstance(days, list) or not days:
            raise _fail(f"{path}.days", "must be a non-empty list of days 0-6 (0 is Sunday)")
        for position, day in enumerate(days):
            if _integer(day, f"{path}.days[{position}]", minimum=0) > 6:
                raise _fail(f"{path}.days[{position}]", "must be a day 0-6 (0 is Sunday)")


#: ``AdRuleHistory.Action`` of the SDK: what a run did to an object.
HISTORY_ACTIONS: Final = tuple(
    [
        "BUDGET_NOT_REDISTRIBUTED",
        "CHANGED_BID",
        "CHANGED_BUDGET",
        "CONSOLIDATE_ASC_FRAGMENTATION",
        "CONSOLIDATE_FRAGMENTATION",
        "CONVERT_ASC_CP_SINGLE_INSTANCE",
        "EMAIL",
        "ENABLE_ADVANTAGE_CAMPAIGN_BUDGET",
        "ENABLE_ADVANTAGE_PLUS_AUDIENCE",
        "ENABLE_ADVANTAGE_PLUS_CREATIVE",
        "ENABLE_ADVANTAGE_PLUS_PLACEMENTS",
        "ENABLE_AUTOFLOW",
        "ENABLE_GEN_UNCROP",
        "ENABLE_LANDING_PAGE_VIEWS",
        "ENABLE_MUSIC",
        "ENABLE_PIXELLESS_LPV_OPTIMIZATION_GOAL",
        "ENABLE_PRODUCT_SET_BOOSTING",
        "ENABLE_REELS_PLACEMENTS",
        "ENABLE_SEMANTIC_BASED_AUDIENCE_EXPANSION",
        "ENABLE_SHOPS_ADS",
        "ENABLE_SHOPS_ADS_SAOFF",
        "ENABLE_WTWA_UPSELL_IN_DUPLICATION",
        "ENDPOINT_PINGED",
        "ERROR",
        "FACEBOOK_NOTIFICATION_SENT",
        "MESSAGE_SENT",
        "NOT_CHANGED",
        "PAUSED",
        "UNPAUSED",
    ]
)
HISTORY_OBJECT_TYPES: Final = ("AD", "ADSET", "CAMPAIGN")


def validate_rule(evaluation: Any, execution: Any, schedule: Any) -> None:
    """Check a rule's three specs together (an action must suit its evaluation).

    Raises:
        GraphError: 100 naming the first field that is wrong.
    """
    evaluation_type, entity_type = validate_evaluation_spec(evaluation)
    execution_type = validate_execution_spec(execution, evaluation_type, entity_type)
    if execution_type == "ROTATE":
        fields = {f.get("field") for f in evaluation["filters"]}
        if entity_type != "AD" or "adset.id" not in fields:
            raise _fail(
                "evaluation_spec.filters",
                "must have entity_type AD and an adset.id filter for ROTATE",
            )
    validate_schedule_spec(schedule, evaluation_type)


def read_back(value: Any) -> Any:
    """A filter or option value the way Meta reads it back: every number a string.

    Booleans and strings stay as they are; lists and objects are converted item by item.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, list):
        return [read_back(item) for item in value]
    if isinstance(value, Mapping):
        return {key: read_back(item) for key, item in value.items()}
    return value


def read_back_conditions(spec: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The ``{field, value, operator}`` list under ``key``, values as Meta reads them back."""
    return [{**item, "value": read_back(item.get("value"))} for item in spec.get(key, [])]
