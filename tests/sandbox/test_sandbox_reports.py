"""Big Insights: synchronous timeouts above a size, async report runs, the Insights throttle."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from sandbox_helpers import Sandbox

from graph_sandbox.admin import SandboxAdminError

FIELDS = "campaign_id,spend,impressions,purchase_roas"


async def _campaign_ids(box: Sandbox, account: str = "act_1001") -> list[str]:
    reply = await box.get(f"/{account}/campaigns", fields="id", limit="100")
    return [c["id"] for c in reply.body["data"]]


def _filter(ids: list[str]) -> list[dict[str, Any]]:
    return [{"field": "campaign.id", "operator": "IN", "value": ids}]


@pytest.mark.parametrize(
    ("chosen", "code", "subcode"), [(None, 100, 1504018), (1504038, 2, 1504038)]
)
async def test_a_sync_request_above_the_size_times_out_as_meta_says(
    sandbox: Sandbox, chosen: int | None, code: int, subcode: int
) -> None:
    ids = await _campaign_ids(sandbox)
    params = {"level": "campaign", "fields": FIELDS, "date_preset": "last_7d", "limit": "100"}
    whole = await sandbox.get("/act_1001/insights", **params)
    assert whole.status == 200
    # act_1001's ad sets × 7 days is above 100 cells; 4 campaigns' or 3 days' are not
    extra = {} if chosen is None else {"sync_timeout_subcode": chosen}
    await sandbox.admin.set_insights(sync_max_cells=100, **extra)
    refused = await sandbox.get("/act_1001/insights", **params)
    assert refused.error["code"] == code
    assert refused.error["error_subcode"] == subcode
    assert "reduce the amount of data" in refused.error["message"]
    assert refused.error["error_user_title"] == "Request Timed Out"
    assert "async jobs" in refused.error["error_user_msg"]
    # fewer ids, or a shorter range, fit
    few = await sandbox.get("/act_1001/insights", **params, filtering=_filter(ids[:4]))
    short = await sandbox.get("/act_1001/insights", **(params | {"date_preset": "last_3d"}))
    assert few.status == short.status == 200


async def test_a_report_run_moves_by_reads_and_pages_the_rows_a_sync_request_gives(
    sandbox: Sandbox,
) -> None:
    params = {"level": "campaign", "fields": FIELDS, "date_preset": "last_7d"}
    sync = await sandbox.get("/act_1001/insights", **params, limit="100")
    await sandbox.admin.set_insights(sync_max_cells=1)  # async runs have no size limit
    started = await sandbox.post("/act_1001/insights", **params)
    assert started.status == 200
    run_id = started.body["report_run_id"]
    assert isinstance(run_id, str)
    early = await sandbox.get(f"/{run_id}/insights")
    assert early.error["code"] == 100
    seen = []
    for _ in range(3):
        run = (await sandbox.get(f"/{run_id}")).body
        seen.append((run["async_status"], run["async_percent_completion"]))
    assert seen == [("Job Not Started", 0), ("Job Running", 50), ("Job Completed", 100)]
    assert run["account_id"] == "1001"
    assert run["date_start"] == sync.body["data"][0]["date_start"]
    assert run["time_completed"] >= run["time_ref"] > 0
    assert not run["is_running"]
    rows: list[dict[str, Any]] = []
    page = await sandbox.get(f"/{run_id}/insights", limit="4")
    while True:
        rows.extend(page.body["data"])
        if "next" not in page.body.get("paging", {}):
            break
        page = await sandbox.fetch("GET", page.body["paging"]["next"])
    assert rows == sync.body["data"]
    assert len(rows) > 4
    stats = await sandbox.admin.stats()
    assert stats["calls_by_kind"]["report"] == 1
    assert stats["calls_by_kind"]["report_run"] == 3
    assert await sandbox.admin.writes() == []  # a report run changes no ad object


async def test_queued_outcomes_fail_and_skip_the_next_runs(sandbox: Sandbox) -> None:
    settings = await sandbox.admin.set_insights(
        report_polls=1, report_outcomes=["Job Failed", "Job Skipped"]
    )
    assert settings["report_outcomes"] == ["Job Failed", "Job Skipped"]
    statuses = []
    for _ in range(3):
        run_id = (await sandbox.post("/act_1001/insights", level="campaign")).body["report_run_id"]
        statuses.append((await sandbox.get(f"/{run_id}")).body)
    failed, skipped, completed = statuses
    assert failed["async_status"] == "Job Failed"
    assert (failed["error_code"], failed["error_subcode"]) == (-2, 2490547)
    assert failed["error_user_msg"] == "Generating the report failed. Try again later."
    assert skipped["async_status"] == "Job Skipped"
    assert "error_code" not in skipped
    assert completed["async_status"] == "Job Completed"
    assert (await sandbox.admin.insights())["report_outcomes"] == []
    only = await sandbox.get(f"/{completed['id']}", fields="async_status")
    assert only.body == {"id": completed["id"], "async_status": "Job Completed"}


async def test_bad_insights_settings_are_refused(sandbox: Sandbox) -> None:
    for bad in ({"report_polls": 0}, {"sync_timeout_subcode": 7}, {"report_outcomes": ["x"]}):
        with pytest.raises(SandboxAdminError, match="400"):
            await sandbox.admin.set_insights(**bad)
    with pytest.raises(SandboxAdminError, match="400"):
        await sandbox.admin.set_insights(nonsense=1)


async def test_insights_responses_carry_the_insights_throttle_and_refuse_at_100(
    sandbox: Sandbox,
) -> None:
    await sandbox.admin.set_limits(insights_account_calls_per_hour=4)
    listing = await sandbox.get("/act_1001/campaigns")
    assert "X-FB-Ads-Insights-Throttle" not in listing.headers
    loads = []
    for _ in range(4):
        reply = await sandbox.get("/act_1001/insights")
        assert reply.status == 200
        loads.append(reply.usage("X-FB-Ads-Insights-Throttle"))
    assert [load["acc_id_util_pct"] for load in loads] == [25, 50, 75, 100]
    assert loads[-1]["ads_api_access_tier"] == "standard_access"
    refused = await sandbox.get("/act_1001/insights")
    assert (refused.error["code"], refused.error["error_subcode"]) == (4, 1504039)
    assert refused.error["error_user_title"] == "Too many API requests"
    assert refused.usage("X-FB-Ads-Insights-Throttle")["acc_id_util_pct"] == 100
    # another account is not throttled; the app-wide limit is its own
    assert (await sandbox.get("/act_1002/insights")).status == 200
    await sandbox.admin.set_limits(insights_app_calls_per_hour=5)
    app = await sandbox.get("/act_1003/insights")
    assert (app.error["code"], app.error["error_subcode"]) == (4, 1504022)
    assert app.usage("X-FB-Ads-Insights-Throttle")["app_id_util_pct"] == 100
    await sandbox.admin.advance_clock(3601)
    assert (await sandbox.get("/act_1001/insights")).status == 200


async def test_batch_items_carry_the_throttle_header_too(sandbox: Sandbox) -> None:
    reply = await sandbox.batch(
        [
            {"method": "GET", "relative_url": "act_1001/insights?fields=spend"},
            {"method": "GET", "relative_url": "act_1001/campaigns?fields=id"},
        ]
    )
    insights, listing = ({h["name"]: h["value"] for h in item["headers"]} for item in reply.body)
    assert orjson.loads(insights["X-FB-Ads-Insights-Throttle"])["app_id_util_pct"] == 0
    assert "X-FB-Ads-Insights-Throttle" not in listing
