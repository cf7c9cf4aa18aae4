"""``POST /api/backtests`` and ``GET /api/backtests/{id}`` on a real server, sandbox and MongoDB.

The backtests run for real (the service on the Graph sandbox) as background tasks of the
web app, whose clock is frozen at the sandbox's time; the tests poll the API as a client
would until the backtest is done.
"""

from __future__ import annotations

import copy
import json
import zlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_helpers import AUTH, Client, rule_body

from flow import wait_for
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.backtest.result import BacktestRequest
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.backtests import RESTARTED, BacktestStore
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.web.api.backtests import CLOCK, RUNNER, STOPPED, BacktestRunner
from ruleengine.web.app import create_app
from support import SANDBOX_NOW, SANDBOX_TOKEN

RESULT_KEYS = {
    "rule", "since", "until", "days", "accounts", "view", "runs", "fires", "per_day",
    "entities", "views", "differs_as_seen", "as_seen", "graph_calls", "cache_hits", "caveats",
}  # fmt: skip
DAY_KEYS = {"date", "fires", "by_task", "budget_delta", "budget_total", "paused", "activated"}
VIEW_KEYS = {"runs", "fires", "per_day", "entities"}
FIRE_KEYS = {
    "time", "account", "entity_id", "entity_name", "task", "action", "field", "before",
    "after", "seen", "matured",
}  # fmt: skip
ENTITY_KEYS = {"account", "entity_id", "entity_name", "fires", "before", "after"}
ANSWER_KEYS = {
    "id", "status", "progress", "request", "result", "error", "created_at", "updated_at",
    "expires_at",
}  # fmt: skip


async def start(settings: Settings) -> Client:
    """The web app, its backtests running at the sandbox's frozen time."""
    app = create_app(settings)
    app[CLOCK] = lambda: SANDBOX_NOW
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


