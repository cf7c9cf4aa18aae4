"""The attribution-lag curve learned from what conditions saw, without a server."""

from __future__ import annotations

import itertools
import math
import random
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.rules.replay.lag import (
    KNOTS_H,
    Curve,
    LagDay,
    LagMetric,
    LagObservation,
    day_age_h,
    fit_curve,
    lag_metric,
    lag_window,
    matured,
    observation_of,
    share,
    size_weights,
)

SANDBOX_CURVE: Curve = ((0.0, 0.5), (24.0, 0.8), (72.0, 0.95), (168.0, 1.0))
NEW_YORK = ZoneInfo("America/New_York")


def _valid(curve: Curve) -> bool:
    ages, shares = [a for a, _ in curve], [s for _, s in curve]
    return (
        all(math.isfinite(v) for v in ages + shares)
        and all(b > a for a, b in itertools.pairwise(ages))
        and all(0 <= s <= 1 for s in shares)
        and all(b >= a for a, b in itertools.pairwise(shares))
        and shares[-1] == 1.0
    )


def _observations(curve: Curve, count: int, rng: random.Random) -> list[LagObservation]:
    """Conditions over windows of 1 to 7 days seen at instants up to 160 h after their first day."""
    found = []
    for _ in range(count):
        first_age = rng.uniform(-6, 160)
        days = rng.randint(1, 7)
        parts = tuple((first_age + 24 * d, rng.uniform(1, 50)) for d in range(days))
        seen = math.fsum(m * share(curve, age) for age, m in parts)
        found.append(LagObservation(seen, parts))
    return found


def test_share_is_linear_between_points_first_share_before_and_one_after() -> None:
    ages = (-5, 0, 12, 24, 48, 120, 168, 1000, math.nan)
    assert [share(SANDBOX_CURVE, a) for a in ages] == pytest.approx(
        [0.5, 0.5, 0.65, 0.8, 0.875, 0.975, 1.0, 1.0, 0.5]
    )
    assert share((), 3) == 1.0


def test_the_sandbox_curve_is_learned_back_from_exact_observations() -> None:
    fit = fit_curve(_observations(SANDBOX_CURVE, 200, random.Random(1)), sources="9 campaigns")
    assert fit.enough and fit.curve is not None
    assert fit.why == "learned from 200 conditions on 9 campaigns"
    for age, expected in zip(KNOTS_H, (0.5, 0.8, 0.875, 0.95, 0.975, 1.0), strict=True):
        assert share(fit.curve, age) == pytest.approx(expected, abs=0.01)
    assert fit.residual is not None and fit.residual < 0.01


@st.composite
def curves_on_knots(draw: st.DrawFn) -> Curve:
    """A valid curve whose points are some of the fit's knots (0 and 168 always)."""
    inner = draw(st.lists(st.sampled_from(KNOTS_H[1:-1]), unique=True))
    ages = sorted({0.0, 168.0, *inner})
    shares = sorted(draw(st.lists(st.floats(0, 1), min_size=len(ages), max_size=len(ages))))
    shares[-1] = 1.0
    return tuple(zip(ages, shares, strict=True))


@settings(max_examples=60, deadline=None)
@given(curves_on_knots(), st.integers(0, 2**32))
def test_a_random_curve_on_the_knots_is_fitted_back(curve: Curve, seed: int) -> None:
    fit = fit_curve(_observations(curve, 120, random.Random(seed)))
    assert fit.enough and fit.curve is not None and _valid(fit.curve)
    for age in KNOTS_H:
        assert share(fit.curve, age) == pytest.approx(share(curve, age), abs=0.02), age


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e308, -1e308, 5e-324]),
    st.integers(-1000, 1000),
)
HOSTILE = st.builds(
    LagObservation,
    NUMBERS,
    st.lists(st.tuples(NUMBERS, NUMBERS), max_size=8).map(tuple),
    NUMBERS,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(HOSTILE, max_size=60), st.integers(0, 40))
