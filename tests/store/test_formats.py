"""The startup migration of rule formats runs wherever the orphan repair runs: the web app,
the dispatcher and every CLI command."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from flow import campaign_rule, point_cli_at, save_rule
from ruleengine.cli import main as cli_main
from ruleengine.dispatch import run_dispatcher
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore
from ruleengine.web.app import create_app

SPENT = {"metric": "spend", "period": "today", "operator": ">", "value": 1}


async def old_budget_rule(db: Database, name: str) -> str:
    data = campaign_rule(
        {"type": "increase_budget", "percent": 10, "max_budget": 25050}, [SPENT], name=name
    )
    del data["format"]
    return (await save_rule(db, data)).id


async def migrated(db: Database, rule_id: str) -> tuple[int, Any]:
    rule = await RuleStore(db).get(rule_id)
    return rule.version, rule.definition["tasks"][0]["action"]["max_budget"]


async def test_the_web_app_the_dispatcher_and_the_cli_migrate_when_they_start(
    settings: Settings,
    db: Database,
    redis: Any,
    accounts: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    web_rule = await old_budget_rule(db, "web")
    client: TestClient[web.Request, web.Application] = TestClient(
        TestServer(create_app(settings), host="127.0.0.1")
    )
    await client.start_server()
    await client.close()
    assert await migrated(db, web_rule) == (2, 250.5)

    dispatcher_rule = await old_budget_rule(db, "dispatcher")
    assert await run_dispatcher(settings, once=True) == 0
    assert await migrated(db, dispatcher_rule) == (2, 250.5)

    cli_rule = await old_budget_rule(db, "cli")
    point_cli_at(settings, monkeypatch)
    # the CLI runs its own event loop: run it outside this test's loop
    assert await asyncio.to_thread(cli_main, ["rules", "list"]) == 0
    assert await migrated(db, cli_rule) == (2, 250.5)
    assert [await migrated(db, r) for r in (web_rule, dispatcher_rule)] == [(2, 250.5)] * 2
