"""Budgets where they live now: ad set spend limits under an Advantage campaign budget, and ad
set budget sharing (Meta's ad set reference; SDK 24.0.0 release notes)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from flow import campaign_rule, engine_for, records, run_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.undo.run import undo_batch
from test_copies import graph

ALWAYS = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
CAPS = "Advantage Budget ID (spend caps)"
SHARING = "Budget Sharing ID"


def adset_rule(campaign: str, action: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return campaign_rule(
        action,
        [ALWAYS],
        level="adset",
        ad_accounts=["act_1003"],
        timezone="Asia/Jakarta",
        filters=[{"field": "campaign.name", "operator": "EQUAL", "value": campaign}],
        **extra,
    )


async def limits(sandbox: SandboxAdmin, campaign: str) -> dict[str, dict[str, Any]]:
    """Each ad set of ``campaign`` (by name): its spend limits, as the sandbox holds them."""
    fields = "id,name,campaign{name},daily_spend_cap,daily_min_spend_target"
    body = await graph(sandbox, "act_1003/adsets", fields=fields)
    return {a["name"]: a for a in body["data"] if a["campaign"]["name"] == campaign}


def by_name(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["entity_name"]: r for r in rows}


async def test_a_spend_cap_is_scaled_from_its_live_value_and_undone(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    before = await limits(sandbox, CAPS)
    rule = await run_rule(
        settings,
        db,
        adset_rule(
            CAPS, {"type": "increase_spend_limit", "field": "daily_spend_cap", "percent": 10}
        ),
    )
    rows = by_name(await records(db, rule_id=rule.id))
    capped = next(n for n, a in before.items() if a.get("daily_spend_cap"))
    assert (rows[capped]["outcome"], rows[capped]["field"]) == ("applied", "daily_spend_cap")
    assert (rows[capped]["before"], rows[capped]["after"]) == (8000, 8800)
    uncapped = [n for n in before if n != capped]
    assert {rows[n]["reason"] for n in uncapped} == {"no_spend_limit"}
    after = await limits(sandbox, CAPS)
    assert after[capped]["daily_spend_cap"] == "8800"
    writes = [w["params"] for w in await sandbox.writes()]
    assert writes == [{"daily_spend_cap": "8800"}]  # one write, through the Batch API path

    async with engine_for(settings, db) as engine:
        undone = await undo_batch(
            engine, str(rows[capped]["batch_id"]), by="api", now=datetime.now(UTC)
        )
    assert [c["outcome"] for c in undone["changes"]] == ["applied"]
    assert (await limits(sandbox, CAPS))[capped]["daily_spend_cap"] == "8000"


async def test_a_minimum_target_is_set_under_approval_and_refused_without_a_campaign_budget(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    action = {"type": "set_spend_limit", "field": "daily_min_spend_target", "amount": 45}
    approved = adset_rule(CAPS, action)
    approved["tasks"][0]["approval"] = {"when": {"budget_change_pct_above": 50}}
    rule = await run_rule(settings, db, approved)
    rows = by_name(await records(db, rule_id=rule.id))
    before = await limits(sandbox, CAPS)
    targeted = next(n for n, a in before.items() if a.get("daily_min_spend_target"))
    # 50.00 → 45.00: a 10 % move, under the approval's threshold: written at once
    assert (rows[targeted]["outcome"], rows[targeted]["after"]) == ("applied", 4500)
    # from nothing: an infinitely large move, so it waits for a person
    others = [rows[n] for n in before if n != targeted]
    assert {r["outcome"] for r in others} == {"awaiting_approval"}
    assert {r["after"] for r in others} == {4500}

    shared = await run_rule(settings, db, adset_rule(SHARING, action, name="shared"))
    refused = await records(db, rule_id=shared.id)
    assert {(r["outcome"], r["reason"]) for r in refused} == {("skipped", "no_campaign_budget")}
    assert "campaign daily budget" in refused[0]["error"]["message"]
    assert [w["params"] for w in await sandbox.writes()] == [{"daily_min_spend_target": "4500"}]


async def test_budget_sharing_is_shown_kept_on_copies_and_known_to_rebalance(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    rebalance = {"type": "rebalance_budget", "metric": "cpc", "period": "last_7d"}
    rule = await run_rule(settings, db, adset_rule(SHARING, rebalance))
    rows = await records(db, rule_id=rule.id)
    assert rows and all(r["outcome"] != "applied" for r in rows)  # Meta's 20 % covers it
    assert rows[0]["entity"]["campaign"]["is_adset_budget_sharing_enabled"] is True
    wider = await run_rule(
        settings, db, adset_rule(SHARING, rebalance | {"max_change_percent": 30}) | {"name": "w"}
    )
    moved = [r for r in await records(db, rule_id=wider.id) if r["outcome"] == "applied"]
    assert moved
    assert all(abs(r["after"] - r["before"]) <= 600 for r in moved)  # 30 - 20 = 10 % of 60.00

    campaigns = (await graph(sandbox, "act_1003/campaigns", fields="id,name"))["data"]
    source = next(c["id"] for c in campaigns if c["name"] == SHARING)
    copy = campaign_rule(
        {"type": "duplicate", "deep_copy": True},
        [ALWAYS],
        ad_accounts=["act_1003"],
        timezone="Asia/Jakarta",
        filters=[{"field": "id", "operator": "EQUAL", "value": source}],
        name="copy",
    )
    copied = await run_rule(settings, db, copy)
    (record,) = await records(db, rule_id=copied.id)
    assert record["outcome"] == "applied"
    read = await graph(sandbox, str(record["after"]), fields="is_adset_budget_sharing_enabled")
    assert read["is_adset_budget_sharing_enabled"] is True
