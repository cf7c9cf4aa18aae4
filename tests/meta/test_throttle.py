"""Insights throttling: the client slows down as X-FB-Ads-Insights-Throttle rises, and waits
when Meta refuses (code 4, 1504022/1504039) — asserted on the waits it asked for."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_sandbox.admin import SandboxAdmin
from ruleengine.meta.batch import BatchReader, SubRequest
from ruleengine.meta.errors import RateLimitError
from ruleengine.meta.http import READ_WRITE, GraphSession, InsightsThrottle
from ruleengine.meta.pacing import InsightsPacer, pace_wait_s
from ruleengine.meta.reader import RetryPolicy
from ruleengine.settings import Settings
from support import SANDBOX_TOKEN

SPEND = SubRequest("act_1001/insights", {"fields": "spend", "date_preset": "yesterday"})


class SleepRecorder:
    """Stands in for asyncio.sleep: records how long the client asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
async def session(settings: Settings) -> AsyncIterator[GraphSession]:
    graph = GraphSession(settings, methods=READ_WRITE)
    try:
        yield graph
    finally:
        await graph.close()


def reader(session: GraphSession, sleep: SleepRecorder, *, cap_s: float = 60) -> BatchReader:
    pacer = InsightsPacer(session, slowdown_pct=60, max_wait_s=20, sleep=sleep)
    policy = RetryPolicy((0.01, 0.02), rate_limit_cap_s=cap_s, sleep=sleep)
    return BatchReader(session, policy=policy, pacer=pacer)


async def test_a_rising_insights_throttle_spaces_the_calls_out(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_limits(insights_account_calls_per_hour=10)
    sleep = SleepRecorder()
    batch = reader(session, sleep)
    waits_before: list[list[float]] = []
    for _ in range(10):
        before = len(sleep.waits)
        (result,) = await batch.get_many([SPEND], token=SANDBOX_TOKEN, account_id="act_1001")
        assert result.error is None
        waits_before.append(sleep.waits[before:])
    # each call adds 10 % of the account's Insights load; from 60 % on the next call waits,
    # up to 20 s at 100 %
    assert waits_before == [[], [], [], [], [], [], [], [5.0], [10.0], [15.0]]
    throttle = session.insights_throttle("act_1001")
    assert (throttle.account_pct, throttle.access_tier) == (100, "standard_access")
    # other reads are not paced
    listing = SubRequest("act_1001/campaigns", {"fields": "id"})
    before = len(sleep.waits)
    await batch.get_many([listing], token=SANDBOX_TOKEN, account_id="act_1001")
    assert sleep.waits[before:] == []


async def test_at_the_limit_meta_refuses_and_the_reader_waits_before_retrying(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_limits(insights_account_calls_per_hour=2)
    sleep = SleepRecorder()
    batch = reader(session, sleep)
    for _ in range(2):
        await batch.get_many([SPEND], token=SANDBOX_TOKEN, account_id="act_1001")
    (refused,) = await batch.get_many([SPEND], token=SANDBOX_TOKEN, account_id="act_1001")
    assert isinstance(refused.error, RateLimitError)
    assert (refused.error.code, refused.error.subcode) == (4, 1504039)
    assert refused.error.insights_throttle
    # paced at 100 % (20 s), refused, waited RULEENGINE_INSIGHTS_THROTTLE_WAIT_S (30 s), twice
    assert sleep.waits == [20.0, 30.0, 20.0, 30.0, 20.0]
    stats = await sandbox.stats()
    assert stats["errors_by_code"] == {"4": 3}


async def test_a_one_off_global_throttle_is_waited_out_and_the_call_succeeds(
    session: GraphSession, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_faults(
        rules=[{"path_contains": "/insights", "code": 4, "subcode": 1504022, "times": 1}]
    )
    sleep = SleepRecorder()
    (result,) = await reader(session, sleep).get_many(
        [SPEND], token=SANDBOX_TOKEN, account_id="act_1001"
    )
    assert result.error is None
    assert sleep.waits == [30.0]


async def test_a_throttle_wait_beyond_the_cap_gives_up_at_once(
    settings: Settings, sandbox: SandboxAdmin
) -> None:
    patient = settings.model_copy(update={"insights_throttle_wait_s": 120.0})
    graph = GraphSession(patient, methods=READ_WRITE)
    await sandbox.set_faults(
        rules=[{"path_contains": "/insights", "code": 4, "subcode": 1504022, "times": 1}]
    )
    sleep = SleepRecorder()
    try:
        (result,) = await reader(graph, sleep, cap_s=60).get_many(
            [SPEND], token=SANDBOX_TOKEN, account_id="act_1001"
        )
    finally:
        await graph.close()
    assert isinstance(result.error, RateLimitError)
    assert result.error.retry_after_s == 120.0
    assert sleep.waits == []


@given(
    app=st.floats(min_value=0, max_value=200),
    account=st.floats(min_value=0, max_value=200),
    slowdown=st.floats(min_value=0, max_value=99),
    max_wait=st.floats(min_value=0, max_value=600),
)
def test_the_pace_is_zero_below_the_slowdown_and_grows_to_the_max(
    app: float, account: float, slowdown: float, max_wait: float
) -> None:
    throttle = InsightsThrottle(app_pct=app, account_pct=account)
    wait = pace_wait_s(throttle, slowdown_pct=slowdown, max_wait_s=max_wait)
    assert 0 <= wait <= max_wait + 0.001
    if max(app, account) < slowdown:
        assert wait == 0
    if max(app, account) >= 100:
        assert wait == pytest.approx(max_wait, abs=0.001)
    higher = InsightsThrottle(app_pct=app + 5, account_pct=account)
    assert pace_wait_s(higher, slowdown_pct=slowdown, max_wait_s=max_wait) >= wait


@given(st.text())
def test_any_throttle_header_parses_or_is_ignored(raw: str) -> None:
    throttle = InsightsThrottle.from_headers({"X-FB-Ads-Insights-Throttle": raw})
    assert throttle is None or isinstance(throttle.max_pct, float)


@given(
    st.dictionaries(
        st.sampled_from(["app_id_util_pct", "acc_id_util_pct", "ads_api_access_tier", "x"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(min_value=-(2**53), max_value=2**53),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(),
        ),
    )
)
def test_a_throttle_header_object_keeps_only_numbers(value: dict[str, object]) -> None:
    raw = orjson.dumps(value).decode()
    throttle = InsightsThrottle.from_headers({"x-fb-ads-insights-throttle": raw})
    assert throttle is not None

    def expected(name: str) -> float:
        number = value.get(name)
        is_number = isinstance(number, int | float) and not isinstance(number, bool)
        return float(number) if is_number else 0.0  # type: ignore[arg-type]

    assert throttle.app_pct == expected("app_id_util_pct")
    assert throttle.account_pct == expected("acc_id_util_pct")
    tier = value.get("ads_api_access_tier")
    assert throttle.access_tier == (tier if isinstance(tier, str) else None)
