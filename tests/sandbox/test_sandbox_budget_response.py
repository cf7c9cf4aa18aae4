"""The delivery model's answer to writes, without a server: with no budget write every number
is the one the sandbox computed before budgets moved delivery (each day's spend shaped by its
calendar week since the model follows Meta's daily budget flexibility); a budget times k moves spend
k times and conversions k ** ELASTICITY times from the write on; a pause stops everything;
the counterfactual is the actual up to the first write; the same seed and writes give the same
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import pytest
from delivery_oracle import OracleEngine
from delivery_oracle import day_totals as day_totals_before
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_sandbox.attribution_lag import DEFAULT_CURVE
from graph_sandbox.delivery import (
    ELASTICITY,
    Archetype,
    Profile,
    Totals,
    day_totals,
    week_factor,
)
from graph_sandbox.insights import InsightsEngine
from graph_sandbox.scenarios import WorldConfig, build_world, make_profile
from graph_sandbox.timeline import (
    BEGINNING,
    END,
    BudgetChange,
    StatusChange,
    budget_ratios,
    multiply,
    without_api_writes,
)
from graph_sandbox.world import ACTIVE, PAUSED, AdObject, World

DAYS = st.integers(date(2026, 6, 1).toordinal(), date(2027, 6, 1).toordinal())
ARCHETYPES = st.sampled_from([a for a in Archetype if a is not Archetype.NO_DELIVERY])
#: Where the property tests start writing: 10:00 in New York on 1 December 2026.
T0 = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)
ACCOUNTS = ("act_1001", "act_1004")  # a USD account and a yen one, in different timezones
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    """A profile the scenarios could make, of any delivering archetype and size."""
    rng = random.Random(draw(st.integers(0, 10_000)))
    return make_profile(rng, draw(ARCHETYPES), draw(st.integers(100, 5_000_000)))


@dataclass(frozen=True)
class Write:
    """A change of one campaign or ad set, ``offset_h`` hours after T0."""

    target: int
    offset_h: float
    what: Literal["PAUSED", "ACTIVE", "budget"]
    factor: float
    via_api: bool


WRITES = st.lists(
    st.builds(
        Write,
        target=st.integers(0, 10_000),
        offset_h=st.floats(0, 24 * 5, allow_nan=False),
        what=st.sampled_from(["PAUSED", "ACTIVE", "budget"]),
        factor=st.floats(0.2, 5.0, allow_nan=False),
        via_api=st.booleans(),
    ),
    max_size=8,
)


def _targets(world: World) -> list[AdObject]:
    return [
        o for o in world.objects.values() if o.kind != "ad" and o.account_id in ("1001", "1004")
    ]


def _adsets(world: World) -> list[AdObject]:
    return [adset for act in ACCOUNTS for adset in world.adsets(act)]


def _apply(world: World, writes: list[Write], *, budgets: bool = True) -> list[datetime]:
    """Make ``writes`` in the order of their instants, as the write path does; the instants of
    those made through the API."""
    targets = _targets(world)
    api_instants = []
    for write in sorted(writes, key=lambda w: w.offset_h):
        obj, at = targets[write.target % len(targets)], T0 + timedelta(hours=write.offset_h)
        if write.what == "budget":
            field = "daily_budget" if obj.daily_budget is not None else "lifetime_budget"
            old = getattr(obj, field)
            if not budgets or old is None:
                continue
            new = max(100, round(old * write.factor))
            world.log_budget(obj, old, new, at, via_api=write.via_api)
            setattr(obj, field, new)
        else:
            world.set_status(obj, write.what, at, via_api=write.via_api)
        if write.via_api:
            api_instants.append(at)
    return api_instants


def _local_today(world: World, adset: AdObject, now: datetime) -> date:
    return now.astimezone(world.account_of(adset).tz).date()


# --- with no budget write, nothing changes ---


@given(profiles(), st.integers(0, 1000), st.integers(1, 10**15), DAYS)
def test_with_no_budget_write_a_day_is_what_it_was(
    profile: Profile, seed: int, entity: int, ordinal: int
) -> None:
    factor = week_factor(seed, str(entity), ordinal, None)
    before = day_totals_before(profile, seed, str(entity), ordinal, factor)
    assert day_totals(profile, seed, str(entity), ordinal) == before
    assert day_totals(profile, seed, str(entity), ordinal, 1.0) == before


@SLOW
@given(
    seed=st.integers(0, 50),
    writes=WRITES,
    now_h=st.floats(-24 * 60, 24 * 8, allow_nan=False),
    back=st.integers(0, 40),
    lagged=st.booleans(),
)
def test_with_no_budget_write_the_engine_gives_the_old_numbers(
    seed: int, writes: list[Write], now_h: float, back: int, lagged: bool
) -> None:
    """Pauses and activations at any level, any clock, any period, daily and hourly: the
    numbers of the engine before budgets moved delivery."""
    world = build_world(WorldConfig(seed=seed))
    _apply(world, writes, budgets=False)
    now = T0 + timedelta(hours=now_h)
    engine, oracle = InsightsEngine(world), OracleEngine(world)
    lag = DEFAULT_CURVE if lagged else None
    for adset in _adsets(world):
        today = _local_today(world, adset, now)
        period = (today - timedelta(days=back), today)
        assert engine.adset_totals(adset, period, now, lag=lag) == oracle.adset_totals(
            adset, period, now, lag=lag
        )
        day = (today - timedelta(days=back % 3),) * 2
        assert engine.hourly_totals([adset], day, now, lag=lag) == oracle.hourly_totals(
            [adset], day, now, lag=lag
        )


# --- a budget moves spend in proportion and conversions with diminishing returns ---


@given(profiles(), st.integers(0, 1000), DAYS, st.floats(0.1, 10, allow_nan=False))
def test_a_budget_times_k_moves_spend_k_times_and_conversions_k_to_the_elasticity(
    profile: Profile, seed: int, ordinal: int, k: float
) -> None:
    """Within rounding, day by day: the day's noise is the same at every budget."""
    base = day_totals(profile, seed, "120220010000001", ordinal)
    moved = day_totals(profile, seed, "120220010000001", ordinal, k)
    assert abs(moved.spend_cents - k * base.spend_cents) <= 0.5 + 0.5 * k
    returns = k**ELASTICITY
    assert abs(moved.purchases - returns * base.purchases) <= 0.51 + 0.5 * returns
    if base.purchases:
        order_value = base.purchase_value_cents // base.purchases
        assert moved.purchase_value_cents == moved.purchases * order_value
    # leads follow link clicks, which are rounded on their own: allow for theirs too
    clicks_off = abs(moved.link_clicks - k * base.link_clicks)
    slack = 1.1 * profile.lead_rate * k ** (ELASTICITY - 1) * clicks_off
    assert abs(moved.leads - returns * base.leads) <= 0.51 + 0.5 * returns + slack


