"""``GET /api/rules/{id}/impact?days=&window=``: what each task of a rule earned, measured
against its holdout (:mod:`ruleengine.analysis.impact`; docs/impact.md); and
``GET /api/benchmark/impact``: the rules that hold entities out, ranked by that effect.

Delivery comes from the Insights history cache (Graph only for the hours it lacks), so the
route needs a token like the other reads that spend Meta's rate limit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from aiohttp import web

from ruleengine.analysis.impact import rank, ranked_items, rule_impact
from ruleengine.backtest.service import BacktestDeps
from ruleengine.errors import FieldError, NotFoundError
from ruleengine.rules.impact.measure import WINDOW_HOURS
from ruleengine.store.records import ExecutionStore
from ruleengine.web.jsonio import int_param, invalid, json_response
from ruleengine.web.state import services, settings_of

DEFAULT_DAYS: Final = 14
DEFAULT_WINDOW: Final = "72h"
MAX_RANKED: Final = 100


def _query(request: web.Request) -> tuple[int, str]:
    days = int_param(request, "days", default=DEFAULT_DAYS, low=1, high=90)
    window = request.query.get("window") or DEFAULT_WINDOW
    if window not in WINDOW_HOURS:
        message = f"must be one of {', '.join(WINDOW_HOURS)}, not {window!r:.20}"
        raise invalid("invalid query parameter", [FieldError("window", message)])
    return days, window


async def get_impact(request: web.Request) -> web.Response:
    """Per task: the counts, and per currency the effect with its 95 % interval (or why
    there is none), the entities it rests on, the estimated total, and the chart's series
    (a costly read: :mod:`ruleengine.web.costly`)."""
    days, window = _query(request)
    rule_id = request.match_info["id"]

    async def compute() -> dict[str, Any]:
        async with BacktestDeps.open(settings_of(request), services(request).db) as deps:
            return await rule_impact(deps, rule_id, days=days, window=window, now=_now())

    report = await services(request).costly.answer("impact", (rule_id, days, window), compute)
    return json_response(report)


async def impact_ranking(request: web.Request) -> web.Response:
    """``GET /api/benchmark/impact?days=14&window=72h``: the rules that held entities out in the
    period, each task's measured profit effect per currency, ranked
    (:func:`~ruleengine.analysis.impact.rank`). Rules without a holdout are not measured and
    not listed. A costly read (:mod:`ruleengine.web.costly`)."""
    days, window = _query(request)

    async def compute() -> dict[str, Any]:
        return await _ranking(request, days=days, window=window)

    answer = await services(request).costly.answer("impact_ranking", (days, window), compute)
    return json_response(answer)


async def _ranking(request: web.Request, *, days: int, window: str) -> dict[str, Any]:
    state, now = services(request), _now()
    since = now - timedelta(days=days)
    items: list[dict[str, Any]] = []
    async with BacktestDeps.open(settings_of(request), state.db) as deps:
        for rule_id in await ExecutionStore(state.db).rules_holding_out(since=since):
            try:
                report = await rule_impact(deps, rule_id, days=days, window=window, now=now)
            except NotFoundError:
                continue  # deleted since
            items.extend(ranked_items(report))
    return {"days": days, "window": window, "now": now, "items": rank(items)[:MAX_RANKED]}


def _now() -> datetime:
    return datetime.now(UTC)


def add_routes(app: web.Application) -> None:
    """Register the impact routes."""
    app.router.add_get("/api/rules/{id}/impact", get_impact, name="api.rule_impact")
    app.router.add_get("/api/benchmark/impact", impact_ranking, name="api.impact_ranking")
