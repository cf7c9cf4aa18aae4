"""What the sandbox knows and Graph never shows: each entity's quality and its counterfactual.

For tests that measure the engine's effect. An ad set's *quality* is its profile: the ROAS
it makes at the budget the scenario built it with (``true_roas``), and how that falls when
its budget moves (:data:`~graph_sandbox.delivery.ELASTICITY`). Its *counterfactual* is what
it would have delivered had nothing been written through the Graph API since some instant:
the same model, the same noise, with the API's writes left out of the logs. The true effect
of the writes is then ``actual - counterfactual``, day by day or hour by hour.

Pure functions of the world and an engine; the admin routes serve them as JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any, Literal

from graph_sandbox.delivery import ELASTICITY, Totals
from graph_sandbox.insights import InsightsEngine
from graph_sandbox.periods import Period
from graph_sandbox.timeline import ratio_at
from graph_sandbox.world import Account, AdObject, World

Increment = Literal["all", "day", "hour"]


def members(world: World, node_id: str) -> tuple[Account, list[AdObject]] | None:
    """The account and the ad sets that deliver for a node (an ad account, a campaign or an
    ad set); ``None`` for an unknown id or an ad (its ad set delivers)."""
    account = world.account(node_id)
    if account is not None:
        return account, world.adsets(node_id)
    obj = world.get(node_id)
    if obj is None or obj.kind == "ad":
        return None
    adsets = world.adsets_of(obj.id) if obj.kind == "campaign" else [obj]
    return world.account_of(obj), adsets


def quality(
    insights: InsightsEngine, node_id: str, adsets: list[AdObject], now: datetime
) -> dict[str, Any]:
    """The hidden quality of a node: its ad sets' archetypes, typical spend and true ROAS at
    the budget they were built with and at the budget in force ``now``.

    A node's ROAS is its ad sets' weighted by their typical spend (at that budget).
    """
    rows = [_adset_quality(insights, adset, now) for adset in adsets]
    typical = sum(row["typical_spend_cents"] for row in rows)
    spend_now = sum(row["typical_spend_cents"] * row["budget_ratio"] for row in rows)
    value = sum(row["typical_spend_cents"] * row["true_roas"] for row in rows)
    value_now = sum(
        row["typical_spend_cents"] * row["budget_ratio"] * row["true_roas_now"] for row in rows
    )
    archetypes = sorted({row["archetype"] for row in rows})
    return {
        "id": node_id,
        "elasticity": ELASTICITY,
        "archetype": archetypes[0] if len(archetypes) == 1 else "mixed",
        "typical_spend_cents": typical,
        "true_roas": value / typical if typical else 0.0,
        "true_roas_now": value_now / spend_now if spend_now else 0.0,
        "adsets": rows,
    }


def _adset_quality(insights: InsightsEngine, adset: AdObject, now: datetime) -> dict[str, Any]:
    profile = adset.profile
    assert profile is not None, "every ad set has a profile"
    ratio = ratio_at(insights.budget_ratios(adset), now)
    return {
        "id": adset.id,
        "archetype": str(profile.archetype),
        "typical_spend_cents": profile.spend_cents,
        "true_roas": profile.roas,
        "budget_ratio": ratio,
        # value per unit of spend falls as ratio ** (ELASTICITY - 1) (delivery.day_totals)
        "true_roas_now": profile.roas * ratio ** (ELASTICITY - 1),
    }


def counterfactual(
    insights: InsightsEngine,
    adsets: list[AdObject],
    *,
    since: datetime | None,
    period: Period,
    increment: Increment,
    now: datetime,
) -> list[dict[str, Any]]:
    """What ``adsets`` delivered in ``period`` up to ``now``, what they would have delivered
    with no Graph API write at or after ``since`` (``None``: ever), and the difference.

    One row for the period, one per day, or one per local hour of each day (every row, with
    delivery or not); days are calendar days in the ad account's timezone. Matured numbers:
    no attribution lag, conversions as ``use_unified_attribution_setting=true`` shows them.
    """
    unwritten = insights.without_writes(since)
    if increment == "all":
        return [
            _row(
                _label(period),
                insights.totals(adsets, period, now),
                unwritten.totals(adsets, period, now),
            )
        ]
    rows = []
    for day in _days(period):
        if increment == "day":
            actual = insights.totals(adsets, (day, day), now)
            rows.append(_row(_label((day, day)), actual, unwritten.totals(adsets, (day, day), now)))
            continue
        hours = insights.hourly_totals(adsets, (day, day), now)
        alternatives = unwritten.hourly_totals(adsets, (day, day), now)
        for hour, (actual, alternative) in enumerate(zip(hours, alternatives, strict=True)):
            rows.append(_row({**_label((day, day)), "hour": hour}, actual, alternative))
    return rows


def _days(period: Period) -> Iterator[date]:
    day = period[0]
    while day <= period[1]:
        yield day
        day += timedelta(days=1)


def _label(period: Period) -> dict[str, Any]:
    return {"date_start": str(period[0]), "date_stop": str(period[1])}


def _row(label: dict[str, Any], actual: Totals, alternative: Totals) -> dict[str, Any]:
    effect = Totals(*(a - b for a, b in zip(actual, alternative, strict=True)))
    return {
        **label,
        "actual": _as_json(actual),
        "counterfactual": _as_json(alternative),
        "effect": _as_json(effect),
    }


def _as_json(totals: Totals) -> dict[str, int]:
    """Totals as JSON: money in minor units, as integers."""
    return dict(totals._asdict())


def default_period(
    account: Account, adsets: list[AdObject], since: datetime | None, now: datetime
) -> Period:
    """From the local day of ``since`` (or of the oldest ad set's creation) to today."""
    start = since or min((adset.created_time for adset in adsets), default=now)
    return _local_day(start, account), _local_day(now, account)


def _local_day(moment: datetime, account: Account) -> date:
    return moment.astimezone(account.tz).date()
