"""Inputs a fuzzer found answering 500 or logging a traceback: now a 4xx naming the field."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web
from web_helpers import AUTH, Client, rule_body

from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.web.app import create_app

TOO_BIG = 2**64


async def raw_exchange(client: Client, request: bytes) -> bytes:
    """Send ``request`` as raw bytes (what no well-behaved client library would send)."""
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read()  # the request says "Connection: close"
    finally:
        writer.close()
        await writer.wait_closed()


async def stored(db: Database) -> tuple[int, int]:
    return (
        await db[c.RULES].count_documents({}),
        await db[c.RULE_VERSIONS].count_documents({}),
    )


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"timezone": "x" * 300}, "timezone"),
        ({"timezone": "America"}, "timezone"),
        ({"date_range": {"start": "0001-01-01"}}, "date_range.start"),
        ({"date_range": {"end": "9999-12-31"}}, "date_range.end"),
        ({"ad_accounts": ["act_1001\n"]}, "ad_accounts[0]"),
        ({"schedule": {"mode": "interval", "every_minutes": TOO_BIG}}, "schedule.every_minutes"),
    ],
)
async def test_a_hostile_rule_is_422_and_nothing_is_stored(
    client: Client, db: Database, change: dict[str, Any], path: str
) -> None:
    body = rule_body() | change
    for url in ("/api/rules/validate", "/api/rules", "/api/rules/preview"):
        response = await client.post(url, json=body, headers=AUTH)
        assert response.status == 422, (url, await response.text())
        assert path in {e["path"] for e in (await response.json())["errors"]}
    assert await stored(db) == (0, 0)


async def test_a_budget_beyond_int64_is_422_on_update_and_changes_nothing(
    client: Client, db: Database
) -> None:
    created = await (await client.post("/api/rules", json=rule_body(), headers=AUTH)).json()
    body = rule_body()
    body["tasks"][0]["action"] = {"type": "set_budget", "amount": TOO_BIG}
    response = await client.put(f"/api/rules/{created['id']}", json=body, headers=AUTH)
    assert response.status == 422
    assert (await response.json())["errors"][0]["path"] == "tasks[0].action.amount"
    assert await stored(db) == (1, 1)


@pytest.mark.parametrize(
    ("body", "headers", "path"),
    [
        # 2**63 still parses as an integer (2**64 arrives as a float), one past int64
        ({"version": 2**63}, {}, "version"),
        ({"version": 1, "expected_version": 2**63}, {}, "expected_version"),
        ({"version": 1}, {"If-Match": "99999999999999999999999"}, "If-Match"),
        ({"version": 1}, {"If-Match": "١"}, "If-Match"),
    ],
)
async def test_a_rollback_version_that_is_no_int64_is_422(
    client: Client, body: dict[str, Any], headers: dict[str, str], path: str
) -> None:
    created = await (await client.post("/api/rules", json=rule_body(), headers=AUTH)).json()
    response = await client.post(
        f"/api/rules/{created['id']}/rollback", json=body, headers=AUTH | headers
    )
    assert response.status == 422, await response.text()
    assert (await response.json())["errors"][0]["path"] == path


async def test_a_put_with_a_non_ascii_expected_version_is_422(client: Client) -> None:
    created = await (await client.post("/api/rules", json=rule_body(), headers=AUTH)).json()
    url = f"/api/rules/{created['id']}?expected_version=%D9%A1"  # Arabic-Indic "1"
    response = await client.put(url, json=rule_body(), headers=AUTH)
    assert response.status == 422
    assert (await response.json())["errors"][0]["path"] == "expected_version"


async def test_an_authorization_header_that_is_not_utf8_is_401(client: Client) -> None:
    answer = await raw_exchange(
        client,
        b"POST /api/rules HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Authorization: Bearer \xff\xfe\xc3token\r\nContent-Length: 2\r\n\r\n{}",
    )
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"id": "act_1001\n"}, "id"),
        ({"id": "act_١٠٠١"}, "id"),
        ({"currency": "USD\n"}, "currency"),
        ({"timezone": "x" * 300}, "timezone"),
        ({"timezone": "America"}, "timezone"),
    ],
)
async def test_a_hostile_account_is_422(
    client: Client, db: Database, change: dict[str, str], path: str
) -> None:
    body = {"id": "act_4242", "token": "EAAGsomethingsecret123456"} | change
    response = await client.post("/api/accounts", json=body, headers=AUTH)
    assert response.status == 422, await response.text()
    assert path in {e["path"] for e in (await response.json())["errors"]}
    assert await db[c.ACCOUNTS].count_documents({}) == 4  # the sandbox's, nothing more


async def test_a_very_long_static_path_is_404_and_real_assets_are_served(client: Client) -> None:
    long = await client.get("/static/" + "a" * 5000)
    assert long.status == 404
    for name in ("rules.js", "app.css"):
        asset = await client.get(f"/static/{name}?v=1")
        assert asset.status == 200
        assert len(await asset.read()) > 100
    assert (await client.get("/static/../pyproject.toml")).status == 404


class Recorder(logging.Handler):
    """Records what a logger emits and wakes the test at the first record."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.seen.set()


async def test_a_client_that_hangs_up_is_logged_as_info_without_a_traceback(
    web_settings: Settings, db: Database, redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Served as `python -m ruleengine.web` serves it: aiohttp's test server cancels the
    # handler of a lost connection instead, which hides what production does.
    runner = web.AppRunner(create_app(web_settings), handle_signals=False, access_log=None)
    await runner.setup()
    recorder = Recorder()
    caplog.set_level(logging.DEBUG, logger="ruleengine.web.app")
    app_log = logging.getLogger("ruleengine.web.app")
    app_log.addHandler(recorder)
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        _, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST /api/rules/validate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            b'Content-Length: 100000\r\n\r\n{"name": "half a bo'
        )
        await writer.drain()
        writer.close()  # gone before the body is complete
        await writer.wait_closed()
        await asyncio.wait_for(recorder.seen.wait(), timeout=10)
    finally:
        app_log.removeHandler(recorder)
        await runner.cleanup()
    (record,) = recorder.records
    assert (record.levelno, record.exc_info) == (logging.INFO, None)
    assert "client closed the connection" in record.getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
