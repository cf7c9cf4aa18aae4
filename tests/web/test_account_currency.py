"""An ad account registered with another currency or timezone than Meta's: the worker finds it in
its one read of the ad account, makes no budget or bid change on it (pauses, renames and
messages go on), and says so — records, one error group, the account's ``currency_state`` in
the API, the CLI and ``/health/ready`` — until the account is re-read from Meta."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_api_approvals import gated_rule, pending, propose
from web_helpers import AUTH, Client

from flow import campaign_ids, campaign_rule, dispatch, records, save_rule, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.accounts.facts import AccountFacts
from ruleengine.cli import main
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from support import SANDBOX_NOW, SANDBOX_TOKEN

HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}
PROSPECTING = "[AUTO] Prospecting JP 1"  # a daily budget of ¥30,000


def yen_rule(*, name: str = "yen") -> dict[str, Any]:
    """Raise the budget of one yen campaign by 20 %, and tag its name (not money)."""
    data = campaign_rule({"type": "increase_budget", "percent": 20}, [HAS_BUDGET], name=name)
    data["tasks"].append(
        {
            "id": "tag",
            "conditions": [HAS_BUDGET],
            "action": {"type": "append_to_name", "text": " [seen]"},
        }
    )
    data["ad_accounts"] = ["act_1004"]
    data["timezone"] = "Asia/Tokyo"
    data["filters"] = [{"field": "name", "operator": "CONTAIN", "value": "Prospecting JP 1"}]
    return data


async def register_wrong(db: Database, settings: Settings, account: str, **wrong: str) -> None:
    """Register ``account`` with values Meta does not hold (as the store lets one)."""
    await CredentialStore(db, load_key(settings)).add(
        account, SANDBOX_TOKEN, now=SANDBOX_NOW, **wrong
    )


async def run_at(settings: Settings, db: Database, at: datetime) -> None:
    await dispatch(settings, db, now=at)
    await work(settings)


async def account_entry(client: Client, account_id: str) -> dict[str, Any]:
    answer = await (await client.get("/api/accounts", headers=AUTH)).json()
    return next(a for a in answer["items"] if a["id"] == account_id)


def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ruleengine`` commands run in this process use ``settings`` (database, key, Graph)."""
    assert settings.token_encryption_key is not None
    for name, value in {
        "RULEENGINE_MONGODB_URL": settings.mongodb_url,
        "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
        "RULEENGINE_DATA_DIR": str(settings.data_dir),
        "RULEENGINE_GRAPH_URL": settings.graph_url,
        "RULEENGINE_TOKEN_ENCRYPTION_KEY": settings.token_encryption_key.get_secret_value(),
    }.items():
        monkeypatch.setenv(name, value)


