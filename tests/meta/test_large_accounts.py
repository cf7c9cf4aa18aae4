"""Big accounts against the sandbox: timeouts split the request, then async report runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import date, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_sandbox.admin import SandboxAdmin
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.errors import (
    DataTooLargeError,
    MalformedResponseError,
    ReportRunError,
    error_from_body,
)
from ruleengine.meta.http import READ_AND_REPORT, READ_WRITE, GraphSession, ReadOnlyViolation
from ruleengine.meta.insights import InsightsResult, LargeAccounts, fetch_insights
from ruleengine.meta.reader import RetryPolicy
from ruleengine.meta.reports import ReportRunner, RunStatus, parse_status
from ruleengine.meta.rows import sum_rows
from ruleengine.rules.language.periods import halves, preset_range
from ruleengine.settings import Settings
from support import SANDBOX_NOW, SANDBOX_TOKEN

ACCOUNT = "act_2001"  # the bench scenario's first account (America/New_York)
TODAY = date(2026, 12, 1)  # SANDBOX_NOW in New York
ROAS = {"last_7d": ["spend", "purchase_roas"]}
ADDITIVE = {"last_14d": ["spend", "impressions", "actions"]}


class SleepRecorder:
    """Stands in for asyncio.sleep: records how long the client asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
async def graph(settings: Settings, sandbox: SandboxAdmin) -> AsyncIterator[GraphSession]:
    """A worker's session on a bench account of 60 one-ad-set campaigns, clock frozen."""
    await sandbox.reset(
        scenario="bench", accounts=1, campaigns_per_account=60, adsets_per_campaign=1
    )
    await sandbox.set_clock(SANDBOX_NOW)
    session = GraphSession(settings, methods=READ_WRITE)
    try:
        yield session
    finally:
        await session.close()


async def campaign_ids(session: GraphSession) -> list[str]:
    body = await session.request(
        "GET", f"{ACCOUNT}/campaigns", token=SANDBOX_TOKEN, params={"fields": "id", "limit": 500}
    )
    return [c["id"] for c in body["data"]]


def policy(sleep: SleepRecorder) -> RetryPolicy:
    return RetryPolicy((0.01, 0.02), rate_limit_cap_s=60, sleep=sleep)


def runner(session: GraphSession, sleep: SleepRecorder, *, max_wait_s: float = 60) -> ReportRunner:
    return ReportRunner(session, policy=policy(sleep), poll_first_s=2.0, max_wait_s=max_wait_s)


async def fetch(
    session: GraphSession,
    ids: list[str],
    groups: dict[str, list[str]],
    large: LargeAccounts | None = None,
    sleep: SleepRecorder | None = None,
) -> InsightsResult:
    batch = BatchReader(session, policy=policy(sleep or SleepRecorder()))
    return await fetch_insights(
        batch,
        strategy="account_level",
        account_id=ACCOUNT,
        level="campaign",
        entity_ids=ids,
        groups=groups,
        token=SANDBOX_TOKEN,
        large=large,
    )


def values(result: InsightsResult, groups: dict[str, list[str]]) -> dict[str, Any]:
    """entity → period → field → value, action lists as {type: number}."""

    def value(row: dict[str, Any], name: str) -> Any:
        raw = row.get(name)
        if isinstance(raw, list):
            return {a["action_type"]: float(a["value"]) for a in raw}
        return None if raw is None else float(raw)

    return {
        entity: {p: {f: value(row, f) for f in groups[p]} for p, row in rows.items()}
        for entity, rows in result.rows.items()
    }


