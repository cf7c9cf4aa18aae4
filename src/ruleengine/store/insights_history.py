"""The Insights history cache: ``insights_history``, one document per entity, day and granularity.

A document's ``_id`` is its :class:`~ruleengine.rules.history.HistoryKey`
(``act_…|campaign|<id>|2026-11-20|day``); it repeats ``account``, ``level``,
``entity``, ``day`` (``YYYY-MM-DD``, the ad account's date) and ``granularity``
(``day`` or ``hour``) for the one query, and holds ``fields``: per Insights field,
``{"value": …, "fetched_at": …}`` — Graph's value as it came (a string of digits, an
action list; ``null`` when Meta returned no value: no delivery that day, or a ratio
without denominator); for the ``hour`` granularity the value is ``{"07": …}`` over the
hours with delivery. Each field remembers when it was fetched, so fields added by a
later request carry their own instant. Writing a field again replaces it (upsert on
``_id``, ``$set`` per field): safe to repeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Final

from pymongo import UpdateOne

from ruleengine import constants as c
from ruleengine.rules.history import DayRange, Granularity, HistoryKey
from ruleengine.store.db import INSIGHTS_HISTORY_INDEX, Database, Document

#: Up to this many entity ids go into the query; more are picked out of its answer.
MAX_IDS_IN_QUERY: Final = 50


@dataclass(frozen=True)
class Cached:
    """One cached value and when it was fetched."""

    value: Any
    fetched_at: datetime


#: (entity id, day) → field → what the cache holds.
CachedCells = dict[tuple[str, date], dict[str, Cached]]


@dataclass(frozen=True)
class HistoryQuery:
    """Which documents and which of their fields one read asks for."""

    account_id: str
    level: str
    granularity: Granularity
    entity_ids: Sequence[str]
    days: DayRange
    fields: Sequence[str]

    def filter(self) -> Document:
        """The MongoDB filter (served by ``INSIGHTS_HISTORY_INDEX``).

        The entity ids are in it only when they are few: the embedded server tests an
        ``$in`` of hundreds of ids on every document slowly (7 s for 500 ids × 30 days,
        against under 2 s to read them all), so many ids are picked out here instead.
        """
        query: Document = {
            "account": self.account_id,
            "level": self.level,
            "granularity": self.granularity,
            "day": {"$gte": self.days.since.isoformat(), "$lte": self.days.until.isoformat()},
        }
        if len(self.entity_ids) <= MAX_IDS_IN_QUERY:
            query["entity"] = {"$in": list(self.entity_ids)}
        return query

    def projection(self) -> Document:
        """Only the asked fields of each document."""
        return {"_id": 0, "entity": 1, "day": 1, **{f"fields.{f}": 1 for f in self.fields}}


class InsightsHistoryStore:
    """Reads and writes of the Insights history cache."""

    def __init__(self, db: Database) -> None:
        self._docs = db[c.INSIGHTS_HISTORY]

    async def read(self, query: HistoryQuery) -> CachedCells:
        """What the cache holds for ``query``: (entity, day) → field → value and instant."""
        cells: CachedCells = {}
        wanted = set(query.entity_ids)
        cursor = self._docs.find(query.filter(), query.projection()).hint(INSIGHTS_HISTORY_INDEX)
        async for doc in cursor:
            if doc["entity"] not in wanted:
                continue
            fields = doc.get("fields") or {}
            cells[(doc["entity"], date.fromisoformat(doc["day"]))] = {
                name: Cached(entry.get("value"), entry["fetched_at"])
                for name, entry in fields.items()
                if isinstance(entry, dict) and isinstance(entry.get("fetched_at"), datetime)
            }
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
        """Store each cell's fields as fetched at ``fetched_at``; the number of documents."""
        ops = []
        for (entity, day), values in cells.items():
            if not values:
                continue
            key = HistoryKey(account_id, level, entity, day, granularity)
            ops.append(
                UpdateOne(
                    {"_id": key.text()},
                    {
                        "$set": {
                            f"fields.{name}": {"value": value, "fetched_at": fetched_at}
                            for name, value in values.items()
                        },
                        "$setOnInsert": {
                            "account": account_id,
                            "level": level,
                            "entity": entity,
                            "day": day.isoformat(),
                            "granularity": granularity,
                        },
                    },
                    upsert=True,
                )
            )
        if ops:
            await self._docs.bulk_write(ops, ordered=False)
        return len(ops)
