"""The impact measure, pure (docs/impact.md): entities on their account's own hours, each
counted once at its first decision, every currency apart, Welch's interval, and "not enough
data yet" or "nothing to measure" rather than a claim about nothing."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.impact.intervals import Stratum, t_cdf, t_quantile, welch_interval
from ruleengine.rules.impact.measure import (
    MIN_ENTITIES,
    Decision,
    Hourly,
    Series,
    hour_start,
    measure,
)
from ruleengine.rules.language.money import format_money

T0 = datetime(2026, 11, 20, 14, 40, tzinfo=UTC)
LATER = T0 + timedelta(days=3)


def series(
    effect_per_hour: float,
    *,
    zone: str = "UTC",
    currency: str = "USD",
    rng: random.Random | None = None,
    hours: int = 60,
    scale: float = 1.0,
) -> Series:
    """An entity's hours on its zone's grid around T0: a profit of +1/h with some noise
    (× ``scale``), and ``effect_per_hour`` more in each hour after T0's."""
    rng = rng or random.Random(0)
    start = hour_start(T0, zone)
    by_hour = {}
    for h in range(-hours, hours):
        profit = (1.0 + (effect_per_hour if h > 0 else 0.0) + rng.gauss(0, 0.5)) * scale
        by_hour[start + timedelta(hours=h)] = Hourly(
            spend=10 * scale, purchases=1, revenue=10 * scale + profit
        )
    return Series(currency, zone, by_hour, start - timedelta(days=5), LATER)


def world(
    effect: float, *, acted: int, held: int, zone: str = "UTC", currency: str = "USD",
    scale: float = 1.0, prefix: str = "e", rng: random.Random | None = None,
) -> tuple[list[Decision], dict[str, Series]]:  # fmt: skip
    """``acted`` entities that earn ``effect`` more per hour after T0, ``held`` that do not."""
    rng = rng or random.Random(0)
    decisions, hours = [], {}
    for i in range(acted + held):
        entity, is_held = f"{prefix}{i}", i >= acted
        hours[entity] = series(
            0 if is_held else effect, zone=zone, currency=currency,
            rng=rng, scale=scale,
        )  # fmt: skip
        decisions.append(Decision(entity, T0, is_held))
    return decisions, hours


def test_the_effect_is_per_entity_acted_minus_held_out_with_an_interval_around_it() -> None:
    decisions, hours = world(2.0, acted=12, held=6)
    impact = measure("t", decisions, hours, window="24h", now=LATER, measured=True)
    (usd,) = impact.currencies
    assert (impact.counts.acted_entities, impact.counts.held_out_entities) == (12, 6)
    profit = usd.effects["profit"]
    assert profit.low <= 48 <= profit.high and profit.effect == pytest.approx(48, abs=3)
    assert (profit.acted_entities, profit.held_out_entities) == (12, 6)
    total = usd.total_profit_effect
    assert total is not None and total[0] == pytest.approx(profit.effect * 12, abs=0.01)
    assert len(usd.chart["acted"]) == 24 and (usd.chart["acted"][0] or 0) > 1.5
    assert impact.enough and usd.note.startswith("effect measured")


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "Asia/Kathmandu", "Australia/Adelaide"])
def test_half_and_quarter_hour_zones_are_read_on_their_own_hours(zone: str) -> None:
    """Kolkata's 10:00 is 04:30 UTC, Kathmandu's 04:15: the windows start where the numbers
    are keyed, and both groups deliver (not "0, interval [0, 0]")."""
    decisions, hours = world(2.0, acted=8, held=8, zone=zone)
    assert all(h.minute in (15, 30) for h in hours["e0"].hours)
    (part,) = measure("t", decisions, hours, window="24h", now=LATER, measured=True).currencies
    profit = part.effects["profit"]
    assert profit.acted_mean == pytest.approx(48, abs=5) and profit.held_out_mean != 0
    assert profit.low < 48 < profit.high


def test_hour_start_is_the_accounts_local_hour() -> None:
    at = datetime(2026, 11, 20, 5, 10, tzinfo=UTC)  # 10:40 in Kolkata, 10:55 in Kathmandu
    assert hour_start(at, "Asia/Kolkata") == datetime(2026, 11, 20, 4, 30, tzinfo=UTC)
    assert hour_start(at, "Asia/Kathmandu") == datetime(2026, 11, 20, 4, 15, tzinfo=UTC)
    assert hour_start(at, "America/St_Johns") == datetime(2026, 11, 20, 4, 30, tzinfo=UTC)
    assert hour_start(at, "UTC") == datetime(2026, 11, 20, 5, 0, tzinfo=UTC)