def test_hostile_observations_never_crash_nor_give_an_invalid_curve(
    observations: list[LagObservation], minimum: int
) -> None:
    fit = fit_curve(observations, min_observations=minimum)
    assert fit.observations <= len(observations)
    assert (fit.curve is not None) == fit.enough
    assert fit.why
    if fit.curve is not None:
        assert _valid(fit.curve)
        assert fit.residual is not None and math.isfinite(fit.residual)


@settings(max_examples=100, deadline=None)
@given(st.lists(HOSTILE, max_size=30), st.integers(0, 2**32))
def test_hostile_observations_among_good_ones_keep_the_curve_valid(
    hostile: list[LagObservation], seed: int
) -> None:
    good = _observations(SANDBOX_CURVE, 60, random.Random(seed))
    fit = fit_curve([*good, *hostile])
    assert fit.enough and fit.curve is not None and _valid(fit.curve)


def test_too_few_conditions_give_no_curve_and_say_so() -> None:
    fit = fit_curve(_observations(SANDBOX_CURVE, 4, random.Random(2)))
    assert (fit.curve, fit.enough, fit.observations) == (None, False, 4)
    assert fit.why == (
        "only 4 usable conditions of its own (at least 30 needed): matured numbers used"
    )
    assert fit_curve([]).why.startswith("only 0 usable conditions")


def test_ages_in_one_stretch_only_give_no_curve() -> None:
    rng = random.Random(3)
    young = [
        LagObservation(m * share(SANDBOX_CURVE, a), ((a, m),))
        for a, m in ((rng.uniform(1, 23), rng.uniform(1, 9)) for _ in range(50))
    ]
    fit = fit_curve(young)
    assert (fit.curve, fit.enough, fit.stretches) == (None, False, ((0.0, 24.0),))
    assert "cover only 0–24 h of the curve" in fit.why


def test_no_lag_gives_a_curve_of_one() -> None:
    fit = fit_curve(_observations(((0.0, 1.0), (168.0, 1.0)), 80, random.Random(4)))
    assert fit.curve is not None
    assert all(s == pytest.approx(1.0, abs=1e-6) for _, s in fit.curve)


def test_noisy_observations_still_give_a_valid_curve_near_the_true_one() -> None:
    rng = random.Random(5)
    noisy = [
        LagObservation(max(0.0, o.seen * rng.uniform(0.7, 1.3)), o.parts)
        for o in _observations(SANDBOX_CURVE, 1000, rng)
    ]  # ±30 % on each condition: far noisier than rounding conversions to whole ones
    fit = fit_curve(noisy)
    assert fit.curve is not None and _valid(fit.curve)
    assert all(abs(share(fit.curve, a) - share(SANDBOX_CURVE, a)) < 0.1 for a in KNOTS_H)


def test_bad_knots_are_refused() -> None:
    for knots in ((), (0,), (0, 24, 24), (-1, 24), (0, math.inf)):
        with pytest.raises(ValueError, match="knots"):
            fit_curve([], knots_h=knots)


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("actions.omni_purchase", LagMetric("count", "actions", "omni_purchase")),
        ("conversions.lead", LagMetric("count", "conversions", "lead")),
        ("action_values.purchase", LagMetric("value", "action_values", "purchase")),
        ("conversion_values.x", LagMetric("value", "conversion_values", "x")),
        ("purchase_roas.omni_purchase", LagMetric("roas", "action_values", "omni_purchase")),
        (
            "website_purchase_roas.offsite_conversion.fb_pixel_purchase",
            LagMetric("roas", "action_values", "offsite_conversion.fb_pixel_purchase"),
        ),
        (
            "mobile_app_purchase_roas.app_custom_event.fb_mobile_purchase",
            LagMetric("roas", "action_values", "app_custom_event.fb_mobile_purchase"),
        ),
        ("cost_per_action_type.lead", LagMetric("cost", "actions", "lead")),
        ("actions.link_click", None),
        ("spend", None),
        ("ctr", None),
        ("custom:roas", None),
        ("actions.", None),
    ],
)
def test_which_metrics_are_conversion_metrics(metric: str, expected: object) -> None:
    found = lag_metric(metric)
    assert found == expected
    if found is not None:
        assert found.fields == (
            (found.field, "spend") if found.kind in ("roas", "cost") else (found.field,)
        )


