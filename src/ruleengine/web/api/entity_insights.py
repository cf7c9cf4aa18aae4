"""``GET /api/entities/{id}/insights?days=14``: one entity's spend and impressions per day of
its ad account, for the entity timeline's chart, from the Insights history cache the
backtest and the impact report use (:class:`~ruleengine.backtest.history.InsightsHistory`:
Graph only for the days the cache lacks or holds too young a number of).

The records give what the engine saw at its runs; on a new rule that is a few minutes at
the chart's right edge. Insights give the whole period. Like the other reads that may spend
Meta's rate limit, it needs a token (:data:`~ruleengine.web.auth.ROUTE_ROLES`) and is a
costly read (:mod:`ruleengine.web.costly`). The entity's ad account and level are its
newest execution record's: an entity no rule evaluated has none, and no series.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final
from zoneinfo import ZoneInfo

from aiohttp import web

from ruleengine.backtest.history import HistoryRequest, HistoryResult
from ruleengine.backtest.service import BacktestDeps
from ruleengine.errors import RuleEngineError
from ruleengine.meta.errors import GraphError
from ruleengine.rules.replay.history import DayRange
from ruleengine.store.credentials import token_ref
from ruleengine.web.api.labels import with_accounts
from ruleengine.web.jsonio import int_param, json_response
from ruleengine.web.state import services, settings_of

MAX_DAYS: Final = 90
FIELDS: Final = ("spend", "impressions")


def _number(value: Any) -> float:
    """Graph's ``"12.34"`` as a number (a day without delivery has no value: 0)."""
    try:
        return float(Decimal(str(value))) if value is not None else 0.0
    except InvalidOperation:
        return 0.0


def per_day(result: HistoryResult, entity_id: str, days: DayRange) -> list[dict[str, Any]]:
    """The entity's days in order; a day Graph could not answer for is left out."""
    known = result.daily.get(entity_id, {})
    return [
        {"date": day.isoformat(), **{f: _number(known[day].values.get(f)) for f in FIELDS}}
        for day in days.days()
        if day in known
    ]


async def _series(request: web.Request, entity_id: str, days: int) -> dict[str, Any]:
    svc, now = services(request), datetime.now(UTC)
    newest = await svc.executions.for_entity(
        entity_id, since=now - timedelta(days=MAX_DAYS), limit=1
    )
    answer: dict[str, Any] = {"entity_id": entity_id, "days": days, "series": [], "problem": None}
    if not newest:
        answer["problem"] = "no rule evaluated this entity: its ad account is not known here"
        return answer
    account_id, level = str(newest[0]["account"]), str(newest[0]["level"])
    answer |= {"account": account_id, "level": level}
    async with BacktestDeps.open(settings_of(request), svc.db) as deps:
        try:
            account = await deps.credentials.get(account_id)
            token = await deps.credentials.usable_token(token_ref(account_id))
            today = now.astimezone(ZoneInfo(account.timezone)).date()
            span = DayRange(today - timedelta(days=days - 1), today)
            ask = HistoryRequest(account_id, level, (entity_id,), FIELDS, span)
            result = await deps.history.get(ask, token=token, timezone=account.timezone, now=now)
        except (RuleEngineError, GraphError) as exc:  # removed, token refused, Graph down
            answer["problem"] = f"Insights of {account_id} could not be read: {exc}"
            return answer
    if entity_id in result.errors:
        answer["problem"] = f"Meta did not answer for some days: {result.errors[entity_id]}"
    answer |= {"timezone": account.timezone, "series": per_day(result, entity_id, span)}
    return answer


async def entity_insights(request: web.Request) -> web.Response:
    """``GET /api/entities/{id}/insights?days=14``: ``series`` of ``{date, spend,
    impressions}`` per day of the account (spend in its currency's units), with the account's
    name and currency; ``problem`` says why a series is short or empty."""
    days = int_param(request, "days", default=14, low=1, high=MAX_DAYS)
    entity_id = request.match_info["id"]

    async def compute() -> dict[str, Any]:
        answer = await _series(request, entity_id, days)
        await with_accounts(request, [answer])
        return answer

    costly = services(request).costly
    return json_response(await costly.answer("entity_insights", (entity_id, days), compute))


def add_routes(app: web.Application) -> None:
    """Register the entity insights route."""
    app.router.add_get("/api/entities/{id}/insights", entity_insights, name="api.entity_insights")
