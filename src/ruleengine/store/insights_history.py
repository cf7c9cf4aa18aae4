"""The Insights history cache: ``insights_history``, one document per entity, granularity and month.

A document — a *bucket* — holds one entity's cells of one calendar month of the ad
account's days, at one granularity (``day`` or ``hour``). Its ``_id`` is
``act_…|campaign|<id>|2026-11|day`` (:func:`bucket_id`); it repeats ``account``,
``level``, ``entity``, ``granularity`` and ``month`` (``YYYY-MM``) for the one query,
has ``month_end`` (the instant after the month, UTC midnight, which the retention TTL
index counts from: :mod:`ruleengine.maintenance.retention`), and holds ``days``: per day
(``YYYY-MM-DD``, the account's date) per Insights field ``{"value": …, "fetched_at": …}``
— Graph's value as it came (a string of digits; ``null`` when Meta returned no value:
no delivery that day, or a ratio without denominator) — or, for a list or an object
(an action list; for the ``hour`` granularity ``{"07": …}`` over the hours with
delivery), ``{"json": …, "fetched_at": …}`` with the value as JSON text: the embedded
server sends, and PyMongo decodes, one string much faster than the nested documents
(a warm read of 500 entities × 30 days: 0.3–0.7 s against 1.1–1.5 s to receive).
Each field of each day remembers when it was fetched, so fields added by a later
request carry their own instant.

Writing is an upsert per bucket with ``$set`` on each ``days.<day>.<field>`` path: a
repeat is harmless, and two writers of different fields (or days) of the same bucket
keep each other's — nothing is read and written back. Keys are safe: days are
``YYYY-MM-DD`` and field names pass :func:`~ruleengine.rules.replay.history.check_fields`.

Documents of the layout before buckets (one per day, with ``day`` and ``fields``) have
no ``month``: no read matches them, and the retention pass deletes them once
(:func:`drop_day_documents`). The cache is only a cache: what it lacks is fetched again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any, Final, NamedTuple

import orjson
from pymongo import UpdateOne

from ruleengine import constants as c
from ruleengine.rules.replay.history import DayRange, Granularity, HistoryKey, check_fields
from ruleengine.store.db import Database, Document

#: Up to this many entity ids go into the query; more are picked out of its answer.
MAX_IDS_IN_QUERY: Final = 50
#: The name of the index of the layout before buckets (``account``, ``level``,
#: ``granularity``, ``day``): while it exists, day documents may remain.
DAY_LAYOUT_INDEX: Final = "account_1_level_1_granularity_1_day_1"


class Cached(NamedTuple):
    """One cached value and when it was fetched."""

    value: Any
    fetched_at: datetime


#: (entity id, day) → field → what the cache holds.
CachedCells = dict[tuple[str, date], dict[str, Cached]]


def month_of(day: date) -> str:
    """The bucket a day belongs to: ``YYYY-MM``."""
    return f"{day.year:04d}-{day.month:02d}"


def month_end(day: date) -> datetime:
    """The instant after ``day``'s month: midnight UTC of the next month's first day."""
    first = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return datetime.combine(first, time(), UTC)


def bucket_id(
    account_id: str, level: str, entity_id: str, day: date, granularity: Granularity
) -> str:
    """``act_…|level|entity|YYYY-MM|granularity``: the bucket holding ``day``.

    Raises:
        ValueError: a part :class:`~ruleengine.rules.replay.history.HistoryKey` refuses.
    """
    key = HistoryKey(account_id, level, entity_id, day, granularity)
    return f"{key.account_id}|{key.level}|{key.entity_id}|{month_of(day)}|{key.granularity}"


@dataclass(frozen=True)
class HistoryQuery:
    """Which buckets and which of their fields one read asks for."""

    account_id: str
    level: str
    granularity: Granularity
    entity_ids: Sequence[str]
    days: DayRange
    fields: Sequence[str]

    def filter(self) -> Document:
        """The MongoDB filter (served by ``INSIGHTS_HISTORY_INDEX``).

        The entity ids are in it only when they are few: the embedded server tests an
        ``$in`` of hundreds of ids on every document slowly, so many ids are picked out
        here instead. The read has no projection: the embedded server projects nested
        paths slower than it sends whole buckets (1.2 s against 0.6 s for 1,000 buckets
        of 30 days × 4 fields), so the unasked fields are skipped here.
        """
        query: Document = {
            "account": self.account_id,
            "level": self.level,
            "granularity": self.granularity,
            "month": {"$gte": month_of(self.days.since), "$lte": month_of(self.days.until)},
        }
        if len(self.entity_ids) <= MAX_IDS_IN_QUERY:
            query["entity"] = {"$in": list(self.entity_ids)}
        return query


class InsightsHistoryStore:
    """Reads and writes of the Insights history cache."""

    def __init__(self, db: Database) -> None:
        self._docs = db[c.INSIGHTS_HISTORY]
        # read with naive datetimes, made aware here once per distinct instant: PyMongo
        # decodes a bucket's aware datetimes (one per field and day) 6 times slower
        naive = self._docs.codec_options.with_options(tz_aware=False, tzinfo=None)
        self._reads = self._docs.with_options(codec_options=naive)

    async def read(self, query: HistoryQuery) -> CachedCells:
        """What the cache holds for ``query``: (entity, day) → field → value and instant."""
        cells: CachedCells = {}
        wanted = set(query.entity_ids)
        fields = tuple(query.fields)
        since, until = query.days.since.isoformat(), query.days.until.isoformat()
        to_date, loads = date.fromisoformat, orjson.loads
        instants: dict[Any, datetime] = {}  # naive UTC → aware
        # no hint: the embedded server walks a hinted index whole (387 ms at 8,000 buckets),
        # where its planner looks the account up (12–20 ms)
        cursor = self._reads.find(query.filter())
        async for doc in cursor:
            entity = doc["entity"]
            if entity not in wanted:
                continue
            for day, held in (doc.get("days") or {}).items():
                if not since <= day <= until:  # YYYY-MM-DD: text order is date order
                    continue
                found = {}
                for name in fields:
                    entry = held.get(name)
                    if not isinstance(entry, dict):
                        continue
                    at = entry.get("fetched_at")
                    if (instant := instants.get(at)) is None:
                        if not isinstance(at, datetime):
                            continue
                        instant = instants[at] = at.replace(tzinfo=UTC)
                    text = entry.get("json")
                    found[name] = Cached(
                        entry.get("value") if text is None else loads(text), instant
                    )
                cells[(entity, to_date(day))] = found
        return cells

    async def write(
        self,
        *,
        account_id: str,
        level: str,
        granularity: Granularity,
        cells: Mapping[tuple[str, date], Mapping[str, Any]],
        fetched_at: datetime,
    ) -> int:
        """Store each cell's fields as fetched at ``fetched_at``; the number of buckets written.

        One upsert per bucket, ``$set`` per (day, field): other fields and days of the
        bucket, written before or at the same time, stay as they are. Two writers
        inserting the same new bucket at once: MongoDB retries the losing upsert as an
        update itself (an upsert on ``_id`` equality), the embedded server runs writes
        one after the other.

        Raises:
            ValueError: a field name :func:`~ruleengine.rules.replay.history.check_fields`
                refuses, or an id :func:`bucket_id` refuses (nothing is written).
        """
        check_fields(list({name for values in cells.values() for name in values}))  # safe keys
        buckets: dict[str, tuple[str, date, Document]] = {}
        for (entity, day), values in cells.items():
            if not values:
                continue
            _id = bucket_id(account_id, level, entity, day, granularity)
            paths = buckets.setdefault(_id, (entity, day, {}))[2]
            for name, value in values.items():
                paths[f"days.{day.isoformat()}.{name}"] = _entry(value, fetched_at)
        ops = [
            UpdateOne(
                {"_id": _id},
                {
                    "$set": paths,
                    "$setOnInsert": {
                        "account": account_id,
                        "level": level,
                        "entity": entity,
                        "granularity": granularity,
                        "month": month_of(day),
                        "month_end": month_end(day),
                    },
                },
                upsert=True,
            )
            for _id, (entity, day, paths) in buckets.items()
        ]
        if ops:
            await self._docs.bulk_write(ops, ordered=False)
        return len(ops)


def _entry(value: Any, fetched_at: datetime) -> Document:
    """How one field of one day is stored: a list or an object as JSON text, else as it is."""
    if isinstance(value, list | dict):
        return {"json": orjson.dumps(value).decode(), "fetched_at": fetched_at}
    return {"value": value, "fetched_at": fetched_at}


async def drop_day_documents(db: Database) -> int:
    """Delete the documents of the layout before buckets, once; the number deleted.

    Only while that layout's index exists (a deployment that had it); the index is
    dropped afterwards, so later calls cost one listing of the indexes.
    """
    docs = db[c.INSIGHTS_HISTORY]
    if DAY_LAYOUT_INDEX not in await docs.index_information():
        return 0
    deleted = await docs.delete_many({"month": {"$exists": False}})
    await docs.drop_index(DAY_LAYOUT_INDEX)
    return deleted.deleted_count