@pytest.fixture
async def bt(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> AsyncIterator[Client]:
    client = await start(web_settings)
    try:
        yield client
    finally:
        await client.close()


async def post(client: Client, body: Any) -> tuple[int, Any]:
    response = await client.post("/api/backtests", json=body, headers=AUTH)
    return response.status, await response.json()


async def finished(client: Client, backtest_id: str) -> dict[str, Any]:
    """Poll ``GET /api/backtests/{id}`` until the backtest is done or failed."""

    async def poll() -> dict[str, Any] | None:
        response = await client.get(f"/api/backtests/{backtest_id}")
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer if answer["status"] in ("done", "failed") else None

    answer: dict[str, Any] = await wait_for(poll, timeout_s=60)
    return answer


def paths(answer: dict[str, Any]) -> list[str]:
    return [e["path"] for e in answer["errors"]]


async def test_a_draft_is_backtested_in_the_background_and_kept_a_week(bt: Client) -> None:
    status, accepted = await post(bt, {"rule": rule_body(), "days": 3, "accounts": ["act_1001"]})
    assert status == 202, accepted
    assert accepted["status"] == "queued"
    assert accepted["links"] == {"self": f"/api/backtests/{accepted['id']}"}
    assert set(accepted["progress"]) == {"days_done", "days_total", "stage"}

    answer = await finished(bt, accepted["id"])

    assert answer["status"] == "done", answer["error"]
    assert set(answer) == ANSWER_KEYS
    assert answer["error"] is None
    assert answer["request"] == {
        "rule_id": None,
        "version": None,
        "days": 3,
        "accounts": ["act_1001"],
        "as_seen": None,
        "rule_name": "Pause spenders",
    }
    assert answer["progress"]["stage"] == "done"
    result = answer["result"]
    assert set(result) >= RESULT_KEYS
    assert result["days"] == 3
    assert result["accounts"] == ["act_1001"]
    assert len(result["per_day"]) == 3
    assert all(set(day) >= DAY_KEYS for day in result["per_day"])
    assert set(result["views"]["matured"]) >= VIEW_KEYS
    assert all(set(fire) >= FIRE_KEYS for fire in result["fires"])
    assert all(set(entity) >= ENTITY_KEYS for entity in result["entities"])
    assert isinstance(result["graph_calls"], int)
    assert result["caveats"]
    created = answer["created_at"]
    assert answer["expires_at"] == (SANDBOX_NOW + timedelta(days=7)).isoformat().replace(
        "+00:00", "Z"
    )
    assert created == SANDBOX_NOW.isoformat().replace("+00:00", "Z")


async def test_no_token_is_stored_anywhere_in_the_backtest(bt: Client, db: Database) -> None:
    _, accepted = await post(bt, {"rule": rule_body(), "days": 2})
    answer = await finished(bt, accepted["id"])
    assert answer["status"] == "done", answer["error"]

    doc = await db[c.BACKTESTS].find_one({"_id": accepted["id"]})
    assert doc is not None
    assert doc["request"]["rule"]["name"] == "Pause spenders"  # the rule document is kept
    text = orjson.dumps(doc, default=str).decode()
    if doc.get("result_z") is not None:
        text += zlib.decompress(bytes(doc["result_z"])).decode()
    assert SANDBOX_TOKEN not in text
    assert "access_token" not in text


async def test_a_stored_rule_by_id_and_version(bt: Client) -> None:
    created = await bt.post("/api/rules", json=rule_body(), headers=AUTH)
    rule = await created.json()
    changed = rule_body(
        tasks=[rule_body()["tasks"][0] | {"id": "pause-big-spenders", "cooldown_minutes": 120}]
    )
    saved = await bt.put(f"/api/rules/{rule['id']}", json=changed, headers=AUTH)
    assert (await saved.json())["version"] == 2

    _, first = await post(bt, {"rule_id": rule["id"], "version": 1, "days": 2})
    _, current = await post(bt, {"rule_id": rule["id"], "days": 2})
    old, new = await finished(bt, first["id"]), await finished(bt, current["id"])

    assert old["status"] == new["status"] == "done", (old["error"], new["error"])
    assert old["request"]["version"] == 1
    assert new["request"]["version"] == 2
    assert old["result"]["rule"]["rule_id"] == rule["id"]
    assert old["result"]["rule"]["version"] == 1
    assert new["result"]["rule"]["version"] == 2
    tasks_old = {t for day in old["result"]["per_day"] for t in day["by_task"]}
    tasks_new = {t for day in new["result"]["per_day"] for t in day["by_task"]}
    assert tasks_old <= {"pause-spenders"}
    assert tasks_new <= {"pause-big-spenders"}


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (
            {"rule": rule_body(tasks=[rule_body()["tasks"][0] | {"conditions": [
                {"metric": "spendd", "period": "today", "operator": ">", "value": 1}]}])},
            "rule.tasks[0].conditions[0].metric",
        ),
        ({"rule": {k: v for k, v in rule_body().items() if k != "format"}}, "rule.format"),
        ({"rule": rule_body(ad_accounts=["act_9999"])}, "rule.ad_accounts[0]"),
        ({"rule": rule_body(), "days": 0}, "days"),
        ({"rule": rule_body(), "days": 91}, "days"),
        ({"rule": rule_body(), "days": "30"}, "days"),
        ({"rule": rule_body(), "days": True}, "days"),
        ({"rule": rule_body(), "accounts": ["act_1002"]}, "accounts[0]"),
        ({"rule": rule_body(), "accounts": ["act_1001", "act_1001"]}, "accounts[1]"),
        ({"rule": rule_body(), "accounts": ["act_1001", "act_1001\n"]}, "accounts[1]"),
        ({"rule": rule_body(), "accounts": "act_1001"}, "accounts"),
        ({"rule": rule_body(), "as_seen": "yes"}, "as_seen"),
        ({"rule": rule_body(), "speed": "fast"}, "speed"),
        ({"rule": rule_body(), "rule_id": "x"}, "rule"),
        ({"rule": [rule_body()]}, "rule"),
        ({"days": 3}, ""),
        ({"rule_id": {"$ne": None}}, "rule_id"),
        ({"rule_id": "x", "version": 0}, "version"),
        ({"rule": rule_body(), "version": 2}, "version"),
    ],
)  # fmt: skip
async def test_an_invalid_request_is_422_at_its_path_and_nothing_runs(
    bt: Client, db: Database, body: dict[str, Any], path: str
) -> None:
    status, answer = await post(bt, body)
    assert status == 422, answer
    assert answer["error"] == "invalid backtest"
    assert path in paths(answer), answer
    assert await db[c.BACKTESTS].count_documents({}) == 0


async def test_body_that_is_not_an_object_is_422(bt: Client) -> None:
    for raw in (b"", b"{", b"[1]"):
        response = await bt.post(
            "/api/backtests", data=raw, headers={**AUTH, "Content-Type": "application/json"}
        )
        assert response.status == 422
        assert paths(await response.json()) == [""]


async def test_a_format_1_stored_version_is_422_with_the_migration_hint(
    bt: Client, db: Database
) -> None:
    created = await (await bt.post("/api/rules", json=rule_body(), headers=AUTH)).json()
    # a version written before formats, as the startup migration may leave one
    await db[c.RULE_VERSIONS].update_one(
        {"rule_id": created["id"], "version": 1}, {"$unset": {"definition.format": ""}}
    )
    status, answer = await post(bt, {"rule_id": created["id"], "version": 1})
    assert status == 422, answer
    assert paths(answer) == ["version"]
    assert "ruleengine rules migrate" in answer["errors"][0]["message"]


