"""``GET /api/rules/vocabulary``: the rule builder's vocabulary over HTTP."""

from __future__ import annotations

from typing import Any

from web_helpers import AUTH, Client, rule_body, start_client

from ruleengine.rules.language.model import rule_json_schema
from ruleengine.settings import Settings
from ruleengine.store.db import Database

KEYS = {
    "schema",
    "levels",
    "metrics",
    "action_types",
    "periods",
    "period_aliases",
    "operators",
    "filter_operators",
    "filter_fields",
    "effective_statuses",
    "action_kinds",
    "followups",
    "timezones",
}


async def test_the_vocabulary_is_answered_with_the_rule_s_schema(client: Client) -> None:
    response = await client.get("/api/rules/vocabulary")
    assert response.status == 200
    assert response.headers["Cache-Control"] == "private, max-age=3600"
    assert response.content_type == "application/json"
    body = await response.json()
    assert set(body) == KEYS
    assert body["schema"] == rule_json_schema()
    again = await client.get("/api/rules/vocabulary", headers=AUTH)
    assert await again.json() == body


async def test_the_vocabulary_needs_the_token_when_reads_do(
    web_settings: Settings, db: Database
) -> None:
    closed = await start_client(web_settings.model_copy(update={"api_reads_require_token": True}))
    try:
        refused = await closed.get("/api/rules/vocabulary")
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await closed.get("/api/rules/vocabulary", headers=AUTH)).status == 200
    finally:
        await closed.close()


async def test_a_rule_built_from_the_vocabulary_validates(client: Client) -> None:
    """Every concrete metric, with a listed period and operator, makes a valid rule at each
    level it lists (a ranking compared with a label of its scale)."""
    body = await (await client.get("/api/rules/vocabulary")).json()
    metrics = [m for g in body["metrics"] for m in g["metrics"] if not m["pattern"]]
    periods = [p["value"] for p in body["periods"]]
    operators = [o["value"] for o in body["operators"]]
    for level in [v["value"] for v in body["levels"]]:
        conditions: list[dict[str, Any]] = []
        for index, metric in enumerate(m for m in metrics if level in m["levels"]):
            operator = operators[index % len(operators)]
            value: Any = [1, 2] if operator in ("IN_RANGE", "NOT_IN_RANGE") else 1
            if "scale" in metric:
                operator, value = "<=", metric["scale"][index % len(metric["scale"])]
            condition = {"metric": metric["name"], "operator": operator, "value": value}
            if metric["needs_period"]:
                condition["period"] = periods[index % len(periods)]
            conditions.append(condition)
        tasks = [
            {
                "id": f"t{start}",
                "conditions": conditions[start : start + 50],
                "action": {"type": "pause"},
            }
            for start in range(0, len(conditions), 50)
        ]
        response = await client.post(
            "/api/rules/validate", json=rule_body(tasks=tasks, level=level)
        )
        assert response.status == 200, await response.text()
        assert (await response.json())["valid"] is True, level
