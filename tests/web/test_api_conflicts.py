"""/api/rules/conflicts and the ``warnings`` of a save: rules that fight, found before they run."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr
from web_helpers import AUTH, Client, rule_body, start_client

from ruleengine.settings import Settings
from ruleengine.store.db import Database

AUTO = [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}]
ROAS = "purchase_roas.omni_purchase"


def budget_rule(name: str, action: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A campaign rule on act_1001's [AUTO] campaigns that changes their budget."""
    body = rule_body(name, **({"filters": AUTO} | overrides))
    body["tasks"][0] = {
        "id": "budget",
        "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
        "action": action,
    }
    return body


UP = {"type": "increase_budget", "percent": 20}
DOWN = {"type": "decrease_budget", "percent": 20}


async def test_a_save_answers_its_conflicts_with_the_active_rules_as_warnings(
    client: Client,
) -> None:
    first = await client.post("/api/rules", json=budget_rule("Scale up", UP), headers=AUTH)
    assert first.status == 201
    assert (await first.json())["warnings"] == []
    second = await client.post("/api/rules", json=budget_rule("Cut down", DOWN), headers=AUTH)
    assert second.status == 201  # saved all the same
    body = await second.json()
    (warning,) = body["warnings"]
    assert warning["field"] == "daily_budget"
    assert warning["kind"] == "opposing" and warning["scope"] == "overlap"
    assert warning["severity"] == "conflict"
    assert {r["rule_id"] for r in warning["rules"]} == {body["id"], (await first.json())["id"]}
    assert {r["name"] for r in warning["rules"]} == {"Scale up", "Cut down"}

    listed = await (await client.get("/api/rules/conflicts", headers=AUTH)).json()
    assert listed["conflicts"] == 1
    assert set(listed["conflicting_rules"]) == {body["id"], (await first.json())["id"]}

    # an edit is checked too, against the others only
    edit = budget_rule("Cut down", DOWN, ad_accounts=["act_1002"])
    put = await client.put(f"/api/rules/{body['id']}", json=edit, headers=AUTH)
    assert put.status == 200 and (await put.json())["warnings"] == []


async def test_disjoint_scopes_are_not_reported(client: Client) -> None:
    a = budget_rule("In A", UP, filters=[{"field": "name", "operator": "CONTAIN", "value": "[A]"}])
    b = budget_rule(
        "Not in A", DOWN, filters=[{"field": "name", "operator": "NOT_CONTAIN", "value": "[A]"}]
    )
    assert (await client.post("/api/rules", json=a, headers=AUTH)).status == 201
    response = await client.post("/api/rules", json=b, headers=AUTH)
    assert (await response.json())["warnings"] == []
    assert (await (await client.get("/api/rules/conflicts", headers=AUTH)).json())["findings"] == []


async def test_thresholds_that_exclude_each_other_are_reported_as_cannot_fire_together(
    client: Client,
) -> None:
    low = budget_rule("Low", UP)
    low["tasks"][0]["conditions"] = [
        {"metric": ROAS, "period": "last_7d", "operator": "<", "value": 1}
    ]
    high = budget_rule("High", DOWN)
    high["tasks"][0]["conditions"] = [
        {"metric": ROAS, "period": "last_7d", "operator": ">", "value": 2}
    ]
    await client.post("/api/rules", json=low, headers=AUTH)
    (warning,) = (await (await client.post("/api/rules", json=high, headers=AUTH)).json())[
        "warnings"
    ]
    assert warning["conditions"] == "cannot_fire_together"
    assert warning["severity"] == "note"
    listed = await (await client.get("/api/rules/conflicts", headers=AUTH)).json()
    assert (listed["conflicts"], listed["notes"], listed["conflicting_rules"]) == (0, 1, {})


