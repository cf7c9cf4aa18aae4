"""The Graph client against the sandbox over HTTP: listing, batches, retries, redaction."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from graph_sandbox.admin import SandboxAdmin
from ruleengine.errors import ErrorReport
from ruleengine.meta.batch import BatchReader, SubRequest
from ruleengine.meta.errors import (
    AuthError,
    GraphError,
    InvalidRequestError,
    RateLimitError,
    TransientError,
    token_status,
)
from ruleengine.meta.http import READ_AND_BATCH, READ_WRITE, GraphSession, ReadOnlyViolation
from ruleengine.meta.insights import fetch_insights
from ruleengine.meta.reader import GraphReader, RetryPolicy
from ruleengine.meta.writer import GraphWriter, WriteContext
from ruleengine.settings import Settings
from support import SANDBOX_NOW, SANDBOX_TOKEN

FIELDS = ["id", "name", "effective_status", "daily_budget", "created_time"]


class SleepRecorder:
    """Stands in for asyncio.sleep: records how long the client asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class ListSink:
    """An error sink that keeps what it is given."""

    def __init__(self) -> None:
        self.reports: list[ErrorReport] = []

    async def report(self, report: ErrorReport) -> None:
        self.reports.append(report)


@pytest.fixture
async def session(settings: Settings) -> AsyncIterator[GraphSession]:
    graph = GraphSession(
        settings.model_copy(update={"listing_retry_waits_s": (1.0, 2.0)}), methods=READ_WRITE
    )
    try:
        yield graph
    finally:
        await graph.close()


def reader_with(session: GraphSession, sleep: SleepRecorder, *, cap_s: float = 60.0) -> GraphReader:
    return GraphReader(
        session,
        listing=RetryPolicy((1.0, 2.0), rate_limit_cap_s=cap_s, sleep=sleep),
        reads=RetryPolicy((0.5, 1.0), rate_limit_cap_s=cap_s, sleep=sleep),
    )


async def campaign_ids(admin: SandboxAdmin, account: str = "act_1001") -> list[str]:
    world = await admin.world()
    return [c["id"] for c in world["accounts"][account]["campaigns"]] if "accounts" in world else []


async def test_listing_follows_cursors_with_filters(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    reader = reader_with(session, SleepRecorder())
    tagged = await reader.list_entities(
        "act_1001",
        "campaign",
        token=SANDBOX_TOKEN,
        fields=FIELDS,
        filtering=[{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}],
        page_size=3,
    )
    assert len(tagged) == 10
    assert len({c["id"] for c in tagged}) == 10
    assert all("[AUTO]" in c["name"] for c in tagged)
    stats = await sandbox.stats()
    assert stats["calls_by_kind"]["list"] == 4  # 3 + 3 + 3 + 1
    active = await reader.list_entities(
        "act_1001",
        "campaign",
        token=SANDBOX_TOKEN,
        fields=FIELDS,
        filtering=[{"field": "effective_status", "operator": "IN", "value": ["PAUSED"]}],
    )
    assert [c["effective_status"] for c in active] == ["PAUSED"]


ACTIVE_ONLY = [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]


async def _active_campaigns(reader: GraphReader) -> list[str]:
    listed = await reader.list_entities(
        "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"], filtering=ACTIVE_ONLY
    )
    return [c["id"] for c in listed]


@pytest.mark.parametrize("position", [1, 0], ids=["the cursor's entity", "an earlier entity"])
async def test_an_entity_paused_mid_listing_leaves_every_other_exactly_once(
    session: GraphSession, sandbox: SandboxAdmin, position: int, caplog: pytest.LogCaptureFixture
) -> None:
    reader = reader_with(session, SleepRecorder())
    active = await _active_campaigns(reader)
    paused = active[position]
    # Paused "in Ads Manager" right after the first page (2 entities) was served: with
    # position 1 the next page's cursor points at it, and Meta answers 2642.
    await sandbox.set_faults(
        changes=[{"path_contains": "act_1001/campaigns", "object_id": paused, "status": "PAUSED"}]
    )
    await sandbox.clear_stats()
    with caplog.at_level(logging.INFO, logger="ruleengine.meta.reader"):
        listed = await reader.list_entities(
            "act_1001",
            "campaign",
            token=SANDBOX_TOKEN,
            fields=["id", "effective_status"],
            filtering=ACTIVE_ONLY,
            page_size=2,
        )
    ids = [c["id"] for c in listed]
    # Every other entity exactly once; the paused one only if a page served it before the pause.
    assert sorted(i for i in ids if i != paused) == sorted(a for a in active if a != paused)
    assert len(ids) == len(set(ids))
    assert (paused in ids) is (position == 0)
    stats = await sandbox.stats()
    restarted = position == 1
    assert stats["errors_by_code"] == ({"2642": 1} if restarted else {})
    assert ("listing again from the start" in caplog.text) is restarted


