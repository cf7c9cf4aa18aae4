"""Meta's daily budget flexibility in the delivery model: a day spends up to 1.75 times its
daily budget, a calendar week (Sunday to Saturday in the account's timezone) at most 7 times
(Meta's v23.0 announcement, SDK 24.0.0 notes, the Ad Set Budget page) — seeded, deterministic."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_sandbox.delivery import DAILY_FLEX, WEEK_DAYS, week_factor
from graph_sandbox.insights import InsightsEngine
from graph_sandbox.scenarios import WorldConfig, build_world
from graph_sandbox.world import ACTIVE, AdObject, World

DAYS = st.integers(date(2026, 1, 1).toordinal(), date(2028, 1, 1).toordinal())
#: Eight whole calendar weeks, Sunday 4 October to Saturday 28 November 2026.
FIRST_SUNDAY = date(2026, 10, 4)
WEEKS = 8
LATER = datetime(2026, 12, 1, tzinfo=UTC)


def _sunday(ordinal: int) -> int:
    return ordinal - date.fromordinal(ordinal).isoweekday() % 7


@given(st.integers(0, 1000), st.text(max_size=20), DAYS, st.integers(0, 9))
def test_a_day_never_passes_the_flex_and_a_week_never_its_seven_days(
    seed: int, entity: str, ordinal: int, started_days_before: int
) -> None:
    sunday = _sunday(ordinal)
    first = ordinal - started_days_before
    week = [week_factor(seed, entity, day, first) for day in range(sunday, sunday + 7)]
    assert all(0 <= factor <= DAILY_FLEX for factor in week)
    counted = sunday + WEEK_DAYS - max(sunday, first)  # the days of the week it existed
    assert sum(week) <= counted + 1e-9
    days = range(sunday, sunday + 7)
    assert all(factor == 0 for day, factor in zip(days, week, strict=True) if day < first)
    assert week == [week_factor(seed, entity, day, first) for day in range(sunday, sunday + 7)]


def _budget_holders(world: World) -> list[tuple[AdObject, list[AdObject]]]:
    """Each delivering daily budget of the USD, EUR and JPY accounts: the campaign's (its ad
    sets share it) or each ad set's own."""
    found = []
    for act in ("act_1001", "act_1002", "act_1004"):
        for campaign in world.campaigns(act):
            if campaign.status != ACTIVE or campaign.held_as:
                continue
            adsets = [a for a in world.adsets_of(campaign.id) if a.status == ACTIVE]
            if campaign.daily_budget is not None:
                found.append((campaign, adsets))
            found += [(a, [a]) for a in adsets if a.daily_budget is not None]
    return [(holder, adsets) for holder, adsets in found if adsets]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_demo_accounts_spend_over_budget_on_some_days_never_over_a_week(seed: int) -> None:
    world = build_world(WorldConfig(seed=seed))
    holders = _budget_holders(world)
    engine = InsightsEngine(world)
    ratios: list[float] = []
    for holder, adsets in holders:
        budget = holder.daily_budget
        assert budget is not None
        for week in range(WEEKS):
            sunday = FIRST_SUNDAY + timedelta(days=7 * week)
            days = [sunday + timedelta(days=n) for n in range(7)]
            spent = [engine.totals(adsets, (day, day), LATER).spend_cents for day in days]
            assert all(day <= DAILY_FLEX * budget for day in spent), holder.name
            assert sum(spent) <= WEEK_DAYS * budget, (holder.name, sunday)
            ratios += [day / budget for day in spent if day]
    assert max(ratios) > 1.5  # some days well over the budget …
    assert sum(r > 1 for r in ratios) > len(ratios) / 20  # … and not rarely
    assert min(ratios) < 0.9  # and less on others
