"""``/api/trends``: the short per-rule series the screens draw as sparklines.

``rules/fires`` (Rules list: actions applied per UTC day) and ``rules/p95`` (Benchmark:
p95 batch duration per UTC day), for at most :data:`MAX_IDS` rules named by repeated
``rule_id`` parameters, over the last ``days`` UTC days (today included, oldest first).
The Errors screen's per-hour counts are a field of ``/api/errors`` itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, date, datetime
from typing import Any, Final

from aiohttp import web

from ruleengine.errors import FieldError
from ruleengine.store.db import Database
from ruleengine.store.trends import fires_per_day, p95_per_day, window
from ruleengine.web.jsonio import int_param, invalid, json_response
from ruleengine.web.state import services

MAX_IDS: Final = 100  # ids in a query string: a URL stays well under aiohttp's 8 KiB line
MAX_DAYS: Final = 90  # the batch rows' default retention
DEFAULT_DAYS: Final = 14

Series = Callable[..., Awaitable[dict[str, Any]]]


def _rule_ids(request: web.Request) -> list[str]:
    ids = [i for i in request.query.getall("rule_id", []) if i]
    if not ids:
        raise invalid("invalid query parameter", [FieldError("rule_id", "name at least one rule")])
    if len(ids) > MAX_IDS:
        message = f"at most {MAX_IDS} rules a request, not {len(ids)}; ask in pages"
        raise invalid("invalid query parameter", [FieldError("rule_id", message)])
    if any(len(i) > 200 for i in ids):
        raise invalid("invalid query parameter", [FieldError("rule_id", "a rule id is shorter")])
    return ids


async def _series(request: web.Request, compute: Series, unit: str) -> web.Response:
    ids = _rule_ids(request)
    days = int_param(request, "days", default=DEFAULT_DAYS, low=1, high=MAX_DAYS)
    today: date = datetime.now(UTC).date()
    db: Database = services(request).db
    series = await compute(db, rule_ids=ids, today=today, days=days)
    labels: Sequence[date] = window(today, days)
    return json_response(
        {
            "days": [d.isoformat() for d in labels],
            "unit": unit,
            "items": [{"rule_id": i, "values": series[i]} for i in dict.fromkeys(ids)],
        }
    )


async def rule_fires(request: web.Request) -> web.Response:
    """``GET /api/trends/rules/fires?rule_id=…&days=14``: actions applied per UTC day."""
    return await _series(request, fires_per_day, "actions")


async def rule_p95(request: web.Request) -> web.Response:
    """``GET /api/trends/rules/p95?rule_id=…&days=14``: p95 batch duration per UTC day."""
    return await _series(request, p95_per_day, "seconds")


def add_routes(app: web.Application) -> None:
    """Register the trend routes."""
    r = app.router
    r.add_get("/api/trends/rules/fires", rule_fires, name="api.trends_fires")
    r.add_get("/api/trends/rules/p95", rule_p95, name="api.trends_p95")