async def test_a_listing_whose_restart_goes_stale_again_fails(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    reader = reader_with(session, SleepRecorder())
    active = await _active_campaigns(reader)
    changes = [
        {"path_contains": "act_1001/campaigns", "after_calls": 1, "object_id": active[1]},
        {"path_contains": "act_1001/campaigns", "after_calls": 3, "object_id": active[2]},
    ]
    await sandbox.set_faults(changes=changes)
    with pytest.raises(InvalidRequestError) as info:
        await reader.list_entities(
            "act_1001",
            "campaign",
            token=SANDBOX_TOKEN,
            fields=["id"],
            filtering=ACTIVE_ONLY,
            page_size=2,
        )
    assert info.value.code == 2642


async def test_a_batch_of_120_reads_is_3_http_calls_with_per_item_errors(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    reader = reader_with(session, SleepRecorder())
    campaigns = await reader.list_entities(
        "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"]
    )
    ids = [c["id"] for c in campaigns]
    requests = [SubRequest(ids[i % len(ids)], {"fields": "id,name"}) for i in range(118)]
    requests += [
        SubRequest("999999999999999", {"fields": "id"}),
        SubRequest(ids[0], {"fields": "bogus_field"}),
    ]
    await sandbox.clear_stats()
    batch = BatchReader(session, policy=RetryPolicy((0.01,), rate_limit_cap_s=1))
    results = await batch.get_many(requests, token=SANDBOX_TOKEN, account_id="act_1001")
    stats = await sandbox.stats()
    assert stats["http_requests"] == 3
    assert stats["counted_calls"] == 120
    assert session.cost.counted_calls >= 120
    assert all(r.error is None and r.body["id"] for r in results[:118])
    assert isinstance(results[118].error, InvalidRequestError)
    assert isinstance(results[119].error, InvalidRequestError)
    assert results[119].error.code == 100


async def test_null_batch_items_are_retried(session: GraphSession, sandbox: SandboxAdmin) -> None:
    reader = reader_with(session, SleepRecorder())
    ids = [
        c["id"]
        for c in await reader.list_entities(
            "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"]
        )
    ]
    await sandbox.set_faults(null_item_rate=0.3)
    await sandbox.clear_stats()
    batch = BatchReader(session, policy=RetryPolicy((0.01,), rate_limit_cap_s=1), item_rounds=6)
    results = await batch.get_many(
        [SubRequest(i, {"fields": "id"}) for i in ids * 3], token=SANDBOX_TOKEN
    )
    assert all(r.error is None for r in results)
    assert (await sandbox.stats())["counted_calls"] > len(ids) * 3


async def test_listing_fails_twice_then_succeeds_waiting_1s_then_2s(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    sleep = SleepRecorder()
    await sandbox.set_faults(
        rules=[{"path_contains": "/act_1001/campaigns", "method": "GET", "code": 2, "times": 2}]
    )
    entities = await reader_with(session, sleep).list_entities(
        "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"]
    )
    assert len(entities) == 12
    assert sleep.waits == [1.0, 2.0]


async def test_three_listing_failures_raise_after_3s_of_waiting(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    sleep = SleepRecorder()
    await sandbox.set_faults(
        rules=[{"path_contains": "/act_1001/campaigns", "code": 2, "times": 3}]
    )
    with pytest.raises(TransientError) as info:
        await reader_with(session, sleep).list_entities(
            "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"]
        )
    assert sum(sleep.waits) == 3.0
    assert info.value.code == 2
    assert info.value.fbtrace_id
    assert (await sandbox.stats())["calls_by_kind"]["list"] == 3


async def test_expired_token_is_never_retried(session: GraphSession, sandbox: SandboxAdmin) -> None:
    sleep = SleepRecorder()
    await sandbox.set_faults(revoked_tokens=[SANDBOX_TOKEN])
    with pytest.raises(AuthError) as info:
        await reader_with(session, sleep).list_entities(
            "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"]
        )
    assert info.value.code == 190
    assert sleep.waits == []
    assert SANDBOX_TOKEN not in str(info.value)