def test_dollars_and_yen_are_measured_apart_and_never_added() -> None:
    usd, usd_hours = world(2.0, acted=8, held=8, currency="USD")
    jpy, jpy_hours = world(2.0, acted=8, held=8, currency="JPY", scale=150, prefix="y")
    impact = measure("t", usd + jpy, usd_hours | jpy_hours, window="24h", now=LATER, measured=True)
    parts = {c.currency: c for c in impact.currencies}
    assert sorted(parts) == ["JPY", "USD"]
    assert parts["USD"].effects["profit"].low <= 48 <= parts["USD"].effects["profit"].high
    assert parts["JPY"].effects["profit"].low <= 48 * 150 <= parts["JPY"].effects["profit"].high
    assert parts["JPY"].effects["profit"].acted_entities == 8
    assert impact.counts.acted_entities == 16  # counts add up; money does not
    assert "never added up" in impact.note


def test_hourly_decisions_inside_a_24h_window_count_each_entity_once() -> None:
    """Every hourly run re-decides (no cooldown): 24 decisions per entity, one window each."""
    decisions, hours = world(2.0, acted=6, held=6)
    again = [
        Decision(d.entity_id, d.at + timedelta(hours=h), d.held_out)
        for d in decisions
        for h in range(1, 24)
    ]
    impact = measure("t", decisions + again, hours, window="24h", now=LATER, measured=True)
    assert (impact.counts.acted, impact.counts.acted_entities) == (6 * 24, 6)
    (usd,) = impact.currencies
    profit = usd.effects["profit"]
    assert (profit.acted_entities, profit.held_out_entities) == (6, 6)
    assert usd.total_profit_effect is not None
    assert usd.total_profit_effect[0] == pytest.approx(profit.effect * 6, abs=0.01)


def test_proposals_are_acted_on_whatever_became_of_them_and_undos_are_counted() -> None:
    decisions, hours = world(2.0, acted=9, held=6)
    fates = ["applied", "rejected", "expired"]
    decisions = [
        d
        if d.held_out
        else Decision(d.entity_id, d.at, False, approval=fates[i % 3], undone=i == 0)
        for i, d in enumerate(decisions)
    ]
    impact = measure("t", decisions, hours, window="24h", now=LATER, measured=True)
    counts = impact.counts
    assert counts.approvals == {"applied": 3, "expired": 3, "rejected": 3}
    assert (counts.acted_entities, counts.undone) == (9, 1)
    assert impact.currencies[0].effects["profit"].acted_entities == 9


def test_a_changed_salt_keeps_each_entity_in_its_first_group_within_its_setting() -> None:
    decisions, hours = world(2.0, acted=6, held=6)
    # under the old salt some entities were held out; the new one acts on them
    flipped = [
        Decision(d.entity_id, d.at + timedelta(hours=1), not d.held_out, "b") for d in decisions[:4]
    ]
    first = [Decision(d.entity_id, d.at, d.held_out, "a") for d in decisions]
    impact = measure("t", first + flipped, hours, window="24h", now=LATER, measured=True)
    assert impact.counts.switched_groups == 4
    assert (impact.counts.acted_entities, impact.counts.held_out_entities) == (6, 6)


def test_settings_are_strata_and_a_stratum_without_both_groups_is_not_compared() -> None:
    a, a_hours = world(2.0, acted=6, held=6, prefix="a")
    b, b_hours = world(2.0, acted=6, held=0, prefix="b")  # decided with no holdout at all
    tagged = [Decision(d.entity_id, d.at, d.held_out, "30 %") for d in a] + [
        Decision(d.entity_id, d.at, d.held_out, "none") for d in b
    ]
    (usd,) = measure(
        "t", tagged, a_hours | b_hours, window="24h", now=LATER, measured=True
    ).currencies
    assert usd.acted_complete == 12
    assert usd.effects["profit"].acted_entities == 6  # only the randomised ones


def test_a_window_reaching_outside_the_hours_read_is_not_counted_as_nothing() -> None:
    decisions, hours = world(2.0, acted=6, held=6)
    late = {
        e: Series(s.currency, s.timezone, s.hours, T0 - timedelta(hours=2), s.until)
        for e, s in hours.items()
    }
    (usd,) = measure("t", decisions, late, window="24h", now=LATER, measured=True).currencies
    assert (usd.outside_history, usd.acted_complete, usd.effects) == (12, 0, {})
    assert usd.note.startswith("not enough data yet")


def test_below_the_minimum_or_before_the_window_ends_there_is_not_enough_data() -> None:
    decisions, hours = world(2.0, acted=12, held=MIN_ENTITIES - 1)
    impact = measure("t", decisions, hours, window="24h", now=LATER, measured=True)
    assert not impact.enough and "not enough data yet" in impact.note
    decisions, hours = world(2.0, acted=12, held=6)
    early = measure(
        "t", decisions, hours, window="24h", now=T0 + timedelta(hours=20), measured=True
    )
    assert (early.currencies[0].acted_complete, early.enough) == (0, False)