@pytest.mark.parametrize("k", [0.5, 1.5, 3.0])
@pytest.mark.parametrize("archetype", [Archetype.WINNER, Archetype.LOSER, Archetype.LEADGEN])
def test_in_expectation_spend_moves_by_k_and_conversions_by_k_to_the_elasticity(
    archetype: Archetype, k: float
) -> None:
    """Over a year of days the rounding averages out: sums move by the model's factors (a
    $5,000 day, so that a loser's few purchases a day round out within the tolerance)."""
    profile = make_profile(random.Random(7), archetype, 500_000)
    days = range(date(2026, 1, 1).toordinal(), date(2027, 1, 1).toordinal())
    base = [day_totals(profile, 3, "120220030000001", d) for d in days]
    moved = [day_totals(profile, 3, "120220030000001", d, k) for d in days]

    def ratio(field: str) -> float:
        return sum(getattr(t, field) for t in moved) / sum(getattr(t, field) for t in base)

    assert ratio("spend_cents") == pytest.approx(k, rel=1e-4)
    assert ratio("impressions") == pytest.approx(k, rel=1e-3)
    conversions = "leads" if archetype is Archetype.LEADGEN else "purchases"
    assert ratio(conversions) == pytest.approx(k**ELASTICITY, rel=0.01)
    if archetype is not Archetype.LEADGEN:
        assert ratio("purchase_value_cents") == pytest.approx(k**ELASTICITY, rel=0.01)


def _first_with(world: World, act: str, *, cbo: bool) -> AdObject:
    """The first delivering campaign of ``act`` with a daily campaign budget (or ad set
    budgets) whose ad sets all purchase."""
    return next(
        c
        for c in world.campaigns(act)
        if (c.daily_budget is not None if cbo else c.daily_budget is c.lifetime_budget is None)
        and c.status == ACTIVE
        and all(a.status == ACTIVE and a.profile and a.profile.roas for a in world.adsets_of(c.id))
    )


