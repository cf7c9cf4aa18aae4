"""The impact report at the edges of real accounts, judged by the sandbox's counterfactual
truth (docs/impact.md): a half-hour time zone, a rule over a dollar and a yen account, hourly
runs inside a 24 h window, approvals some of which are rejected or expire, a holdout salt
changed mid-way, and an undone change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flow import aged, campaign_rule, engine_for, records, save_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.analysis.impact import rule_impact
from ruleengine.approvals.applying import apply_approval
from ruleengine.backtest.service import BacktestDeps
from ruleengine.cli.impact import impact_text
from ruleengine.rules.entity import currency_offset
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.approvals import ApprovalStore
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database, server_time
from ruleengine.store.rules import RuleStore
from ruleengine.undo.run import undo_batch
from support import SANDBOX_ACCOUNTS, SANDBOX_NOW, SANDBOX_TOKEN
from test_holdout import losers_rule, pinned, run_on_day

#: Ad sets that make money: raising their budget changes profit (either way: the sandbox's
#: returns fall as a budget grows).
WINNING = {
    "metric": "purchase_roas.omni_purchase",
    "period": "last_7d",
    "operator": ">",
    "value": 2,
}


async def register(settings: Settings, db: Database, zones: dict[str, str] | None = None) -> None:
    """The demo accounts registered as Meta holds them (``zones``: replaced time zones)."""
    store = CredentialStore(db, load_key(settings))
    for account, (name, timezone, currency) in SANDBOX_ACCOUNTS.items():
        zone = (zones or {}).get(account, timezone)
        await store.add(
            account, SANDBOX_TOKEN, now=SANDBOX_NOW, name=name, timezone=zone, currency=currency
        )


async def first_decisions(db: Database, rule_id: str) -> list[dict[str, Any]]:
    """Each entity's first decision of the rule (changed, proposed or held out)."""
    first: dict[str, dict[str, Any]] = {}
    kinds = ("applied", "awaiting_approval", "held_out")
    rows = [r for r in await records(db, rule_id=rule_id) if r["outcome"] in kinds]
    for row in sorted(rows, key=lambda r: r["created_at"]):
        if row.get("kind") not in ("approval", "undo"):
            first.setdefault(row["entity_id"], row)
    return list(first.values())


async def truth(
    sandbox: SandboxAdmin, db: Database, rule_id: str, hours: int, now: datetime
) -> dict[str, float]:
    """Per currency, the mean over entities acted on (their first decision, window over) of
    actual minus counterfactual profit over the ``hours`` account-local hours after the
    decision's hour: what the rule's actions really earned (currency units)."""
    sums: dict[str, list[float]] = {}
    for row in await first_decisions(db, rule_id):
        if row["outcome"] == "held_out":
            continue
        _, zone, currency = SANDBOX_ACCOUNTS[row["account"]]
        account = await db[c.ACCOUNTS].find_one({"_id": row["account"]})
        zone = account["timezone"] if account else zone
        at = row["created_at"].replace(tzinfo=UTC)
        local = at.astimezone(ZoneInfo(zone)).replace(minute=0, second=0, microsecond=0)
        start = local.astimezone(UTC) + timedelta(hours=1)
        end = start + timedelta(hours=hours)
        if end > now:
            continue
        effect = await sandbox.true_effect(row["entity_id"], since=at, start=start, end=end)
        profit = effect["purchase_value_cents"] - effect["spend_cents"]
        sums.setdefault(currency, []).append(profit / currency_offset(currency))
    return {currency: sum(v) / len(v) for currency, v in sums.items()}


def pause_all(name: str, holdout: dict[str, Any]) -> dict[str, Any]:
    """Pause every campaign of act_1001 (about a dozen), ``holdout`` held out."""
    data = campaign_rule(
        {"type": "pause"}, [{"metric": "current_hour", "operator": ">=", "value": 0}], name=name
    )
    data["tasks"][0]["holdout"] = holdout
    return data


