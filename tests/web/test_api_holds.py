"""Oscillation holds in the API: placed by a real fight between two rules, listed, cleared
(with the token) — after which the field changes again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from web_helpers import AUTH, Client

from flow import campaign_ids, records
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from test_rules_that_fight import ONE, run_all, save_fighting_pair


async def test_a_hold_is_listed_cleared_with_the_token_and_the_field_moves_again(
    client: Client, web_settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    campaign = (await campaign_ids(sandbox))[ONE]
    await save_fighting_pair(db)
    start = datetime.now(UTC)
    for run in range(3):
        await run_all(web_settings, db, start + timedelta(minutes=15 * run))
    listing = await (await client.get("/api/holds?status=active")).json()
    (hold,) = listing["items"]
    assert listing["total"] == 1
    assert (hold["id"], hold["entity"]["id"], hold["field"]) == (
        f"{campaign}:daily_budget",
        campaign,
        "daily_budget",
    )
    assert len(hold["rules"]) == 2 and len(hold["changes"]) >= 3
    assert (await client.get("/api/holds?status=nope")).status == 422
    assert (await client.delete(f"/api/holds/{hold['id']}")).status == 401
    assert (await client.delete("/api/holds/nope:daily_budget", headers=AUTH)).status == 404
    cleared = await (await client.delete(f"/api/holds/{hold['id']}", headers=AUTH)).json()
    assert cleared["status"] == "cleared" and cleared["cleared_at"]
    assert (await (await client.get("/api/holds?status=active")).json())["items"] == []
    # cleared: the older swings no longer count, and the budget changes again
    await run_all(web_settings, db, start + timedelta(minutes=45))
    latest = (await records(db, entity_id=campaign))[-2:]
    assert "applied" in {r["outcome"] for r in latest}
