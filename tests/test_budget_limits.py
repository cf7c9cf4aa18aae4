"""Counting an ad set's budget changes in the hour: Meta's log and the engine's own, once each."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from ruleengine.accounts.facts import ChangeCount, count_changes, same_value
from ruleengine.meta.adaccount import BudgetEvent
from ruleengine.store.intents import AppliedChange

NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
SINCE = NOW - timedelta(hours=1)


def event(minutes_ago: int, value: int | None) -> BudgetEvent:
    reported = None if value is None else Decimal(value)
    return BudgetEvent("1", NOW - timedelta(minutes=minutes_ago), reported)


def own(minutes_ago: int, target: int) -> AppliedChange:
    return AppliedChange(NOW - timedelta(minutes=minutes_ago), target)


def test_the_engines_own_changes_in_the_log_count_once() -> None:
    count = count_changes(
        [event(50, 5100), event(30, 5200)], [own(50, 5100), own(30, 5200)], since=SINCE, offset=100
    )
    assert (len(count.times), count.outside) == (2, 0)


def test_outside_changes_and_own_changes_not_logged_yet_add_up() -> None:
    count = count_changes(
        [event(50, 7000), event(40, 7100), event(30, 5200)],
        [own(30, 5200), own(1, 5300)],  # the last one made after the log was read
        since=SINCE,
        offset=100,
    )
    assert (len(count.times), count.outside) == (4, 2)
    assert count.allowed_at(4) == NOW - timedelta(minutes=50) + timedelta(hours=1)


def test_changes_older_than_the_hour_do_not_count() -> None:
    count = count_changes([event(61, 1), event(10, 2)], [own(70, 3)], since=SINCE, offset=100)
    assert len(count.times) == 1


def test_a_log_in_major_units_or_without_values_still_matches_or_counts() -> None:
    major = count_changes([event(20, 52)], [own(20, 5200)], since=SINCE, offset=100)
    assert (len(major.times), major.outside) == (1, 0)
    unknown = count_changes([event(20, None)], [own(20, 5200)], since=SINCE, offset=100)
    assert (len(unknown.times), unknown.outside) == (2, 1)  # counted twice: never too few


def test_allowed_now_below_four() -> None:
    assert ChangeCount([NOW, NOW, NOW]).allowed_at(4) is None
    times = [NOW - timedelta(minutes=m) for m in (40, 30, 20, 10, 5)]
    assert ChangeCount(times).allowed_at(4) == times[1] + timedelta(hours=1)


def test_same_value_is_strict_about_types() -> None:
    assert same_value(Decimal(6000), 6000, offset=100)
    assert same_value(Decimal(60), 6000, offset=100)
    assert same_value(Decimal(6000), 6000, offset=1)
    assert not same_value(Decimal(60), 6000, offset=1)
    assert not same_value(None, 6000, offset=100)
    assert not same_value(Decimal(1), True, offset=100)


minutes = st.integers(min_value=0, max_value=59)
values = st.integers(min_value=100, max_value=10**6)


@given(
    logged=st.lists(st.tuples(minutes, values), max_size=8),
    mine=st.lists(st.tuples(minutes, values), max_size=8),
)
def test_never_fewer_than_either_side_never_more_than_both(
    logged: list[tuple[int, int]], mine: list[tuple[int, int]]
) -> None:
    events = [event(m, v) for m, v in logged]
    changes = [own(m, v) for m, v in mine]
    count = count_changes(events, changes, since=SINCE, offset=100)
    assert max(len(events), len(changes)) <= len(count.times) <= len(events) + len(changes)
    assert 0 <= count.outside <= len(events)
    assert count.times == sorted(count.times)