@pytest.mark.parametrize("cbo", [True, False])
def test_a_budget_write_moves_every_full_day_after_it_and_the_day_it_was_made_in_part(
    cbo: bool,
) -> None:
    world = build_world(WorldConfig(seed=5))
    campaign = _first_with(world, "act_1001", cbo=cbo)
    adset = world.adsets_of(campaign.id)[0]
    target = campaign if cbo else adset
    assert target.daily_budget is not None
    world.log_budget(target, target.daily_budget, target.daily_budget * 3, T0)
    target.daily_budget *= 3
    engine = InsightsEngine(world)
    unwritten = engine.without_writes()
    now = T0 + timedelta(days=3)
    tz = world.account_of(adset).tz
    write_day = T0.astimezone(tz).date()
    assert adset.profile is not None
    for offset in (1, 2):
        day = write_day + timedelta(days=offset)
        actual = engine.adset_totals(adset, (day, day), now)
        assert actual == day_totals(adset.profile, 5, adset.id, day.toordinal(), 3.0)
        assert unwritten.adset_totals(adset, (day, day), now) == day_totals(
            adset.profile, 5, adset.id, day.toordinal()
        )
    # 10:00 in New York: 10 hours at the old budget, 14 at three times it
    actual = engine.adset_totals(adset, (write_day, write_day), now)
    full_1 = day_totals(adset.profile, 5, adset.id, write_day.toordinal())
    full_3 = day_totals(adset.profile, 5, adset.id, write_day.toordinal(), 3.0)
    assert actual.spend_cents == pytest.approx(
        full_1.spend_cents * 10 / 24 + full_3.spend_cents * 14 / 24, abs=2
    )


def test_the_budget_ratio_follows_the_log_and_the_last_write_of_an_instant_holds() -> None:
    t1, t2 = T0, T0 + timedelta(hours=3)
    log = [BudgetChange(t1, 100, 200), BudgetChange(t2, 200, 100), BudgetChange(t2, 100, 300)]
    assert budget_ratios(log) == [((BEGINNING, t1), 1.0), ((t1, t2), 2.0), ((t2, END), 3.0)]
    back = [BudgetChange(t1, 100, 50), BudgetChange(t2, 50, 100)]
    assert budget_ratios(back) == [((BEGINNING, t1), 1.0), ((t1, t2), 0.5), ((t2, END), 1.0)]
    assert budget_ratios([]) == [((BEGINNING, END), 1.0)]
    # its own budget halved at t1 and restored at t2, the other doubled at t1: 1, then 2
    assert multiply(budget_ratios(back), budget_ratios(log[:1])) == [
        ((BEGINNING, t2), 1.0),
        ((t2, END), 2.0),
    ]


def test_without_api_writes_a_log_keeps_its_instants_and_ads_manager_changes() -> None:
    t1, t2, t3 = T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    log = [
        StatusChange(t1, ACTIVE, PAUSED),  # the API's
        StatusChange(t2, PAUSED, ACTIVE, via_api=False),  # a person's, in Ads Manager
        StatusChange(t3, ACTIVE, PAUSED, via_api=False),
    ]
    assert without_api_writes(log, None) == [
        StatusChange(t1, ACTIVE, ACTIVE),
        StatusChange(t2, ACTIVE, ACTIVE, via_api=False),
        StatusChange(t3, ACTIVE, PAUSED, via_api=False),
    ]
    assert without_api_writes(log, t2) == log


# --- a pause stops everything, at every level ---


@SLOW
@given(
    seed=st.integers(0, 50),
    writes=WRITES,
    pause_h=st.floats(0, 24 * 3, allow_nan=False),
    level=st.sampled_from(["campaign", "adset"]),
    pick=st.integers(0, 1000),
)
def test_after_a_pause_nothing_more_accrues(
    seed: int, writes: list[Write], pause_h: float, level: str, pick: int
) -> None:
    """Whatever was written before, a campaign's or an ad set's pause freezes what its ad sets
    delivered: spend, conversions and value, at the pause and days later."""
    world = build_world(WorldConfig(seed=seed))
    _apply(world, [w for w in writes if w.offset_h < pause_h])
    paused_at = T0 + timedelta(hours=pause_h)
    candidates = [o for o in _targets(world) if o.kind == level and _settled(world, o)]
    target = candidates[pick % len(candidates)]
    world.set_status(target, PAUSED, paused_at)
    engine = InsightsEngine(world)
    adsets = world.adsets_of(target.id) if level == "campaign" else [target]
    for adset in filter(lambda adset: _settled(world, adset), adsets):
        period = (_local_today(world, adset, paused_at) - timedelta(days=2),) * 2
        period = (period[0], _local_today(world, adset, paused_at + timedelta(days=4)))
        at_pause = engine.adset_totals(adset, period, paused_at)
        later = engine.adset_totals(adset, period, paused_at + timedelta(days=4))
        assert later == at_pause


def _settled(world: World, obj: AdObject) -> bool:
    """True when neither the object nor its campaign is one the scenario built paused and
    nothing has changed since: such an object counts as paused since the start of "today",
    wherever the clock stands (docs/sandbox.md), so its past grows as the clock moves."""
    chain = [obj] if obj.kind == "campaign" else [obj, world.campaign_of(obj)]
    return all(o.status == ACTIVE or world.status_log(o.id) for o in chain)