async def test_a_yen_account_registered_as_usd_changes_no_budget_until_it_is_re_read(
    client: Client,
    web_settings: Settings,
    db: Database,
    sandbox: SandboxAdmin,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign = (await campaign_ids(sandbox, "act_1004"))[PROSPECTING]
    await register_wrong(db, web_settings, "act_1004", currency="USD")
    start = datetime.now(UTC)
    await save_rule(db, yen_rule(), now=start)
    await run_at(web_settings, db, start)

    by_task = {r["task_id"]: r for r in await records(db)}
    budget, tag = by_task["t"], by_task["tag"]
    assert (budget["outcome"], budget["reason"]) == ("failed", "account_currency_mismatch")
    assert (budget["error"]["currency"], budget["error"]["meta_currency"]) == ("USD", "JPY")
    assert "ruleengine accounts refresh act_1004" in budget["error"]["message"]
    assert (tag["outcome"], tag["after"]) == ("applied", f"{PROSPECTING} [seen]")  # not money
    live = await sandbox.object(campaign)
    assert (live["daily_budget"], live["name"]) == (30000, f"{PROSPECTING} [seen]")

    state = (await account_entry(client, "act_1004"))["currency_state"]
    assert (state["currency"], state["meta_currency"]) == ("USD", "JPY")
    assert state["timezone"] == state["meta_timezone"] == "Asia/Tokyo"
    ready = await (await client.get("/health/ready")).json()
    assert "currencies" in ready["degraded"] and "currencies" not in ready["failing"]
    (named,) = ready["checks"]["currencies"]["mismatched"]
    assert (named["account"], named["meta_currency"]) == ("act_1004", "JPY")
    cli_env(web_settings, monkeypatch)
    assert await asyncio.to_thread(main, ["accounts", "list"]) == 0
    listed = capsys.readouterr().out
    assert "NOT META'S: currency USD is registered, Meta's is JPY" in listed

    # A second run is stopped the same way: one error group for the account, counted twice.
    await run_at(web_settings, db, start + timedelta(minutes=15))
    groups = [g async for g in db[c.ERROR_LOG].find({"function": "account_check"})]
    assert [(g["count"], "act_1004" in g["message"]) for g in groups] == [(2, True)]
    assert (await sandbox.object(campaign))["daily_budget"] == 30000

    # Re-read from Meta: JPY registered, the state gone, the budget rises by exactly 20 %.
    assert await asyncio.to_thread(main, ["accounts", "refresh", "act_1004"]) == 0
    refreshed = capsys.readouterr().out
    assert "currency USD → JPY" in refreshed and "now read in JPY" in refreshed
    entry = await account_entry(client, "act_1004")
    assert (entry["currency"], entry["currency_state"]) == ("JPY", None)
    assert "currencies" not in (await (await client.get("/health/ready")).json())["degraded"]
    await run_at(web_settings, db, start + timedelta(minutes=30))
    assert (await sandbox.object(campaign))["daily_budget"] == 36000


@pytest.mark.parametrize("batch_size", [1, 50])
async def test_a_wrong_timezone_stops_budget_changes_too_and_pauses_go_on(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    sandbox: SandboxAdmin,
    batch_size: int,
) -> None:
    await register_wrong(db, settings, "act_1001", timezone="UTC")  # Meta's: America/New_York
    spent = {"metric": "spend", "period": "today", "operator": ">", "value": 1}
    data = campaign_rule({"type": "set_budget", "amount": 123}, [spent], name="set")
    data["tasks"].append({"id": "stop", "conditions": [spent], "action": {"type": "pause"}})
    await save_rule(db, data)
    await dispatch(settings, db)
    await work(settings.model_copy(update={"write_batch_size": batch_size}))

    found = await records(db, passed=True)
    budgets = [r for r in found if r["task_id"] == "t"]
    pauses = [r for r in found if r["task_id"] == "stop"]
    assert budgets and pauses
    assert {(r["outcome"], r["reason"]) for r in budgets} == {
        ("failed", "account_timezone_mismatch")
    }
    assert {r["outcome"] for r in pauses} == {"applied"}
    written = [w["params"] for w in await sandbox.writes()]
    assert written and not [p for p in written if "daily_budget" in p]
    account = await CredentialStore(db, load_key(settings)).get("act_1001")
    assert account.currency_state is not None
    assert (account.currency_state.timezone, account.currency_state.meta_timezone) == (
        "UTC",
        "America/New_York",
    )


async def test_one_read_of_the_ad_account_gives_its_minimum_currency_and_timezone(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    account = await CredentialStore(db, load_key(settings)).get("act_1004")
    session = GraphSession(settings)
    try:
        facts = AccountFacts(
            GraphReader.from_settings(session),
            account=account,
            token=SANDBOX_TOKEN,
            now=SANDBOX_NOW,
        )
        await sandbox.clear_stats()
        assert facts.read is None  # nothing is read before a money change asks
        assert await facts.min_daily_budget() == 150
        assert await facts.mismatch() is None  # JPY and Asia/Tokyo, as registered
        assert await facts.min_daily_budget() == 150
    finally:
        await session.close()
    assert (await sandbox.stats())["calls_by_kind"]["read"] == 1
    assert facts.read is not None
    assert (facts.read.currency, facts.read.timezone) == ("JPY", "Asia/Tokyo")


async def test_an_approved_raise_is_not_written_while_the_currency_is_not_metas(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    data = gated_rule()
    await propose(web_settings, db, redis, data, now=datetime.now(UTC))
    first = (await pending(client))[0]
    entity, before = first["entity"]["id"], first["before"]
    # planned in dollars; then act_1001 is registered in yen (Meta's: USD)
    await register_wrong(db, web_settings, "act_1001", currency="JPY")
    approved = await client.post(f"/api/approvals/{first['id']}/approve", headers=AUTH)
    assert approved.status == 200
    await work(web_settings)

    done = await (await client.get(f"/api/approvals/{first['id']}")).json()
    assert done["status"] == "failed"
    (record,) = await records(db, batch_id=f"approval:{first['id']}")
    assert (record["outcome"], record["reason"]) == ("failed", "account_currency_mismatch")
    assert int((await sandbox.object(entity))["daily_budget"]) == before
