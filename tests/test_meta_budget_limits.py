"""Meta's limits on budget writes, end to end against the sandbox: the ad-set limit of 4
changes an hour (plain code 17, changes made in Ads Manager) and the minimum daily budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from flow import campaign_rule, dispatch, records, save_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_TOKEN

ADSET = "Creative Test US 1 - Lookalike 1%"  # 50.00 a day, act_1001
YEN_ADSET = "Creative Test JP 1 - Lookalike 1%"  # ¥3,000 a day, act_1004 (minimum ¥150)
HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}


@pytest.fixture
async def wired(settings: Settings, db: Database, redis: Any, accounts: list[str]) -> Settings:
    """Accounts registered, Redis and the database empty."""
    return settings


@pytest.fixture
async def real_time(sandbox: SandboxAdmin) -> datetime:
    """The sandbox's clock frozen at the engine's (real) time, so both agree on the hour.

    Rules are saved at this instant too: saved a second later (a loaded machine), an
    interval rule would first be due after the dispatch at this instant."""
    now = datetime.now(UTC).replace(microsecond=0)  # Meta's times have whole seconds
    await sandbox.set_clock(now)
    return now


def adset_rule(
    action: dict[str, Any], *, account: str, adsets: str, **extra: Any
) -> dict[str, Any]:
    """A rule on the ad sets of ``account`` whose name contains ``adsets``, every 15 minutes."""
    data = campaign_rule(action, [HAS_BUDGET], level="adset", **extra)
    data["ad_accounts"] = [account]
    data["filters"] = [{"field": "adset.name", "operator": "CONTAIN", "value": adsets}]
    return data


async def adset_id(sandbox: SandboxAdmin, account: str, name: str) -> str:
    """The id of the ad set called ``name``, listed through the sandbox's Graph API."""
    async with aiohttp.ClientSession() as http:
        url = f"{sandbox.base_url}/v27.0/{account}/adsets"
        params = {"fields": "id,name", "limit": "500", "access_token": SANDBOX_TOKEN}
        async with http.get(url, params=params) as response:
            body = await response.json()
    return str(next(a["id"] for a in body["data"] if a["name"] == name))


async def runs(settings: Settings, db: Database, count: int, *, start: datetime) -> None:
    """``count`` scheduled runs, 15 minutes apart, each dispatched and worked."""
    for run in range(count):
        await dispatch(settings, db, now=start + timedelta(minutes=15 * run))
        await work(settings)


def near(moment: datetime, expected: datetime, *, within_s: float = 120) -> bool:
    return abs((moment - expected).total_seconds()) <= within_s


async def test_a_fifth_change_meets_plain_17_and_the_ad_set_waits_out_the_hour(
    wired: Settings, db: Database, sandbox: SandboxAdmin, real_time: datetime
) -> None:
    target = await adset_id(sandbox, "act_1001", ADSET)
    for step in range(4):  # someone used up the hour in Ads Manager…
        await sandbox.ads_manager_change(target, daily_budget=5001 + step)
    # …and the engine cannot see it: the activity log does not answer
    await sandbox.set_faults(rules=[{"path_contains": "/activities", "code": 2}])
    rule = await save_rule(
        db,
        adset_rule({"type": "increase_budget", "percent": 10}, account="act_1001", adsets=ADSET),
        now=real_time,
    )
    await runs(wired, db, 2, start=real_time)

    first, second = await records(db, rule_id=rule.id)
    assert (first["outcome"], first["reason"]) == ("failed", "meta_budget_change_limit")
    assert first["error"]["code"] == 17
    assert first["error"]["subcode"] is None
    allowed_at = first["error"]["allowed_at"].replace(tzinfo=UTC)
    assert near(allowed_at, first["created_at"].replace(tzinfo=UTC) + timedelta(hours=1))
    # the next run does not try: same reason, the same time it may change again, no write
    assert (second["outcome"], second["reason"]) == ("skipped", "meta_budget_change_limit")
    assert second["error"]["allowed_at"] == first["error"]["allowed_at"]
    writes = await sandbox.writes()
    assert [(w["ok"], w["error"]["code"]) for w in writes] == [(False, 17)]
    intent = await db[c.ACTION_INTENTS].find_one({"entity_id": target})
    assert intent is not None
    assert (intent["status"], intent["reason"]) == ("failed", "meta_budget_change_limit")
    assert intent["allowed_at"] == first["error"]["allowed_at"]


