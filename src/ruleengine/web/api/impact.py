"""``GET /api/rules/{id}/impact?days=&window=``: what each task of a rule earned, measured
against its holdout (:mod:`ruleengine.analysis.impact`; docs/impact.md).

Delivery comes from the Insights history cache (Graph only for the hours it lacks), so the
route needs a token like the other reads that spend Meta's rate limit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from aiohttp import web

from ruleengine.analysis.impact import rule_impact
from ruleengine.backtest.service import BacktestDeps
from ruleengine.errors import FieldError
from ruleengine.rules.impact import WINDOW_HOURS
from ruleengine.web.jsonio import int_param, invalid, json_response
from ruleengine.web.state import services, settings_of

DEFAULT_DAYS: Final = 14
DEFAULT_WINDOW: Final = "72h"


async def get_impact(request: web.Request) -> web.Response:
    """Per task: the counts, the effect with its 95 % interval (or why there is none), the
    estimated total, and the chart's series."""
    days = int_param(request, "days", default=DEFAULT_DAYS, low=1, high=90)
    window = request.query.get("window") or DEFAULT_WINDOW
    if window not in WINDOW_HOURS:
        message = f"must be one of {', '.join(WINDOW_HOURS)}, not {window!r:.20}"
        raise invalid("invalid query parameter", [FieldError("window", message)])
    state = services(request)
    async with BacktestDeps.open(settings_of(request), state.db) as deps:
        report = await rule_impact(
            deps, request.match_info["id"], days=days, window=window, now=datetime.now(UTC)
        )
    return json_response(report)


def add_routes(app: web.Application) -> None:
    """Register the impact route."""
    app.router.add_get("/api/rules/{id}/impact", get_impact, name="api.rule_impact")