def by_currency(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (task,) = report["tasks"]
    return {part["currency"]: part for part in task["currencies"]}


async def measure(
    settings: Settings, db: Database, rule_id: str, *, days: int, window: str, now: datetime
) -> dict[str, Any]:
    async with BacktestDeps.open(settings, db) as deps:
        return await rule_impact(deps, rule_id, days=days, window=window, now=now)


async def run_and_measure(
    settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
    rule_id: str,
    runs: list[datetime],
    *,
    now: datetime,
    window: str,
) -> dict[str, Any]:
    """The rule run at each of ``runs``, then its report at ``now`` (the sandbox's clock).

    What the engine stores to compare later is on MongoDB's clock, which does not follow the
    runs' instants: before each run the earlier ones are made as much older there (``aged``),
    so Meta's hourly budget limit and cooldowns see the hours between them."""
    for previous, at in zip([None, *runs], runs, strict=False):
        if previous is not None:
            for batch_id in await db[c.ACTION_INTENTS].distinct("batch_id", {"rule_id": rule_id}):
                await aged(db, str(batch_id), at - previous)
        await run_on_day(settings, db, sandbox, rule_id, at)
    await sandbox.set_clock(now)
    return await measure(settings, db, rule_id, days=10, window=window, now=now)


DAILY = [SANDBOX_NOW + timedelta(days=day) for day in range(3)]


async def test_a_half_hour_zone_account_is_measured_on_its_own_hours(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    # act_1001 reports in India's time: its hours start at :30 UTC, and so do its numbers
    zones = {"act_1001": "Asia/Kolkata"}
    await sandbox.reset(seed=1, scenario="demo", campaigns_per_account=192, timezones=zones)
    await register(settings, db, zones)
    rule = await pinned(db, await save_rule(db, losers_rule(30), now=SANDBOX_NOW), "kolkata-30")
    now = SANDBOX_NOW + timedelta(days=8)
    report = await run_and_measure(settings, db, sandbox, rule.id, DAILY, now=now, window="72h")
    usd = by_currency(report)["USD"]
    assert usd["enough_data"], usd
    profit = usd["effects"]["profit"]
    # both groups delivered in their windows: not the "0, interval [0, 0]" of missed hours
    assert profit["acted_mean"] != 0 and profit["held_out_mean"] != 0
    assert profit["low"] < profit["high"]
    true = (await truth(sandbox, db, rule.id, 72, now))["USD"]
    assert true > 0 and profit["low"] <= true <= profit["high"], (true, profit)


async def test_a_dollar_and_a_yen_account_are_measured_apart_never_added(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    await sandbox.reset(seed=1, scenario="demo", campaigns_per_account=192)
    await register(settings, db)
    data = losers_rule(30)
    data["ad_accounts"] = ["act_1001", "act_1004"]  # dollars and yen
    rule = await pinned(db, await save_rule(db, data, now=SANDBOX_NOW), "usd-jpy-30")
    now = SANDBOX_NOW + timedelta(days=8)
    report = await run_and_measure(settings, db, sandbox, rule.id, DAILY, now=now, window="72h")
    parts = by_currency(report)
    assert sorted(parts) == ["JPY", "USD"]
    truths = await truth(sandbox, db, rule.id, 72, now)
    for currency, part in parts.items():
        assert part["enough_data"], (currency, part["counts"])
        profit = part["effects"]["profit"]
        assert profit["low"] <= truths[currency] <= profit["high"], (currency, truths, profit)
        assert part["total_profit_effect"] == round(profit["effect"] * profit["acted_entities"], 2)
    (task,) = report["tasks"]
    assert task["counts"]["acted_entities"] == sum(
        p["counts"]["acted_entities"] for p in parts.values()
    )
    assert "effects" not in task and "total_profit_effect" not in task  # nothing added up
    text = impact_text(report)
    assert "    JPY: " in text and "    USD: " in text
    # each in its own currency: yen without decimals, dollars with cents
    yen, dollars = parts["JPY"]["effects"]["profit"], parts["USD"]["effects"]["profit"]
    assert f"${abs(dollars['effect']):,.2f} per entity" in text
    assert f"¥{abs(round(yen['effect'])):,} per entity" in text
    assert "$" in text and "¥" in text


async def test_hourly_runs_inside_a_24h_window_count_each_entity_once(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    """A budget raise every hour (no cooldown) re-decides every entity 24 times a day: the
    report compares entities, not decisions, and its total counts each entity's lift once."""
    await sandbox.reset(seed=3, scenario="demo", campaigns_per_account=96)
    await register(settings, db)
    data = campaign_rule(
        {"type": "increase_budget", "percent": 10}, [WINNING], name="Hourly raise", level="adset"
    )
    data["tasks"][0]["holdout"] = {"percent": 40}
    data["filters"] = [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]
    rule = await pinned(db, await save_rule(db, data, now=SANDBOX_NOW), "hourly-raise-40")
    hourly = [SANDBOX_NOW + timedelta(hours=hour) for hour in range(24)]
    now = SANDBOX_NOW + timedelta(days=3)
    report = await run_and_measure(settings, db, sandbox, rule.id, hourly, now=now, window="24h")
    (task,) = report["tasks"]
    counts = task["counts"]
    firsts = await first_decisions(db, rule.id)
    acted = {r["entity_id"] for r in firsts if r["outcome"] != "held_out"}
    held = {r["entity_id"] for r in firsts if r["outcome"] == "held_out"}
    assert (counts["acted_entities"], counts["held_out_entities"]) == (len(acted), len(held))
    # every run decided again: many decisions per entity, each entity counted once
    assert counts["held_out"] > 10 * len(held) and counts["acted"] > 10 * len(acted)
    usd = by_currency(report)["USD"]
    profit = usd["effects"]["profit"]
    assert (profit["acted_entities"], profit["held_out_entities"]) == (len(acted), len(held))
    assert usd["total_profit_effect"] == round(profit["effect"] * len(acted), 2)
    true = (await truth(sandbox, db, rule.id, 24, now))["USD"]
    assert profit["low"] <= true <= profit["high"], (true, profit)


async def test_approvals_keep_rejected_and_expired_proposals_in_the_acted_group(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    """A proposal is the decision, dated when it is made like its held-out twins; what a
    person then did with it is counted, and the effect is the rule's as it was run."""
    await sandbox.reset(seed=1, scenario="demo", campaigns_per_account=192)
    await register(settings, db)
    data = losers_rule(30)
    data["tasks"][0]["approval"] = {"when": "always", "expires_after_minutes": 240}
    rule = await pinned(db, await save_rule(db, data, now=SANDBOX_NOW), "approved-30")
    await run_on_day(settings, db, sandbox, rule.id, SANDBOX_NOW)
    proposals = [a async for a in db[c.APPROVALS].find({"rule_id": rule.id}).sort("entity_id", 1)]
    assert len(proposals) >= 30
    decided_at = SANDBOX_NOW + timedelta(hours=2)
    await sandbox.set_clock(decided_at)
    store = ApprovalStore(db)
    approved = proposals[::3]
    rejected = proposals[1::3]
    async with engine_for(settings, db) as engine:
        for doc in approved:
            await store.decide(doc["_id"], status="approved", by="t", now=decided_at)
            await apply_approval(engine, doc["_id"], now=decided_at)
    for doc in rejected:
        await store.decide(doc["_id"], status="rejected", by="t", now=decided_at)
    # the rest expire: their deadline is on MongoDB's clock, 4 hours after they were made
    await store.expire_due(now=await server_time(db) + timedelta(hours=5))
    now = SANDBOX_NOW + timedelta(days=6)
    await sandbox.set_clock(now)
    report = await measure(settings, db, rule.id, days=8, window="72h", now=now)
    (task,) = report["tasks"]
    counts = task["counts"]
    assert counts["approvals"] == {
        "applied": len(approved),
        "expired": len(proposals) - len(approved) - len(rejected),
        "rejected": len(rejected),
    }
    assert counts["acted_entities"] == len(proposals)
    usd = by_currency(report)["USD"]
    assert usd["counts"]["acted_complete"] == len(proposals)
    profit = usd["effects"]["profit"]
    true = (await truth(sandbox, db, rule.id, 72, now))["USD"]
    assert profit["low"] <= true <= profit["high"], (true, profit)
    assert "proposal(s) rejected" in impact_text(report)


async def test_a_changed_salt_never_puts_an_entity_in_both_groups(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    await register(settings, db)
    data = pause_all("Salt", {"percent": 50, "salt": "a"})
    rule = await save_rule(db, data, now=SANDBOX_NOW)
    await run_on_day(settings, db, sandbox, rule.id, SANDBOX_NOW)
    # the holdout drawn again: some held-out entities are now acted on, and the other way
    data["tasks"][0]["holdout"] = {"percent": 50, "salt": "b"}
    await RuleStore(db).save(
        parse_rule(data), rule_id=rule.id, now=SANDBOX_NOW, author="t", source="test"
    )
    await sandbox.reset(seed=1, scenario="demo")  # every campaign active again
    await run_on_day(settings, db, sandbox, rule.id, SANDBOX_NOW + timedelta(hours=1))
    rows = [
        r for r in await records(db, rule_id=rule.id) if r["outcome"] in ("applied", "held_out")
    ]
    groups: dict[str, set[str]] = {}
    for row in rows:
        groups.setdefault(row["entity_id"], set()).add(row["outcome"])
    both = {e for e, g in groups.items() if len(g) == 2}
    assert both, "the new salt moved no entity: pick another pair of salts"
    later = SANDBOX_NOW + timedelta(hours=2)
    report = await measure(settings, db, rule.id, days=2, window="24h", now=later)
    counts = report["tasks"][0]["counts"]
    assert counts["switched_groups"] == len(both)
    assert counts["acted_entities"] + counts["held_out_entities"] == len(groups)
    assert "decided in both groups" in impact_text(report)


async def test_an_undone_change_is_counted_and_stays_in_the_acted_group(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    await register(settings, db)
    rule = await save_rule(db, pause_all("Undo", {"percent": 30}), now=SANDBOX_NOW)
    await run_on_day(settings, db, sandbox, rule.id, SANDBOX_NOW)
    applied = [r for r in await records(db, rule_id=rule.id) if r["outcome"] == "applied"]
    assert applied
    batch_id = applied[0]["batch_id"]
    async with engine_for(settings, db) as engine:
        result = await undo_batch(engine, batch_id, by="t", now=SANDBOX_NOW + timedelta(minutes=30))
    assert result["complete"] and len(result["changes"]) == len(applied)
    report = await measure(
        settings, db, rule.id, days=2, window="24h", now=SANDBOX_NOW + timedelta(hours=1)
    )
    counts = report["tasks"][0]["counts"]
    # the undo's own records are not decisions: the entities stay acted on, once each
    assert counts["undone"] == counts["acted_entities"] == counts["acted"] == len(applied)
    assert "undone" in impact_text(report)
