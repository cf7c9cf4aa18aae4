"""Properties of sharing delivery between parts (ads, breakdown cells), without a server."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_sandbox.ads import (
    CLICKS_RANGE,
    CONVERSIONS_RANGE,
    DELIVERY_RANGE,
    AdFactors,
    rankings,
    seeded_factors,
    weights,
)
from graph_sandbox.delivery import Archetype, Totals, add, day_totals
from graph_sandbox.scenarios import make_profile
from graph_sandbox.split import MAX_WEIGHT, Weights, apportion, split

WEIGHTS = st.lists(st.integers(0, MAX_WEIGHT - 1), min_size=1, max_size=20).filter(any)
TOTALS = st.integers(0, 10**7)


@given(TOTALS, WEIGHTS)
def test_shares_add_up_and_never_fall_below_their_quota(total: int, weights: list[int]) -> None:
    shares = apportion(total, weights)
    assert sum(shares) == total
    for share, weight in zip(shares, weights, strict=True):
        assert share >= total * weight // sum(weights)
        assert weight or not share


@given(TOTALS, st.integers(1, 5000), WEIGHTS)
def test_a_bigger_total_never_gives_a_part_less(total: int, more: int, weights: list[int]) -> None:
    # What lets an ad's hour (its share by the hour's end less by its start) never be negative.
    before, after = apportion(total, weights), apportion(total + more, weights)
    assert all(b <= a for b, a in zip(before, after, strict=True))


@given(st.integers(2**28, 2**40), st.lists(st.integers(1, 100), min_size=2, max_size=5))
def test_big_totals_are_shared_exactly_too(total: int, weights: list[int]) -> None:
    assert sum(apportion(total, weights)) == total


def test_apportion_refuses_what_it_cannot_share() -> None:
    with pytest.raises(ValueError, match="positive weight"):
        apportion(5, [0, 0])
    with pytest.raises(ValueError, match="non-negative"):
        apportion(-1, [1])
    assert apportion(0, [0, 0]) == [0, 0]


def _day(seed: int, archetype: Archetype, ordinal: int) -> Totals:
    profile = make_profile(random.Random(seed), archetype, 20000)
    return day_totals(profile, seed, f"adset-{seed}", ordinal)


@given(
    st.integers(0, 1000),
    st.sampled_from(list(Archetype)),
    st.integers(738000, 740000),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
)
def test_ads_of_a_day_add_up_to_it_and_keep_its_funnel(
    seed: int, archetype: Archetype, ordinal: int, ad_seeds: list[int]
) -> None:
    day = _day(seed, archetype, ordinal)
    factors = [seeded_factors(seed, str(ad)) for ad in ad_seeds]
    parts = split(day, weights(factors))
    total = Totals()
    for part in parts:
        total = add(total, part)
        assert part.link_clicks <= part.clicks
        assert part.landing_page_views <= part.link_clicks
        assert part.purchases <= part.add_to_cart
        assert part.purchase_value_cents == (
            part.purchases * (day.purchase_value_cents // day.purchases) if day.purchases else 0
        )
    assert total == day


def test_a_part_without_weight_gets_nothing() -> None:
    day = _day(1, Archetype.WINNER, 739000)
    shared = Weights((3, 5, 7), (3, 5, 7), (3, 5, 7)).only([True, False, True])
    parts = split(day, shared)
    assert parts[1] == Totals()
    assert add(parts[0], parts[2]) == day


@given(st.integers(0, 10**6), st.integers(0, 100_000))
def test_rankings_are_metas_values_and_unknown_below_500_impressions(
    seed: int, impressions: int
) -> None:
    ranked = rankings(seeded_factors(seed, "ad"), impressions)
    assert set(ranked) == {"quality_ranking", "engagement_rate_ranking", "conversion_rate_ranking"}
    meta = {"BELOW_AVERAGE_10", "BELOW_AVERAGE_20", "BELOW_AVERAGE_35", "AVERAGE", "ABOVE_AVERAGE"}
    if impressions < 500:
        assert set(ranked.values()) == {"UNKNOWN"}
    else:
        assert set(ranked.values()) <= meta


def test_rankings_follow_an_ads_rates() -> None:
    worst = AdFactors(DELIVERY_RANGE[0], CLICKS_RANGE[0], CONVERSIONS_RANGE[0], 0.0)
    best = AdFactors(DELIVERY_RANGE[1], CLICKS_RANGE[1], CONVERSIONS_RANGE[1], 0.99)
    assert set(rankings(worst, 1000).values()) == {"BELOW_AVERAGE_10"}
    assert set(rankings(best, 1000).values()) == {"ABOVE_AVERAGE"}
    with pytest.raises(ValueError, match="clicks"):
        AdFactors(100, 200, 100, 0.5)
