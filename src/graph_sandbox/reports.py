"""The Insights routes: ``GET /act_{id}/insights`` and ``GET /{campaign_or_adset_id}/insights``,
and the async report runs (``POST …/insights``, ``GET /{report_run_id}``, its ``insights``).

Rows are built from the ad sets under the requested node: ``filtering`` picks
ad sets (``campaign.id`` reads each ad set's campaign), ``level`` groups them
into account, campaign or ad set rows, and a group with no impressions in the
period has no row at all. With ``attribution_lag`` on (``POST /_sandbox/insights``), the
conversions of recent days are those seen at the sandbox clock's time
(:mod:`graph_sandbox.attribution_lag`). A synchronous request over more than ``sync_max_cells``
(ad sets × days) times out (:mod:`graph_sandbox.report_runs`); a report run answers
the same parameters without that limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

from graph_sandbox.currencies import offset as currency_offset
from graph_sandbox.delivery import Totals
from graph_sandbox.errors import GraphError, invalid_param
from graph_sandbox.insights_fields import METRIC_FIELDS, render_metrics, with_attribution
from graph_sandbox.insights_params import (
    Slicing,
    check_action_breakdowns,
    check_reporting_options,
    hour_label,
    parse_breakdowns,
    parse_insights_fields,
    parse_level,
    parse_time_increment,
    parse_time_ranges,
    slices,
)
from graph_sandbox.objects import filter_fields, filter_value, getters
from graph_sandbox.periods import (
    MAXIMUM_PRESETS,
    PRESETS,
    Period,
    parse_time_range,
    preset_period,
)
from graph_sandbox.protocol import GraphRequest, page_body
from graph_sandbox.query import (
    Filter,
    matches,
    paginate,
    parse_fields,
    parse_filtering,
    parse_limit,
)
from graph_sandbox.report_runs import RUN_FIELDS, ReportRun, sync_timeout
from graph_sandbox.state import SandboxState
from graph_sandbox.world import Account, AdObject

IDENTITY_FIELDS = frozenset(
    {
        "account_id",
        "account_name",
        "account_currency",
        "campaign_id",
        "campaign_name",
        "adset_id",
        "adset_name",
        "objective",
        "date_start",
        "date_stop",
    }
)
INSIGHTS_FIELDS = METRIC_FIELDS | IDENTITY_FIELDS
DEFAULT_FIELDS = ("spend", "impressions")
DEFAULT_PRESET = "last_30d"
_FILTER_FIELDS = filter_fields("adset") | filter_fields("campaign")


def insights(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """One page of Insights rows for the node in the path."""
    settings = state.report_runs.settings
    rows, _ = _rows(state, req, max_cells=settings.sync_max_cells)
    return _page(req, rows, max_rows=settings.page_max_rows)


def _page(
    req: GraphRequest, rows: list[tuple[str, dict[str, Any]]], *, max_rows: int | None = None
) -> dict[str, Any]:
    limit = parse_limit(req.param("limit"))
    page = paginate(
        rows,
        lambda row: row[0],
        limit=min(limit, max_rows) if max_rows else limit,
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [row for _, row in page.items], page)


def _rows(
    state: SandboxState, req: GraphRequest, *, max_cells: int | None
) -> tuple[list[tuple[str, dict[str, Any]]], Period]:
    """(key, row) for each group with delivery, and the period.

    Raises:
        GraphError: 100 for a bad parameter; the sync timeout beyond ``max_cells``.
    """
    account, leaves, default_level = _scope(state, req.segments[0])
    level = parse_level(req.param("level"), default_level)
    fields = parse_insights_fields(
        req.param("fields"), default=DEFAULT_FIELDS, allowed=INSIGHTS_FIELDS
    )
    now = state.now()
    slicing = _slicing(req, now.astimezone(account.tz).date(), account, leaves)
    filters = parse_filtering(req.param("filtering"), _FILTER_FIELDS)
    if filters:
        leaves = [leaf for leaf in leaves if _passes(state, leaf, filters, level)]
    span = _overall(slicing)
    if max_cells is not None and len(leaves) * ((span[1] - span[0]).days + 1) > max_cells:
        raise sync_timeout(state.report_runs.settings.sync_timeout_subcode)
    unified = (req.param("use_unified_attribution_setting") or "").lower() in ("true", "1")
    groups = _groups(leaves, level, account)
    rows: list[tuple[str, dict[str, Any]]] = []
    for key, group, period, totals, extra in _slices(state, groups, slicing, now):
        shown = with_attribution(totals, unified=unified)
        rows.append((key, _row(state, group, level, account, shown, fields, period) | extra))
    return rows, span


def create_report_run(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``POST /{node}/insights``: an async report run of the same parameters (no size limit)."""
    rows, period = _rows(state, req, max_cells=None)
    account, _, _ = _scope(state, req.segments[0])
    run = state.report_runs.create(account.id, rows, period, state.now())
    return {"report_run_id": run.id}


def _run(state: SandboxState, run_id: str) -> ReportRun:
    run = state.report_runs.get(run_id)
    assert run is not None, "the router checks report run ids"
    return run


