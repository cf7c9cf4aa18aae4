"""The preview says which ad sets a rule respecting the learning phase would leave alone."""

from __future__ import annotations

from typing import Any

from web_helpers import AUTH, Client

from test_learning_phase import LEARNING, learning_rule
from test_meta_budget_limits import adset_id


async def test_the_preview_says_in_learning_phase_and_writes_nothing(
    client: Client, sandbox: Any
) -> None:
    response = await client.post("/api/rules", json=learning_rule(), headers=AUTH)
    assert response.status == 201, await response.text()
    rule = await response.json()
    response = await client.post(f"/api/rules/{rule['id']}/preview", headers=AUTH)
    assert response.status == 200, await response.text()
    records = {r["entity_id"]: r for r in (await response.json())["records"]}
    learning = records.pop(await adset_id(sandbox, "act_1001", LEARNING))
    assert (learning["outcome"], learning["reason"]) == ("skipped", "in_learning_phase")
    assert [r["outcome"] for r in records.values()] == ["would_apply"]
    assert await sandbox.writes() == []