async def test_a_paused_rule_is_listed_but_a_save_is_checked_against_active_rules_only(
    client: Client,
) -> None:
    await client.post("/api/rules", json=budget_rule("Up", UP, status="PAUSED"), headers=AUTH)
    response = await client.post("/api/rules", json=budget_rule("Down", DOWN), headers=AUTH)
    assert (await response.json())["warnings"] == []
    (finding,) = (await (await client.get("/api/rules/conflicts", headers=AUTH)).json())["findings"]
    assert finding["both_active"] is False
    paused_id = next(r["rule_id"] for r in finding["rules"] if r["name"] == "Up")
    activated = await client.post(f"/api/rules/{paused_id}/activate", headers=AUTH)
    assert activated.status == 200  # not refused by default, and told what it fights
    assert [w["field"] for w in (await activated.json())["warnings"]] == ["daily_budget"]


async def test_the_refusing_setting_answers_409_with_the_findings(
    web_settings: Settings, db: Database, accounts: list[str]
) -> None:
    client = await start_client(web_settings.model_copy(update={"refuse_conflicting_rules": True}))
    try:
        assert (
            await client.post("/api/rules", json=budget_rule("Up", UP), headers=AUTH)
        ).status == 201
        refused = await client.post("/api/rules", json=budget_rule("Down", DOWN), headers=AUTH)
        assert refused.status == 409
        body = await refused.json()
        assert "RULEENGINE_REFUSE_CONFLICTING_RULES" in body["error"]
        assert body["conflicts"][0]["field"] == "daily_budget"
        names = [r["name"] for r in (await (await client.get("/api/rules")).json())["items"]]
        assert names == ["Up"]  # nothing saved

        # a paused rule fights nothing: saved, with its warnings; activating it is refused
        paused = await client.post(
            "/api/rules", json=budget_rule("Down", DOWN, status="PAUSED"), headers=AUTH
        )
        assert paused.status == 201
        body = await paused.json()
        assert len(body["warnings"]) == 1
        activate = await client.post(f"/api/rules/{body['id']}/activate", headers=AUTH)
        assert activate.status == 409
        assert "not activated" in (await activate.json())["error"]
        assert (await (await client.get(f"/api/rules/{body['id']}")).json())["status"] == "PAUSED"
    finally:
        await client.close()


async def test_a_draft_is_checked_and_a_live_check_names_current_entities(client: Client) -> None:
    await client.post("/api/rules", json=budget_rule("Scale up", UP), headers=AUTH)
    draft = await client.post(
        "/api/rules/conflicts?live=1", json=budget_rule("Cut down", DOWN), headers=AUTH
    )
    assert draft.status == 200, await draft.text()
    body = await draft.json()
    (finding,) = body["findings"]
    assert body["live"] is True
    entities = finding["entities"]
    assert 1 <= len(entities) <= 5
    assert all("[AUTO]" in e["name"] and e["ad_account"] == "act_1001" for e in entities)
    live = await (await client.get("/api/rules/conflicts?live=1", headers=AUTH)).json()
    assert live["findings"] == []  # the draft was not saved


APART = [{"field": "name", "operator": "NOT_CONTAIN", "value": "[AUTO]"}]


async def _fighting_history(client: Client) -> str:
    """ "Down": v1 fights "Up" (saved paused), v2 is ACTIVE on other campaigns. Its id."""
    assert (await client.post("/api/rules", json=budget_rule("Up", UP), headers=AUTH)).status == 201
    v1 = budget_rule("Down", DOWN, status="PAUSED")
    created = await client.post("/api/rules", json=v1, headers=AUTH)
    assert created.status == 201, await created.text()
    rule_id = str((await created.json())["id"])
    v2 = budget_rule("Down", DOWN, filters=APART, status="ACTIVE")
    edited = await client.put(f"/api/rules/{rule_id}", json=v2, headers=AUTH)
    assert edited.status == 200, await edited.text()
    assert ((await edited.json())["version"], (await edited.json())["warnings"]) == (2, [])
    return rule_id