def test_windows_must_end_before_the_records_date() -> None:
    today = date(2026, 11, 20)
    assert lag_window("yesterday", today) == (date(2026, 11, 19), date(2026, 11, 19))
    assert lag_window("last_7d", today) == (date(2026, 11, 13), date(2026, 11, 19))
    assert lag_window("last_nd_14_8", today) == (date(2026, 11, 6), date(2026, 11, 12))
    for period in ("today", "this_month", "last_7_days", "maximum", "lifetime", "nonsense"):
        assert lag_window(period, today) is None


def test_observations_of_each_kind() -> None:
    days = (LagDay(4.0, 10.0, 50.0), LagDay(28.0, 20.0, 30.0))
    parts = ((4.0, 10.0), (28.0, 20.0))
    count = LagMetric("count", "actions", "purchase")
    assert observation_of(count, 17, days) == LagObservation(17, parts)
    roas = LagMetric("roas", "action_values", "purchase")
    assert observation_of(roas, 1.5, days) == LagObservation(120.0, parts)  # 1.5 × 80 spent
    cost = LagMetric("cost", "actions", "purchase")
    assert observation_of(cost, 4.0, days) == LagObservation(20.0, parts)  # 80 spent / 4
    assert observation_of(cost, 0.0, days) is None
    assert observation_of(count, None, days) is None
    assert observation_of(count, math.nan, days) is None
    assert observation_of(count, 3, ()) is None


def test_ages_and_maturity_count_from_the_local_midnight_after_the_day() -> None:
    day = date(2026, 11, 20)
    midnight = datetime(2026, 11, 21, 5, 0, tzinfo=UTC)  # New York, EST
    assert day_age_h(day, NEW_YORK, midnight + timedelta(hours=10)) == 10
    assert day_age_h(day, NEW_YORK, midnight - timedelta(hours=3)) == -3
    assert matured(day, midnight + timedelta(hours=168), NEW_YORK)
    assert not matured(day, midnight + timedelta(hours=167), NEW_YORK)


def test_windows_weigh_by_their_size_within_their_metric() -> None:
    small = LagObservation(1, ((3.0, 2.0),))
    big = LagObservation(10, ((3.0, 20.0),))
    money = LagObservation(500, ((3.0, 1000.0),))
    empty = LagObservation(0, ((3.0, 0.0),))
    weighted = size_weights([small, big, money, empty], ["count", "count", "value", "count"])
    assert [o.weight for o in weighted] == pytest.approx([2 / 11, 20 / 11, 1.0, 1.0])


def test_a_heavier_observation_pulls_the_curve_its_way() -> None:
    anchors = [LagObservation(9, ((60.0, 10.0),))] * 10  # 0.9 at 60 h: a second stretch

    def at_12h(weight_low: float, weight_high: float) -> float:
        low = LagObservation(5, ((12.0, 10.0),), weight=weight_low)  # saw a share of 0.5
        high = LagObservation(8, ((12.0, 10.0),), weight=weight_high)  # saw 0.8
        fit = fit_curve([*anchors, *[low, high] * 10], min_observations=1, knots_h=(0, 24, 168))
        assert fit.curve is not None
        return share(fit.curve, 12)

    assert at_12h(1, 1) == pytest.approx(0.65, abs=0.01)
    assert at_12h(1, 3) == pytest.approx(0.725, abs=0.01)  # (0.5 + 3 × 0.8) / 4
    assert at_12h(3, 1) == pytest.approx(0.575, abs=0.01)