@pytest.mark.parametrize(
    ("change", "code", "subcode", "status"),
    [
        ({"expire": True}, 190, 463, "expired"),
        ({"invalidate": "password_changed"}, 190, 460, "invalid"),
        ({"invalidate": "logged_out"}, 190, 467, "invalid"),
        ({"permissions": []}, 200, None, "missing_permission"),
    ],
)
async def test_token_errors_are_never_retried_and_say_what_they_mean(
    session: GraphSession,
    sandbox: SandboxAdmin,
    change: dict[str, Any],
    code: int,
    subcode: int | None,
    status: str,
) -> None:
    sleep = SleepRecorder()
    reader = reader_with(session, sleep)
    await sandbox.update_token(SANDBOX_TOKEN, **change)
    with pytest.raises(GraphError) as info:
        await reader.list_entities("act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"])
    assert (info.value.code, info.value.subcode) == (code, subcode)
    assert token_status(info.value.code, info.value.subcode) == status
    batch = BatchReader(session, policy=RetryPolicy((0.01,), rate_limit_cap_s=1, sleep=sleep))
    (result,) = await batch.get_many([SubRequest("act_1001", {})], token=SANDBOX_TOKEN)
    assert result.error is not None
    assert result.error.code == code
    assert sleep.waits == []
    assert (await sandbox.stats())["calls_by_kind"]["list"] == 1


async def test_ad_account_rate_limit_waits_as_the_headers_say(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_limits(account_calls_per_hour=3)
    sleep = SleepRecorder()
    reader = reader_with(session, sleep, cap_s=3600)
    for _ in range(3):
        await reader.get_object(
            "act_1001", token=SANDBOX_TOKEN, fields=["id"], account_id="act_1001"
        )
    with pytest.raises(RateLimitError) as info:
        await reader.list_entities("act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"])
    assert info.value.code in (80004, 80000)
    assert info.value.retry_after_s
    assert info.value.retry_after_s > 0
    assert sleep.waits
    assert sleep.waits[0] == info.value.retry_after_s
    assert session.usage("act_1001").account_pct >= 100


async def test_rate_limit_beyond_the_cap_gives_up_at_once(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_limits(account_calls_per_hour=1)
    sleep = SleepRecorder()
    reader = reader_with(session, sleep, cap_s=1)
    await reader.get_object("act_1001", token=SANDBOX_TOKEN, fields=["id"], account_id="act_1001")
    with pytest.raises(RateLimitError):
        await reader.list_entities("act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"])
    assert sleep.waits == []


async def test_user_rate_limit_17_without_estimate_uses_the_configured_waits(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_faults(
        rules=[{"path_contains": "/act_1001/campaigns", "code": 17, "times": 1}]
    )
    sleep = SleepRecorder()
    await reader_with(session, sleep).list_entities(
        "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"]
    )
    assert sleep.waits == [1.0]


async def test_the_reader_refuses_post(session: GraphSession, sandbox: SandboxAdmin) -> None:
    reader = reader_with(session, SleepRecorder())
    with pytest.raises(ReadOnlyViolation, match="refusing POST"):
        await reader.session.request("POST", "act_1001", token=SANDBOX_TOKEN, form={"name": "x"})
    with pytest.raises(ReadOnlyViolation):
        reader.session.view(methods=READ_WRITE)
    assert (await sandbox.stats())["http_by_method"].get("POST", 0) == 0


async def test_the_preview_session_sends_batches_of_gets_and_nothing_else(
    settings: Settings, sandbox: SandboxAdmin
) -> None:
    preview = GraphSession(settings, methods=READ_AND_BATCH)
    try:
        gets = {"batch": [{"method": "GET", "relative_url": "act_1001/campaigns?fields=id"}]}
        (item,) = await preview.request("BATCH", "", token=SANDBOX_TOKEN, form=gets)
        assert item["code"] == 200
        posts = {"batch": [{"method": "POST", "relative_url": "120210010000001?name=x"}]}
        with pytest.raises(ReadOnlyViolation, match="GET sub-requests only"):
            await preview.request("BATCH", "", token=SANDBOX_TOKEN, form=posts)
        with pytest.raises(ReadOnlyViolation, match="refusing POST"):
            await preview.request("POST", "act_1001", token=SANDBOX_TOKEN, form={"name": "x"})
    finally:
        await preview.close()
    assert await sandbox.writes() == []


async def test_writer_reports_failures_with_the_exact_redacted_request(
    session: GraphSession, sandbox: SandboxAdmin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sink = ListSink()
    writer = GraphWriter(session, sink)
    reader = reader_with(session, SleepRecorder())
    campaigns = await reader.list_entities(
        "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id", "name", "daily_budget"]
    )
    abo = next(c for c in campaigns if "daily_budget" not in c)
    ctx = WriteContext("act_1001", abo["id"], "rule-1", "batch-1")
    with pytest.raises(InvalidRequestError):
        await writer.set_budget("daily_budget", 12000, token=SANDBOX_TOKEN, ctx=ctx)
    assert len(sink.reports) == 1
    report = sink.reports[0]
    assert report.function == "meta.writer.set_budget"
    assert report.params == {
        "method": "POST",
        "path": abo["id"],
        "params": {"daily_budget": "12000"},
    }
    assert report.response["error"]["code"] == 100  # type: ignore[index]
    assert "Traceback" in report.stack
    await writer.set_name(
        "Renamed", token=SANDBOX_TOKEN, ctx=WriteContext("act_1001", campaigns[0]["id"])
    )
    assert (await sandbox.object(campaigns[0]["id"]))["name"] == "Renamed"
    everything = caplog.text + repr(sink.reports) + repr(await sandbox.writes())
    assert SANDBOX_TOKEN not in everything


