"""Budget schedules (Meta's high-demand periods) in the sandbox: made, listed, read and deleted
over HTTP and the Batch API, refused where Meta (or the sandbox, where Meta is silent) refuses
them — and spent by the delivery model inside their windows."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_helpers import NOON_ISH, TOKEN, Sandbox

from graph_sandbox.insights import InsightsEngine
from graph_sandbox.scenarios import WorldConfig, build_world
from graph_sandbox.schedules import HighDemandPeriod
from graph_sandbox.world import AdObject, World

#: 18:00–22:00 UTC on the sandbox's day (13:00–17:00 in New York).
START = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
HOUR = 3600


def window(start: datetime = START, hours: float = 4) -> dict[str, str]:
    first = int(start.timestamp())
    return {"time_start": str(first), "time_end": str(first + round(hours * HOUR))}


async def campaign_named(sandbox: Sandbox, name: str, account: str = "act_1001") -> str:
    found = await sandbox.get(f"/{account}/campaigns", fields="id,name", limit="100")
    return next(c["id"] for c in found.body["data"] if c["name"] == name)


async def test_a_schedule_is_made_listed_read_and_deleted(sandbox: Sandbox) -> None:
    campaign = await campaign_named(sandbox, "[AUTO] Prospecting US 1")
    made = await sandbox.post(
        f"/{campaign}/budget_schedules",
        budget_value="50",
        budget_value_type="MULTIPLIER",
        **window(),
    )
    assert made.status == 200 and set(made.body) == {"id"}
    fields = "id,ad_object_id,budget_value,budget_value_type,time_start,time_end"
    listed = await sandbox.get(f"/{campaign}/budget_schedules", fields=fields)
    assert listed.body["data"] == [
        {
            "id": made.body["id"],
            "ad_object_id": campaign,
            "budget_value": 50,
            "budget_value_type": "MULTIPLIER",
            "time_start": "2026-12-01T18:00:00+0000",
            "time_end": "2026-12-01T22:00:00+0000",
        }
    ]
    # Meta's filters: time_start leaves out those ending at or before it, time_stop those
    # starting at or after it
    ending = str(int(START.timestamp()) + 4 * HOUR)
    assert (await sandbox.get(f"/{campaign}/budget_schedules", time_start=ending)).body == {
        "data": []
    }
    assert (
        await sandbox.get(f"/{campaign}/budget_schedules", time_stop=window()["time_start"])
    ).body == {"data": []}
    node = await sandbox.get(f"/{made.body['id']}", fields="budget_value,ad_object_id")
    assert node.body == {"budget_value": 50, "ad_object_id": campaign, "id": made.body["id"]}
    gone = await sandbox.fetch(
        "DELETE", f"{sandbox.graph}/{made.body['id']}", params={"access_token": TOKEN}
    )
    assert (gone.status, gone.body) == (200, {"success": True})
    assert (await sandbox.get(f"/{campaign}/budget_schedules")).body == {"data": []}
    again = await sandbox.fetch(
        "DELETE", f"{sandbox.graph}/{made.body['id']}", params={"access_token": TOKEN}
    )
    assert (again.error["code"], again.error["error_subcode"]) == (100, 33)
    writes = [(w["kind"], w["ok"]) for w in await sandbox.admin.writes()]
    assert writes == [("budget_schedule", True), ("delete", True), ("delete", False)]


async def test_the_batch_api_makes_and_deletes_schedules(sandbox: Sandbox) -> None:
    campaign = await campaign_named(sandbox, "[AUTO] Prospecting US 1")
    form = "budget_value=25&budget_value_type=ABSOLUTE&" + "&".join(
        f"{k}={v}" for k, v in window().items()
    )
    made = await sandbox.batch(
        [{"method": "POST", "relative_url": f"{campaign}/budget_schedules", "body": form}]
    )
    schedule = made.body[0]
    assert schedule["code"] == 200
    schedule_id = orjson.loads(schedule["body"])["id"]
    deleted = await sandbox.batch([{"method": "DELETE", "relative_url": schedule_id, "body": ""}])
    assert deleted.body[0]["code"] == 200
    assert (await sandbox.get(f"/{campaign}/budget_schedules")).body == {"data": []}


async def test_refusals_leave_nothing_behind(sandbox: Sandbox) -> None:
    campaign = await campaign_named(sandbox, "[AUTO] Prospecting US 1")
    lifetime = await campaign_named(sandbox, "[AUTO] Broad US 1")
    legacy = await campaign_named(sandbox, "Advantage+ Shopping ID (legacy)", "act_1003")
    path = f"/{campaign}/budget_schedules"
    good = {"budget_value": "50", "budget_value_type": "MULTIPLIER"}
    assert (await sandbox.post(path, **good, **window())).status == 200
    refusals: list[tuple[str, dict[str, Any]]] = [
        (path, good | window(START + timedelta(hours=2))),  # overlaps the first
        (path, good | window(START + timedelta(minutes=5))),  # off a quarter hour
        (path, good | window(NOON_ISH - timedelta(hours=1))),  # in the past
        (path, good | window(START + timedelta(hours=8), hours=0)),  # empty
        (path, good | window(START + timedelta(hours=8)) | {"budget_value": "0"}),
        (path, good | window(START + timedelta(hours=8)) | {"budget_value_type": "PERCENT"}),
        (path, good | window(START + timedelta(hours=8)) | {"recurrence_type": "DAILY"}),
        (path, {"budget_value": "50"} | window(START + timedelta(hours=8))),
        (f"/{lifetime}/budget_schedules", good | window()),  # no daily budget to raise
        (f"/{legacy}/budget_schedules", good | window()),  # legacy Advantage+: no updates
    ]
    for where, form in refusals:
        refused = await sandbox.post(where, **form)
        assert (refused.status, refused.error["code"]) == (400, 100), (form, refused.body)
    assert len((await sandbox.get(path)).body["data"]) == 1
    ad = (await sandbox.get(f"/{campaign}/ads", fields="id")).body["data"][0]["id"]
    assert (await sandbox.post(f"/{ad}/budget_schedules", **good, **window())).status == 400


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    form=st.dictionaries(
        st.sampled_from(
            ["budget_value", "budget_value_type", "time_start", "time_end", "recurrence_type"]
        ),
        st.one_of(
            st.integers(-(2**70), 2**70).map(str),
            st.sampled_from(["ABSOLUTE", "MULTIPLIER", "WEEKLY", "ONE_TIME", "", "1e3", "١٢"]),
            st.text(max_size=12),
        ),
    )
)
async def test_hostile_parameters_are_answered_with_meta_errors(
    sandbox: Sandbox, form: dict[str, str]
) -> None:
    campaign = await campaign_named(sandbox, "[AUTO] Prospecting US 2")
    answer = await sandbox.post(f"/{campaign}/budget_schedules", **form)
    assert answer.status in (200, 400), answer.body
    if answer.status == 400:
        assert answer.error["code"] == 100
    else:  # made: a whole window on quarter hours, ahead of the clock
        made = await sandbox.get(f"/{answer.body['id']}", fields="time_start,time_end")
        await sandbox.fetch(
            "DELETE", f"{sandbox.graph}/{answer.body['id']}", params={"access_token": TOKEN}
        )
        assert made.body["time_start"] < made.body["time_end"]


# ---------------------------------------------------------------- delivery


def _first(world: World, name: str) -> AdObject:
    return next(c for c in world.campaigns("act_1001") if c.name == name)


def _spend(engine: InsightsEngine, adsets: list[AdObject], day: date, at: datetime) -> int:
    return engine.totals(adsets, (day, day), at).spend_cents


def _period(world: World, campaign: AdObject, **changes: Any) -> HighDemandPeriod:
    fields: dict[str, Any] = {
        "id": world.schedules.next_id(),
        "object_id": campaign.id,
        "account_id": campaign.account_id,
        "budget_value": 50,
        "budget_value_type": "MULTIPLIER",
        "time_start": START,
        "time_end": START + timedelta(hours=4),
        "recurrence_type": None,
        "created_at": NOON_ISH,
    }
    return HighDemandPeriod(**(fields | changes))


def _hour_spend(engine: InsightsEngine, adsets: list[AdObject], end: datetime) -> int:
    day = end.astimezone(START.tzinfo).date()
    return _spend(engine, adsets, day, end) - _spend(engine, adsets, day, end - timedelta(hours=1))


def test_a_window_spends_at_the_scheduled_budget_and_a_deletion_stops_it() -> None:
    world = build_world(WorldConfig(seed=1))
    campaign = _first(world, "[AUTO] Prospecting US 1")  # daily 200.00
    adsets = world.adsets_of(campaign.id)
    plain = InsightsEngine(world)
    ends = [START + timedelta(hours=h) for h in (1, 3, 5)]
    before = [_hour_spend(plain, adsets, end) for end in ends]
    # ×1.5 in percent; 100.00 more on a 200.00 budget: also ×1.5
    for changes in ({}, {"budget_value_type": "ABSOLUTE", "budget_value": 100}):
        scheduled = _period(world, campaign, **changes)
        world.schedules.add(scheduled)
        during = [_hour_spend(InsightsEngine(world), adsets, end) for end in ends]
        # within the rounding of each ad set's share of its day
        assert during[:2] == [pytest.approx(1.5 * b, rel=0.01) for b in before[:2]]
        # after the window: the budget in force again
        assert during[2] == pytest.approx(before[2], rel=0.01)
        # the counterfactual leaves out what the API made since
        counterfactual = InsightsEngine(world).without_writes(NOON_ISH)
        assert _hour_spend(counterfactual, adsets, ends[0]) == before[0]
        scheduled.deleted_at = START + timedelta(hours=2)
        cut = [_hour_spend(InsightsEngine(world), adsets, end) for end in ends]
        # what was spent before the deletion stays; after it, the budget in force again
        assert cut[0] == during[0]
        assert cut[1] == pytest.approx(before[1], rel=0.01)
        world.schedules = type(world.schedules)(seed=1)


def test_a_weekly_window_comes_back_every_seven_days() -> None:
    world = build_world(WorldConfig(seed=1))
    campaign = _first(world, "[AUTO] Prospecting US 1")
    adsets = world.adsets_of(campaign.id)
    ends = [START + timedelta(days=days, hours=1) for days in (7, 14, 3)]
    plain = [_hour_spend(InsightsEngine(world), adsets, end) for end in ends]
    world.schedules.add(_period(world, campaign, recurrence_type="WEEKLY"))
    weekly = [_hour_spend(InsightsEngine(world), adsets, end) for end in ends]
    assert weekly[:2] == [pytest.approx(1.5 * p, rel=0.01) for p in plain[:2]]
    assert weekly[2] == pytest.approx(plain[2], rel=0.01)  # not a day of the window
