"""Properties of the attribution-lag curve and of a day as seen before it matured, without a
server."""

from __future__ import annotations

import itertools
import math
import random
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from graph_sandbox.attribution_lag import (
    DEFAULT_CURVE,
    AttributionLag,
    Curve,
    as_seen,
    day_age_h,
    seen_share,
)
from graph_sandbox.delivery import Archetype, Totals, day_totals
from graph_sandbox.scenarios import make_profile

CONVERSIONS = ("add_to_cart", "initiate_checkout", "purchases", "purchase_value_cents", "leads")
BOOKED = tuple(name for name in Totals._fields if name not in CONVERSIONS)
AGES = st.floats(min_value=-48, max_value=400, allow_nan=False)
DAYS = st.integers(date(2026, 6, 1).toordinal(), date(2027, 6, 1).toordinal())


@st.composite
def curves(draw: st.DrawFn) -> Curve:
    """A valid curve: ages from 0 increasing, shares not decreasing up to 1."""
    steps = draw(st.lists(st.floats(0.5, 100), max_size=5))
    ages = list(itertools.accumulate(steps, initial=0.0))
    shares = sorted(draw(st.lists(st.floats(0, 1), min_size=len(ages), max_size=len(ages))))
    shares[-1] = 1.0
    return tuple(zip(ages, shares, strict=True))


@st.composite
def matured_days(draw: st.DrawFn) -> Totals:
    archetype = draw(st.sampled_from([a for a in Archetype if a is not Archetype.NO_DELIVERY]))
    rng = random.Random(draw(st.integers(0, 10_000)))
    profile = make_profile(rng, archetype, draw(st.integers(500, 500_000)))
    return day_totals(profile, draw(st.integers(0, 100)), "120000000000001", draw(DAYS))


def test_the_default_curve_is_the_documented_one() -> None:
    assert DEFAULT_CURVE == ((0.0, 0.5), (24.0, 0.8), (72.0, 0.95), (168.0, 1.0))
    assert [seen_share(age) for age in (-5, 0, 12, 24, 48, 120, 168, 1000)] == pytest.approx(
        [0.5, 0.5, 0.65, 0.8, 0.875, 0.975, 1.0, 1.0]
    )
    assert AttributionLag().enabled is False
    assert AttributionLag().horizon_h == 168


@given(matured_days(), AGES, AGES, st.one_of(st.just(DEFAULT_CURVE), curves()))
def test_seen_never_exceeds_matured_and_grows_with_age(
    matured: Totals, age1: float, age2: float, curve: Curve
) -> None:
    young, old = sorted((age1, age2))
    seen_young = as_seen(matured, seen_share(young, curve))
    seen_old = as_seen(matured, seen_share(old, curve))
    for name in CONVERSIONS:
        assert getattr(seen_young, name) <= getattr(seen_old, name) <= getattr(matured, name)
    for name in BOOKED:
        assert getattr(seen_young, name) == getattr(matured, name)
    if seen_old.purchases:
        # value follows the purchases: the same value per purchase as the matured day
        assert seen_old.purchase_value_cents * matured.purchases == (
            matured.purchase_value_cents * seen_old.purchases
        )
    assert as_seen(matured, seen_share(curve[-1][0], curve)) == matured


@given(curves(), AGES, AGES)
def test_a_valid_curve_is_taken_and_its_share_is_monotone_from_first_to_one(
    curve: Curve, age1: float, age2: float
) -> None:
    lag = AttributionLag.model_validate({"enabled": True, "curve": [list(p) for p in curve]})
    assert lag.curve == curve
    young, old = sorted((age1, age2))
    assert curve[0][1] <= seen_share(young, curve) <= seen_share(old, curve) <= 1.0
    assert seen_share(lag.horizon_h, curve) == 1.0
    assert seen_share(0, curve) == curve[0][1]


POINT = st.tuples(
    st.one_of(st.floats(), st.integers(-10, 200)), st.one_of(st.floats(), st.integers(-1, 2))
)


@given(st.lists(POINT, max_size=6))
def test_any_curve_is_taken_only_if_it_grows_from_age_0_to_a_share_of_1(
    points: list[tuple[float, float]],
) -> None:
    ages, shares = [a for a, _ in points], [s for _, s in points]
    valid = (
        bool(points)
        and all(math.isfinite(v) for v in ages + shares)
        and ages[0] == 0
        and all(b > a for a, b in itertools.pairwise(ages))
        and all(0 <= s <= 1 for s in shares)
        and all(b >= a for a, b in itertools.pairwise(shares))
        and shares[-1] == 1
    )
    if valid:
        lag = AttributionLag(curve=tuple(points))
        assert seen_share(lag.horizon_h, lag.curve) == 1.0
    else:
        with pytest.raises(ValidationError):
            AttributionLag(curve=tuple(points))


@given(DAYS, st.integers(-36 * 3600, 30 * 86400))
def test_a_days_age_counts_from_the_local_midnight_after_it(ordinal: int, seconds: int) -> None:
    tz = ZoneInfo("America/New_York")
    day = date.fromordinal(ordinal)
    midnight = datetime.combine(day + timedelta(days=1), datetime.min.time(), tz)
    now = midnight.astimezone(UTC) + timedelta(seconds=seconds)
    assert day_age_h(day, tz, now) == pytest.approx(seconds / 3600)
