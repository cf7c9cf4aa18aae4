"""History: 90 days of daily and hourly Insights, and conversions that mature along the
documented attribution-lag curve (``docs/sandbox.md``, "Conversions that mature")."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sandbox_helpers import NOON_ISH, Sandbox

from graph_sandbox.attribution_lag import DEFAULT_CURVE, seen_share
from graph_sandbox.timeline import day_window

FIELDS = "spend,impressions,clicks,inline_link_clicks,actions,action_values,purchase_roas"
HOURLY = "hourly_stats_aggregated_by_advertiser_time_zone"
#: Booked at once: the same however old the day is.
BOOKED = ("spend", "impressions", "clicks", "inline_link_clicks")
CONVERSIONS = frozenset(
    {
        "add_to_cart",
        "omni_add_to_cart",
        "offsite_conversion.fb_pixel_add_to_cart",
        "initiate_checkout",
        "omni_initiated_checkout",
        "offsite_conversion.fb_pixel_initiate_checkout",
        "purchase",
        "omni_purchase",
        "offsite_conversion.fb_pixel_purchase",
        "lead",
        "onsite_conversion.lead_grouped",
    }
)
NEW_YORK = ZoneInfo("America/New_York")  # act_1001's timezone
DAY = date(2026, 11, 30)
#: Midnight after DAY in New York: 2026-12-01 05:00 UTC, so NOON_ISH is 10 h later.
END_OF_DAY = day_window(DAY, NEW_YORK)[1]


async def _adset(box: Sandbox, name_part: str) -> str:
    reply = await box.get("/act_1001/adsets", fields="id,name", limit="100")
    return str(next(a["id"] for a in reply.body["data"] if name_part in a["name"]))


async def _day_row(box: Sandbox, object_id: str, day: date = DAY) -> dict[str, Any]:
    reply = await box.get(
        f"/{object_id}/insights",
        time_range={"since": day.isoformat(), "until": day.isoformat()},
        fields=FIELDS,
        use_unified_attribution_setting="true",
    )
    assert reply.status == 200, reply.body
    [row] = reply.body["data"]
    return dict(row)


async def _all_rows(box: Sandbox, path: str, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after: dict[str, str] = {}
    while True:
        reply = await box.get(path, limit="5000", **params, **after)
        assert reply.status == 200, reply.body
        rows += reply.body["data"]
        if "next" not in reply.body.get("paging", {}):
            return rows
        after = {"after": reply.body["paging"]["cursors"]["after"]}


def _actions(row: dict[str, Any], field: str) -> dict[str, str]:
    return {item["action_type"]: item["value"] for item in row.get(field, [])}


def _cents(amount: str) -> int:
    return round(float(amount) * 100)


def _purchases(row: dict[str, Any]) -> int:
    return int(_actions(row, "actions").get("omni_purchase", "0"))


def _assert_seen(row: dict[str, Any], matured: dict[str, Any], share: float) -> None:
    """``row`` is ``matured`` with its conversions at ``share``, as the docs define it."""
    for field in BOOKED:
        assert row[field] == matured[field]
    seen = _actions(row, "actions")
    for kind, value in _actions(matured, "actions").items():
        expected = round(int(value) * share) if kind in CONVERSIONS else int(value)
        assert int(seen.get(kind, "0")) == expected, kind
    per_purchase, rest = divmod(
        _cents(_actions(matured, "action_values")["omni_purchase"]), _purchases(matured)
    )
    assert rest == 0
    value_cents = _purchases(row) * per_purchase
    values = _actions(row, "action_values")
    roas = _actions(row, "purchase_roas")
    if value_cents:
        assert _cents(values["omni_purchase"]) == value_cents
        assert roas["omni_purchase"] == f"{value_cents / _cents(row['spend']):.6f}"
    else:
        assert values == roas == {}


async def test_a_past_day_shows_fewer_conversions_until_the_curve_matures_it(
    sandbox: Sandbox,
) -> None:
    adset = await _adset(sandbox, "Prospecting US 1")
    matured = await _day_row(sandbox, adset)  # the lag is off by default
    assert _purchases(matured) >= 4
    settings = await sandbox.admin.set_insights(attribution_lag={"enabled": True})
    assert settings["attribution_lag"] == {
        "enabled": True,
        "curve": [list(point) for point in DEFAULT_CURVE],
    }

    rows = {}
    for age_h in (0, 10, 58, 130, 168, 200):
        await sandbox.admin.set_clock(END_OF_DAY + timedelta(hours=age_h))
        rows[age_h] = await _day_row(sandbox, adset)
        _assert_seen(rows[age_h], matured, seen_share(age_h))

    # earlier is lower, never higher later, and matured from the horizon (168 h) on
    purchases = [_purchases(rows[age_h]) for age_h in sorted(rows)]
    assert purchases == sorted(purchases)
    assert purchases[0] < _purchases(matured)
    assert rows[168] == rows[200] == matured
    # the day's ROAS grows with the conversions while its spend stays
    roas = [float(_actions(rows[a], "purchase_roas")["omni_purchase"]) for a in (10, 58, 200)]
    assert roas == sorted(roas)
    assert roas[0] < roas[-1]

    # switched off, the same instant shows the matured day again
    await sandbox.admin.set_clock(END_OF_DAY + timedelta(hours=10))
    await sandbox.admin.set_insights(attribution_lag={"enabled": False})
    assert await _day_row(sandbox, adset) == matured


async def test_while_a_day_lasts_its_conversions_are_at_the_curves_first_share(
    sandbox: Sandbox,
) -> None:
    adset = await _adset(sandbox, "Prospecting US 1")
    params = {"date_preset": "today", "fields": FIELDS, "use_unified_attribution_setting": "true"}
    [today] = (await sandbox.get(f"/{adset}/insights", **params)).body["data"]
    await sandbox.admin.set_insights(attribution_lag={"enabled": True})
    [seen] = (await sandbox.get(f"/{adset}/insights", **params)).body["data"]
    for field in BOOKED:
        assert seen[field] == today[field]
    assert _purchases(seen) <= _purchases(today)


async def test_hourly_rows_add_up_to_the_daily_rows_as_seen(sandbox: Sandbox) -> None:
    params = {
        "date_preset": "last_7d",
        "time_increment": "1",
        "fields": "spend,actions",
        "use_unified_attribution_setting": "true",
    }
    matured = await _all_rows(sandbox, "/act_1001/insights", **params)
    await sandbox.admin.set_insights(attribution_lag={"enabled": True})
    daily = await _all_rows(sandbox, "/act_1001/insights", **params)
    hourly = await _all_rows(sandbox, "/act_1001/insights", **params, breakdowns=[HOURLY])
    assert len(daily) == 7
    assert len(hourly) == 7 * 24

    spend: defaultdict[str, int] = defaultdict(int)
    purchases: defaultdict[str, int] = defaultdict(int)
    for hour in hourly:
        spend[hour["date_start"]] += _cents(hour["spend"])
        purchases[hour["date_start"]] += _purchases(hour)
    for day, old in zip(daily, matured, strict=True):
        assert spend[day["date_start"]] == _cents(day["spend"]) == _cents(old["spend"])
        assert purchases[day["date_start"]] == _purchases(day) <= _purchases(old)
    # the last two days are young: fewer purchases than they will have
    assert _purchases(daily[-1]) < _purchases(matured[-1])
    assert _purchases(daily[-2]) < _purchases(matured[-2])


async def test_the_hours_before_h_add_up_to_what_today_showed_at_h(sandbox: Sandbox) -> None:
    params = {
        "level": "campaign",
        "fields": "campaign_id,spend,impressions,clicks,actions",
        "use_unified_attribution_setting": "true",  # the older one is rounded per row
        # an object the scenario built paused has an empty today but full past days
        "filtering": [{"field": "adset.effective_status", "operator": "IN", "value": ["ACTIVE"]}],
    }
    await sandbox.admin.set_clock(END_OF_DAY - timedelta(hours=14))  # 10:00 on DAY
    then = await _all_rows(sandbox, "/act_1001/insights", **params, date_preset="today")
    await sandbox.admin.set_clock(END_OF_DAY + timedelta(days=3))
    day = {"since": DAY.isoformat(), "until": DAY.isoformat()}
    hours = await _all_rows(
        sandbox, "/act_1001/insights", **params, time_range=day, breakdowns=[HOURLY]
    )
    morning: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for hour in hours:
        if hour[HOURLY] < "10":
            sums = morning[hour["campaign_id"]]
            for n, value in enumerate(
                (_cents(hour["spend"]), hour["impressions"], hour["clicks"], _purchases(hour))
            ):
                sums[n] += int(value)
    assert len(then) > 5
    assert morning == {
        row["campaign_id"]: [
            _cents(row["spend"]),
            int(row["impressions"]),
            int(row["clicks"]),
            _purchases(row),
        ]
        for row in then
    }


def _created_day(created_time: str) -> date:
    return datetime.strptime(created_time, "%Y-%m-%dT%H:%M:%S%z").astimezone(NEW_YORK).date()


async def test_ninety_days_of_daily_history_per_ad_set(sandbox: Sandbox) -> None:
    first, last = date(2026, 9, 2), date(2026, 11, 30)  # last_90d at NOON_ISH
    adsets = await _all_rows(sandbox, "/act_1001/adsets", fields="id,name,created_time")
    rows = await _all_rows(
        sandbox,
        "/act_1001/insights",
        level="adset",
        date_preset="last_90d",
        time_increment="1",
        fields="adset_id,spend,impressions",
    )
    days: defaultdict[str, list[str]] = defaultdict(list)
    for row in rows:
        assert row["date_start"] == row["date_stop"]
        days[row["adset_id"]].append(row["date_start"])
    silent = {a["id"] for a in adsets if "Seasonal Promo" in a["name"]}  # never delivers
    assert {a["id"] for a in adsets} - days.keys() == silent
    spans = []
    for adset in adsets:
        if adset["id"] not in days:
            continue
        since = max(first, _created_day(adset["created_time"]))
        expected = [since + timedelta(days=n) for n in range((last - since).days + 1)]
        assert days[adset["id"]] == [d.isoformat() for d in expected]
        spans.append(len(expected))
    assert max(spans) == 90  # an ad set older than the range: all 90 days
    assert min(spans) < 90  # one created within the range: from its creation day on

    # a day within the 90 is the same day asked alone
    for row in (rows[0], rows[-1]):
        day = {"since": row["date_start"], "until": row["date_start"]}
        alone = await sandbox.get(
            f"/{row['adset_id']}/insights", time_range=day, fields="adset_id,spend,impressions"
        )
        assert alone.body["data"] == [row]


async def test_ninety_days_of_hourly_history_start_at_the_creation_hour(
    sandbox: Sandbox,
) -> None:
    adsets = await _all_rows(sandbox, "/act_1001/adsets", fields="id,name,created_time")
    delivering = [a for a in adsets if "Seasonal Promo" not in a["name"]]
    youngest = max(delivering, key=lambda a: a["created_time"])
    created = datetime.strptime(youngest["created_time"], "%Y-%m-%dT%H:%M:%S%z")
    created_day = created.astimezone(NEW_YORK).date()
    assert created_day > date(2026, 9, 2)  # within last_90d
    params = {"date_preset": "last_90d", "time_increment": "1", "fields": "spend"}
    daily = await _all_rows(sandbox, f"/{youngest['id']}/insights", **params)
    hourly = await _all_rows(sandbox, f"/{youngest['id']}/insights", **params, breakdowns=[HOURLY])

    full_days = (date(2026, 11, 30) - created_day).days
    assert len(daily) == full_days + 1
    first_hour = created.astimezone(NEW_YORK).hour
    assert len(hourly) == 24 * full_days + 24 - first_hour
    assert hourly[0]["date_start"] == created_day.isoformat()
    assert hourly[0][HOURLY] == f"{first_hour:02d}:00:00 - {first_hour:02d}:59:59"
    by_day: defaultdict[str, int] = defaultdict(int)
    for hour in hourly:
        by_day[hour["date_start"]] += _cents(hour["spend"])
    assert by_day == {day["date_start"]: _cents(day["spend"]) for day in daily}


async def test_the_curve_is_shown_changed_and_checked_through_the_admin_api(
    sandbox: Sandbox,
) -> None:
    shown = (await sandbox.admin.insights())["attribution_lag"]
    assert shown == {"enabled": False, "curve": [list(point) for point in DEFAULT_CURVE]}
    curve = [[0, 0.4], [48, 0.9], [96, 1]]
    changed = await sandbox.admin.set_insights(attribution_lag={"curve": curve})
    assert changed["attribution_lag"] == {"enabled": False, "curve": curve}
    enabled = await sandbox.admin.set_insights(attribution_lag={"enabled": True})
    assert enabled["attribution_lag"] == {"enabled": True, "curve": curve}  # the curve stays

    adset = await _adset(sandbox, "Prospecting US 1")
    await sandbox.admin.set_insights(attribution_lag={"enabled": False})
    matured = await _day_row(sandbox, adset)
    await sandbox.admin.set_insights(attribution_lag={"enabled": True})
    assert END_OF_DAY + timedelta(hours=10) == NOON_ISH  # the fixture's clock
    points = tuple((float(age), float(share)) for age, share in curve)
    _assert_seen(await _day_row(sandbox, adset), matured, seen_share(10.0, points))

    for bad in (
        {"curve": [[1, 0.5], [24, 1]]},  # does not start at age 0
        {"curve": [[0, 0.5], [24, 0.4], [48, 1]]},  # decreases
        {"curve": [[0, 0.5], [24, 0.9]]},  # never matures
        {"curve": [[0, 0.5], [0, 1]]},  # ages do not increase
        {"curve": [[0, 1.5]]},
        {"curve": []},
        {"enabled": True, "tau_h": 24},
    ):
        reply = await sandbox.fetch(
            "POST", f"{sandbox.url}/_sandbox/insights", json={"attribution_lag": bad}
        )
        assert reply.status == 400, bad
        assert "error" in reply.body
    assert (await sandbox.admin.insights())["attribution_lag"]["curve"] == curve

    await sandbox.admin.reset()
    assert (await sandbox.admin.insights())["attribution_lag"] == shown
