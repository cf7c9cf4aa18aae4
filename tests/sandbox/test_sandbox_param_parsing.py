"""Properties of the sandbox's parameter parsing and delivery spans, without a server."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_sandbox.errors import GraphError
from graph_sandbox.insights_params import (
    MAX_TIME_INCREMENT_DAYS,
    parse_time_increment,
    parse_time_ranges,
    slices,
)
from graph_sandbox.periods import time_range_value
from graph_sandbox.query import parse_expanded_fields, parse_list_param
from graph_sandbox.timeline import StatusChange, active_spans, intersect, overlap

NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True), max_size=8)
DATES = st.dates(min_value=date(2020, 1, 1), max_value=date(2030, 12, 31))
T0 = datetime(2026, 12, 1, tzinfo=UTC)


@given(NAMES)
def test_a_json_array_and_a_comma_list_mean_the_same_list(names: list[str]) -> None:
    assert parse_list_param(orjson.dumps(names).decode(), "x") == names
    assert parse_list_param(",".join(names), "x") == names
    assert parse_list_param(" , ".join(names), "x") == names


@given(st.text(max_size=12))
def test_time_increment_takes_exactly_1_to_90_monthly_and_all_days(raw: str) -> None:
    valid = raw in ("monthly", "all_days", "") or (
        raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_TIME_INCREMENT_DAYS
    )
    if valid:
        parse_time_increment(raw)
    else:
        with pytest.raises(GraphError, match=r"^\(#100\) time_increment"):
            parse_time_increment(raw)


@given(DATES, st.integers(0, 400), st.one_of(st.integers(1, 90), st.just("monthly")))
def test_slices_cover_the_period_in_order_without_overlap(
    since: date, length: int, increment: int | str
) -> None:
    until = since + timedelta(days=length)
    parts = slices((since, until), increment)
    assert parts[0][0] == since
    assert parts[-1][1] == until
    for (_, end), (start, _) in itertools.pairwise(parts):
        assert start == end + timedelta(days=1)
    for start, end in parts:
        assert start <= end
        if increment == "monthly":
            assert (start.year, start.month) == (end.year, end.month)
        else:
            assert isinstance(increment, int)
            assert (end - start).days < increment


@given(st.text(max_size=12), st.text(max_size=12))
def test_time_ranges_take_only_yyyy_mm_dd_dates(since: str, until: str) -> None:
    def iso(raw: str) -> date | None:
        if len(raw) == 10 and raw[4] == raw[7] == "-" and raw.replace("-", "").isdigit():
            try:
                return date.fromisoformat(raw)
            except ValueError:
                return None
        return None

    raw = orjson.dumps([{"since": since, "until": until}]).decode()
    start, end = iso(since), iso(until)
    if start is None or end is None or start > end:
        with pytest.raises(GraphError, match=r"^\(#100\)"):
            parse_time_ranges(raw)
    else:
        assert parse_time_ranges(raw) == ((start, end),)


@given(DATES, DATES)
def test_a_time_range_is_its_two_dates(since: date, until: date) -> None:
    value = {"since": since.isoformat(), "until": until.isoformat()}
    if since <= until:
        assert time_range_value(value, "time_range") == (since, until)
    else:
        with pytest.raises(GraphError, match="since must not be after until"):
            time_range_value(value, "time_range")


@given(st.dictionaries(st.integers(0, 48 * 60), st.booleans(), max_size=8), st.booleans())
def test_active_spans_follow_the_status_log(changes: dict[int, bool], starts_active: bool) -> None:
    status = "ACTIVE" if starts_active else "PAUSED"
    log, current = [], status
    for minute, active in sorted(changes.items()):
        after = "ACTIVE" if active else "PAUSED"
        if after != current:
            log.append(StatusChange(T0 + timedelta(minutes=minute), current, after))
            current = after
    spans = active_spans(current, log, settled_at=T0)
    for start, end in spans:
        assert start < end
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end < start  # disjoint, sorted, merged
    # At every logged instant the spans agree with the status the log says.
    for change in log:
        assert (overlap((change.at, change.at + timedelta(seconds=1)), spans) > timedelta()) == (
            change.after == "ACTIVE"
        )
    before = (T0 - timedelta(hours=1), T0)
    assert overlap(before, spans) == timedelta(hours=1)  # before settling: delivered history
    assert intersect(spans, spans) == spans


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["id", "name", "adset", "campaign", "status"]),
            st.one_of(st.none(), st.lists(st.sampled_from(["id", "name", "status"]), min_size=1)),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_fields_with_expanded_parents_read_as_they_were_written(
    items: list[tuple[str, list[str] | None]],
) -> None:
    expandable = {
        "adset": ("AdSet", {"id", "name", "status"}),
        "campaign": ("Campaign", {"id", "name", "status"}),
    }
    raw = ",".join(name + (f"{{{','.join(sub)}}}" if sub else "") for name, sub in items)
    allowed = {"id", "name", "adset", "campaign", "status"}
    if any(sub and name not in expandable for name, sub in items):
        with pytest.raises(GraphError, match=r"^\(#100\) Field expansion"):
            parse_expanded_fields(
                raw, default=(), allowed=allowed, node="Ad", expandable=expandable
            )
        return
    fields, expanded = parse_expanded_fields(
        raw, default=(), allowed=allowed, node="Ad", expandable=expandable
    )
    assert fields == list(dict.fromkeys(name for name, _ in items))
    for name, sub in items:
        if sub:
            assert name in expanded


@given(st.text(alphabet="ab{},.() ", max_size=20))
def test_any_fields_text_is_fields_or_graphs_error_100(raw: str) -> None:
    expandable = {"a": ("AdSet", {"a", "b"})}
    code = None
    try:
        fields, _ = parse_expanded_fields(
            raw, default=(), allowed={"a", "b"}, node="Ad", expandable=expandable
        )
    except GraphError as error:
        code = error.code
    else:
        assert set(fields) <= {"a", "b"}
    assert code in (None, 100)