async def test_the_refusing_setting_refuses_a_rollback_to_a_fighting_version(
    web_settings: Settings, db: Database, accounts: list[str]
) -> None:
    client = await start_client(web_settings.model_copy(update={"refuse_conflicting_rules": True}))
    try:
        rule_id = await _fighting_history(client)
        refused = await client.post(
            f"/api/rules/{rule_id}/rollback", json={"version": 1}, headers=AUTH
        )
        assert refused.status == 409
        body = await refused.json()
        assert body["error"].startswith("not rolled back: the rule fights 1 time(s)")
        assert [c["field"] for c in body["conflicts"]] == ["daily_budget"]
        stored = await (await client.get(f"/api/rules/{rule_id}", headers=AUTH)).json()
        assert (stored["version"], stored["status"]) == (2, "ACTIVE")  # nothing moved
    finally:
        await client.close()


async def test_without_the_setting_a_rollback_answers_its_conflicts_as_warnings(
    client: Client,
) -> None:
    rule_id = await _fighting_history(client)
    rolled = await client.post(f"/api/rules/{rule_id}/rollback", json={"version": 1}, headers=AUTH)
    assert rolled.status == 200, await rolled.text()
    body = await rolled.json()
    assert (body["version"], body["status"]) == (1, "ACTIVE")
    assert [w["field"] for w in body["warnings"]] == ["daily_budget"]


CUT_ADSETS = budget_rule("Cut ad sets", DOWN, level="adset", filters=[])
HOOKS = {"meta-rules": SecretStr("http://127.0.0.1:9/hook")}
WINNERS = "Scale winners +20% (ROAS over 3)"  # act_1001's, at Meta: ad sets, ENABLED


async def test_the_refusing_setting_refuses_an_activating_import(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: Any
) -> None:
    update = {"refuse_conflicting_rules": True, "webhooks": HOOKS}
    client = await start_client(web_settings.model_copy(update=update))
    try:
        assert (await client.post("/api/rules", json=CUT_ADSETS, headers=AUTH)).status == 201
        body = {"account": "act_1001", "apply": True, "activate": True}
        refused = await client.post("/api/import/meta", json=body, headers=AUTH)
        assert refused.status == 409, await refused.text()
        answer = await refused.json()
        assert "1 imported rule(s) not saved" in answer["error"]
        assert {c["field"] for c in answer["conflicts"]} == {"daily_budget"}
        items = {item["name"]: item for item in answer["items"]}
        assert items[WINNERS]["saved"]["state"] == "refused"
        assert items[WINNERS]["saved"]["conflicts"][0]["field"] == "daily_budget"
        spender = items["Tell me when a campaign spends over $250 today"]["saved"]
        assert spender["state"] == "created"  # the others are saved
        assert await db["rules"].find_one({"name": WINNERS}) is None
    finally:
        await client.close()


async def test_without_the_setting_an_activating_import_answers_warnings(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: Any
) -> None:
    client = await start_client(web_settings.model_copy(update={"webhooks": HOOKS}))
    try:
        assert (await client.post("/api/rules", json=CUT_ADSETS, headers=AUTH)).status == 201
        body = {"account": "act_1001", "apply": True, "activate": True}
        saved = await client.post("/api/import/meta", json=body, headers=AUTH)
        assert saved.status == 200, await saved.text()
        answer = await saved.json()
        items = {item["name"]: item for item in answer["items"]}
        winners = items[WINNERS]["saved"]
        assert winners["state"] == "created"
        (warning,) = winners["warnings"]
        assert warning["field"] == "daily_budget"
        assert winners["rule_id"] in {r["rule_id"] for r in warning["rules"]}  # not "new"
        assert answer["warnings"] == winners["warnings"]
        stored = await db["rules"].find_one({"name": WINNERS})
        assert stored is not None and stored["status"] == "ACTIVE"
    finally:
        await client.close()
