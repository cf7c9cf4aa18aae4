"""Meta's daily budget flexibility seen by a rule: a day may spend up to 75 % over its daily
budget while the calendar week stays within 7 days' budget, so a rule on
``budget_utilization`` over the week raises no alarm on a 1.6× day that a rule on the day's
spend against its budget would (Meta's v23.0 announcement; SDK 24.0.0 notes)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flow import records
from graph_sandbox.admin import SandboxAdmin
from graph_sandbox.insights import InsightsEngine
from graph_sandbox.scenarios import WorldConfig, build_world
from graph_sandbox.world import ACTIVE
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from test_budget_schedules import run_once

#: The Saturdays a search may pick: eight whole calendar weeks before the sandbox's clock.
SATURDAYS = [date(2026, 10, 10) + timedelta(days=7 * n) for n in range(8)]


def flexible_saturday() -> tuple[str, str, str, int, date]:
    """An ad set (account, id, timezone, daily budget) of the demo world whose Saturday — the
    last day of a calendar week — spends at least 1.6 times its daily budget."""
    world = build_world(WorldConfig(seed=1))
    engine = InsightsEngine(world)
    for act, account in world.accounts.items():
        for adset in world.adsets(act):
            campaign = world.campaign_of(adset)
            budget = adset.daily_budget
            if not budget or adset.status != ACTIVE or campaign.status != ACTIVE:
                continue
            for saturday in SATURDAYS:
                end = datetime.combine(saturday + timedelta(days=1), time(), account.tz)
                spent = engine.adset_totals(adset, (saturday, saturday), end).spend_cents
                if spent >= 1.6 * budget:
                    return act, adset.id, account.timezone_name, budget, saturday
    raise AssertionError("the demo world has no ad set spending 1.6 × its budget on a Saturday")


def utilization(task: str, period: str, value: float) -> dict[str, Any]:
    condition = {"metric": "budget_utilization", "period": period, "operator": ">", "value": value}
    action = {"type": "append_to_name", "text": f" [{task}]"}
    return {"id": task, "conditions": [condition], "action": action}


async def test_a_one_point_six_day_in_a_week_within_seven_days_raises_no_alarm(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    account, adset, timezone, budget, saturday = flexible_saturday()
    # the end of that Saturday, where the ad account's day and calendar week end
    at = datetime.combine(saturday, time(23, 55), ZoneInfo(timezone)).astimezone(UTC)
    await sandbox.set_clock(at)
    data = {
        "name": "Overspend watch",
        "format": 2,
        "level": "adset",
        "ad_accounts": [account],
        "filters": [{"field": "id", "operator": "EQUAL", "value": adset}],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "timezone": timezone,
        "tasks": [
            # against one day's budget: a false alarm on a flexible day
            utilization("day", "today", 150),
            # against the week's (Sunday to today, a whole calendar week on a Saturday): none
            utilization("week", "this_week_sun_today", 100),
        ],
    }
    rule = await run_once(settings, db, data, at=at)
    rows = {r["task_id"]: r for r in await records(db, rule_id=rule.id)}
    (today,) = rows["day"]["conditions"]
    (week,) = rows["week"]["conditions"]
    assert today["actual"] >= 159  # 23 h 55 of a 1.6× day
    assert rows["day"]["outcome"] == "applied"
    assert week["actual"] <= 100  # Meta holds the calendar week within 7 days' budget
    assert rows["week"]["outcome"] == "not_matched"
    assert int(rows["day"]["entity"]["daily_budget"]) == budget
