"""Periods as inclusive date ranges, how Insights is asked for each, and halves of a range.

Pure date maths, in the ad account's calendar: ``today`` is the account-local date
(Meta reports Insights in the ad account's timezone). Three families of names:

* Insights' own ``date_preset`` names (``last_7d``, ``this_month`` …): ``last_Nd`` ends
  yesterday, as Meta's do. Sent to Meta as ``date_preset``.
* Meta's Ad Rules presets that Insights does not know, lower-cased: ``last_2d``;
  ``last_N_days``, which *include* today (``last_7_days`` is the last 6 full days and
  today, where ``last_7d`` is the 7 full days before today); and the "mature data"
  windows ``last_nd_A_B`` — from A days ago to B days ago, both included, today being
  0 days ago: ``last_nd_14_8`` is the 7 days of ``last_14d`` that are not in
  ``last_7d``. ``last_nd_lifetime_B`` starts as far back as Insights reach. These are
  sent as a ``time_range`` computed here.

Also used to split a synchronous Insights request that timed out into shorter ranges
whose rows add up to the whole.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta
from typing import Any, Final, get_args

from ruleengine.rules.basics import InsightsPeriod

DateRange = tuple[date, date]
_LAST_DAYS = re.compile(r"last_([0-9]{1,3})d")
_LAST_DAYS_WITH_TODAY = re.compile(r"last_([0-9]{1,3})_days")
_MATURE = re.compile(r"last_nd_([0-9]{1,3}|lifetime)_([0-9]{1,3})")
#: The periods Graph's Insights ``date_preset`` takes as they are; the others of the rule
#: language are asked for with a ``time_range``.
INSIGHTS_DATE_PRESETS: Final = frozenset(get_args(InsightsPeriod))
#: Meta keeps 37 months of Insights and refuses a ``time_range`` starting earlier.
HISTORY_MONTHS: Final = 37


def _month_start(day: date) -> date:
    return day.replace(day=1)


def history_start(today: date) -> date:
    """The oldest date Insights may be asked about: the day after ``today`` − 37 months."""
    months = today.year * 12 + today.month - 1 - HISTORY_MONTHS
    year, month = divmod(months, 12)
    day = min(today.day, calendar.monthrange(year, month + 1)[1])
    return date(year, month + 1, day) + timedelta(days=1)


def _days_ago(today: date, first: int, last: int) -> DateRange | None:
    """From ``first`` days ago to ``last`` days ago, both included (today is 0 days ago)."""
    if first < last:
        return None
    return today - timedelta(days=first), today - timedelta(days=last)


def _this_week(today: date, first_weekday: int) -> DateRange:
    return today - timedelta(days=(today.weekday() - first_weekday) % 7), today


def _counted(preset: str, today: date) -> DateRange | None:
    """The presets named by numbers: ``last_Nd``, ``last_N_days``, ``last_nd_A_B``."""
    if match := _LAST_DAYS.fullmatch(preset):
        days = int(match.group(1))
        return _days_ago(today, days, 1) if days else None
    if match := _LAST_DAYS_WITH_TODAY.fullmatch(preset):
        days = int(match.group(1))
        return _days_ago(today, days - 1, 0) if days else None
    if match := _MATURE.fullmatch(preset):
        last = int(match.group(2))
        if match.group(1) == "lifetime":
            end = today - timedelta(days=last)
            start = history_start(today)
            return (start, end) if start <= end else None
        return _days_ago(today, int(match.group(1)), last)
    return None


def preset_range(preset: str, today: date) -> DateRange | None:
    """The inclusive dates ``preset`` covers when the account's date is ``today``.

    None for a preset whose dates depend on more than the date (``maximum`` starts at
    the account's oldest delivery) or that this function does not know.
    """
    if preset == "today":
        return today, today
    if preset == "yesterday":
        return today - timedelta(days=1), today - timedelta(days=1)
    if preset == "this_month":
        return _month_start(today), today
    if preset == "last_month":
        last = _month_start(today) - timedelta(days=1)
        return _month_start(last), last
    if preset == "this_week_mon_today":
        return _this_week(today, 0)
    if preset == "this_week_sun_today":
        return _this_week(today, 6)
    return _counted(preset, today)


def time_range(span: DateRange) -> dict[str, str]:
    """Graph's ``time_range`` parameter for ``span``."""
    return {"since": span[0].isoformat(), "until": span[1].isoformat()}


def insights_period(period: str, today: date | None) -> dict[str, Any]:
    """How Graph's Insights is asked for ``period``: ``date_preset``, or else ``time_range``.

    Raises:
        ValueError: the period needs a ``time_range`` and the account's date is unknown,
            or the period is not one this module knows.
    """
    if period in INSIGHTS_DATE_PRESETS:
        return {"date_preset": period}
    span = preset_range(period, today) if today is not None else None
    if span is None:
        raise ValueError(
            f"period '{period}' is asked for with a time_range, which needs the ad account's"
            " date" + ("" if today is None else f" (unknown period on {today})")
        )
    return {"time_range": time_range(span)}


def halves(span: DateRange) -> tuple[DateRange, DateRange] | None:
    """``span`` cut into two ranges of (nearly) equal length; None for a single day."""
    since, until = span
    days = (until - since).days + 1
    if days < 2:
        return None
    middle = since + timedelta(days=days // 2 - 1)
    return (since, middle), (middle + timedelta(days=1), until)
