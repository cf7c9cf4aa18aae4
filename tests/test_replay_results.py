"""``results`` and ``cost_per_result`` in a backtest's replay, pure (no servers).

For random days of Graph's ``results`` lists (one indicator per entity, entries with and
without ``values``, people-counting ``reach``, malformed entries), the row the replay
rebuilds for an instant (:class:`~ruleengine.rules.replay.rows.RowBuilder`) reads what a
live evaluation of Meta's row over the same days would read — the sum of the indicator's
counts, and spend ÷ that sum — and the vectorised candidate masks
(:class:`~ruleengine.rules.replay.masks.MaskBuilder`) hold the same numbers at every
instant, so no instant a condition passes at is left out of the candidates.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.rules.evaluate import insight_value
from ruleengine.rules.language.catalog import resolve_metric
from ruleengine.rules.language.periods import preset_range
from ruleengine.rules.replay.masks import MaskBuilder
from ruleengine.rules.replay.rows import RawHistory, RowBuilder, history_plan

TZ = ZoneInfo("America/New_York")
FIRST = date(2026, 11, 1)
DAYS = 14
PURCHASE = "actions:offsite_conversion.fb_pixel_purchase"
INDICATORS = [PURCHASE, "actions:link_click", "actions:onsite_conversion.lead_grouped", "reach"]
PERIODS = ["yesterday", "last_3d", "last_7d", "last_14d"]
FETCHED = datetime(2026, 11, 20, tzinfo=UTC)

counts = st.one_of(st.integers(0, 40), st.floats(0, 40, allow_nan=False).map(lambda v: f"{v:.2f}"))


def entry(indicator: str, count: Any) -> dict[str, Any]:
    """One ``results`` entry as Meta lists it: no ``values`` where nothing resulted."""
    if count in (0, "0.00"):
        return {"indicator": indicator}
    return {
        "indicator": indicator,
        "values": [{"value": count, "attribution_windows": ["default"]}],
    }


@st.composite
def entity_days(draw: st.DrawFn) -> dict[date, dict[str, Any]]:
    """An entity's days: spend, and results of its one indicator (some days missing)."""
    indicator = draw(st.sampled_from(INDICATORS))
    days: dict[date, dict[str, Any]] = {}
    for n in range(DAYS):
        if draw(st.booleans()) and n % 3:  # no delivery that day: no row
            continue
        values: dict[str, Any] = {"spend": f"{draw(st.floats(0, 500)):.2f}"}
        kind = draw(st.sampled_from(["entry", "entry", "entry", "none", "junk"]))
        if kind == "entry":
            values["results"] = [entry(indicator, draw(counts))]
        elif kind == "junk":
            values["results"] = draw(st.sampled_from([None, "x", [1, {"values": []}], [{}]]))
        days[FIRST + timedelta(days=n)] = values
    return days


def meta_row(days: dict[date, dict[str, Any]], span: tuple[date, date]) -> dict[str, Any] | None:
    """What Meta would answer for ``span``: spend summed, results summed per indicator."""
    inside = [v for d, v in days.items() if span[0] <= d <= span[1]]
    if not inside:
        return None
    spend = sum(float(v["spend"]) for v in inside)
    total: dict[str, float] = {}
    for values in inside:
        items = values.get("results")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("indicator"), str):
                found = item.get("values") or []
                total[item["indicator"]] = total.get(item["indicator"], 0.0) + sum(
                    float(v["value"]) for v in found
                )
    if any(ind == "reach" for ind in total):  # people do not add up over days: no data here
        return {"spend": spend}
    row: dict[str, Any] = {"spend": spend}
    if total:
        ((indicator, count),) = total.items()
        row["results"] = [entry(indicator, count)] if count else [{"indicator": indicator}]
        row["cost_per_result"] = (
            [{"indicator": indicator, "values": [{"value": spend / count}]}]
            if count
            else [{"indicator": indicator}]
        )
    return row


@settings(max_examples=60, deadline=None)
@given(
    entities=st.lists(entity_days(), min_size=1, max_size=4),
    metric=st.sampled_from(["results", "cost_per_result"]),
    period=st.sampled_from(PERIODS),
)
def test_results_rows_and_masks_read_what_meta_would(
    entities: list[dict[date, dict[str, Any]]], metric: str, period: str
) -> None:
    ids = [f"ad{n}" for n in range(len(entities))]
    daily = {
        i: {d: (v, FETCHED) for d, v in days.items()} for i, days in zip(ids, entities, strict=True)
    }
    history = RawHistory(daily, {})
    instants = [
        datetime.combine(FIRST + timedelta(days=n), datetime.min.time(), TZ).replace(hour=10)
        for n in range(1, DAYS + 1)
    ]
    spec = resolve_metric(metric)
    plan = history_plan([(period, spec)], today=instants[-1].astimezone(TZ).date())
    masks = MaskBuilder(ids, history, [t.astimezone(UTC) for t in instants], TZ)
    grid = masks.values(spec, period)
    assert grid is not None  # one indicator per entity: no instant needs evaluating alone
    for row_n, (entity_id, days) in enumerate(zip(ids, entities, strict=True)):
        builder = RowBuilder(history.entity(entity_id), plan.needs, TZ)
        for col, at in enumerate(instants):
            span = preset_range(period, at.date())
            assert span is not None
            expected = insight_value(meta_row(days, span), spec)
            rebuilt = insight_value(builder.rows(at.astimezone(UTC)).get(period), spec)
            masked = grid[row_n, col]
            if expected is None:
                assert rebuilt is None and math.isnan(masked)
            else:
                assert rebuilt == pytest.approx(expected, rel=1e-9, abs=1e-9)
                assert masked == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_an_ad_set_whose_goal_changed_is_evaluated_at_each_instant() -> None:
    """Two indicators in one entity's days: no one result over a period holding both (as
    Meta's row over ad sets with different goals), so the masks leave it to the verdicts."""
    days = {
        FIRST: ({"spend": "10", "results": [entry(PURCHASE, 2)]}, FETCHED),
        FIRST + timedelta(days=1): (
            {"spend": "10", "results": [entry("actions:link_click", 9)]},
            FETCHED,
        ),
    }
    history = RawHistory({"ad": days}, {})
    at = datetime.combine(FIRST + timedelta(days=2), datetime.min.time(), TZ).replace(hour=10)
    spec = resolve_metric("results")
    masks = MaskBuilder(["ad"], history, [at.astimezone(UTC)], TZ)
    assert masks.values(spec, "last_3d") is None
    plan = history_plan([("last_3d", spec)], today=at.date())
    row = RowBuilder(history.entity("ad"), plan.needs, TZ).rows(at.astimezone(UTC))["last_3d"]
    assert insight_value(row, spec) is None
    assert {e["indicator"] for e in row["results"]} == {PURCHASE, "actions:link_click"}
    yesterday = RowBuilder(history.entity("ad"), {"yesterday": plan.needs["last_3d"]}, TZ)
    assert insight_value(yesterday.rows(at.astimezone(UTC))["yesterday"], spec) == 9


def test_a_ranking_is_said_to_have_no_day_by_day_history() -> None:
    plan = history_plan([("last_7d", resolve_metric("quality_ranking"))], today=FIRST)
    assert plan.fields == ()
    assert "ranking" in plan.unsupported["quality_ranking"]
