"""Reading what the ad account says: its activity log of budget changes, its minimum budget,
currency and timezone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.meta.adaccount import (
    AdAccount,
    BudgetEvent,
    new_value,
    parse_ad_account,
    parse_budget_event,
)
from ruleengine.meta.errors import MalformedResponseError

AT = datetime(2026, 12, 1, 17, 30, tzinfo=UTC)


def activity(**fields: Any) -> dict[str, Any]:
    return {
        "event_type": "update_ad_set_budget",
        "event_time": "2026-12-01T17:30:00+0000",
        "object_id": "120220010000001",
        "extra_data": json.dumps({"old_value": 5000, "new_value": 6000, "currency": "USD"}),
    } | fields


def test_a_budget_event_as_meta_logs_it() -> None:
    assert parse_budget_event(activity()) == BudgetEvent("120220010000001", AT, Decimal(6000))
    campaign = parse_budget_event(activity(event_type="update_campaign_budget"))
    assert campaign is not None


def test_other_events_are_not_budget_events() -> None:
    for event_type in ("update_ad_set_run_status", "update_ad_set_bid_strategy", None, 3):
        assert parse_budget_event(activity(event_type=event_type)) is None
    assert parse_budget_event("not an activity") is None


def test_event_times_as_unix_seconds_too() -> None:
    parsed = parse_budget_event(activity(event_time=str(int(AT.timestamp()))))
    assert parsed is not None and parsed.at == AT
    parsed = parse_budget_event(activity(event_time=int(AT.timestamp())))
    assert parsed is not None and parsed.at == AT


def test_a_budget_event_without_time_or_object_is_malformed() -> None:
    for broken in ({"event_time": None}, {"event_time": "soon"}, {"object_id": None}):
        with pytest.raises(MalformedResponseError):
            parse_budget_event(activity(**broken))


@pytest.mark.parametrize(
    ("extra", "value"),
    [
        ({"new_value": 6000}, Decimal(6000)),
        ({"new_value": "60.00"}, Decimal("60.00")),
        ({"new_value": {"new_value": 6000, "type": "daily_budget"}}, Decimal(6000)),
        ({"old_value": 5000}, None),
        ({"new_value": True}, None),
        ({"new_value": "NaN"}, None),
        ({"new_value": [1]}, None),
    ],
)
def test_the_new_value_in_extra_data(extra: dict[str, Any], value: Decimal | None) -> None:
    assert new_value(extra) == value
    assert new_value(json.dumps(extra)) == value


@given(st.one_of(st.text(max_size=60), st.dictionaries(st.text(max_size=10), st.text())))
def test_extra_data_of_any_shape_never_raises(extra: Any) -> None:
    value = new_value(extra)
    assert value is None or value.is_finite()


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "event_type": st.sampled_from(["update_ad_set_budget", "update_campaign_budget"]),
            "event_time": st.one_of(st.none(), st.integers(), st.text(max_size=30)),
            "object_id": st.one_of(st.none(), st.integers(), st.text(max_size=20)),
            "extra_data": st.one_of(st.none(), st.text(max_size=40)),
        },
    )
)
def test_any_activity_parses_or_is_malformed(item: dict[str, Any]) -> None:
    try:
        event = parse_budget_event(item)
    except MalformedResponseError:
        return
    assert event is None or event.at.tzinfo is not None


def test_the_ad_account_as_meta_sends_it() -> None:
    body = {
        "id": "act_1004",
        "min_daily_budget": "150",
        "currency": "JPY",
        "timezone_name": "Asia/Tokyo",
    }
    assert parse_ad_account(body) == AdAccount(150, "JPY", "Asia/Tokyo")
    assert parse_ad_account({"currency": "jpy"}).currency == "JPY"


@pytest.mark.parametrize(
    "body",
    [
        {"min_daily_budget": "1.5", "currency": "US", "timezone_name": ""},
        {"min_daily_budget": -1, "currency": 392, "timezone_name": None},
        {"min_daily_budget": True, "currency": "JP\n", "timezone_name": "x" * 65},
        [],
        None,
    ],
)
def test_what_meta_did_not_send_usably_is_no_word_from_meta(body: Any) -> None:
    assert parse_ad_account(body) == AdAccount()


ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)


@given(
    st.one_of(
        ANY_JSON,
        st.fixed_dictionaries(
            {},
            optional={
                "min_daily_budget": ANY_JSON,
                "currency": st.one_of(ANY_JSON, st.from_regex(r"[A-Za-z]{3}", fullmatch=True)),
                "timezone_name": ANY_JSON,
            },
        ),
    )
)
def test_any_answer_parses_into_values_or_none(body: Any) -> None:
    found = parse_ad_account(body)
    assert found.min_daily_budget is None or found.min_daily_budget >= 0
    assert found.currency is None or (len(found.currency) == 3 and found.currency.isupper())
    assert found.timezone is None or 0 < len(found.timezone) <= 64
