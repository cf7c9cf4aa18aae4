"""The activity log: every change by anyone, as ``GET /act_{id}/activities`` lists it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sandbox_helpers import NOON_ISH, Sandbox

from graph_sandbox.activities import parse_time
from graph_sandbox.errors import GraphError

FIELDS = "event_time,event_type,object_id,object_type,actor_id,actor_name,application_name"


async def _abo_adset(box: Sandbox) -> dict[str, Any]:
    adsets = await box.get("/act_1001/adsets", fields="id,name,daily_budget", limit="100")
    return next(a for a in adsets.body["data"] if "daily_budget" in a)


async def test_budget_changes_by_api_and_ads_manager_are_listed_newest_first(
    sandbox: Sandbox,
) -> None:
    adset = await _abo_adset(sandbox)
    await sandbox.post(f"/{adset['id']}", daily_budget="6000")
    await sandbox.admin.advance_clock(60)
    await sandbox.admin.ads_manager_change(adset["id"], daily_budget=6500)
    reply = await sandbox.get("/act_1001/activities", fields=FIELDS + ",extra_data")
    manager, api = reply.body["data"]
    assert manager == {
        "event_time": "2026-12-01T15:01:00+0000",
        "event_type": "update_ad_set_budget",
        "object_id": adset["id"],
        "object_type": "ADSET",
        "actor_id": "100000000000002",
        "actor_name": "Ads Manager User",
        "application_name": "Ads Manager",
        "extra_data": manager["extra_data"],
    }
    assert orjson.loads(manager["extra_data"]) == {
        "old_value": 6000,
        "new_value": 6500,
        "currency": "USD",
        "type": "daily_budget",
    }
    assert api["event_time"] == "2026-12-01T15:00:00+0000"
    assert api["application_name"] == "Sandbox App"
    assert orjson.loads(api["extra_data"])["old_value"] == int(adset["daily_budget"])
    # the ad set's own edge lists the same events; another account's lists nothing
    own = await sandbox.get(f"/{adset['id']}/activities", fields="event_time")
    assert len(own.body["data"]) == 2
    assert (await sandbox.get("/act_1002/activities")).body == {"data": []}


async def test_category_since_and_paging(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    await sandbox.post(f"/{adset['id']}", status="PAUSED")
    for step in range(3):
        await sandbox.admin.advance_clock(600)
        await sandbox.post(f"/{adset['id']}", daily_budget=str(7100 + step))
    await sandbox.post(f"/{adset['id']}", name="Renamed")
    everything = await sandbox.get("/act_1001/activities", fields="event_type", limit="100")
    assert [e["event_type"] for e in everything.body["data"]] == [
        "update_ad_set_name",
        *["update_ad_set_budget"] * 3,
        "update_ad_set_run_status",
    ]
    budgets = await sandbox.get("/act_1001/activities", category="BUDGET", fields="event_type")
    assert len(budgets.body["data"]) == 3
    since = int((NOON_ISH + timedelta(minutes=15)).timestamp())
    recent = await sandbox.get(
        "/act_1001/activities", category="BUDGET", since=str(since), fields="event_time"
    )
    assert [e["event_time"] for e in recent.body["data"]] == [
        "2026-12-01T15:30:00+0000",
        "2026-12-01T15:20:00+0000",
    ]
    page = await sandbox.get("/act_1001/activities", limit="2", fields="event_type")
    sizes = [len(page.body["data"])]
    while "next" in page.body["paging"]:
        page = await sandbox.fetch("GET", page.body["paging"]["next"])
        sizes.append(len(page.body["data"]))
    assert sizes == [2, 2, 1]


async def test_a_change_to_the_same_value_logs_nothing(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    await sandbox.post(f"/{adset['id']}", daily_budget=adset["daily_budget"])
    assert (await sandbox.get("/act_1001/activities")).body == {"data": []}


async def test_the_default_span_is_one_week(sandbox: Sandbox) -> None:
    adset = await _abo_adset(sandbox)
    await sandbox.post(f"/{adset['id']}", status="PAUSED")
    await sandbox.admin.advance_clock(7 * 86400 + 1)
    assert (await sandbox.get("/act_1001/activities")).body == {"data": []}
    old = await sandbox.get("/act_1001/activities", since="2026-12-01")
    assert len(old.body["data"]) == 1


async def test_bad_parameters_are_error_100(sandbox: Sandbox) -> None:
    for params in ({"fields": "colour"}, {"since": "yesterday-ish"}, {"category": "MOOD"}):
        reply = await sandbox.get("/act_1001/activities", **params)
        assert (reply.status, reply.error["code"]) == (400, 100), params


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1)))
def test_since_reads_unix_seconds_dates_and_iso_times(moment: datetime) -> None:
    aware = moment.replace(tzinfo=UTC)
    assert parse_time(str(int(aware.timestamp())), "since") == aware.replace(microsecond=0)
    assert parse_time(aware.isoformat(), "since") == aware
    assert parse_time(aware.strftime("%Y-%m-%dT%H:%M:%S+0000"), "since") == aware.replace(
        microsecond=0
    )
    assert parse_time(aware.date().isoformat(), "since") == datetime(
        aware.year, aware.month, aware.day, tzinfo=UTC
    )


@given(st.text(max_size=40))
def test_since_never_raises_anything_but_error_100(raw: str) -> None:
    code: int | None = None
    try:
        parsed = parse_time(raw, "since")
    except GraphError as exc:
        code = exc.code
    else:
        assert parsed is None or parsed.tzinfo is not None
    assert code in (None, 100)


def test_an_empty_since_is_no_since() -> None:
    assert parse_time("", "since") is None
    assert parse_time(None, "since") is None
    with pytest.raises(GraphError):
        parse_time("nan-ish", "since")
