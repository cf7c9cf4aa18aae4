"""The rules API and rule formats: only format 2 is saved; a stored format-1 rule the startup
migration had to leave alone says why in ``GET /api/rules/{id}``."""

from __future__ import annotations

from typing import Any

from web_helpers import AUTH, rule_body, start_client

from flow import save_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database


def without_format(**overrides: Any) -> dict[str, Any]:
    body = rule_body(**overrides)
    del body["format"]
    return body


async def test_a_rule_without_format_2_is_refused_at_the_path_format_with_the_hint(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    client = await start_client(web_settings)
    try:
        old = without_format()
        old["tasks"][0]["action"] = {"type": "set_budget", "amount": 50000}
        for body in (old, old | {"format": 1}):
            for path in ("/api/rules", "/api/rules/validate", "/api/rules/preview"):
                response = await client.post(path, json=body, headers=AUTH)
                assert response.status == 422, path
                (error,) = (await response.json())["errors"]
                assert error["path"] == "format"
                assert "ruleengine rules migrate" in error["message"]
        assert await db["rules"].count_documents({}) == 0
        created = await client.post("/api/rules", json=old | {"format": 2}, headers=AUTH)
        assert created.status == 201
        answer = await created.json()
        assert (answer["format"], answer["migration"]) == (2, None)
        assert answer["definition"]["tasks"][0]["action"]["amount"] == 50000  # ¤50,000.00
    finally:
        await client.close()


async def test_the_web_app_migrates_at_startup_and_shows_a_rule_it_kept(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    kept_body = without_format(name="usd and yen", ad_accounts=["act_1001", "act_1004"])
    kept_body["tasks"][0]["action"] = {"type": "set_budget", "amount": 50000}
    moved_body = without_format(name="usd only")
    moved_body["tasks"][0]["action"] = {"type": "set_budget", "amount": 50000}
    kept, moved = await save_rule(db, kept_body), await save_rule(db, moved_body)
    client = await start_client(web_settings)
    try:
        answer = await (await client.get(f"/api/rules/{kept.id}")).json()
        assert (answer["format"], answer["version"]) == (1, 1)
        assert answer["migration"]["status"] == "not_migrated"
        assert "act_1004 JPY" in answer["migration"]["message"]
        migrated = await (await client.get(f"/api/rules/{moved.id}")).json()
        assert (migrated["format"], migrated["version"], migrated["migration"]) == (2, 2, None)
        assert migrated["definition"]["tasks"][0]["action"]["amount"] == 500
        versions = await (await client.get(f"/api/rules/{moved.id}/versions")).json()
        assert [(v["version"], v["author"], v["source"]) for v in versions["items"]] == [
            (2, "migration", "format-2"),
            (1, "test", "test"),
        ]
        errors = await (await client.get("/api/errors", headers=AUTH)).json()
        assert any("kept at format 1" in g["message"] for g in errors["items"])

        # saving it in format 2 (the amounts the author means, per currency) clears the note
        fixed = kept_body | {"format": 2}
        fixed["tasks"][0]["conditions"][0]["value"] = {"USD": 1, "JPY": 150}
        fixed["tasks"][0]["action"] = {"type": "set_budget", "amount": {"USD": 500, "JPY": 75000}}
        saved = await client.put(f"/api/rules/{kept.id}", json=fixed, headers=AUTH)
        assert saved.status == 200, await saved.text()
        answer = await saved.json()
        assert (answer["format"], answer["version"], answer["migration"]) == (2, 2, None)
    finally:
        await client.close()
