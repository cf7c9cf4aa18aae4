"""One money unit for people, end to end: format-2 amounts in the account currency's units,
minor units only in what the sandbox (Meta) receives; stored format-1 rules migrated at
startup with a new version, or kept (with a note) when their accounts' currencies differ."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from flow import campaign_ids, campaign_rule, dispatch, records, run_rule, save_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.rules.language.model import definition_checksum
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.formats import migrate_rules
from ruleengine.store.rules import RuleStore

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}


@pytest.fixture
async def wired(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> Settings:
    """Accounts registered (act_1004 in JPY); the engine-wide change cap out of the way."""
    return settings.model_copy(update={"max_budget_change_pct": 1000})


async def budget_writes(sandbox: SandboxAdmin, entity_id: str) -> list[int]:
    return [
        int(w["params"]["daily_budget"])
        for w in await sandbox.writes()
        if w["ok"] and w["id"] == entity_id and "daily_budget" in w["params"]
    ]


def on(account: str, campaign_id: str, data: dict[str, Any]) -> dict[str, Any]:
    data["ad_accounts"] = [account]
    data["filters"] = [{"field": "id", "operator": "EQUAL", "value": campaign_id}]
    return data


@pytest.mark.parametrize(
    ("account", "campaign", "start", "expected"),
    [
        # $123.45 is 12345 cents; +400 % is stopped at $500.00, 50000 cents
        ("act_1001", "[AUTO] Prospecting US 1", 123.45, [12345, 50000]),
        # ¥300 is 300 (whole yen); +400 % is stopped at ¥500, not 50000
        ("act_1004", "[AUTO] Prospecting JP 1", 300, [300, 500]),
    ],
)
async def test_a_max_budget_of_500_never_passes_500_in_the_accounts_currency(
    wired: Settings,
    db: Database,
    sandbox: SandboxAdmin,
    account: str,
    campaign: str,
    start: float,
    expected: list[int],
) -> None:
    campaign_id = (await campaign_ids(sandbox, account))[campaign]
    set_to = campaign_rule({"type": "set_budget", "amount": start}, [ALWAYS], name="set")
    await run_rule(wired, db, on(account, campaign_id, set_to))
    scale = {"type": "increase_budget", "percent": 400, "max_budget": 500}
    await run_rule(wired, db, on(account, campaign_id, campaign_rule(scale, [ALWAYS], name="up")))
    await run_rule(wired, db, on(account, campaign_id, campaign_rule(scale, [ALWAYS], name="up2")))

    assert await budget_writes(sandbox, campaign_id) == expected
    (clamped,) = await records(db, outcome="applied", clamped_by="max_budget")
    assert (clamped["requested"], clamped["after"]) == (expected[0] * 5, expected[1])
    (at_max,) = await records(db, reason="at_max_budget")
    assert at_max["before"] == expected[1]  # the third run writes nothing


# ---------------------------------------------------------------- the startup migration


def old_rule(name: str, accounts: list[str], **action: Any) -> dict[str, Any]:
    """A format-1 document (no "format"): action budgets in minor units."""
    data = campaign_rule(action or {"type": "pause"}, [ALWAYS], name=name)
    del data["format"]
    data["ad_accounts"] = accounts
    return data


async def test_a_stored_format_1_rule_is_migrated_once_and_writes_the_same(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    campaign_id = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    old = old_rule("scale", ["act_1001"], type="increase_budget", percent=400, max_budget=41234)
    old["filters"] = [{"field": "id", "operator": "EQUAL", "value": campaign_id}]
    stored = await save_rule(db, old)
    assert "format" not in stored.definition and stored.version == 1

    # two processes starting at once: the rule is migrated exactly once
    now = datetime.now(UTC)
    reports = await asyncio.gather(migrate_rules(db, now=now), migrate_rules(db, now=now))
    assert sorted(len(r.migrated) for r in reports) == [0, 1]
    again = await migrate_rules(db, now=now)
    assert (again.migrated, again.kept) == ([], {})

    store = RuleStore(db)
    rule = await store.get(stored.id)
    newest, first = await store.versions(stored.id)
    assert (rule.version, newest.version, newest.author, newest.source) == (
        2,
        2,
        "migration",
        "format-2",
    )
    assert newest.checksum == definition_checksum(newest.definition) == rule.checksum
    assert newest.definition["format"] == 2
    assert newest.definition["tasks"][0]["action"]["max_budget"] == 412.34
    assert first.definition == stored.definition  # the old version stays as it was
    assert rule.status == stored.status and rule.next_execute_at == stored.next_execute_at

    await dispatch(wired, db)
    await work(wired)
    (record,) = await records(db, rule_id=stored.id)
    assert record["rule_version"] == 2
    assert (record["after"], record["clamped_by"]) == (41234, ["max_budget"])
    assert await budget_writes(sandbox, campaign_id) == [41234]


async def test_a_rule_on_usd_and_jpy_accounts_stays_at_format_1_with_a_note(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    mixed = await save_rule(
        db, old_rule("mixed", ["act_1001", "act_1004"], type="set_budget", amount=50000)
    )
    # another amount than the mixed rule's: whichever of the two runs second on act_1001
    # still changes the budget (the same amount would find it already set: not applied)
    unknown = await save_rule(
        db, old_rule("unknown", ["act_1001", "act_9999"], type="set_budget", amount=40000)
    )
    plain = await save_rule(db, old_rule("no budgets", ["act_1001", "act_1004"]))
    now = datetime.now(UTC)
    report = await migrate_rules(db, now=now)
    assert report.migrated == [plain.id]
    assert set(report.kept) == {mixed.id, unknown.id}

    store = RuleStore(db)
    kept = await store.get(mixed.id)
    assert (kept.version, kept.definition) == (1, mixed.definition)
    assert kept.migration is not None
    assert "act_1004 JPY" in kept.migration.message
    assert "split the rule by currency" in kept.migration.message
    assert "act_9999" in ((await store.get(unknown.id)).migration or kept.migration).message
    groups = [g async for g in db[c.ERROR_LOG].find({"function": "store.formats.migrate_rules"})]
    assert sum(g["count"] for g in groups) == 2

    await migrate_rules(db, now=now)  # a second start logs nothing new
    groups = [g async for g in db[c.ERROR_LOG].find({"function": "store.formats.migrate_rules"})]
    assert sum(g["count"] for g in groups) == 2

    # it keeps running as format 1: 50000 cents on the USD account, ¥50000 on the yen one
    await dispatch(wired, db)
    await work(wired)
    applied = await records(db, rule_id=mixed.id, outcome="applied")
    assert {r["account"] for r in applied} == {"act_1001", "act_1004"}
    assert {r["after"] for r in applied} == {50000}
