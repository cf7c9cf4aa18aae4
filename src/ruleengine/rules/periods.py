"""Meta's ``date_preset`` periods as inclusive date ranges, and halves of a range.

Pure date maths, in the ad account's calendar: ``today`` is the account-local date
(Meta reports Insights in the ad account's timezone) and ``last_Nd`` presets end
yesterday, as Meta's do. Used to split a synchronous Insights request that timed
out into shorter ranges whose rows add up to the whole.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

DateRange = tuple[date, date]
_LAST_DAYS = re.compile(r"last_([0-9]{1,3})d")


def _month_start(day: date) -> date:
    return day.replace(day=1)


def preset_range(preset: str, today: date) -> DateRange | None:
    """The inclusive dates ``preset`` covers when the account's date is ``today``.

    None for a preset whose dates depend on more than the date (``maximum`` starts at
    the account's oldest delivery) or that this function does not know.
    """
    if preset == "today":
        return today, today
    if preset == "yesterday":
        return today - timedelta(days=1), today - timedelta(days=1)
    if match := _LAST_DAYS.fullmatch(preset):
        days = int(match.group(1))
        return (today - timedelta(days=days), today - timedelta(days=1)) if days else None
    if preset == "this_month":
        return _month_start(today), today
    if preset == "last_month":
        last = _month_start(today) - timedelta(days=1)
        return _month_start(last), last
    if preset == "this_week_mon_today":
        return today - timedelta(days=today.weekday()), today
    return None


def halves(span: DateRange) -> tuple[DateRange, DateRange] | None:
    """``span`` cut into two ranges of (nearly) equal length; None for a single day."""
    since, until = span
    days = (until - since).days + 1
    if days < 2:
        return None
    middle = since + timedelta(days=days // 2 - 1)
    return (since, middle), (middle + timedelta(days=1), until)
