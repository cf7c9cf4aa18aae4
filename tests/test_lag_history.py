"""The lag curve learned from the engine's own records, against the Graph sandbox.

The worker's evaluation runs a harmless rule (thresholds no campaign reaches) on act_1001
at 30 instants over five days, the sandbox's clock frozen at each and its attribution lag
switched on, so each record holds conversions as they were seen then. Nine days later
every day those conditions covered has matured, and :func:`learn_lag` fits the curve from
the records and the history: it must be the sandbox's own (``DEFAULT_CURVE``: 0 h 0.50,
24 h 0.80, 72 h 0.95, 168 h 1.00).

The sandbox rounds each ad set's conversions of each day to whole ones. Adds to cart are
10 to 30 an ad set a day, so the curve they give is within 0.025 of the sandbox's at every
knot; purchases are 1 to 7, and rounding moves their small shares (one purchase seen at any
share above 0.5 shows whole), so the curve from purchases and ROAS is within 0.05.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from flow import run_at
from graph_sandbox.admin import SandboxAdmin
from graph_sandbox.attribution_lag import DEFAULT_CURVE, seen_share
from ruleengine.backtest.history import InsightsHistory
from ruleengine.backtest.lag_fit import LagLearning, _needs, learn_lag
from ruleengine.meta.http import READ_AND_BATCH, GraphSession
from ruleengine.rules.replay.lag import KNOTS_H, share
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.insights_history import InsightsHistoryStore
from support import SANDBOX_TOKEN

ACCOUNT, TIMEZONE = "act_1001", "America/New_York"
#: Every four hours from 01:00 to 21:00 in New York, 16 to 20 November.
INSTANTS = tuple(
    datetime(2026, 11, day, hour, tzinfo=ZoneInfo(TIMEZONE)).astimezone(UTC)
    for day in range(16, 21)
    for hour in range(1, 24, 4)
)
#: Nine days after the last instant: every day its conditions covered has matured.
LATER = max(INSTANTS) + timedelta(days=9)
PERIODS = ("yesterday", "last_3d", "last_7d")
NEVER = 1e12


def _conditions(*metrics: str) -> list[dict[str, Any]]:
    return [
        {"metric": metric, "period": period, "operator": ">", "value": NEVER}
        for metric in metrics
        for period in PERIODS
    ]


@pytest.fixture
async def graph(
    settings: Settings, sandbox: SandboxAdmin, accounts: list[str]
) -> AsyncIterator[GraphSession]:
    """A read-only session with the Batch API (what a backtest may use); the sandbox's
    accounts registered, so the worker's evaluation finds their tokens."""
    session = GraphSession(settings, methods=READ_AND_BATCH)
    try:
        yield session
    finally:
        await session.close()


async def learn(db: Database, graph: GraphSession, sandbox: SandboxAdmin) -> LagLearning:
    await sandbox.set_clock(LATER)
    history = InsightsHistory(InsightsHistoryStore(db), graph)
    return await learn_lag(
        db,
        history,
        account_id=ACCOUNT,
        level="campaign",
        timezone=TIMEZONE,
        token=SANDBOX_TOKEN,
        now=LATER,
    )


def _figures(learning: LagLearning) -> str:
    assert learning.fit.curve is not None
    return ", ".join(
        f"{age:g} h {share(learning.fit.curve, age):.3f} (sandbox {seen_share(age):.3f})"
        for age in KNOTS_H
    )


async def test_the_curve_learned_from_adds_to_cart_is_the_sandboxs(
    settings: Settings, db: Database, sandbox: SandboxAdmin, graph: GraphSession
) -> None:
    await sandbox.set_insights(attribution_lag={"enabled": True})
    await run_at(settings, db, sandbox, _conditions("actions.omni_add_to_cart"), INSTANTS)
    learning = await learn(db, graph, sandbox)
    fit = learning.fit
    print(f"\nadds to cart: {fit.why}; residual {fit.residual:.4f}; {_figures(learning)}")
    assert fit.enough and fit.curve is not None, fit.why
    # 8 of the 12 campaigns deliver adds to cart: 30 instants × 8 campaigns × 3 periods
    assert fit.why == "learned from 720 conditions on 8 campaigns"
    assert fit.stretches == tuple(itertools.pairwise(KNOTS_H))  # ages in every stretch
    for age in KNOTS_H:
        assert share(fit.curve, age) == pytest.approx(seen_share(age), abs=0.025), age
    assert learning.records_read == len(INSTANTS) * 12 and learning.graph_calls > 0

    # a second learning reads the same matured days from the cache
    again = await learn(db, graph, sandbox)
    assert (again.graph_calls, again.fit) == (0, fit) and again.cache_hits > 0