async def test_a_timed_out_request_is_split_by_ids_and_gives_the_same_numbers(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(graph)
    whole = await fetch(graph, ids, ROAS)
    await sandbox.set_insights(sync_max_cells=300)  # 60 campaigns × 7 days is 420
    await sandbox.clear_stats()
    split = await fetch(graph, ids, ROAS)
    assert not split.errors
    assert values(split, ROAS) == values(whole, ROAS)
    assert len(split.rows) == 60
    stats = await sandbox.stats()
    assert stats["calls_by_kind"]["insights"] == 3  # 60 timed out, then 30 + 30
    assert stats["errors_by_code"] == {"100": 1}


async def test_without_splits_or_reports_a_timeout_is_a_per_entity_error(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(graph)
    await sandbox.set_insights(sync_max_cells=5, sync_timeout_subcode=1504038)
    result = await fetch(graph, ids[:10], ROAS, LargeAccounts(min_ids=10))
    assert set(result.errors) == set(ids[:10])
    error = result.errors[ids[0]]
    assert isinstance(error, DataTooLargeError)
    assert (error.code, error.subcode) == (2, 1504038)
    # code 2 is transient, but a timeout is not retried as such: one call only
    assert (await sandbox.stats())["calls_by_kind"]["insights"] == 1


async def test_additive_fields_over_several_days_are_split_by_range_and_summed(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = (await campaign_ids(graph))[:10]
    whole = await fetch(graph, ids, ADDITIVE)
    await sandbox.set_insights(sync_max_cells=75)  # 10 × 14 days is 140; 10 × 7 is 70
    await sandbox.clear_stats()
    split = await fetch(graph, ids, ADDITIVE, LargeAccounts(min_ids=10, today=TODAY))
    assert not split.errors
    assert values(split, ADDITIVE) == values(whole, ADDITIVE)
    row = split.rows[ids[0]]["last_14d"]
    assert (row["date_start"], row["date_stop"]) == ("2026-11-17", "2026-11-30")
    assert (await sandbox.stats())["calls_by_kind"]["insights"] == 3
    # without the account's date the period cannot be cut: the timeout stays an error
    unknown_day = await fetch(graph, ids, ADDITIVE, LargeAccounts(min_ids=10))
    assert set(unknown_day.errors) == set(ids)


async def test_a_later_page_of_a_range_timing_out_counts_no_row_twice(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = (await campaign_ids(graph))[:10]
    whole = await fetch(graph, ids, ADDITIVE)
    # 10 × 14 days times out; each 7-day half comes in pages of 4 rows, and the second
    # page of the first half times out too: that half is fetched again in shorter ranges,
    # and the 4 rows its first page gave must not stay counted beside them.
    await sandbox.set_insights(sync_max_cells=75, page_max_rows=4)
    await sandbox.set_faults(
        rules=[
            {"path_contains": "/insights", "code": 100, "subcode": 1504018, "skip": 3, "times": 1}
        ]
    )
    split = await fetch(graph, ids, ADDITIVE, LargeAccounts(min_ids=10, today=TODAY))
    assert not split.errors
    assert values(split, ADDITIVE) == values(whole, ADDITIVE)
    assert (await sandbox.stats())["errors_by_code"] == {"100": 2}


async def test_what_splits_cannot_fix_runs_as_an_async_report_with_progress(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(graph)
    whole = await fetch(graph, ids, ROAS)
    await sandbox.set_insights(sync_max_cells=50)  # even 15 campaigns × 7 days is too much
    await sandbox.clear_stats()
    sleep, progress = SleepRecorder(), []

    async def on_progress(percent: float) -> None:
        progress.append(percent)

    large = LargeAccounts(reports=runner(graph, sleep), min_ids=15, on_progress=on_progress)
    result = await fetch(graph, ids, ROAS, large, sleep)
    assert not result.errors
    assert values(result, ROAS) == values(whole, ROAS)
    stats = await sandbox.stats()
    # 60 → 30 + 30 → 4 × 15, all timed out; then one report run for the period
    assert stats["calls_by_kind"]["insights"] == 7
    assert stats["calls_by_kind"]["report"] == 1
    assert stats["calls_by_kind"]["report_run"] == 3
    assert progress == [0.0, 50.0, 100.0]
    assert sleep.waits == [2.0, 4.0]  # polls back off
    assert await sandbox.writes() == []


async def test_past_the_threshold_the_account_goes_async_at_once(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = await campaign_ids(graph)
    groups = ROAS | {"today": ["spend"]}
    whole = await fetch(graph, ids, groups)
    await sandbox.clear_stats()
    sleep = SleepRecorder()
    large = LargeAccounts(reports=runner(graph, sleep), async_threshold=60)
    result = await fetch(graph, ids, groups, large, sleep)
    assert values(result, groups) == values(whole, groups)
    stats = await sandbox.stats()
    assert stats["calls_by_kind"]["insights"] == 0
    assert stats["calls_by_kind"]["report"] == 2  # one run per period
    assert stats["calls_by_kind"]["report_results"] == 2


async def test_a_failed_run_is_an_error_of_each_entity_and_a_skipped_one_is_resubmitted(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = (await campaign_ids(graph))[:20]
    sleep = SleepRecorder()
    large = LargeAccounts(reports=runner(graph, sleep), async_threshold=1)
    await sandbox.set_insights(report_outcomes=["Job Skipped"])
    skipped_once = await fetch(graph, ids, ROAS, large, sleep)
    assert not skipped_once.errors
    assert len(skipped_once.rows) == 20
    await sandbox.set_insights(report_outcomes=["Job Failed"])
    failed = await fetch(graph, ids, ROAS, large, sleep)
    assert set(failed.errors) == set(ids)
    error = failed.errors[ids[0]]
    assert isinstance(error, ReportRunError)
    assert (error.code, error.subcode) == (-2, 2490547)
    assert "Generating the report failed" in str(error)
    await sandbox.set_insights(report_outcomes=["Job Skipped", "Job Skipped"])
    skipped_twice = await fetch(graph, ids, ROAS, large, sleep)
    assert "Job Skipped" in str(skipped_twice.errors[ids[0]])


async def test_a_run_that_takes_too_long_is_given_up_after_the_bound(
    graph: GraphSession, sandbox: SandboxAdmin
) -> None:
    ids = (await campaign_ids(graph))[:5]
    await sandbox.set_insights(report_polls=50)
    sleep = SleepRecorder()
    large = LargeAccounts(reports=runner(graph, sleep, max_wait_s=10), async_threshold=1)
    result = await fetch(graph, ids, ROAS, large, sleep)
    assert "did not complete within 10s" in str(result.errors[ids[0]])
    assert sleep.waits == [2.0, 4.0, 4.0]  # 2 + 4 + the 4 s left of the 10


async def test_the_preview_may_start_a_report_run_and_nothing_else(
    settings: Settings, sandbox: SandboxAdmin
) -> None:
    preview = GraphSession(settings, methods=READ_AND_REPORT)
    try:
        started = await preview.request(
            "REPORT", "act_1001/insights", token=SANDBOX_TOKEN, form={"level": "campaign"}
        )
        assert started["report_run_id"]
        for path in ("act_1001", "act_1001/campaigns", "120210010000001/insights", "/"):
            with pytest.raises(ReadOnlyViolation, match="act_…/insights only"):
                await preview.request("REPORT", path, token=SANDBOX_TOKEN, form={"name": "x"})
        with pytest.raises(ReadOnlyViolation, match="refusing POST"):
            await preview.request("POST", "act_1001/insights", token=SANDBOX_TOKEN)
    finally:
        await preview.close()
    assert await sandbox.writes() == []


def test_presets_as_ranges_and_their_halves() -> None:
    today = date(2026, 12, 1)
    assert preset_range("last_7d", today) == (date(2026, 11, 24), date(2026, 11, 30))
    assert preset_range("today", today) == (today, today)
    assert preset_range("this_month", today) == (today, today)
    assert preset_range("last_month", today) == (date(2026, 11, 1), date(2026, 11, 30))
    assert preset_range("this_week_mon_today", today) == (date(2026, 11, 30), today)
    assert preset_range("maximum", today) is None
    assert preset_range("last_0d", today) is None
    assert halves((today, today)) is None
    first, second = halves((today, today + timedelta(days=4))) or ((), ())
    assert first == (today, today + timedelta(days=1))
    assert second == (today + timedelta(days=2), today + timedelta(days=4))


def test_rows_of_adjacent_ranges_add_up() -> None:
    a = {
        "campaign_id": "1",
        "spend": "10.10",
        "impressions": "100",
        "actions": [{"action_type": "purchase", "value": "2"}],
        "date_start": "2026-11-01",
        "date_stop": "2026-11-07",
    }
    b = {
        "campaign_id": "1",
        "spend": "0.95",
        "actions": [
            {"action_type": "purchase", "value": "1"},
            {"action_type": "lead", "value": "3"},
        ],
        "date_start": "2026-11-08",
        "date_stop": "2026-11-14",
    }
    assert sum_rows(a, b) == {
        "campaign_id": "1",
        "spend": "11.05",
        "impressions": "100",
        "actions": [
            {"action_type": "purchase", "value": "3"},
            {"action_type": "lead", "value": "3"},
        ],
        "date_start": "2026-11-01",
        "date_stop": "2026-11-14",
    }


@given(
    preset=st.one_of(
        st.integers(min_value=-5, max_value=1200).map(lambda n: f"last_{n}d"),
        st.sampled_from(["today", "yesterday", "this_month", "last_month", "maximum", "x"]),
        st.text(max_size=12),
    ),
    today=st.dates(min_value=date(2000, 3, 1), max_value=date(2999, 12, 31)),
)
def test_any_preset_is_a_valid_range_or_none_and_halves_cover_it(preset: str, today: date) -> None:
    span = preset_range(preset, today)
    if span is None:
        return
    since, until = span
    assert since <= until <= today
    parts = halves(span)
    if since == until:
        assert parts is None
        return
    assert parts is not None
    (a, b), (c, d) = parts
    assert (a, d) == (since, until)
    assert b + timedelta(days=1) == c
    assert a <= b and c <= d
    assert abs((b - a).days - (d - c).days) <= 1


@given(
    st.dictionaries(
        st.sampled_from(["async_status", "async_percent_completion", "error_code", "id"]),
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text()),
    )
)
def test_any_report_run_body_is_a_status_or_a_malformed_response(body: dict[str, Any]) -> None:
    try:
        status = parse_status(body)
    except MalformedResponseError:
        assert not isinstance(body.get("async_status"), str)
        return
    assert isinstance(status, RunStatus)
    assert isinstance(status.error("1"), ReportRunError)
    assert status.done == (status.status == "Job Completed" and status.percent >= 100)


@given(
    code=st.one_of(st.none(), st.integers(), st.text(max_size=5)),
    subcode=st.one_of(st.none(), st.integers(), st.text(max_size=8)),
    message=st.one_of(st.none(), st.text(max_size=80)),
)
def test_any_error_body_maps_to_a_class_and_timeouts_to_data_too_large(
    code: Any, subcode: Any, message: Any
) -> None:
    body = {"error": {"code": code, "error_subcode": subcode, "message": message}}
    error = error_from_body(body, http_status=400, throttle_wait_s=30)
    if (code, subcode) in ((100, 1504018), (2, 1504038)):
        assert isinstance(error, DataTooLargeError)
    if code == 4 and subcode in (1504022, 1504039):
        assert getattr(error, "retry_after_s", None) == 30