def report_run(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /{report_run_id}``: the run, one step further."""
    run = _run(state, req.segments[0])
    fields = parse_fields(req.param("fields"), default=(), allowed=RUN_FIELDS, node="AdReportRun")
    run.read(state.now())
    return run.render(fields)


def report_run_insights(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /{report_run_id}/insights``: the rows of a completed run, paged."""
    run = _run(state, req.segments[0])
    if run.status != "Job Completed":
        raise GraphError(
            100,
            f"(#100) The report run {run.id} has no results: its status is {run.status}",
        )
    return _page(req, run.rows)


def _scope(state: SandboxState, node_id: str) -> tuple[Account, list[AdObject], str]:
    """The account, the ad sets under the node, and the node's own level."""
    world = state.world
    account = world.account(node_id)
    if account is not None:
        return account, world.adsets(node_id), "account"
    obj = world.get(node_id)
    assert obj is not None, "the router checks ids before Insights"
    if obj.kind == "campaign":
        return world.account_of(obj), world.adsets_of(obj.id), "campaign"
    return world.account_of(obj), [obj], "adset"


def _slices(
    state: SandboxState, groups: dict[str, list[AdObject]], slicing: Slicing, now: datetime
) -> Iterator[tuple[str, str, Period, Totals, dict[str, str]]]:
    """Each result with delivery: its paging key, group, period, totals and breakdown value.

    Period by period, then group by group, then hour by hour. A group with no
    impressions in a slice has no row for it.
    """
    sliced = len(slicing.periods) > 1 or slicing.hourly is not None
    lag = state.report_runs.settings.attribution_lag
    curve = lag.curve if lag.enabled else None
    for period in slicing.periods:
        for group, members in groups.items():
            if slicing.hourly is None:
                totals = state.insights.totals(members, period, now, lag=curve)
                key = f"{group}|{period[0]}|None" if sliced else group
                if totals.impressions:
                    yield key, group, period, totals, {}
                continue
            hours = state.insights.hourly_totals(members, period, now, lag=curve)
            for hour, totals in enumerate(hours):
                if totals.impressions:
                    # Meta counts no unique people within an hourly breakdown.
                    hourly = totals._replace(reach=0, unique_clicks=0)
                    label = {slicing.hourly: hour_label(hour)}
                    yield f"{group}|{period[0]}|{hour}", group, period, hourly, label


def _overall(slicing: Slicing) -> Period:
    """From the first day of the first slice to the last day of the last."""
    return (
        min(period[0] for period in slicing.periods),
        max(period[1] for period in slicing.periods),
    )


def _slicing(req: GraphRequest, today: date, account: Account, leaves: list[AdObject]) -> Slicing:
    """The periods (``time_ranges``, or the period cut by ``time_increment``) and breakdown."""
    hourly = parse_breakdowns(req.param("breakdowns"))
    check_action_breakdowns(req.param("action_breakdowns"))
    check_reporting_options(
        req.param("action_attribution_windows"), req.param("action_report_time")
    )
    increment = parse_time_increment(req.param("time_increment"))
    ranges = parse_time_ranges(req.param("time_ranges"))
    period = _period(req, today, account, leaves)
    # As Graph does: time_ranges wins over time_range and date_preset, and ignores time_increment.
    return Slicing(ranges or slices(period, increment), hourly)


def _period(req: GraphRequest, today: date, account: Account, leaves: list[AdObject]) -> Period:
    preset = req.param("date_preset") or DEFAULT_PRESET
    if preset not in PRESETS:
        raise invalid_param(
            f"date_preset must be one of the following values: {', '.join(PRESETS)}"
        )
    time_range = req.param("time_range")
    if time_range:
        return parse_time_range(time_range)
    earliest = None
    if preset in MAXIMUM_PRESETS and leaves:
        earliest = min(leaf.created_time for leaf in leaves).astimezone(account.tz).date()
    return preset_period(preset, today, earliest=earliest)


def _passes(state: SandboxState, adset: AdObject, filters: list[Filter], level: str) -> bool:
    return matches(filters, lambda field: _leaf_value(state, adset, field, level))


def _leaf_value(state: SandboxState, adset: AdObject, field: str, level: str) -> Any:
    """A filter field read on an ad set; bare names mean the row's own object."""
    prefix, _, name = field.rpartition(".")
    on_campaign = prefix == "campaign" or (
        not prefix and (level == "campaign" or name not in getters("adset"))
    )
    return filter_value(state, adset, f"campaign.{name}" if on_campaign else name)


def _groups(leaves: list[AdObject], level: str, account: Account) -> dict[str, list[AdObject]]:
    groups: dict[str, list[AdObject]] = {}
    for leaf in leaves:
        if level == "account":
            key = account.id
        elif level == "campaign":
            key = leaf.campaign_id or leaf.id
        else:
            key = leaf.id
        groups.setdefault(key, []).append(leaf)
    return groups


def _row(
    state: SandboxState,
    key: str,
    level: str,
    account: Account,
    totals: Totals,
    fields: list[str],
    period: Period,
) -> dict[str, Any]:
    identity: dict[str, Any] = {
        "account_id": account.account_id,
        "account_name": account.name,
        "account_currency": account.currency,
    }
    if level != "account":
        obj = state.world.objects[key]
        campaign = obj if obj.kind == "campaign" else state.world.campaign_of(obj)
        identity |= {
            "campaign_id": campaign.id,
            "campaign_name": campaign.name,
            "objective": campaign.objective,
        }
        if obj.kind == "adset":
            identity |= {"adset_id": obj.id, "adset_name": obj.name}
    metrics = [f for f in fields if f in METRIC_FIELDS]
    row = render_metrics(totals, metrics, offset=currency_offset(account.currency))
    row |= {f: identity[f] for f in fields if f in identity}
    row["date_start"], row["date_stop"] = period[0].isoformat(), period[1].isoformat()
    return row