async def test_no_token_in_logs_when_pages_carry_it_in_next_urls(
    session: GraphSession, sandbox: SandboxAdmin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await sandbox.set_faults(
        rules=[{"path_contains": "/act_1001/campaigns", "code": 2, "times": 1}]
    )
    await reader_with(session, SleepRecorder()).list_entities(
        "act_1001", "campaign", token=SANDBOX_TOKEN, fields=["id"], page_size=2
    )
    assert "retrying" in caplog.text
    assert SANDBOX_TOKEN not in caplog.text


@pytest.mark.parametrize("level", ["campaign", "adset"])
async def test_both_strategies_return_the_same_values_at_a_tenth_of_the_cost(
    settings: Settings, sandbox: SandboxAdmin, level: str
) -> None:
    await sandbox.reset(
        scenario="bench", accounts=1, campaigns_per_account=60, adsets_per_campaign=1
    )
    await sandbox.set_clock(SANDBOX_NOW)  # a reset returns to real time; today must not grow
    account = (await sandbox.accounts())[0]
    groups = {
        "today": ["spend", "clicks", "ctr"],
        "last_7d": ["spend", "purchase_roas", "actions"],
        "last_14d": ["cpc", "action_values"],
    }
    results: dict[str, Any] = {}
    costs: dict[str, int] = {}
    for strategy in ("per_campaign", "account_level"):
        graph = GraphSession(settings, methods=READ_WRITE)
        reader = reader_with(graph, SleepRecorder())
        entities = await reader.list_entities(account, level, token=SANDBOX_TOKEN, fields=["id"])
        batch = BatchReader(graph, policy=RetryPolicy((0.01,), rate_limit_cap_s=1), concurrency=8)
        before = graph.cost.counted_calls
        result = await fetch_insights(
            batch,
            strategy=strategy,  # type: ignore[arg-type]
            account_id=account,
            level=level,
            entity_ids=[e["id"] for e in entities],
            groups=groups,
            token=SANDBOX_TOKEN,
        )
        costs[strategy] = graph.cost.counted_calls - before
        results[strategy] = {
            eid: {p: {f: row.get(f) for f in groups[p]} for p, row in rows.items()}
            for eid, rows in result.rows.items()
        }
        assert not result.errors
        await graph.close()
    assert len(results["per_campaign"]) == 60
    assert results["per_campaign"] == results["account_level"]
    assert costs["per_campaign"] == 180
    assert costs["account_level"] * 10 <= costs["per_campaign"]


async def test_several_objects_are_read_in_batch_api_calls_of_50_never_by_multi_id(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    """New apps may not send multi-ID requests (``GET /?ids=``) since 2026-11-04; the
    sandbox refuses them (its default "new app" mode), and the live read of several
    objects goes through the Batch API instead: 120 objects, 3 calls (50 + 50 + 20)."""
    await sandbox.reset(scenario="bench", accounts=1, campaigns_per_account=120, app="new")
    reader = reader_with(session, SleepRecorder())
    ids = [
        c["id"]
        for c in await reader.list_entities(
            "act_2001", "campaign", token=SANDBOX_TOKEN, fields=["id"]
        )
    ]
    await sandbox.clear_stats()
    batch = BatchReader(session, policy=RetryPolicy((0.01,), rate_limit_cap_s=1))
    objects = await batch.get_objects(
        ids, token=SANDBOX_TOKEN, fields=["id", "name", "daily_budget"]
    )
    assert sorted(objects) == sorted(ids)
    assert all(o["daily_budget"] for o in objects.values())
    stats = await sandbox.stats()
    assert (stats["http_requests"], stats["counted_calls"]) == (3, 120)
    with pytest.raises(GraphError) as refused:
        await reader.session.request(
            "GET", "", token=SANDBOX_TOKEN, params={"ids": ",".join(ids[:2])}
        )
    assert refused.value.code == 3  # the multi-ID request itself: not for a new app
    with pytest.raises(GraphError):  # one object that cannot be read fails the read
        await batch.get_objects([ids[0], "120210019999999"], token=SANDBOX_TOKEN, fields=["id"])