# --- the counterfactual is the actual up to the first write ---


@SLOW
@given(seed=st.integers(0, 50), writes=WRITES, lagged=st.booleans())
def test_up_to_the_first_api_write_actual_and_counterfactual_are_the_same(
    seed: int, writes: list[Write], lagged: bool
) -> None:
    world = build_world(WorldConfig(seed=seed))
    instants = _apply(world, writes)
    first = min(instants, default=T0 + timedelta(days=6))
    engine = InsightsEngine(world)
    unwritten = engine.without_writes()
    later = T0 + timedelta(days=6)
    lag = DEFAULT_CURVE if lagged else None
    for adset in _adsets(world):
        today = _local_today(world, adset, first)
        period = (today - timedelta(days=9), today)
        assert engine.adset_totals(adset, period, first, lag=lag) == unwritten.adset_totals(
            adset, period, first, lag=lag
        )
        # seen later: the days before the first write's day, and its hours before it
        before = (period[0], today - timedelta(days=1))
        assert engine.adset_totals(adset, before, later) == unwritten.adset_totals(
            adset, before, later
        )
        hours = engine.hourly_totals([adset], (today, today), later)
        unwritten_hours = unwritten.hourly_totals([adset], (today, today), later)
        whole = first.astimezone(world.account_of(adset).tz).hour  # hours ended by the write
        assert hours[:whole] == unwritten_hours[:whole]


@SLOW
@given(seed=st.integers(0, 50), writes=WRITES)
def test_with_no_api_write_since_an_instant_the_counterfactual_is_the_actual(
    seed: int, writes: list[Write]
) -> None:
    """Changes made in Ads Manager are no engine's: the counterfactual keeps them."""
    world = build_world(WorldConfig(seed=seed))
    instants = _apply(world, writes)
    since = max(instants, default=T0) + timedelta(seconds=1)
    engine = InsightsEngine(world)
    unwritten = engine.without_writes(since)
    now = T0 + timedelta(days=6)
    for adset in _adsets(world):
        today = _local_today(world, adset, now)
        period = (today - timedelta(days=9), today)
        assert engine.adset_totals(adset, period, now) == unwritten.adset_totals(adset, period, now)


def test_a_counterfactual_since_an_instant_keeps_the_writes_before_it() -> None:
    world = build_world(WorldConfig(seed=2))
    campaign = _first_with(world, "act_1001", cbo=True)
    adset = world.adsets_of(campaign.id)[0]
    assert campaign.daily_budget is not None
    budget = campaign.daily_budget
    world.log_budget(campaign, budget, budget * 2, T0)
    world.set_status(campaign, PAUSED, T0 + timedelta(days=2))
    engine = InsightsEngine(world)
    now = T0 + timedelta(days=4)
    day = (T0 + timedelta(days=3)).astimezone(world.account_of(adset).tz).date()
    assert adset.profile is not None

    def on(engine: InsightsEngine) -> Totals:
        return engine.adset_totals(adset, (day, day), now)

    assert on(engine).spend_cents == 0  # paused
    assert on(engine.without_writes()) == day_totals(adset.profile, 2, adset.id, day.toordinal())
    since_pause = engine.without_writes(T0 + timedelta(days=1))
    assert on(since_pause) == day_totals(adset.profile, 2, adset.id, day.toordinal(), 2.0)


# --- determinism ---


@SLOW
@given(seed=st.integers(0, 50), writes=WRITES)
def test_the_same_seed_and_the_same_writes_give_the_same_numbers(
    seed: int, writes: list[Write]
) -> None:
    now = T0 + timedelta(days=5, hours=7)
    results = []
    for _ in range(2):
        world = build_world(WorldConfig(seed=seed))
        _apply(world, writes)
        engine = InsightsEngine(world)
        results.append(
            [
                (
                    engine.adset_totals(adset, (date(2026, 11, 20), date(2026, 12, 7)), now),
                    engine.without_writes().adset_totals(
                        adset, (date(2026, 11, 20), date(2026, 12, 7)), now
                    ),
                )
                for adset in _adsets(world)
            ]
        )
    assert results[0] == results[1]


def test_another_seed_gives_other_numbers() -> None:
    day = (date(2026, 12, 2), date(2026, 12, 2))
    now = T0 + timedelta(days=3)
    first, second = build_world(WorldConfig(seed=1)), build_world(WorldConfig(seed=2))
    adset = _adsets(first)[0]
    other = _adsets(second)[0]
    assert InsightsEngine(first).adset_totals(adset, day, now) != InsightsEngine(
        second
    ).adset_totals(other, day, now)
