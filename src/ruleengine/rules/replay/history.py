"""Insights history, the pure part: day ranges, cache keys, freshness, and what to fetch.

The history a backtest reads (:mod:`ruleengine.backtest.history`) is cached per (ad account,
level, entity, day, granularity), each field with the instant it was fetched. This
module decides, without I/O:

* which days a request covers (:class:`DayRange`: inclusive, in the ad account's
  calendar, at most :data:`MAX_DAYS` long);
* whether a cached value can be used as it is (:class:`Freshness`): a day's numbers
  keep changing while the day runs and, as conversions are attributed to the day of
  the click or impression, for up to :data:`MATURE_AFTER_DAYS` days after it;
* what is missing, as :class:`Chunk` s — entities × a run of consecutive days × the
  fields they lack — each small enough for one Insights request
  (:func:`missing_chunks`), and how a chunk Meta timed out on is cut in two
  (:func:`split_chunk`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Final, Literal
from zoneinfo import ZoneInfo

Granularity = Literal["day", "hour"]
GRANULARITIES: Final[tuple[Granularity, ...]] = ("day", "hour")
#: The longest day range one history request covers.
MAX_DAYS: Final = 90
#: Meta attributes a conversion to the day of the click or impression up to 28 days later;
#: numbers fetched that long after their day ended no longer change.
MATURE_AFTER_DAYS: Final = 28
HOURS_PER_DAY: Final = 24
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_RANGE = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})(?:\.\.([0-9]{4}-[0-9]{2}-[0-9]{2}))?")
_FIELD = re.compile(r"[a-z][a-z0-9_]{0,63}")
_KEY_PART = re.compile(r"[A-Za-z0-9_]{1,64}")
_HOUR_LABEL = re.compile(r"([01][0-9]|2[0-3]):00:00 - ([01][0-9]|2[0-3]):59:59")


@dataclass(frozen=True)
class DayRange:
    """Inclusive account-local dates, ``since`` to ``until``, at most :data:`MAX_DAYS` days.

    Raises:
        ValueError: ``since`` after ``until``, or a range longer than :data:`MAX_DAYS`.
    """

    since: date
    until: date

    def __post_init__(self) -> None:
        if self.since > self.until:
            raise ValueError(f"day range {self}: the first day is after the last")
        if len(self) > MAX_DAYS:
            raise ValueError(f"day range {self} is {len(self)} days long; at most {MAX_DAYS}")

    def __len__(self) -> int:
        return (self.until - self.since).days + 1

    def __str__(self) -> str:
        return f"{self.since.isoformat()}..{self.until.isoformat()}"

    def days(self) -> list[date]:
        """Every day of the range, in order."""
        return [self.since + timedelta(days=n) for n in range(len(self))]

    @classmethod
    def last(cls, days: int, today: date, *, include_today: bool = True) -> DayRange:
        """The last ``days`` days up to ``today`` (or up to yesterday)."""
        if days < 1:
            raise ValueError(f"a day range needs at least one day, not {days}")
        until = today if include_today else today - timedelta(days=1)
        return cls(until - timedelta(days=days - 1), until)

    @classmethod
    def spanning(cls, since: date, until: date) -> list[DayRange]:
        """``since`` to ``until`` as consecutive ranges of at most :data:`MAX_DAYS` days (a
        span longer than one request may hold: 90 days of decisions and their baselines)."""
        ranges = []
        while since <= until:
            end = min(until, since + timedelta(days=MAX_DAYS - 1))
            ranges.append(cls(since, end))
            since = end + timedelta(days=1)
        return ranges

    @classmethod
    def parse(cls, text: str) -> DayRange:
        """``YYYY-MM-DD..YYYY-MM-DD`` (or one ``YYYY-MM-DD``, a single day).

        Raises:
            ValueError: anything else, an impossible date, or a range :class:`DayRange`
                refuses.
        """
        match = _RANGE.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"day range {text!r}: write YYYY-MM-DD..YYYY-MM-DD")
        since = date.fromisoformat(match.group(1))
        return cls(since, date.fromisoformat(match.group(2)) if match.group(2) else since)


def check_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """Insights field names, sorted and de-duplicated; they become MongoDB keys.

    Raises:
        ValueError: a name that is not a plain Insights field (lower-case, digits and
            ``_``), such as a dotted metric key (ask for ``actions``, not ``actions.purchase``).
    """
    for name in fields:
        if not _FIELD.fullmatch(name):
            raise ValueError(f"{name!r} is not an Insights field name")
    return tuple(sorted(set(fields)))


@dataclass(frozen=True)
class HistoryKey:
    """What one cached document is about; its ``_id`` is :meth:`text`.

    Raises:
        ValueError: a part with a character other than letters, digits and ``_``.
    """

    account_id: str
    level: str
    entity_id: str
    day: date
    granularity: Granularity

    def __post_init__(self) -> None:
        for part in (self.account_id, self.level, self.entity_id):
            if not _KEY_PART.fullmatch(part):
                raise ValueError(f"{part!r} cannot be part of a history key")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity {self.granularity!r} is not one of {GRANULARITIES}")

    def text(self) -> str:
        """``act_…|level|entity|YYYY-MM-DD|granularity``."""
        day = self.day.isoformat()
        return f"{self.account_id}|{self.level}|{self.entity_id}|{day}|{self.granularity}"

    @classmethod
    def parse(cls, text: str) -> HistoryKey:
        """The key :meth:`text` wrote.

        Raises:
            ValueError: not five ``|``-separated parts, or a part that does not fit.
        """
        parts = text.split("|")
        if len(parts) != 5:
            raise ValueError(f"history key {text!r}: expected 5 parts separated by '|'")
        account, level, entity, day, granularity = parts
        if not _DATE.fullmatch(day):
            raise ValueError(f"history key {text!r}: the day must be YYYY-MM-DD")
        if granularity not in GRANULARITIES:
            raise ValueError(f"history key {text!r}: unknown granularity {granularity!r}")
        gran: Granularity = "day" if granularity == "day" else "hour"
        return cls(account, level, entity, date.fromisoformat(day), gran)


def hour_of(label: str) -> int:
    """The hour of Meta's hourly breakdown value ``"07:00:00 - 07:59:59"`` (7).

    Raises:
        ValueError: any other text.
    """
    match = _HOUR_LABEL.fullmatch(label)
    if match is None or match.group(1) != match.group(2):
        raise ValueError(f"{label!r} is not an hour of hourly_stats_aggregated_by_*_time_zone")
    return int(match.group(1))


def hour_key(hour: int) -> str:
    """How an hour is stored (MongoDB keys are strings): ``"07"``."""
    return f"{hour:02d}"


@dataclass(frozen=True)
class Freshness:
    """When a cached value of a day may be used as it is.

    * fetched **before the day ended** (today's numbers, still growing): usable while
      that day lasts and for ``today_refresh_after_s``;
    * fetched **less than** ``mature_after_days`` **after the day ended** (conversions
      still arriving): usable for ``refresh_after_s``;
    * fetched later than that: final, used forever.
    """

    mature_after_days: int = MATURE_AFTER_DAYS
    refresh_after_s: float = 6 * 3600.0
    today_refresh_after_s: float = 900.0

    def fresh(self, day: date, fetched_at: datetime, now: datetime, tz: ZoneInfo) -> bool:
        """True when a value of ``day`` fetched at ``fetched_at`` may be used at ``now``."""
        day_end = day_end_utc(day, tz)
        age = now - fetched_at
        if fetched_at < day_end:
            return now < day_end and age < timedelta(seconds=self.today_refresh_after_s)
        if self.final(day, fetched_at, tz):
            return True
        return age < timedelta(seconds=self.refresh_after_s)

    def final(self, day: date, fetched_at: datetime, tz: ZoneInfo) -> bool:
        """True when ``day``'s numbers fetched at ``fetched_at`` can no longer change."""
        return fetched_at >= day_end_utc(day, tz) + timedelta(days=self.mature_after_days)


@functools.lru_cache(maxsize=4096)  # asked once per cached value: thousands per history
def day_end_utc(day: date, tz: ZoneInfo) -> datetime:
    """The instant ``day`` ends in ``tz`` (the next local midnight)."""
    return datetime.combine(day + timedelta(days=1), time(), tz)


@dataclass(frozen=True)
class Chunk:
    """Something to fetch: ``fields`` of ``entity_ids`` on each day of ``days``."""

    granularity: Granularity
    entity_ids: tuple[str, ...]
    days: DayRange
    fields: tuple[str, ...]

    @property
    def rows(self) -> int:
        """The most rows Meta can answer with (one per entity, day and hour)."""
        hours = HOURS_PER_DAY if self.granularity == "hour" else 1
        return len(self.entity_ids) * len(self.days) * hours


def missing_chunks(
    granularity: Granularity,
    entity_ids: Sequence[str],
    days: DayRange,
    fields: Sequence[str],
    fresh: Mapping[tuple[str, date], Set[str]],
    *,
    ids_per_chunk: int,
    rows_per_chunk: int,
) -> list[Chunk]:
    """The chunks that fetch every (entity, day, field) ``fresh`` lacks, and nothing else.

    ``fresh`` holds, per (entity, day), the fields whose cached value may be used.
    Entities lacking the same fields on the same days are fetched together; within
    them, consecutive days lacking the same fields make one range. Each chunk has at
    most ``ids_per_chunk`` entities and ``rows_per_chunk`` rows.
    """
    wanted = frozenset(fields)
    groups: dict[tuple[tuple[date, frozenset[str]], ...], list[str]] = {}
    for entity in dict.fromkeys(entity_ids):
        lacks = tuple(
            (day, missing)
            for day in days.days()
            if (missing := wanted - fresh.get((entity, day), frozenset()))
        )
        if lacks:
            groups.setdefault(lacks, []).append(entity)
    chunks: list[Chunk] = []
    for lacks, ids in groups.items():
        for run, missing in _runs(lacks):
            chunks += _cut(
                granularity, ids, run, tuple(sorted(missing)), ids_per_chunk, rows_per_chunk
            )
    return chunks


def _runs(lacks: Sequence[tuple[date, frozenset[str]]]) -> list[tuple[DayRange, frozenset[str]]]:
    """Consecutive days lacking the same fields, as ranges."""
    runs: list[tuple[DayRange, frozenset[str]]] = []
    for day, missing in lacks:
        if runs:
            last, fields = runs[-1]
            if fields == missing and last.until + timedelta(days=1) == day:
                runs[-1] = (DayRange(last.since, day), fields)
                continue
        runs.append((DayRange(day, day), missing))
    return runs


def _cut(
    granularity: Granularity,
    ids: Sequence[str],
    run: DayRange,
    fields: tuple[str, ...],
    ids_per_chunk: int,
    rows_per_chunk: int,
) -> list[Chunk]:
    hours = HOURS_PER_DAY if granularity == "hour" else 1
    per_ids = max(1, min(ids_per_chunk, rows_per_chunk // hours, len(ids)))
    chunks: list[Chunk] = []
    for start in range(0, len(ids), per_ids):
        part = tuple(ids[start : start + per_ids])
        per_days = max(1, rows_per_chunk // (len(part) * hours))
        for first in range(0, len(run), per_days):
            since = run.since + timedelta(days=first)
            until = min(run.until, since + timedelta(days=per_days - 1))
            chunks.append(Chunk(granularity, part, DayRange(since, until), fields))
    return chunks


def split_chunk(chunk: Chunk) -> tuple[Chunk, Chunk] | None:
    """Two chunks covering ``chunk``: half the entities, else half the days; None for one
    entity on one day."""
    ids = chunk.entity_ids
    if len(ids) > 1:
        half = (len(ids) + 1) // 2
        return (
            Chunk(chunk.granularity, ids[:half], chunk.days, chunk.fields),
            Chunk(chunk.granularity, ids[half:], chunk.days, chunk.fields),
        )
    if len(chunk.days) < 2:
        return None
    middle = chunk.days.since + timedelta(days=len(chunk.days) // 2 - 1)
    return (
        Chunk(chunk.granularity, ids, DayRange(chunk.days.since, middle), chunk.fields),
        Chunk(
            chunk.granularity,
            ids,
            DayRange(middle + timedelta(days=1), chunk.days.until),
            chunk.fields,
        ),
    )
