"""POST /api/batches/{id}/undo: the plan as a dry run, the undo on a worker, once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from web_helpers import AUTH, Client

from flow import campaign_ids, records, successful_writes, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ApiTokenStore
from ruleengine.store.db import Database
from ruleengine.web.api.undo import parse_request
from ruleengine.web.jsonio import ApiError
from undo_helpers import BUDGETED, adset_budgets, limit_used_up, misfire, state


async def test_preview_then_undo_through_a_worker_then_asked_again(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(web_settings, db, sandbox)
    ids = await campaign_ids(sandbox)
    await sandbox.ads_manager_change(ids["Brand Awareness US"], daily_budget=7777)
    url = f"/api/batches/{batch_id}/undo"
    writes = len(await successful_writes(sandbox))

    dry = await client.post(url, json={"dry_run": True}, headers=AUTH)
    assert dry.status == 200
    plan = await dry.json()
    assert plan["will_revert"] == 7 and plan["skipped"] == 1
    [kept] = [c for c in plan["changes"] if not c["will_revert"]]
    assert kept["reason"] == "changed_by_someone_else" and kept["live"] == 7777
    assert {"entity_id", "field", "before", "after", "live", "will_revert"} <= set(kept)

    first = await client.post(url, json={}, headers=AUTH)
    again = await client.post(url, headers=AUTH)  # delivered twice before a worker ran
    assert first.status == again.status == 202
    assert (await first.json())["undo_batch_id"] == f"undo:{batch_id}"
    assert (await first.json())["queued"] is True and (await again.json())["queued"] is False
    assert len(await successful_writes(sandbox)) == writes  # nothing written by the web app
    await work(web_settings)
    assert len(await successful_writes(sandbox)) == writes + 7

    done = await client.post(url, headers=AUTH)
    assert done.status == 200
    body = await done.json()
    assert body["existing"] is True and body["batch"]["undoes"] == batch_id
    assert body["batch"]["by"] == "api"
    assert sorted(c["outcome"] for c in body["changes"]) == ["applied"] * 7 + ["skipped"]
    original = await (await client.get(f"/api/batches/{batch_id}", headers=AUTH)).json()
    assert original["undone_by"] == f"undo:{batch_id}"
    await work(web_settings)
    assert len(await successful_writes(sandbox)) == writes + 7
    expected = before | {"Brand Awareness US": ("ACTIVE", 7777)}
    assert await state(sandbox) == expected


async def test_bad_requests_are_answered_before_anything_is_queued(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    batch_id, _ = await misfire(web_settings, db, sandbox)
    url = f"/api/batches/{batch_id}/undo"
    unknown = await client.post(url, json={"executions": ["nope"]}, headers=AUTH)
    assert unknown.status == 422
    assert (await unknown.json())["errors"][0]["path"] == "executions"
    typed = await client.post(url, json={"dry_run": "yes"}, headers=AUTH)
    assert typed.status == 422
    missing = await client.post("/api/batches/no-such/undo", headers=AUTH)
    assert missing.status == 404
    of_undo = await client.post(f"/api/batches/undo:{batch_id}/undo", headers=AUTH)
    assert of_undo.status == 422
    await db["batches"].update_one({"_id": batch_id}, {"$set": {"status": "RUNNING"}})
    running = await client.post(url, json={"dry_run": True}, headers=AUTH)
    assert running.status == 422
    assert "still running" in (await running.json())["errors"][0]["message"]
    anonymous = await client.post(url, json={"dry_run": True})
    assert anonymous.status == 401
    assert await redis.zcard("ruleengine:queue") == 0


@hsettings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["executions", "dry_run", "pause_copies", "other"]),
            st.one_of(
                st.booleans(),
                st.text(max_size=5),
                st.lists(st.text(max_size=5), max_size=3),
                st.integers(),
                st.none(),
            ),
            max_size=4,
        ),
        st.lists(st.integers(), max_size=2),
        st.text(max_size=5),
    )
)
def test_any_body_parses_or_is_a_422(body: Any) -> None:
    refused: ApiError | None = None
    try:
        ask = parse_request(body)
    except ApiError as exc:
        refused = exc
    if refused is not None:
        assert refused.status == 422 and refused.errors
        return
    assert isinstance(body, dict) or body is None
    assert ask.executions is None or all(isinstance(e, str) for e in ask.executions)
    assert isinstance(ask.dry_run, bool) and isinstance(ask.pause_copies, bool)


async def test_only_an_approver_or_admin_token_undoes_and_its_name_is_recorded(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(web_settings, db, sandbox)
    store = ApiTokenStore(db)
    tokens = {
        role: (await store.add(f"{role}-1", role, now=datetime.now(UTC)))[1]
        for role in ("viewer", "editor", "approver")
    }
    url = f"/api/batches/{batch_id}/undo"
    writes = len(await successful_writes(sandbox))
    for role in ("viewer", "editor"):
        bearer = {"Authorization": f"Bearer {tokens[role]}"}
        refused = await client.post(url, json={}, headers=bearer)
        assert refused.status == 403, role
        assert "approver" in (await refused.json())["error"]
    await work(web_settings)
    assert len(await successful_writes(sandbox)) == writes  # nothing queued, nothing written
    bearer = {"Authorization": f"Bearer {tokens['approver']}"}
    assert (await client.post(url, json={}, headers=bearer)).status == 202
    await work(web_settings)
    done = await (await client.post(url, headers=bearer)).json()
    assert done["batch"]["by"] == "approver-1"
    assert await state(sandbox) == before


async def test_the_entity_timeline_marks_the_revert_as_the_undo_s(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(web_settings, db, sandbox)
    assert (await client.post(f"/api/batches/{batch_id}/undo", json={}, headers=AUTH)).status == 202
    await work(web_settings)
    entity = (await campaign_ids(sandbox))[BUDGETED[0]]
    timeline = await (await client.get(f"/api/entities/{entity}/timeline", headers=AUTH)).json()
    budget = timeline["fields"]["daily_budget"]["changes"]
    assert [c["by"]["kind"] for c in budget] == ["rule", "undo"]
    assert budget[1]["by"]["label"] == "undo of Misfire v1 by api"
    assert budget[1]["after"] == budget[0]["before"] == before[BUDGETED[0]][1]


async def test_an_undo_that_could_not_set_everything_back_says_so(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    batch = await limit_used_up(web_settings, db, sandbox)
    url = f"/api/batches/{batch.batch_id}/undo"
    assert (await client.post(url, json={}, headers=AUTH)).status == 202
    await work(web_settings)
    done = await client.post(url, headers=AUTH)
    assert done.status == 200
    body = await done.json()
    assert body["complete"] is False and body["status"] == "DONE"
    assert (body["batch"]["not_reverted_count"], body["batch"]["reverted_count"]) == (1, 2)
    assert body["batch"]["complete"] is False
    [held] = [c for c in body["changes"] if c["revert"] == "not_reverted"]
    assert held["entity_id"] == batch.limited and held["reason"] == "meta_budget_change_limit"
    assert held["error"]["allowed_at"]
    budgets = await adset_budgets(sandbox, list(batch.execution))
    assert budgets[batch.limited] == held["before"] != batch.before[batch.limited]
    assert {i: b for i, b in budgets.items() if i != batch.limited} == {
        i: b for i, b in batch.before.items() if i != batch.limited
    }
    row = await (await client.get(f"/api/batches/{body['undo_batch_id']}", headers=AUTH)).json()
    assert (row["complete"], row["not_reverted_count"]) == (False, 1)


async def test_a_second_undo_names_the_executions_the_first_did_not_cover(
    client: Client, web_settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    batch_id, before = await misfire(web_settings, db, sandbox)
    applied = [str(r["_id"]) for r in await records(db, batch_id=batch_id, outcome="applied")]
    url = f"/api/batches/{batch_id}/undo"
    writes = len(await successful_writes(sandbox))

    async def undo(executions: list[str]) -> dict[str, Any]:
        answer = await client.post(url, json={"executions": executions}, headers=AUTH)
        assert answer.status in (200, 202)
        await work(web_settings)
        return dict(await answer.json())

    first = await undo(applied[:3])
    second = await undo(applied[3:])
    assert len({first["undo_batch_id"], second["undo_batch_id"], f"undo:{batch_id}"}) == 3
    assert await state(sandbox) == before
    assert len(await successful_writes(sandbox)) == writes + 8
    # the same undo asked again is answered as it is; an undo of undone executions writes nothing
    again = await client.post(url, json={"executions": list(reversed(applied[:3]))}, headers=AUTH)
    assert again.status == 200
    assert (await again.json())["undo_batch_id"] == first["undo_batch_id"]
    plan = await client.post(url, json={"dry_run": True}, headers=AUTH)
    assert (await plan.json())["will_revert"] == 0
    assert {c["reason"] for c in (await plan.json())["changes"]} == {"already_undone"}
    everything = await undo(applied)
    done = await (await client.post(url, json={"executions": applied}, headers=AUTH)).json()
    assert done["undo_batch_id"] == everything["undo_batch_id"] and done["complete"] is True
    assert {(c["outcome"], c["reason"]) for c in done["changes"]} == {("skipped", "already_undone")}
    assert len(await successful_writes(sandbox)) == writes + 8
    original = await (await client.get(f"/api/batches/{batch_id}", headers=AUTH)).json()
    assert original["undone_by"] == first["undo_batch_id"]
    assert sorted(original["undos"]) == sorted(
        [first["undo_batch_id"], second["undo_batch_id"], everything["undo_batch_id"]]
    )
