"""The rule language's shared vocabulary: the base model, value types, bounds and checks.

Everything the rule format's models (:mod:`ruleengine.rules.language.model`,
:mod:`ruleengine.rules.language.action_types`, :mod:`ruleengine.rules.language.schedule`) have in
common:
the strict base model, the literal types, the bounds on money and dates, the patterns
(full matches, ASCII digits), and the checks of a timezone, an ad account id and a
time of day.
"""

from __future__ import annotations

import re
from datetime import date, time
from typing import Final, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict

Level = Literal["campaign", "adset", "ad"]
LEVELS: Final[tuple[Level, ...]] = ("campaign", "adset", "ad")
Status = Literal["ACTIVE", "PAUSED"]
Operator = Literal[">", ">=", "<", "<=", "==", "!=", "IN_RANGE", "NOT_IN_RANGE"]
#: The operators whose ``value`` is an inclusive ``[low, high]`` pair (Meta's Ad Rules names).
RANGE_OPERATORS: Final = frozenset({"IN_RANGE", "NOT_IN_RANGE"})
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Periods Graph's Insights ``date_preset`` knows, sent to Meta as they are.
InsightsPeriod = Literal[
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
    "this_week_sun_today",
    "maximum",
]
#: Meta's Ad Rules presets that Insights lacks, lower-cased: fetched with a ``time_range``.
AdRulesPeriod = Literal[
    "last_2d",
    "last_2_days",
    "last_3_days",
    "last_7_days",
    "last_14_days",
    "last_28_days",
    "last_30_days",
    "last_nd_14_8",
    "last_nd_30_8",
    "last_nd_60_8",
    "last_nd_120_8",
    "last_nd_180_8",
    "last_nd_lifetime_8",
    "last_nd_60_29",
    "last_nd_120_29",
    "last_nd_180_29",
    "last_nd_lifetime_29",
]
Period = Literal[InsightsPeriod, AdRulesPeriod]
RENAME_PLACEHOLDERS = frozenset({"name", "date", "rule"})
NOTIFY_PLACEHOLDERS = frozenset(
    {
        "rule",
        "task",
        "level",
        "account",
        "account_name",
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

# The largest budget a rule may name: 10^12 — in minor units (format 1) ten billion in a
# two-decimal currency, in currency units (format 2) 10^14 minor units; far above any real
# daily budget and well inside BSON's int64, so a typo is refused instead of reaching Meta.
MAX_BUDGET: Final = 10**12
# Dates a date_range may hold: any timezone's midnight of these is a valid UTC instant.
FIRST_DATE: Final = date(2000, 1, 1)
LAST_DATE: Final = date(2999, 12, 31)
MAX_TIMEZONE_LENGTH: Final = 255


class RuleModel(BaseModel):
    """The base of every model of the rule format: strict, frozen, finite numbers only."""

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