def test_no_delivery_in_either_group_is_nothing_to_measure_not_an_effect_of_zero() -> None:
    decisions, hours = world(2.0, acted=8, held=8)
    empty = {e: Series(s.currency, s.timezone, {}, s.since, s.until) for e, s in hours.items()}
    impact = measure("t", decisions, empty, window="24h", now=LATER, measured=True)
    (usd,) = impact.currencies
    assert usd.effects == {} and not impact.enough
    assert usd.note.startswith("nothing to measure")


def test_without_a_holdout_the_effect_is_not_measured() -> None:
    decisions, hours = world(2.0, acted=12, held=0)
    impact = measure("t", decisions, hours, window="24h", now=LATER, measured=False)
    assert (impact.counts.acted, impact.currencies) == (12, [])
    assert impact.note.startswith("not measured")


def test_an_entity_whose_delivery_could_not_be_read_is_counted_not_measured() -> None:
    decisions, hours = world(2.0, acted=12, held=6)
    del hours["e0"]  # e.g. Graph refused its rows: not the same as "delivered nothing"
    impact = measure("t", decisions, hours, window="24h", now=LATER, measured=True)
    assert (impact.counts.acted_entities, impact.counts.unread) == (12, 1)
    assert impact.currencies[0].acted_complete == 11


# ---------------------------------------------------------------- the interval


@pytest.mark.parametrize(
    ("df", "quantile"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (1e6, 1.96)],
)
def test_student_t_quantiles_match_the_tables(df: float, quantile: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-3)
    assert t_quantile(0.025, df) == pytest.approx(-quantile, abs=1e-3)
    assert t_cdf(t_quantile(0.9, df), df) == pytest.approx(0.9, abs=1e-9)


@given(
    first=st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30),
    second=st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30),
)
def test_welchs_interval_holds_its_estimate_and_is_symmetric(
    first: list[float], second: list[float]
) -> None:
    interval = welch_interval([Stratum(first, second)])
    assert interval is not None
    assert interval.low <= interval.estimate <= interval.high
    assert interval.estimate == pytest.approx(
        math.fsum(first) / len(first) - math.fsum(second) / len(second), abs=1e-6
    )
    mirrored = welch_interval([Stratum(second, first)])
    assert mirrored is not None
    assert mirrored.low == pytest.approx(-interval.high, abs=1e-6)


def test_welchs_interval_covers_95_pct_of_normal_samples_at_five_a_group() -> None:
    rng = random.Random(44)
    hits, trials = 0, 2000
    for _ in range(trials):
        first = [rng.gauss(3, 1) for _ in range(5)]
        second = [rng.gauss(0, 4) for _ in range(5)]
        interval = welch_interval([Stratum(first, second)])
        assert interval is not None
        hits += interval.low <= 3 <= interval.high
    assert 0.93 <= hits / trials <= 0.97  # about 4.9 standard errors of a share around 95 %


def test_strata_weigh_by_their_acted_entities() -> None:
    interval = welch_interval(
        [Stratum([1, 1.1, 0.9], [0, 0.1, -0.1]), Stratum([5.0, 5.2], [0, 0.2])]
    )
    assert interval is not None
    assert interval.estimate == pytest.approx(3 / 5 * 1 + 2 / 5 * 5, abs=1e-9)
    assert welch_interval([Stratum([1.0], [2.0, 3.0])]) is None  # one value: no variance


# ---------------------------------------------------------------- money shown to people


@pytest.mark.parametrize(
    ("amount", "currency", "signed", "shown"),
    [
        (1234.5, "USD", False, "$1,234.50"),
        (1234.5, "JPY", False, "¥1,235"),
        (-3.1, "eur", False, "-€3.10"),
        (63.875, "USD", True, "+$63.88"),
        (-0.004, "USD", True, "$0.00"),
        (1234.5, "CHF", True, "+1,234.50 CHF"),
        (-0.5, "KRW", False, "-₩1"),
        (2.5, "JPY", False, "¥3"),  # half up, not Python's half to even
    ],
)
def test_money_is_shown_in_its_currency_with_its_decimals(
    amount: float, currency: str, signed: bool, shown: str
) -> None:
    assert format_money(amount, currency, signed=signed) == shown


@given(
    amount=st.floats(allow_nan=False, allow_infinity=False),
    currency=st.sampled_from(["USD", "JPY", "EUR", "XYZ"]),
)
def test_money_always_reads_back_to_the_amount_rounded(amount: float, currency: str) -> None:
    shown = format_money(amount, currency, signed=True)
    digits = shown.replace(",", "").replace(" " + currency, "").lstrip("+-$€¥")
    decimals = 0 if currency == "JPY" else 2
    assert ("." in digits) == (decimals > 0)
    # half up, as people round money (¥2.5 reads ¥3), the float taken as its shortest text
    with localcontext() as context:
        context.prec = 400
        rounded = Decimal(str(amount)).quantize(Decimal(10) ** -decimals, rounding=ROUND_HALF_UP)
    assert Decimal(digits) == rounded.copy_abs()
    assert shown.startswith("-") == (rounded < 0)
