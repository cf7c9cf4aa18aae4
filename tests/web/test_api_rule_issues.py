"""Rules that no longer validate are listed with their issue; a fix clears it. Saves. Paging."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from web_helpers import AUTH, Client, rule_body

from ruleengine import constants as c
from ruleengine.store.db import Database
from ruleengine.store.ruledocs import StoredRuleError
from ruleengine.store.rules import RuleStore


async def create(client: Client, name: str) -> dict[str, Any]:
    response = await client.post("/api/rules", json=rule_body(name), headers=AUTH)
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    return created


async def set_aside(db: Database, rule_id: str) -> None:
    """What the dispatcher does with a due rule that no longer validates."""
    store = RuleStore(db)
    doc = await store.get(rule_id)
    with pytest.raises(StoredRuleError) as caught:
        doc.rule()
    assert await store.set_aside(caught.value, now=datetime.now(UTC))


async def test_a_rule_that_no_longer_validates_is_listed_with_its_issue(
    client: Client, db: Database
) -> None:
    good = await create(client, "Good")
    bad = await create(client, "Bad")
    await db[c.RULES].update_one(
        {"_id": bad["id"]}, {"$set": {"definition.timezone": "Mars/Olympus"}}
    )

    listing = await client.get("/api/rules")
    assert listing.status == 200, await listing.text()
    items = {item["name"]: item for item in (await listing.json())["items"]}
    assert items["Good"]["issue"] is None
    assert items["Good"]["schedule"] == "every 15 min"
    # found on read, before the dispatcher got to it
    assert items["Bad"]["status"] == "ACTIVE"
    assert "Mars/Olympus" in items["Bad"]["issue"]["message"]
    assert items["Bad"]["issue"]["at"] is None

    await set_aside(db, bad["id"])
    listing = await client.get("/api/rules")
    items = {item["name"]: item for item in (await listing.json())["items"]}
    assert items["Bad"]["status"] == "HAS_ISSUES"
    assert items["Bad"]["issue"]["message"].startswith("timezone: unknown timezone")
    assert items["Bad"]["issue"]["at"] is not None
    detail = await client.get(f"/api/rules/{bad['id']}")
    assert detail.status == 200
    answer = await detail.json()
    assert (answer["status"], answer["definition"]["timezone"]) == ("HAS_ISSUES", "Mars/Olympus")
    assert good["id"] != bad["id"]


async def test_a_damaged_rule_document_is_listed_and_shown(client: Client, db: Database) -> None:
    bad = await create(client, "Bad")
    await db[c.RULES].update_one({"_id": bad["id"]}, {"$unset": {"created_at": ""}})
    listing = await client.get("/api/rules")
    assert listing.status == 200
    (item,) = (await listing.json())["items"]
    assert (item["id"], item["name"], item["status"]) == (bad["id"], "Bad", "HAS_ISSUES")
    assert "created_at" in item["issue"]["message"]
    detail = await client.get(f"/api/rules/{bad['id']}")
    assert (detail.status, (await detail.json())["definition"]) == (200, None)


async def test_saving_a_valid_definition_clears_the_issue(client: Client, db: Database) -> None:
    bad = await create(client, "Bad")
    await db[c.RULES].update_one({"_id": bad["id"]}, {"$unset": {"definition.tasks": ""}})
    await set_aside(db, bad["id"])
    path = f"/api/rules/{bad['id']}"

    saved = await client.put(path, json=rule_body("Bad"), headers=AUTH)

    assert saved.status == 200, await saved.text()
    answer = await saved.json()
    # the stored definition differed from the body, whatever the checksum said: a new version
    assert (answer["status"], answer["issue"], answer["version"]) == ("PAUSED", None, 2)
    assert answer["definition"]["tasks"][0]["id"] == "pause-spenders"
    active = await client.post(f"{path}/activate", headers=AUTH)
    assert (active.status, (await active.json())["status"]) == (200, "ACTIVE")


async def test_activation_clears_the_issue_only_when_the_definition_validates(
    client: Client, db: Database
) -> None:
    bad = await create(client, "Bad")
    path = f"/api/rules/{bad['id']}"
    await db[c.RULES].update_one({"_id": bad["id"]}, {"$set": {"definition.timezone": "Mars/X"}})
    await set_aside(db, bad["id"])

    refused = await client.post(f"{path}/activate", headers=AUTH)
    assert refused.status == 409
    body = await refused.json()
    assert "Mars/X" in body["issue"]["message"]
    assert f"PUT /api/rules/{bad['id']}" in body["error"]

    # e.g. the tz database is back: the definition validates again
    await db[c.RULES].update_one(
        {"_id": bad["id"]}, {"$set": {"definition.timezone": "America/New_York"}}
    )
    active = await client.post(f"{path}/activate", headers=AUTH)
    assert active.status == 200
    answer = await active.json()
    assert (answer["status"], answer["issue"]) == ("ACTIVE", None)


async def test_rollback_of_a_rule_with_issues_brings_it_back_paused(
    client: Client, db: Database
) -> None:
    rule = await create(client, "Rule")
    path = f"/api/rules/{rule['id']}"
    changed = rule_body("Rule")
    changed["tasks"][0]["cooldown_minutes"] = 5
    assert (await client.put(path, json=changed, headers=AUTH)).status == 200
    await db[c.RULES].update_one({"_id": rule["id"]}, {"$set": {"definition.timezone": "Nope"}})
    await set_aside(db, rule["id"])
    rolled = await client.post(f"{path}/rollback", json={"version": 1}, headers=AUTH)
    assert rolled.status == 200, await rolled.text()
    answer = await rolled.json()
    assert (answer["status"], answer["issue"], answer["version"]) == ("PAUSED", None, 1)


# ---------------------------------------------------------------- saves


async def test_a_put_refused_for_a_taken_name_leaves_nothing_and_the_next_put_works(
    client: Client, db: Database
) -> None:
    await create(client, "Taken")
    rule = await create(client, "Mine")
    path = f"/api/rules/{rule['id']}"
    refused = await client.put(path, json=rule_body("Taken"), headers=AUTH)
    assert refused.status == 409
    assert "already exists" in (await refused.json())["error"]
    assert await db[c.RULE_VERSIONS].count_documents({"rule_id": rule["id"]}) == 1

    changed = rule_body("Mine")
    changed["tasks"][0]["cooldown_minutes"] = 5
    saved = await client.put(path, json=changed, headers={**AUTH, "If-Match": "1"})
    assert saved.status == 200, await saved.text()
    assert (await saved.json())["version"] == 2


# ---------------------------------------------------------------- paging


async def test_rules_are_paged(client: Client, db: Database) -> None:
    for index in range(5):
        await create(client, f"Rule {index}")
    first = await (await client.get("/api/rules?limit=2")).json()
    assert (first["total"], first["limit"], first["skip"]) == (5, 2, 0)
    assert [i["name"] for i in first["items"]] == ["Rule 0", "Rule 1"]
    last = await (await client.get("/api/rules?limit=2&skip=4")).json()
    assert [i["name"] for i in last["items"]] == ["Rule 4"]
    default = await (await client.get("/api/rules")).json()
    assert (default["limit"], len(default["items"])) == (100, 5)


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=501", "limit=ten", "skip=-1", "limit=%D9%A3", "skip=1e3"]
)
async def test_a_bad_page_is_422_naming_the_parameter(client: Client, query: str) -> None:
    response = await client.get(f"/api/rules?{query}")
    assert response.status == 422
    (error,) = (await response.json())["errors"]
    assert error["path"] == query.split("=")[0]
    assert "whole number between" in error["message"]