async def test_unknown_rules_versions_and_backtests_are_404(bt: Client) -> None:
    created = await (await bt.post("/api/rules", json=rule_body(), headers=AUTH)).json()
    for body in ({"rule_id": "nope"}, {"rule_id": created["id"], "version": 7}):
        status, answer = await post(bt, body)
        assert status == 404, answer
    response = await bt.get("/api/backtests/674a1f0c9b1e8a2f3c4d5e6f")
    assert response.status == 404
    assert "does not exist or has expired" in (await response.json())["error"]


async def test_posting_needs_the_api_token(bt: Client) -> None:
    response = await bt.post("/api/backtests", json={"rule": rule_body()})
    assert response.status == 401


async def test_an_expired_backtest_is_404_and_the_ttl_index_expires_it(
    bt: Client, db: Database
) -> None:
    store = BacktestStore(db)
    old = await store.create(
        request={"rule_name": "x"}, days_total=3, now=SANDBOX_NOW - timedelta(days=7, seconds=1)
    )
    young = await store.create(request={"rule_name": "y"}, days_total=3, now=SANDBOX_NOW)
    assert (await bt.get(f"/api/backtests/{old['_id']}")).status == 404
    assert (await bt.get(f"/api/backtests/{young['_id']}")).status == 200
    indexes = await db[c.BACKTESTS].index_information()
    assert indexes["expires_at_ttl"]["expireAfterSeconds"] == 0
    assert indexes["expires_at_ttl"]["key"] == [("expires_at", 1)]


async def test_a_restart_fails_what_the_last_process_left_unfinished(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    store = BacktestStore(db)
    queued = await store.create(request={"rule_name": "q"}, days_total=3, now=SANDBOX_NOW)
    running = await store.create(request={"rule_name": "r"}, days_total=3, now=SANDBOX_NOW)
    await store.start(running["_id"], now=SANDBOX_NOW)
    done = await store.create(request={"rule_name": "d"}, days_total=3, now=SANDBOX_NOW)
    await store.finish(done["_id"], {"days": 3}, now=SANDBOX_NOW)

    client = await start(web_settings)
    try:
        for doc in (queued, running):
            answer = await (await client.get(f"/api/backtests/{doc['_id']}")).json()
            assert answer["status"] == "failed"
            assert answer["error"] == RESTARTED
        kept = await (await client.get(f"/api/backtests/{done['_id']}")).json()
        assert kept["status"] == "done"
    finally:
        await client.close()


async def test_stopping_the_web_app_fails_its_unfinished_backtests(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    client = await start(web_settings)
    runner = client.app[RUNNER]
    try:
        # hold the only slot: the backtests stay queued until the app stops
        async with runner._slots:
            ids = [(await post(client, {"rule": rule_body(), "days": 2}))[1]["id"] for _ in "ab"]
            await client.close()
    finally:
        await client.close()
    for backtest_id in ids:
        doc = await db[c.BACKTESTS].find_one({"_id": backtest_id})
        assert doc is not None
        assert (doc["status"], doc["error"]) == ("failed", STOPPED)


async def test_stopping_the_web_app_interrupts_a_running_backtest(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    await sandbox.set_faults(latency_ms=1500)  # every Graph call outlasts the test's steps
    client = await start(web_settings)
    try:
        _, accepted = await post(client, {"rule": rule_body(), "days": 2})

        async def listing() -> bool:
            answer = await (await client.get(f"/api/backtests/{accepted['id']}")).json()
            progress = answer["progress"]
            # the POST lists the entities before answering; the run then reads Graph's history
            return answer["status"] == "running" and progress["stage"] in ("listing", "history")

        await wait_for(listing)  # its progress shows while it runs
    finally:
        await client.close()
        await sandbox.clear_faults()
    doc = await db[c.BACKTESTS].find_one({"_id": accepted["id"]})
    assert doc is not None
    assert (doc["status"], doc["error"], doc["result"]) == ("failed", STOPPED, None)


async def test_backtests_wait_for_the_one_slot(bt: Client, db: Database) -> None:
    runner = bt.app[RUNNER]
    async with runner._slots:
        _, first = await post(bt, {"rule": rule_body(), "days": 2})
        answer = await (await bt.get(f"/api/backtests/{first['id']}")).json()
        assert answer["status"] == "queued"
    assert (await finished(bt, first["id"]))["status"] == "done"


async def test_an_unexpected_failure_is_failed_and_in_the_error_log_once(
    web_settings: Settings, db: Database, accounts: list[str]
) -> None:
    # A clock without a timezone is a bug the service refuses (ValueError): nothing it expects.
    runner = BacktestRunner(
        web_settings, db, errors=ErrorLog(db), clock=lambda: SANDBOX_NOW.replace(tzinfo=None)
    )
    doc = await runner.store.create(request={"rule_name": "x"}, days_total=2, now=SANDBOX_NOW)
    runner.submit(doc["_id"], BacktestRequest(rule=parse_rule(rule_body()), days=2))

    async def closed() -> dict[str, Any] | None:
        found = await db[c.BACKTESTS].find_one({"_id": doc["_id"]})
        return found if found and found["status"] == "failed" else None

    failed = await wait_for(closed)
    await runner.close()
    assert failed["error"].startswith("the backtest failed: ValueError: ")
    assert "function backtest.run" in failed["error"]
    groups = [g async for g in db[c.ERROR_LOG].find({"function": "backtest.run"})]
    assert [g["count"] for g in groups] == [1]
    assert groups[0]["samples"][0]["context"]["backtest_id"] == doc["_id"]


# ---------------------------------------------------------------- hostile bodies

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["act_1001", "act_1002", "act_١٠٠١", "act_1001\n", "$ne", "x" * 5000]),
    st.lists(st.sampled_from(["act_1001", "act_1004", 7, None, "act_"]), max_size=4),
    st.dictionaries(st.sampled_from(["$ne", "$gt", "a"]), st.integers(), max_size=2),
)
FIELDS = st.sampled_from(["rule", "rule_id", "version", "days", "accounts", "as_seen", "x"])


@st.composite
def hostile_bodies(draw: st.DrawFn) -> Any:
    body: dict[str, Any] = {"rule": copy.deepcopy(rule_body()), "days": 2}
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        action = draw(st.sampled_from(["set", "delete", "rule"]))
        name = draw(FIELDS)
        if action == "set":
            body[name] = draw(HOSTILE)
        elif action == "delete":
            body.pop(name, None)
        elif isinstance(body.get("rule"), dict):
            key = draw(st.sampled_from(sorted(body["rule"])))
            body["rule"][key] = draw(HOSTILE)
    return body if draw(st.integers(0, 9)) else draw(HOSTILE)


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=hostile_bodies())
async def test_hostile_bodies_never_answer_500(bt: Client, body: Any) -> None:
    slots = bt.app[RUNNER]._slots
    if not slots.locked():  # nothing accepted runs (stopping the app fails it): only answers
        await slots.acquire()
    response = await bt.post(
        "/api/backtests",
        data=json.dumps(body, allow_nan=True).encode(),
        headers={**AUTH, "Content-Type": "application/json"},
    )
    text = await response.text()
    assert response.status in (202, 404, 409, 422, 429), text  # 429: the queue is full
    answer = orjson.loads(text)
    if response.status == 422:
        assert all(isinstance(e["path"], str) for e in answer["errors"])


