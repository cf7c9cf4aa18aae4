"""What the screens need to show people the truth: who the token is (``GET /api/whoami``),
each answer's account named with its currency (``account_name``, ``currency``), and an
entity's spend per day from Insights for its timeline (``GET /api/entities/{id}/insights``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from web_helpers import AUTH, Client, rule_body

from flow import campaign_ids, dispatch, records, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ApiTokenStore
from ruleengine.store.db import Database
from ruleengine.web.auth import ROUTE_ROLES


async def test_whoami_names_the_token_and_its_role_and_each_routes_least_role(
    client: Client, db: Database
) -> None:
    assert (await client.get("/api/whoami")).status == 401  # never anonymous
    admin = await (await client.get("/api/whoami", headers=AUTH)).json()
    assert (admin["name"], admin["role"]) == ("api", "admin")
    assert admin["roles"] == ["viewer", "editor", "approver", "admin"]
    assert admin["routes"] == {f"{m} {p}": role for (m, p), role in ROUTE_ROLES.items()}
    _, text = await ApiTokenStore(db).add("wall-screen", "viewer", now=datetime.now(UTC))
    viewer = {"Authorization": f"Bearer {text}"}
    answer = await (await client.get("/api/whoami", headers=viewer)).json()
    assert (answer["name"], answer["role"]) == ("wall-screen", "viewer")
    # what the screen disables is what the API refuses
    assert answer["routes"]["POST /api/rules"] == "editor"
    assert (await client.post("/api/rules", json=rule_body(), headers=viewer)).status == 403


async def test_batches_name_their_account_and_its_currency(
    client: Client, web_settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    body = rule_body("Everywhere", ad_accounts=["act_1001", "act_1004"], status="ACTIVE")
    # dollars and yen: the spend threshold is given per currency
    body["tasks"][0]["conditions"][0]["value"] = {"USD": 1, "JPY": 100}
    assert (await client.post("/api/rules", json=body, headers=AUTH)).status == 201
    await dispatch(web_settings, db, now=datetime.now(UTC))
    await work(web_settings)
    listed = (await (await client.get("/api/batches")).json())["items"]
    shown = {b["account"]: (b["account_name"], b["currency"]) for b in listed}
    assert shown == {"act_1001": ("Demo Store US", "USD"), "act_1004": ("Demo Store JP", "JPY")}
    one = await (await client.get(f"/api/batches/{listed[0]['batch_id']}")).json()
    assert one["currency"] == shown[one["account"]][1]
    # an account no longer registered: no name, no currency (its money is shown as stored)
    await db[c.ACCOUNTS].delete_one({"_id": "act_1004"})
    listed = (await (await client.get("/api/batches")).json())["items"]
    gone = [b for b in listed if b["account"] == "act_1004"]
    assert gone and all(b["account_name"] is None and b["currency"] is None for b in gone)


async def test_an_entitys_spend_per_day_comes_from_insights(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    campaign = (await campaign_ids(sandbox))["[AUTO] Prospecting US 1"]
    url = f"/api/entities/{campaign}/insights?days=14"
    assert (await client.get(url)).status == 401  # it may spend Meta's rate limit
    # (another number of days: a costly read keeps its answer 30 s for the same inputs)
    unknown = await (await client.get(url.replace("14", "13"), headers=AUTH)).json()
    assert unknown["series"] == [] and "no rule evaluated" in unknown["problem"]
    assert (await client.post("/api/rules", json=rule_body(), headers=AUTH)).status == 201
    await dispatch(web_settings, db, now=datetime.now(UTC))
    await work(web_settings)
    assert await records(db, entity_id=campaign)
    answer = await (await client.get(url, headers=AUTH)).json()
    assert answer["problem"] is None, answer["problem"]
    assert (answer["account"], answer["account_name"], answer["currency"]) == (
        "act_1001",
        "Demo Store US",
        "USD",
    )
    series = answer["series"]
    assert len(series) >= 10  # the whole period, not the minutes since the rule first ran
    assert [d["date"] for d in series] == sorted(d["date"] for d in series)
    assert sum(d["spend"] for d in series) > 0 and all(d["spend"] >= 0 for d in series)
    again = await (await client.get(url.replace("14", "7"), headers=AUTH)).json()
    assert len(again["series"]) <= 7
