"""A web process killed (SIGKILL) in the middle of a backtest's history fetch.

What a backtest writes is the history cache and its own document. After the kill, the
next web process says the backtest was interrupted, and the cache the killed one was
filling gives the same result as an empty cache: nothing half-written is read as data.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from web_helpers import API_TOKEN, rule_body

from flow import process_env, wait_for
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.settings import Settings
from ruleengine.store.backtests import RESTARTED
from ruleengine.store.db import Database


@contextmanager
def web(settings: Settings) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m ruleengine.web`` on a free port; its base URL."""
    child = subprocess.Popen(
        [sys.executable, "-m", "ruleengine.web"],
        env=process_env(settings, api_token=API_TOKEN, web_port="0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line.startswith("web listening on "), line
        yield child, line.removeprefix("web listening on ")
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def call(url: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{url}{path}",
        data=data,
        method="POST" if body is not None else "GET",
        headers={"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


async def finished(url: str, backtest_id: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        answer = call(url, f"/api/backtests/{backtest_id}")
        return answer if answer["status"] in ("done", "failed") else None

    answer: dict[str, Any] = await wait_for(done, timeout_s=120)
    return answer


def fires(answer: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    return [(f["time"], f["entity_id"], f["task"], f["after"]) for f in answer["result"]["fires"]]


async def test_a_backtest_killed_while_filling_the_cache_leaves_nothing_half_done(
    settings: Settings, db: Database, sandbox: SandboxAdmin, accounts: list[str]
) -> None:
    body = {"rule": rule_body(), "days": 20, "as_seen": False}
    await sandbox.set_faults(latency_ms=400)  # the history fetch takes a few Graph calls
    with web(settings) as (child, url):
        accepted = call(url, "/api/backtests", body)

        async def fetching() -> bool:
            answer = call(url, f"/api/backtests/{accepted['id']}")
            return answer["progress"]["stage"] == "history"

        await wait_for(fetching)
        child.kill()  # SIGKILL: no handler runs
        child.wait()
    await sandbox.clear_faults()
    left = await db[c.BACKTESTS].find_one({"_id": accepted["id"]})
    assert left is not None and left["status"] == "running"

    with web(settings) as (_, url):
        interrupted = call(url, f"/api/backtests/{accepted['id']}")
        assert (interrupted["status"], interrupted["error"]) == ("failed", RESTARTED)
        after_kill = await finished(url, call(url, "/api/backtests", body)["id"])
        assert after_kill["status"] == "done", after_kill["error"]
        await db[c.INSIGHTS_HISTORY].delete_many({})
        await db[c.BACKTEST_LISTINGS].delete_many({})
        from_scratch = await finished(url, call(url, "/api/backtests", body)["id"])
    assert from_scratch["status"] == "done", from_scratch["error"]
    assert from_scratch["result"]["graph_calls"] > 0
    assert fires(after_kill) == fires(from_scratch)
    assert after_kill["result"]["runs"] == from_scratch["result"]["runs"] > 0