async def test_a_full_queue_is_429_with_retry_after_and_nothing_stored(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    client = await start(web_settings.model_copy(update={"backtest_queue_max": 2}))
    runner = client.app[RUNNER]
    try:
        async with runner._slots:  # hold the only slot: both stay queued
            ids = [(await post(client, {"rule": rule_body(), "days": 2}))[1]["id"] for _ in "ab"]
            response = await client.post(
                "/api/backtests", json={"rule": rule_body(), "days": 2}, headers=AUTH
            )
            assert response.status == 429
            assert response.headers["Retry-After"] == "30"
            answer = await response.json()
            assert "2 backtest(s) are queued or running" in answer["error"]
            assert "RULEENGINE_BACKTEST_QUEUE_MAX" in answer["error"]
            assert answer["queue_max"] == 2
            assert await db[c.BACKTESTS].count_documents({}) == 2
        for backtest_id in ids:
            assert (await finished(client, backtest_id))["status"] == "done"
        status, _ = await post(client, {"rule": rule_body(), "days": 2})
        assert status == 202  # a place again
    finally:
        await client.close()


async def test_more_entities_than_the_limit_is_422_naming_it_and_how_to_narrow(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> None:
    client = await start(web_settings.model_copy(update={"backtest_max_entities": 1}))
    try:
        for body, where in (
            ({"rule": rule_body(), "days": 2}, "rule"),
            ({"rule": rule_body(), "days": 2, "accounts": ["act_1001"]}, "accounts"),
        ):
            status, answer = await post(client, body)
            assert status == 422, answer
            (error,) = answer["errors"]
            assert error["path"] == where
            assert "RULEENGINE_BACKTEST_MAX_ENTITIES=1" in error["message"]
            assert '"accounts" in the API' in error["message"]
            assert "narrow the rule's filters" in error["message"]
            assert answer["max_entities"] == 1 and answer["entities"]["act_1001"] > 1
        assert await db[c.BACKTESTS].count_documents({}) == 0
    finally:
        await client.close()
