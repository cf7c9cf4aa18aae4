"""Meta's mature-data period ``last_nd_14_8`` end to end, in the ad account's calendar.

The worker evaluates through a recording proxy in front of the Graph sandbox, so the test
sees what Graph received: a ``time_range`` of the account's dates, in the same Batch API
call as the ``date_preset`` periods. The numbers the conditions saw are compared with the
sandbox's own answer for those dates, asked directly, day by day.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp
import orjson
import pytest
from aiohttp import web

from flow import campaign_rule, engine_for, records
from graph_sandbox.admin import SandboxAdmin
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.worker.job import evaluate_account
from support import SANDBOX_NOW, SANDBOX_TOKEN

# At 18:00 UTC on 1 December it is already 2 December in Tokyo (act_1004, yen) and still
# 1 December in New York (act_1001): the 7 days from 14 to 8 days ago differ by one day.
EXPECTED = {
    "act_1001": {"since": "2026-11-17", "until": "2026-11-23"},
    "act_1004": {"since": "2026-11-18", "until": "2026-11-24"},
}
MATURE = {"metric": "spend", "period": "last_nd_14_8", "operator": ">=", "value": 0}
IN_RANGE = {"metric": "spend", "period": "last_nd_14_8", "operator": "IN_RANGE", "value": [0, 1e9]}
NEVER = {"metric": "spend", "period": "today", "operator": ">", "value": 1e12}


@dataclass
class Recorder:
    """Every Graph call that went through the proxy: one list of sub-requests per call."""

    calls: list[list[tuple[str, dict[str, str]]]] = field(default_factory=list)

    def insights_calls(self) -> list[list[tuple[str, dict[str, str]]]]:
        """The calls carrying Insights requests, each reduced to those requests."""
        found = [[r for r in call if r[0].endswith("/insights")] for call in self.calls]
        return [call for call in found if call]


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    return parts.path.rsplit("/v27.0/", 1)[-1].strip("/"), dict(parse_qsl(parts.query))


def _batch_items(body: bytes) -> list[tuple[str, dict[str, str]]]:
    form = dict(parse_qsl(body.decode()))
    if "batch" not in form:
        return []
    return [_split_url("/" + item["relative_url"]) for item in orjson.loads(form["batch"])]


@pytest.fixture
async def proxied(settings: Settings) -> AsyncIterator[tuple[Settings, Recorder]]:
    """Settings whose Graph URL is a proxy to the sandbox that records every call."""
    recorder, target = Recorder(), settings.graph_url
    http = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        items = _batch_items(body) or [_split_url(request.path_qs)]
        recorder.calls.append(items)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with http.request(
            request.method, target + request.path_qs, data=body, headers=headers
        ) as answer:
            raw = await answer.read()
            back = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
            return web.Response(body=raw, status=answer.status, headers=back)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield settings.model_copy(update={"graph_url": f"http://127.0.0.1:{port}"}), recorder
    finally:
        await runner.cleanup()
        await http.close()


_HOP = {"host", "content-length", "transfer-encoding", "content-encoding", "connection"}


async def evaluate(settings: Settings, db: Database, account: str) -> None:
    """Evaluate the rule on ``account``'s campaigns at the sandbox's time, as the worker does."""
    rule = parse_rule(campaign_rule({"type": "pause"}, [MATURE, IN_RANGE, NEVER], name="mature"))
    async with engine_for(settings, db) as engine:
        entities = await GraphReader.from_settings(engine.session).list_for_rule(
            rule, account, token=SANDBOX_TOKEN
        )
        job = EvaluateJob.of(
            rule,
            batch_id=f"mature-{account}",
            rule_id="rule-mature",
            version=1,
            account=account,
            entities=entities,
            scheduled_at=SANDBOX_NOW,
            dispatched_at=SANDBOX_NOW,
        )
        summary = await evaluate_account(engine, job, now=SANDBOX_NOW)
    assert summary.status == "DONE"


def window(span: dict[str, str]) -> list[str]:
    """The dates of ``span``, in order."""
    first, last = date.fromisoformat(span["since"]), date.fromisoformat(span["until"])
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


async def daily_spend(sandbox: SandboxAdmin, campaign: str, span: dict[str, str]) -> list[Any]:
    """The sandbox's rows for ``campaign`` over ``span``, one per day, asked directly."""
    async with aiohttp.ClientSession() as http:
        params = {
            "fields": "spend",
            "time_range": orjson.dumps(span).decode(),
            "time_increment": "1",
            "access_token": SANDBOX_TOKEN,
        }
        url = f"{sandbox.base_url}/v27.0/{campaign}/insights"
        async with http.get(url, params=params) as response:
            body = await response.json()
    rows: list[Any] = body["data"]
    return rows


@pytest.mark.parametrize("account", ["act_1001", "act_1004"])
async def test_last_nd_14_8_is_fetched_as_the_accounts_7_days_and_seen_as_their_sum(
    proxied: tuple[Settings, Recorder],
    db: Database,
    accounts: list[str],
    sandbox: SandboxAdmin,
    account: str,
) -> None:
    settings, recorder = proxied
    await evaluate(settings, db, account)

    # one Batch API call carries both periods: today by name, the mature window by dates
    (call,) = recorder.insights_calls()
    by_period = {p.get("date_preset") or orjson.loads(p["time_range"])["since"]: p for _, p in call}
    assert set(by_period) == {"today", EXPECTED[account]["since"]}
    mature = by_period[EXPECTED[account]["since"]]
    assert orjson.loads(mature["time_range"]) == EXPECTED[account]
    assert "date_preset" not in mature
    assert mature["fields"] == "campaign_id,spend"

    await same_sums(db, sandbox, account)


@pytest.mark.parametrize(
    "change",
    [{"insights_async_threshold": 1}, {"insights_strategy": "per_campaign"}],
    ids=["async-report-runs", "per-campaign"],
)
async def test_the_other_fetch_paths_ask_for_the_same_days(
    settings: Settings,
    db: Database,
    accounts: list[str],
    sandbox: SandboxAdmin,
    change: dict[str, Any],
) -> None:
    await evaluate(settings.model_copy(update=change), db, "act_1004")
    await same_sums(db, sandbox, "act_1004")


async def same_sums(db: Database, sandbox: SandboxAdmin, account: str) -> None:
    """Each record saw the sum of the window's days as the sandbox answers them directly."""
    rows = await records(db, batch_id=f"mature-{account}")
    assert rows
    delivered = 0
    for row in rows:
        mature_spend, in_range, never = row["conditions"]
        daily = await daily_spend(sandbox, row["entity_id"], EXPECTED[account])
        # the days summed are exactly the 7 of the window (a demo campaign delivers daily, or
        # not at all)
        assert [d["date_start"] for d in daily] in ([], window(EXPECTED[account]))
        total = sum((Decimal(d["spend"]) for d in daily), Decimal(0))
        assert mature_spend["actual"] == pytest.approx(float(total))
        assert (mature_spend["passed"], in_range["passed"]) == (True, True)
        assert in_range["expected"] == [0, 1e9]
        assert never["passed"] is False
        delivered += total > 0
    assert delivered  # the window held real delivery, not only zeros
