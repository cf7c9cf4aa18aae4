"""The clock keys follow the ad account's timezone, where Meta's day and daily budgets end."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from flow import NEW_YORK, campaign_rule, records, run_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database

TOKYO = ZoneInfo("Asia/Tokyo")


@pytest.fixture
async def wired(settings: Settings, db: Database, redis: Any, accounts: list[str]) -> Settings:
    """Accounts registered, Redis and the database empty."""
    return settings


async def test_clock_keys_follow_the_ad_accounts_timezone_not_the_rules(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    # a rule written in Tokyo on act_1001, whose day (and daily budgets) end at New York's midnight
    conditions = [
        {"metric": "hours_left_today", "operator": ">=", "value": 0},
        {"metric": "current_hour", "operator": ">=", "value": 0},
    ]
    data = campaign_rule({"type": "rename", "template": "{name} [{date}]"}, conditions)
    data["timezone"] = "Asia/Tokyo"
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": "Prospecting US 1"}]
    await run_rule(wired, db, data)

    (record,) = await records(db)
    local = record["created_at"].replace(tzinfo=UTC).astimezone(NEW_YORK)
    midnight = (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    hours_left, current_hour = (c["actual"] for c in record["conditions"])
    assert hours_left == pytest.approx((midnight - local).total_seconds() / 3600, abs=1e-5)
    assert current_hour == local.hour
    # the rule's own timezone still names the day in templates
    tokyo_day = local.astimezone(TOKYO).date().isoformat()
    assert record["after"] == f"{record['before']} [{tokyo_day}]"
