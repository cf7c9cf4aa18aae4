"""Insights periods: Meta's ``date_preset`` names and ``time_range``, as inclusive date pairs.

Pure date maths. ``today`` is the calendar date in the ad account's timezone;
``last_Nd`` presets end yesterday, as Meta's do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

import orjson

from graph_sandbox.errors import GraphError, invalid_param

Period = tuple[date, date]

#: How far back ``maximum`` reaches (Meta keeps 37 months of Insights).
MAX_HISTORY_DAYS = 37 * 31


def _month_start(day: date) -> date:
    return day.replace(day=1)


def _previous_month(today: date) -> Period:
    last = _month_start(today) - timedelta(days=1)
    return _month_start(last), last


def _quarter_start(day: date) -> date:
    return date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)


def _previous_quarter(today: date) -> Period:
    last = _quarter_start(today) - timedelta(days=1)
    return _quarter_start(last), last


def _last_days(n: int) -> Callable[[date], Period]:
    return lambda today: (today - timedelta(days=n), today - timedelta(days=1))


def _last_week(first_weekday: int) -> Callable[[date], Period]:
    def period(today: date) -> Period:
        start = today - timedelta(days=(today.weekday() - first_weekday) % 7 + 7)
        return start, start + timedelta(days=6)

    return period


def _this_week(first_weekday: int) -> Callable[[date], Period]:
    return lambda today: (today - timedelta(days=(today.weekday() - first_weekday) % 7), today)


_PRESETS: dict[str, Callable[[date], Period]] = {
    "today": lambda today: (today, today),
    "yesterday": lambda today: (today - timedelta(days=1), today - timedelta(days=1)),
    **{f"last_{n}d": _last_days(n) for n in (3, 7, 14, 28, 30, 90)},
    "this_month": lambda today: (_month_start(today), today),
    "last_month": _previous_month,
    "this_quarter": lambda today: (_quarter_start(today), today),
    "last_quarter": _previous_quarter,
    "this_year": lambda today: (date(today.year, 1, 1), today),
    "last_year": lambda today: (date(today.year - 1, 1, 1), date(today.year - 1, 12, 31)),
    "this_week_mon_today": _this_week(0),
    "this_week_sun_today": _this_week(6),
    "last_week_mon_sun": _last_week(0),
    "last_week_sun_sat": _last_week(6),
}

#: Every ``date_preset`` Graph takes, in the order its error message lists them.
PRESETS = (
    "today",
    "yesterday",
    "this_month",
    "last_month",
    "this_quarter",
    "maximum",
    "data_maximum",
    "last_3d",
    "last_7d",
    "last_14d",
    "last_28d",
    "last_30d",
    "last_90d",
    "last_week_mon_sun",
    "last_week_sun_sat",
    "last_quarter",
    "last_year",
    "this_week_mon_today",
    "this_week_sun_today",
    "this_year",
)
#: Presets reaching back as far as Insights go (``data_maximum``: as far as there is data).
MAXIMUM_PRESETS = frozenset({"maximum", "data_maximum"})


def preset_period(preset: str, today: date, *, earliest: date | None) -> Period:
    """The inclusive dates of ``preset``; ``maximum`` starts at ``earliest`` (the oldest object).

    Raises:
        GraphError: 100 for an unknown preset, with Graph's message.
    """
    if preset in MAXIMUM_PRESETS:
        floor = today - timedelta(days=MAX_HISTORY_DAYS)
        return max(earliest or today, floor), today
    make = _PRESETS.get(preset)
    if make is None:
        raise invalid_param(
            f"date_preset must be one of the following values: {', '.join(PRESETS)}"
        )
    return make(today)


def parse_time_range(raw: str) -> Period:
    """Meta's ``time_range={"since": "YYYY-MM-DD", "until": "YYYY-MM-DD"}``.

    Raises:
        GraphError: 100 when the JSON, the dates or their order are wrong.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_param(
            'time_range must be {"since": "YYYY-MM-DD", "until": "YYYY-MM-DD"}'
        ) from exc
    return time_range_value(value, "time_range")


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _iso_date(raw: object) -> date:
    # date.fromisoformat alone would also take 20261201 and 2026-W49-2; Graph does not.
    if isinstance(raw, str) and _ISO_DATE.fullmatch(raw):
        try:
            return date.fromisoformat(raw)
        except ValueError:
            pass
    raise invalid_param("Must be a date representation in the format YYYY-MM-DD")


def time_range_value(value: object, name: str) -> Period:
    """One ``{"since", "until"}`` object (of ``time_range`` or an item of ``time_ranges``).

    Raises:
        GraphError: 100 when it is not such an object, its dates are not ``YYYY-MM-DD``
            (Graph's message) or ``since`` is after ``until``.
    """
    if not isinstance(value, dict) or not {"since", "until"} <= value.keys():
        raise invalid_param(f'{name} must be {{"since": "YYYY-MM-DD", "until": "YYYY-MM-DD"}}')
    since, until = _iso_date(value["since"]), _iso_date(value["until"])
    if since > until:
        raise GraphError(100, f"(#100) {name}: since must not be after until")
    return since, until