async def test_changes_made_in_ads_manager_count_toward_the_four(
    wired: Settings, db: Database, sandbox: SandboxAdmin, real_time: datetime
) -> None:
    target = await adset_id(sandbox, "act_1001", ADSET)
    await sandbox.ads_manager_change(target, daily_budget=5100)
    first_change = real_time
    await sandbox.advance_clock(60)
    await sandbox.ads_manager_change(target, daily_budget=5200)
    await sandbox.advance_clock(60)
    await sandbox.ads_manager_change(target, daily_budget=5300)
    await sandbox.clear_stats()
    rule = await save_rule(
        db,
        adset_rule(
            {"type": "increase_budget", "percent": 1},
            account="act_1001",
            adsets="Creative Test US 1",
        ),
        now=real_time,
    )
    await runs(wired, db, 2, start=real_time)

    mine = [r for r in await records(db, rule_id=rule.id) if r["entity_id"] == target]
    assert [(r["outcome"], r["reason"]) for r in mine] == [
        ("applied", None),
        ("skipped", "meta_budget_change_limit"),
    ]
    error = mine[1]["error"]
    assert (error["changes_last_hour"], error["outside_engine"]) == (4, 3)
    assert error["allowed_at"].replace(tzinfo=UTC) == first_change + timedelta(hours=1)
    assert all(w["ok"] for w in await sandbox.writes())  # Meta's 17 was never met
    # the log is read once per job for the whole account, not once per ad set
    others = [r for r in await records(db, rule_id=rule.id) if r["entity_id"] != target]
    assert len(others) == 4  # the two other ad sets, twice
    assert (await sandbox.stats())["calls_by_kind"]["activities"] == 2


async def test_rules_that_change_no_ad_set_budget_never_read_the_activity_log(
    wired: Settings, db: Database, sandbox: SandboxAdmin, real_time: datetime
) -> None:
    await save_rule(
        db,
        campaign_rule(
            {"type": "increase_budget", "percent": 1},
            [{"metric": "daily_budget", "operator": ">", "value": 0}],
            name="campaign budgets",
        ),
        now=real_time,
    )
    pause = adset_rule({"type": "pause"}, account="act_1001", adsets=ADSET, name="pause")
    await save_rule(db, pause, now=real_time)
    await runs(wired, db, 1, start=real_time)
    stats = await sandbox.stats()
    assert stats["calls_by_kind"]["write"] > 1
    assert stats["calls_by_kind"]["activities"] == 0


async def test_a_decrease_stops_at_the_accounts_minimum_daily_budget(
    wired: Settings, db: Database, sandbox: SandboxAdmin, real_time: datetime
) -> None:
    target = await adset_id(sandbox, "act_1004", YEN_ADSET)
    await sandbox.ads_manager_change(target, daily_budget=200)
    rule = await save_rule(
        db,
        adset_rule(
            {"type": "decrease_budget", "percent": 50}, account="act_1004", adsets=YEN_ADSET
        ),
        now=real_time,
    )
    await runs(wired, db, 2, start=real_time)

    first, second = await records(db, rule_id=rule.id)
    assert (first["outcome"], first["before"], first["requested"], first["after"]) == (
        "applied",
        200,
        100,
        150,
    )
    assert first["clamped_by"] == ["min_daily_budget"]
    assert (second["outcome"], second["reason"]) == ("no_change", "at_min_budget")
    assert (second["before"], second["after"]) == (150, 150)
    assert [w["params"] for w in await sandbox.writes()] == [{"daily_budget": "150"}]
    assert (await sandbox.object(target))["daily_budget"] == 150


async def test_metas_budget_too_low_stops_the_decrease_instead_of_failing_every_run(
    wired: Settings, db: Database, sandbox: SandboxAdmin, real_time: datetime
) -> None:
    target = await adset_id(sandbox, "act_1004", YEN_ADSET)
    await sandbox.ads_manager_change(target, daily_budget=200)
    rule = await save_rule(
        db,
        adset_rule(
            {"type": "decrease_budget", "percent": 50}, account="act_1004", adsets=YEN_ADSET
        ),
        now=real_time,
    )
    # the account cannot be read (its minimum unknown): Meta's own answer is the backstop
    account_read_fails = [{"path_contains": "/act_1004", "method": "GET", "code": 2}]
    for run in range(2):
        await dispatch(wired, db, now=real_time + timedelta(minutes=15 * run))
        await sandbox.set_faults(rules=account_read_fails)
        await work(wired)
        await sandbox.clear_faults()

    first, second = await records(db, rule_id=rule.id)
    assert (first["outcome"], first["reason"]) == ("no_change", "at_min_budget")
    assert (first["error"]["code"], first["error"]["subcode"]) == (100, 1885272)
    assert (second["outcome"], second["reason"]) == ("no_change", "at_min_budget")
    assert second["error"] is None
    assert len(await sandbox.writes()) == 1  # the refused one; the second run sent nothing
    assert (await sandbox.object(target))["daily_budget"] == 200
