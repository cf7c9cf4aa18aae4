"""Who may ask for rules that fight, and what it costs: tokens, roles, counts, pages.

The whole analysis is O(tasks²) over the stored rules and a live check lists entities at
Meta with the accounts' tokens, so neither is open to an anonymous caller even when reads
are (``RULEENGINE_API_READS_REQUIRE_TOKEN`` off, the default); the Rules screen's badges
come from the counts, which are kept until the rules change.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from test_api_conflicts import DOWN, UP, budget_rule
from web_helpers import AUTH, Client

from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ApiTokenStore
from ruleengine.store.db import Database
from ruleengine.web.auth import needs_token, require_role
from ruleengine.web.jsonio import ApiError


async def token(db: Database, name: str, role: str) -> dict[str, str]:
    """A new named token's Authorization header."""
    _, text = await ApiTokenStore(db).add(name, role, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {text}"}


async def fighting_pair(client: Client) -> set[str]:
    """Two ACTIVE rules that fight over the [AUTO] campaigns' budgets; their ids."""
    ids = set()
    for name, action in (("Scale up", UP), ("Cut down", DOWN)):
        response = await client.post("/api/rules", json=budget_rule(name, action), headers=AUTH)
        assert response.status == 201, await response.text()
        ids.add(str((await response.json())["id"]))
    return ids


async def test_an_anonymous_live_check_is_refused_before_any_graph_call(
    client: Client, sandbox: SandboxAdmin
) -> None:
    await fighting_pair(client)
    await sandbox.clear_stats()
    for path in ("/api/rules/conflicts?live=1", "/api/rules/conflicts"):
        response = await client.get(path)
        assert response.status == 401, path
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "missing API token" in (await response.json())["error"]
    assert (await sandbox.stats())["http_requests"] == 0


async def test_findings_need_a_viewer_and_live_entities_an_editor(
    client: Client, db: Database, sandbox: SandboxAdmin
) -> None:
    await fighting_pair(client)
    viewer, editor = await token(db, "wall", "viewer"), await token(db, "ed", "editor")
    await sandbox.clear_stats()
    listed = await client.get("/api/rules/conflicts", headers=viewer)
    assert listed.status == 200
    assert (await listed.json())["conflicts"] == 1
    refused = await client.get("/api/rules/conflicts?live=1", headers=viewer)
    assert refused.status == 403
    assert "this needs the editor role" in (await refused.json())["error"]
    draft = budget_rule("Cut more", DOWN)
    post = await client.post("/api/rules/conflicts?live=1", json=draft, headers=viewer)
    assert post.status == 403
    assert (await sandbox.stats())["http_requests"] == 0  # nothing listed at Meta for them
    plain = await client.post("/api/rules/conflicts", json=draft, headers=viewer)
    assert plain.status == 200 and (await plain.json())["live"] is False

    live = await client.get("/api/rules/conflicts?live=1", headers=editor)
    assert live.status == 200
    (finding,) = (await live.json())["findings"]
    assert finding["entities"] and (await sandbox.stats())["http_requests"] > 0


async def test_the_counts_are_open_like_any_read_and_name_each_fighting_rule(
    client: Client,
) -> None:
    ids = await fighting_pair(client)
    counts = await client.get("/api/rules/conflicts/counts")
    assert counts.status == 200
    body = await counts.json()
    assert body == {
        "conflicting_rules": dict.fromkeys(ids, 1),
        "conflicts": 1,
        "notes": 0,
        "checked_rules": 2,
    }
    assert "findings" not in body
    # kept until the rules change: a pause shows at once
    paused = await client.post(f"/api/rules/{sorted(ids)[0]}/pause", headers=AUTH)
    assert paused.status == 200
    again = await (await client.get("/api/rules/conflicts/counts")).json()
    assert again["conflicts"] == 1 and again["checked_rules"] == 2  # a paused rule is analysed
    listed = await (await client.get("/api/rules/conflicts", headers=AUTH)).json()
    assert [f["both_active"] for f in listed["findings"]] == [False]


async def test_findings_come_in_pages_with_a_total(client: Client) -> None:
    for n in range(4):  # 4 rules all fighting each other over the same budgets: 6 pairs
        action = UP if n % 2 else DOWN
        body = budget_rule(f"Rule {n}", action)
        assert (await client.post("/api/rules", json=body, headers=AUTH)).status == 201
    whole = await (await client.get("/api/rules/conflicts", headers=AUTH)).json()
    total = whole["total"]
    assert total == len(whole["findings"]) >= 4
    assert (whole["limit"], whole["offset"]) == (100, 0)
    pages = []
    for offset in range(0, total, 3):
        page = await client.get(f"/api/rules/conflicts?limit=3&offset={offset}", headers=AUTH)
        body = await page.json()
        assert (body["total"], body["limit"], body["offset"]) == (total, 3, offset)
        assert body["conflicting_rules"] == whole["conflicting_rules"]  # over every finding
        pages += body["findings"]
    assert pages == whole["findings"]
    beyond = await client.get(f"/api/rules/conflicts?offset={total}", headers=AUTH)
    assert (await beyond.json())["findings"] == []
    for bad in ("limit=0", "limit=501", "offset=-1", "limit=x"):
        response = await client.get(f"/api/rules/conflicts?{bad}", headers=AUTH)
        assert response.status == 422, bad


@pytest.mark.parametrize("role", ["viewer", "admin"])
def test_require_role_refuses_a_request_no_token_identified(role: Any) -> None:
    request = make_mocked_request("GET", "/api/rules/conflicts", app=web.Application())
    with pytest.raises(ApiError) as refused:
        require_role(request, role)
    assert refused.value.status == 401
    assert f"an API token with the {role} role" in refused.value.message


@pytest.mark.parametrize(
    ("route", "expected"),
    [("/api/rules/conflicts", True), ("/api/rules/conflicts/counts", False), (None, False)],
)
def test_the_whole_analysis_needs_a_token_even_when_reads_are_open(
    route: str | None, expected: bool
) -> None:
    open_reads = Settings(api_token=SecretStr("t" * 32), api_reads_require_token=False)
    path = route or "/api/rules/conflicts/nowhere"
    assert needs_token("GET", path, open_reads, route=route) is expected


QUERY = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(limit=QUERY, offset=QUERY)
async def test_any_page_parameters_answer_a_page_or_422(
    client: Client, limit: str, offset: str
) -> None:
    response = await client.get(
        "/api/rules/conflicts", params={"limit": limit, "offset": offset}, headers=AUTH
    )
    assert response.status in (200, 422), await response.text()
    body = await response.json()
    if response.status == 200:
        assert 1 <= body["limit"] <= 500 and body["offset"] >= 0
        assert len(body["findings"]) <= body["limit"]
    else:
        assert {e["path"] for e in body["errors"]} <= {"limit", "offset"}
