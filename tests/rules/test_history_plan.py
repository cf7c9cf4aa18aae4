"""The history cache's pure part: day ranges, keys, hour labels, freshness, missing chunks."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.rules.replay.history import (
    MAX_DAYS,
    Chunk,
    DayRange,
    Freshness,
    HistoryKey,
    check_fields,
    hour_key,
    hour_of,
    missing_chunks,
    split_chunk,
)

NEW_YORK = ZoneInfo("America/New_York")
DAYS = st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 12, 31))
KEY_PART = st.from_regex(r"[A-Za-z0-9_]{1,64}", fullmatch=True)


# --- day ranges ---------------------------------------------------------------------------


@given(DAYS, st.integers(min_value=0, max_value=MAX_DAYS - 1))
def test_a_day_range_reads_back_what_it_writes(since: date, extra: int) -> None:
    span = DayRange(since, since + timedelta(days=extra))
    assert DayRange.parse(str(span)) == span
    assert len(span) == extra + 1 == len(span.days())
    assert span.days()[0] == span.since and span.days()[-1] == span.until


@given(DAYS, st.integers(min_value=0, max_value=400))
def test_a_long_span_is_read_in_consecutive_ranges_of_at_most_90_days(
    since: date, extra: int
) -> None:
    """90 days of decisions and the baselines before them: more than one request holds."""
    until = since + timedelta(days=extra)
    ranges = DayRange.spanning(since, until)
    every = [d for r in ranges for d in r.days()]
    assert every == [since + timedelta(days=n) for n in range(extra + 1)]
    assert all(len(r) <= MAX_DAYS for r in ranges) and len(ranges) == -(-(extra + 1) // MAX_DAYS)


@given(st.text(max_size=40))
def test_any_text_is_a_day_range_or_a_value_error(text: str) -> None:
    try:
        span = DayRange.parse(text)
    except ValueError:
        return
    assert 1 <= len(span) <= MAX_DAYS


@given(DAYS, st.integers(min_value=MAX_DAYS, max_value=400))
def test_a_range_longer_than_ninety_days_is_refused(since: date, extra: int) -> None:
    with pytest.raises(ValueError, match="at most 90"):
        DayRange.parse(f"{since}..{since + timedelta(days=extra)}")


def test_day_range_examples() -> None:
    assert DayRange.parse("2026-11-05") == DayRange(date(2026, 11, 5), date(2026, 11, 5))
    assert DayRange.last(30, date(2026, 12, 1)) == DayRange(date(2026, 11, 2), date(2026, 12, 1))
    assert DayRange.last(90, date(2026, 12, 1), include_today=False) == DayRange(
        date(2026, 9, 2), date(2026, 11, 30)
    )
    with pytest.raises(ValueError, match="after the last"):
        DayRange.parse("2026-11-05..2026-11-04")
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        DayRange.parse("2026-11-05 .. 2026-11-06")
    with pytest.raises(ValueError):
        DayRange.parse("2026-02-30")
    with pytest.raises(ValueError, match="at least one day"):
        DayRange.last(0, date(2026, 12, 1))


# --- keys, fields and hours ---------------------------------------------------------------


@given(
    KEY_PART,
    st.sampled_from(["campaign", "adset"]),
    KEY_PART,
    DAYS,
    st.sampled_from(["day", "hour"]),
)
def test_a_history_key_reads_back_what_it_writes(
    account: str, level: str, entity: str, day: date, granularity: str
) -> None:
    key = HistoryKey(account, level, entity, day, "day" if granularity == "day" else "hour")
    assert HistoryKey.parse(key.text()) == key


@given(st.text(max_size=80))
def test_any_text_is_a_history_key_or_a_value_error(text: str) -> None:
    try:
        key = HistoryKey.parse(text)
    except ValueError:
        return
    assert key.text() == text


def test_a_key_part_with_a_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be part"):
        HistoryKey("act_1|x", "campaign", "1", date(2026, 1, 1), "day")


@given(st.integers(min_value=0, max_value=23))
def test_an_hour_label_reads_back(hour: int) -> None:
    assert hour_of(f"{hour_key(hour)}:00:00 - {hour_key(hour)}:59:59") == hour


@given(st.text(max_size=30))
def test_any_text_is_an_hour_or_a_value_error(text: str) -> None:
    try:
        hour = hour_of(text)
    except ValueError:
        return
    assert 0 <= hour <= 23


def test_hour_labels_that_are_not_one_hour_are_refused() -> None:
    for label in ("07:00:00 - 08:59:59", "24:00:00 - 24:59:59", "7:00:00 - 7:59:59", ""):
        with pytest.raises(ValueError):
            hour_of(label)


def test_fields_must_be_plain_insights_fields() -> None:
    assert check_fields(["spend", "actions", "spend"]) == ("actions", "spend")
    for bad in ("actions.purchase", "$where", "Spend", "", "a" * 65):
        with pytest.raises(ValueError, match="not an Insights field"):
            check_fields([bad])


# --- freshness ----------------------------------------------------------------------------

DAY = date(2026, 11, 20)
DAY_END = datetime(2026, 11, 21, 5, 0, tzinfo=UTC)  # midnight in New York (EST)


def test_a_value_fetched_while_its_day_ran_is_fresh_only_that_day_and_briefly() -> None:
    policy = Freshness(today_refresh_after_s=900)
    fetched = DAY_END - timedelta(hours=3)
    assert policy.fresh(DAY, fetched, fetched + timedelta(minutes=14), NEW_YORK)
    assert not policy.fresh(DAY, fetched, fetched + timedelta(minutes=16), NEW_YORK)
    late = DAY_END - timedelta(minutes=5)
    assert not policy.fresh(DAY, late, DAY_END + timedelta(minutes=1), NEW_YORK)  # day ended


def test_a_maturing_value_is_refetched_after_refresh_after_s() -> None:
    policy = Freshness(refresh_after_s=6 * 3600)
    fetched = DAY_END + timedelta(days=3)
    assert policy.fresh(DAY, fetched, fetched + timedelta(hours=5), NEW_YORK)
    assert not policy.fresh(DAY, fetched, fetched + timedelta(hours=7), NEW_YORK)
    assert not policy.final(DAY, fetched, NEW_YORK)


def test_a_value_fetched_28_days_after_its_day_is_final() -> None:
    policy = Freshness()
    fetched = DAY_END + timedelta(days=28)
    assert policy.final(DAY, fetched, NEW_YORK)
    assert policy.fresh(DAY, fetched, fetched + timedelta(days=400), NEW_YORK)
    assert not policy.final(DAY, fetched - timedelta(seconds=1), NEW_YORK)


# --- missing chunks -----------------------------------------------------------------------

ENTITIES = st.lists(st.from_regex(r"[0-9]{1,4}", fullmatch=True), min_size=1, max_size=12)
FIELDS = ("actions", "impressions", "spend")


@st.composite
def cache_states(draw: st.DrawFn) -> tuple[list[str], DayRange, dict[tuple[str, date], set[str]]]:
    ids = draw(ENTITIES)
    since = draw(st.dates(min_value=date(2026, 1, 1), max_value=date(2026, 6, 1)))
    days = DayRange(since, since + timedelta(days=draw(st.integers(0, 20))))
    fresh = {
        (entity, day): set(draw(st.sets(st.sampled_from(FIELDS))))
        for entity in ids
        for day in days.days()
        if draw(st.booleans())
    }
    return ids, days, fresh


@given(
    cache_states(),
    st.sampled_from(["day", "hour"]),
    st.integers(1, 6),
    st.integers(1, 200),
)
def test_missing_chunks_fetch_exactly_what_the_cache_lacks(
    state: tuple[list[str], DayRange, dict[tuple[str, date], set[str]]],
    granularity: str,
    ids_per_chunk: int,
    rows_per_chunk: int,
) -> None:
    ids, days, fresh = state
    gran = "day" if granularity == "day" else "hour"
    chunks = missing_chunks(
        gran, ids, days, FIELDS, fresh, ids_per_chunk=ids_per_chunk, rows_per_chunk=rows_per_chunk
    )
    asked = [
        (entity, day, name)
        for chunk in chunks
        for entity in chunk.entity_ids
        for day in chunk.days.days()
        for name in chunk.fields
    ]
    lacking = {
        (entity, day, name)
        for entity in ids
        for day in days.days()
        for name in FIELDS
        if name not in fresh.get((entity, day), set())
    }
    assert len(asked) == len(set(asked))  # nothing asked twice
    assert set(asked) == lacking  # everything missing, nothing fresh
    for chunk in chunks:
        assert len(chunk.entity_ids) <= ids_per_chunk
        assert chunk.rows <= rows_per_chunk or (len(chunk.entity_ids) == 1 and len(chunk.days) == 1)


def test_a_fully_cached_request_has_no_chunk_and_a_new_field_one_per_run() -> None:
    days = DayRange(date(2026, 11, 1), date(2026, 11, 30))
    ids = [str(n) for n in range(500)]
    full = {(e, d): {"spend"} for e in ids for d in days.days()}
    assert (
        missing_chunks("day", ids, days, ["spend"], full, ids_per_chunk=500, rows_per_chunk=5000)
        == []
    )
    chunks = missing_chunks(
        "day", ids, days, ["spend", "impressions"], full, ids_per_chunk=500, rows_per_chunk=5000
    )
    assert {c.fields for c in chunks} == {("impressions",)}
    assert len(chunks) == 3  # 500 ids × 10 days per request
    assert all(c.rows == 5000 for c in chunks)


@given(
    st.lists(st.from_regex(r"[0-9]{1,4}", fullmatch=True), min_size=1, max_size=9, unique=True),
    st.integers(0, 30),
    st.sampled_from(["day", "hour"]),
)
def test_a_split_chunk_covers_the_whole_in_two_smaller_pieces(
    ids: list[str], extra: int, granularity: str
) -> None:
    since = date(2026, 10, 1)
    gran = "day" if granularity == "day" else "hour"
    chunk = Chunk(gran, tuple(ids), DayRange(since, since + timedelta(days=extra)), ("spend",))
    pieces = split_chunk(chunk)
    if pieces is None:
        assert len(ids) == 1 and extra == 0
        return
    cells = [(e, d) for p in pieces for e in p.entity_ids for d in p.days.days()]
    assert sorted(cells) == sorted((e, d) for e in ids for d in chunk.days.days())
    assert all(0 < p.rows < chunk.rows for p in pieces)
