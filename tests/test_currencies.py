"""One rule over accounts of different currencies, end to end through the Graph sandbox:
amounts given per currency (``{"USD": 20, "JPY": 3000}``) are each account's own — in the
conditions the worker evaluates (and Rule Logs show as ``expected``), in the budgets it
writes (converted with each account's own offset), in the preview and in the backtest's
replay; a backtest never adds two currencies.

The sandbox's demo accounts: act_1001 in USD (cents), act_1004 in JPY (whole yen).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from flow import campaign_ids, campaign_rule, dispatch, records, run_rule, save_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.backtest.result import BacktestRequest
from ruleengine.backtest.service import BacktestDeps, run_backtest
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.preview import open_preview, preview_rule
from support import SANDBOX_NOW
from test_backtest import deps  # noqa: F401  (a fixture)

DOLLARS_AND_YEN = ["act_1001", "act_1004"]
#: ``cost_per_result > 20`` as meant: $20 a result, and ¥3,000 (not ¥20, about 13 cents).
THRESHOLD = {"USD": 20, "JPY": 3000}


@pytest.fixture
async def wired(settings: Settings, db: Database, redis: Any, accounts: list[str]) -> Settings:
    """The demo accounts registered (act_1004 in JPY), Redis and the database empty."""
    return settings


def dollars_and_yen(data: dict[str, Any]) -> dict[str, Any]:
    return data | {"ad_accounts": DOLLARS_AND_YEN, "name": "dollars and yen"}


async def ids_by_name(sandbox: SandboxAdmin) -> dict[str, str]:
    return {**await campaign_ids(sandbox, "act_1001"), **await campaign_ids(sandbox, "act_1004")}


async def test_one_threshold_per_currency_decides_each_account_in_its_own(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    condition = {"metric": "cost_per_result", "period": "yesterday", "operator": ">"}
    data = dollars_and_yen(campaign_rule({"type": "pause"}, [condition | {"value": THRESHOLD}]))
    await run_rule(wired, db, data)

    evaluated = [r for r in await records(db) if r["conditions"]]
    assert {r["account"] for r in evaluated} == set(DOLLARS_AND_YEN)
    currency = {"act_1001": "USD", "act_1004": "JPY"}
    for row in evaluated:  # what Rule Logs show each entity was compared with, and why
        seen = row["conditions"][0]
        assert seen["expected"] == THRESHOLD[currency[row["account"]]]
        assert seen["passed"] == (seen["actual"] is not None and seen["actual"] > seen["expected"])
    matched = {r["entity_id"] for r in evaluated if r["passed"]}
    writes = await sandbox.writes()
    assert {w["id"] for w in writes if w["ok"]} == matched
    assert all(w["params"] == {"status": "PAUSED"} for w in writes)
    yen = [r for r in evaluated if r["account"] == "act_1004"]
    # a yen result cost above 20 but at most ¥3,000 (a few dollars): a bare 20 would have
    # paused it; it runs on, while a dearer one is paused
    spared = [r for r in yen if 20 < (r["conditions"][0]["actual"] or 0) <= 3000]
    assert spared and all(r["outcome"] == "not_matched" for r in spared)
    assert [r for r in yen if r["outcome"] == "applied"]
    assert [r for r in evaluated if r["account"] == "act_1001" and r["outcome"] == "applied"]


async def test_budget_bounds_per_currency_become_each_accounts_minor_units(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    """+20 % capped at $210 (21000 cents) on a USD account and ¥35,000 on a JPY one: a bare
    210 would have held the yen campaign at ¥210 (no raise at all)."""
    action = {"type": "increase_budget", "percent": 20, "max_budget": {"USD": 210, "JPY": 35000}}
    condition = {"metric": "daily_budget", "operator": ">", "value": {"USD": 150, "JPY": 20000}}
    data = dollars_and_yen(campaign_rule(action, [condition]))
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": "Prospecting"}]
    await run_rule(wired, db, data)

    ids = await ids_by_name(sandbox)
    written = {w["id"]: w["params"]["daily_budget"] for w in await sandbox.writes() if w["ok"]}
    assert written == {
        ids["[AUTO] Prospecting US 1"]: "21000",  # $200 → $240, held at $210.00
        ids["[AUTO] Prospecting JP 1"]: "35000",  # ¥30,000 → ¥36,000, held at ¥35,000
    }
    rows = {r["entity_id"]: r for r in await records(db) if r["passed"]}
    us1, us2, jp1 = (ids[f"[AUTO] Prospecting {n}"] for n in ("US 1", "US 2", "JP 1"))
    assert (rows[us1]["before"], rows[us1]["after"], rows[us1]["clamped_by"]) == (
        20000,
        21000,
        ["max_budget"],
    )
    assert (rows[us2]["outcome"], rows[us2]["reason"]) == ("no_change", "at_max_budget")
    assert (rows[jp1]["before"], rows[jp1]["after"]) == (30000, 35000)
    # Rule Logs show each account's own amounts: the threshold, and the action's bound
    assert rows[jp1]["conditions"][0]["expected"] == 20000.0
    assert rows[us1]["conditions"][0]["expected"] == 150.0
    assert (rows[jp1]["action"]["max_budget"], rows[us1]["action"]["max_budget"]) == (35000, 210)


async def test_the_preview_picks_each_accounts_amount_as_the_run_does(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    condition = {"metric": "cost_per_result", "period": "yesterday", "operator": ">"}
    data = dollars_and_yen(campaign_rule({"type": "pause"}, [condition | {"value": THRESHOLD}]))
    reading = open_preview(wired, db=db)
    try:
        preview = await preview_rule(
            reading, parse_rule(data), rule_id="draft", version=1, now=datetime.now(UTC)
        )
    finally:
        await reading.close()
    assert preview.errors == {}
    assert await sandbox.writes() == []
    would = {r["entity_id"] for r in preview.records if r["outcome"] == "would_apply"}
    by_account = {
        (r["account"], r["conditions"][0]["expected"]) for r in preview.records if r["conditions"]
    }
    assert by_account == {("act_1001", 20.0), ("act_1004", 3000.0)}
    await run_rule(wired, db, data)
    assert would == {w["id"] for w in await sandbox.writes() if w["ok"]}


async def test_a_rule_without_the_accounts_currency_runs_nothing_there(
    wired: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    """Saved while the accounts were in dollars only (stored rules are not re-checked): on the
    yen account its job fails with the reason, evaluates and writes nothing; the dollar
    account runs as usual."""
    condition = {"metric": "spend", "period": "yesterday", "operator": ">"}
    data = dollars_and_yen(campaign_rule({"type": "pause"}, [condition | {"value": {"USD": 1}}]))
    rule = await save_rule(db, data)
    await dispatch(wired, db)
    await work(wired)

    yen = await db[c.BATCHES].find_one({"rule_id": rule.id, "account": "act_1004"})
    assert yen is not None
    assert (yen["status"], yen["reason"]) == ("FAILED", "no_amount_for_currency")
    assert "tasks[0].conditions[0].value gives no amount in JPY" in yen["error"]
    assert await records(db, account="act_1004") == []
    yen_ids = set((await campaign_ids(sandbox, "act_1004")).values())
    assert not [w for w in await sandbox.writes() if w["id"] in yen_ids]
    dollar = await db[c.BATCHES].find_one({"rule_id": rule.id, "account": "act_1001"})
    assert dollar is not None and dollar["status"] == "DONE"
    assert await records(db, account="act_1001", outcome="applied")


# ---------------------------------------------------------------- the backtest


async def test_a_backtest_over_dollars_and_yen_keeps_each_currency_apart(
    deps: BacktestDeps,  # noqa: F811
    sandbox: SandboxAdmin,
) -> None:
    action = {"type": "increase_budget", "percent": 10, "max_budget": {"USD": 260, "JPY": 36000}}
    condition = {"metric": "spend", "period": "today", "operator": ">"}
    data = dollars_and_yen(
        campaign_rule(action, [condition | {"value": {"USD": 5, "JPY": 500}}], cooldown_minutes=360)
    )
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": "Prospecting"}]
    result = await run_backtest(deps, BacktestRequest(parse_rule(data), days=3), now=SANDBOX_NOW)

    assert result["currencies"] == {"act_1001": "USD", "act_1004": "JPY"}
    assert not any("summed" in caveat for caveat in result["caveats"])
    fires = [f for f in result["fires"] if f["field"] == "daily_budget"]
    yen = [f for f in fires if f["account"] == "act_1004"]
    dollars = [f for f in fires if f["account"] == "act_1001"]
    # the yen bound is ¥36,000 (a bare 260 would have stopped ¥30,000 from rising at all)
    assert yen and all(f["currency"] == "JPY" and 30000 < f["after"] <= 36000 for f in yen)
    assert dollars and all(f["currency"] == "USD" and f["after"] <= 260 for f in dollars)
    for day in result["per_day"]:
        assert set(day["budget_delta"]) == set(day["budget_total"]) == {"JPY", "USD"}
    last = result["per_day"][-1]["budget_total"]
    for code in ("JPY", "USD"):
        affected = [e for e in result["entities"] if e["currency"] == code]
        changed = [e for e in affected if e["after"]["daily_budget"] != e["before"]["daily_budget"]]
        assert changed
        assert last[code] == pytest.approx(sum(e["after"]["daily_budget"] for e in affected))
    moved = {
        code: sum(day["budget_delta"][code] for day in result["per_day"]) for code in ("JPY", "USD")
    }
    for code in ("JPY", "USD"):
        affected = [e for e in result["entities"] if e["currency"] == code]
        grown = sum(e["after"]["daily_budget"] - e["before"]["daily_budget"] for e in affected)
        assert moved[code] == pytest.approx(grown)