async def test_the_curve_learned_from_purchases_and_roas_is_near_the_sandboxs(
    settings: Settings, db: Database, sandbox: SandboxAdmin, graph: GraphSession
) -> None:
    await sandbox.set_insights(attribution_lag={"enabled": True})
    metrics = ("actions.omni_purchase", "purchase_roas.omni_purchase")
    await run_at(settings, db, sandbox, _conditions(*metrics), INSTANTS)
    learning = await learn(db, graph, sandbox)
    fit = learning.fit
    print(f"\npurchases, ROAS: {fit.why}; residual {fit.residual:.4f}; {_figures(learning)}")
    assert fit.enough and fit.curve is not None, fit.why
    for age in KNOTS_H:  # whole purchases round the shares (module docstring)
        assert share(fit.curve, age) == pytest.approx(seen_share(age), abs=0.05), age

    # a busy account's records are read in slices over the lookback, each with its share
    history = InsightsHistory(InsightsHistoryStore(db), graph)
    some = await learn_lag(
        db,
        history,
        account_id=ACCOUNT,
        level="campaign",
        timezone=TIMEZONE,
        token=SANDBOX_TOKEN,
        now=LATER,
        lookback_days=14,
        max_records=112,
    )
    assert 0 < some.records_read <= 112 and some.graph_calls == 0
    assert some.fit.observations > 0


async def test_without_lag_the_learned_curve_is_one(
    settings: Settings, db: Database, sandbox: SandboxAdmin, graph: GraphSession
) -> None:
    metrics = ("actions.omni_add_to_cart", "purchase_roas.omni_purchase")
    await run_at(settings, db, sandbox, _conditions(*metrics), INSTANTS[::3])
    learning = await learn(db, graph, sandbox)
    assert learning.fit.enough and learning.fit.curve is not None, learning.fit.why
    assert all(s == pytest.approx(1.0, abs=1e-3) for _, s in learning.fit.curve)


async def test_too_few_records_give_matured_numbers_and_say_why(
    settings: Settings, db: Database, sandbox: SandboxAdmin, graph: GraphSession
) -> None:
    await sandbox.set_insights(attribution_lag={"enabled": True})
    yesterday = {"metric": "actions.omni_purchase", "period": "yesterday"}
    await run_at(
        settings, db, sandbox, [yesterday | {"operator": ">", "value": NEVER}], INSTANTS[:1]
    )
    fit = (await learn(db, graph, sandbox)).fit
    assert (fit.curve, fit.enough) == (None, False)
    assert 0 < fit.observations < 30
    assert fit.why == (
        f"only {fit.observations} usable conditions of its own (at least 30 needed):"
        " matured numbers used"
    )


async def test_an_account_without_records_costs_no_graph_call(
    db: Database, sandbox: SandboxAdmin, graph: GraphSession
) -> None:
    learning = await learn(db, graph, sandbox)
    assert (learning.records_read, learning.graph_calls, learning.fit.observations) == (0, 0, 0)
    assert learning.fit.why.startswith("only 0 usable conditions")


JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
CONDITION = st.fixed_dictionaries(
    {},
    optional={
        "metric": st.sampled_from(["actions.purchase", "purchase_roas.omni_purchase", "spend"])
        | st.text(max_size=30),
        "period": st.sampled_from(["yesterday", "last_7d", "today", "last_nd_999_1"])
        | st.text(max_size=20),
        "actual": JSON,
    },
)
RECORD = st.fixed_dictionaries(
    {},
    optional={
        "entity_id": st.sampled_from(["120000000000001", "a|b", ""]) | JSON,
        "created_at": st.datetimes(timezones=st.none() | st.just(UTC)) | JSON,
        "conditions": st.lists(CONDITION | JSON, max_size=4) | JSON,
    },
)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(RECORD, max_size=6))
@example(
    [{"entity_id": "120000000000001", "created_at": datetime(2026, 11, 20), "conditions": True}]
)
# an instant whose local day would be before year 1
@example([{"entity_id": "120000000000001", "created_at": datetime(1, 1, 1)}])
@example(
    [
        {
            "entity_id": "120000000000001",
            "created_at": datetime(1, 1, 2, 12, tzinfo=UTC),
            "conditions": [{"metric": "actions.purchase", "period": "last_7d", "actual": 1}],
        }
    ]
)
def test_any_stored_record_gives_conditions_or_nothing_never_an_error(
    records: list[dict[str, Any]],
) -> None:
    for need in _needs(records, ZoneInfo(TIMEZONE)):
        assert need.window[0] <= need.window[1] < need.at.astimezone(ZoneInfo(TIMEZONE)).date()
        assert re.fullmatch(r"[A-Za-z0-9_]{1,64}", need.entity_id) and need.at.tzinfo is not None


def test_the_sandbox_curve_has_its_points_on_the_knots() -> None:
    # so the piecewise-linear fit can be the sandbox's curve exactly
    assert {age for age, _ in DEFAULT_CURVE} <= set(KNOTS_H)
