"""Short per-rule series for the screens' sparklines: fires per day and p95 duration per day.

Both are bounded: the rules asked for (a page of the Rules list, the rules of the
slow-rule report) over the last ``days`` UTC days, oldest first, today included.

* **Fires** are the actions a rule applied (``applied_count`` of its batch rows), summed
  per UTC day from the batch rows themselves (kept 90 days by default, so 14 days of
  them are always there), one aggregation on the ``(rule_id, started_at)`` index.
* **p95** is the p95 batch duration of the day's finished batches: a rolled-up day's from
  its rollup, a day not rolled up yet (today, a day still settling) computed from its
  batch rows as the rollup would (:func:`~ruleengine.store.batchstats.duration_pipeline`).
  ``None`` where the rule has no finished batch that day.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Final

from ruleengine import constants as c
from ruleengine.store.batchstats import duration_pipeline
from ruleengine.store.db import Database
from ruleengine.store.rollups import DAY, RollupStore, day_start

MAX_RULES: Final = 500  # the Rules list's largest page


def window(today: date, days: int) -> list[date]:
    """The ``days`` UTC days ending with ``today``, oldest first."""
    return [today - DAY * n for n in range(days - 1, -1, -1)]


async def fires_per_day(
    db: Database, *, rule_ids: Sequence[str], today: date, days: int
) -> dict[str, list[int]]:
    """rule id → actions applied per UTC day over the window (0 where none), for every id."""
    ids = list(dict.fromkeys(rule_ids))[:MAX_RULES]
    labels = [d.isoformat() for d in window(today, days)]
    series = {rule_id: [0] * days for rule_id in ids}
    if not ids:
        return series
    pipeline = [
        {
            "$match": {
                "rule_id": {"$in": ids},
                "started_at": {"$gte": day_start(window(today, days)[0])},
            }
        },
        {
            "$group": {
                "_id": {
                    "rule_id": "$rule_id",
                    "day": {"$dateToString": {"format": "%Y-%m-%d", "date": "$started_at"}},
                },
                "fires": {"$sum": "$applied_count"},
            }
        },
    ]
    cursor = await db[c.BATCHES].aggregate(pipeline)
    index = {day: n for n, day in enumerate(labels)}
    async for doc in cursor:
        key = doc["_id"]
        n = index.get(key.get("day"))
        if n is not None and key.get("rule_id") in series:
            series[key["rule_id"]][n] = round(doc["fires"])
    return series


async def p95_per_day(
    db: Database, *, rule_ids: Sequence[str], today: date, days: int
) -> dict[str, list[float | None]]:
    """rule id → p95 batch duration (seconds) per UTC day over the window, for every id."""
    ids = list(dict.fromkeys(rule_ids))[:MAX_RULES]
    days_ = window(today, days)
    series: dict[str, list[float | None]] = {rule_id: [None] * days for rule_id in ids}
    if not ids:
        return series
    rolled = await RollupStore(db).rolled_up(since=days_[0])
    index = {day.isoformat(): n for n, day in enumerate(days_)}
    cursor = db[c.ROLLUPS].find(
        {"rule_id": {"$in": ids}, "date": {"$gte": day_start(days_[0])}},
        {"rule_id": 1, "day": 1, "duration_p95_s": 1},
    )
    async for doc in cursor:
        n = index.get(str(doc.get("day")))
        if n is not None and days_[n] in rolled and doc["rule_id"] in series:
            series[doc["rule_id"]][n] = doc.get("duration_p95_s")
    for n, day in enumerate(days_):
        if day in rolled:
            continue
        start = day_start(day)
        match = {"rule_id": {"$in": ids}, "started_at": {"$gte": start, "$lt": start + DAY}}
        pipeline = duration_pipeline(match, fields=(), accumulators={}, quantiles=(95,))
        async for doc in await db[c.BATCHES].aggregate(pipeline, allowDiskUse=True):
            if str(doc["_id"]) in series:
                series[str(doc["_id"])][n] = round(float(doc["p95_s"]), 6)
    return series
