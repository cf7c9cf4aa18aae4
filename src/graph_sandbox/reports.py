"""The Insights routes: ``GET /act_{id}/insights`` and ``GET /{campaign_adset_or_ad_id}/insights``,
and the async report runs (``POST …/insights``, ``GET /{report_run_id}``, its ``insights``).

Rows are built from the ad sets under the requested node (and their ads): ``filtering``
picks ad sets (``campaign.id`` reads each ad set's campaign) or, at level ``ad``, ads;
``level`` groups them into account, campaign, ad set or ad rows
(:mod:`graph_sandbox.insights_rows`), and a group with no impressions in the period has
no row at all. With ``attribution_lag`` on (``POST /_sandbox/insights``), the conversions
of recent days are those seen at the sandbox clock's time
(:mod:`graph_sandbox.attribution_lag`). A synchronous request over more than
``sync_max_cells`` (ad sets, or ads, × days) times out (:mod:`graph_sandbox.report_runs`);
a report run answers the same parameters without that limit.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from graph_sandbox.ads import RANKING_FIELDS, rankings
from graph_sandbox.breakdowns import parse_breakdowns
from graph_sandbox.currencies import offset as currency_offset
from graph_sandbox.errors import GraphError, invalid_param
from graph_sandbox.insights_fields import METRIC_FIELDS, render_metrics, with_attribution
from graph_sandbox.insights_params import (
    BREAKDOWNS,
    Slicing,
    check_action_breakdowns,
    check_reporting_options,
    enum_values,
    parse_insights_fields,
    parse_level,
    parse_time_increment,
    parse_time_ranges,
    slices,
)
from graph_sandbox.insights_rows import Query, Row, goal_of, rows
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
from graph_sandbox.results import results_field
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
        "ad_id",
        "ad_name",
        "objective",
        "optimization_goal",
        "date_start",
        "date_stop",
    }
)
#: Fields computed per row beyond the metrics of its totals.
ROW_FIELDS = frozenset({"results", "cost_per_result", *RANKING_FIELDS})
INSIGHTS_FIELDS = METRIC_FIELDS | IDENTITY_FIELDS | ROW_FIELDS
#: Fields that are lists by action type: requesting one puts ``action_type`` among the
#: breakdown columns Meta checks a combination of.
ACTION_LIST_FIELDS = frozenset({"actions", "action_values", "cost_per_action_type"})
DEFAULT_FIELDS = ("spend", "impressions")
DEFAULT_PRESET = "last_30d"
#: ``filtering`` fields of rows above ads (bare names: the row's own object), and of ads.
_FILTER_FIELDS = filter_fields("adset") | filter_fields("campaign")
_AD_FILTER_FIELDS = filter_fields("ad")


def insights(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """One page of Insights rows for the node in the path."""
    settings = state.report_runs.settings
    found, _ = _rows(state, req, max_cells=settings.sync_max_cells)
    return _page(req, found, max_rows=settings.page_max_rows)


def _page(
    req: GraphRequest, found: list[tuple[str, dict[str, Any]]], *, max_rows: int | None = None
) -> dict[str, Any]:
    limit = parse_limit(req.param("limit"))
    page = paginate(
        found,
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
    account, leaves, default_level, only_ad = _scope(state, req.segments[0])
    level = parse_level(req.param("level"), default_level)
    if only_ad is not None and level != "ad":
        raise invalid_param(
            f"level {level} on an ad is not supported by the sandbox; ask for level ad"
        )
    fields = parse_insights_fields(
        req.param("fields"), default=DEFAULT_FIELDS, allowed=INSIGHTS_FIELDS
    )
    now = state.now()
    slicing = _slicing(req, now.astimezone(account.tz).date(), account, leaves, fields)
    query = _query(state, req, level, account, leaves, slicing, only_ad)
    span = _overall(slicing)
    measured = len(query.adsets) if level != "ad" else sum(map(len, query.ads.values()))
    if max_cells is not None and measured * ((span[1] - span[0]).days + 1) > max_cells:
        raise sync_timeout(state.report_runs.settings.sync_timeout_subcode)
    unified = (req.param("use_unified_attribution_setting") or "").lower() in ("true", "1")
    rendered = [
        (row.key, _row(state, row, level, account, fields, unified=unified))
        for row in rows(state.insights, state.world, query)
    ]
    return rendered, span


def _query(
    state: SandboxState,
    req: GraphRequest,
    level: str,
    account: Account,
    leaves: list[AdObject],
    slicing: Slicing,
    only_ad: AdObject | None,
) -> Query:
    """The ad sets (and at level ``ad`` the ads) that pass ``filtering``."""
    allowed = _AD_FILTER_FIELDS if level == "ad" else _FILTER_FIELDS | _AD_FILTER_FIELDS
    filters = parse_filtering(req.param("filtering"), allowed)
    on_ads = [f for f in filters if f.field not in _FILTER_FIELDS and level != "ad"]
    if on_ads:
        raise invalid_param(
            f"filtering on {on_ads[0].field} at level {level} is not supported by the sandbox;"
            " filter ads at level ad"
        )
    lag = state.report_runs.settings.attribution_lag
    curve = lag.curve if lag.enabled else None
    ads: dict[str, list[AdObject]] = {}
    if level == "ad":
        for adset in leaves:
            chosen = [
                ad
                for ad in state.world.ads_of(adset.id)
                if (only_ad is None or ad is only_ad) and _ad_passes(state, ad, filters)
            ]
            if chosen:
                ads[adset.id] = chosen
        leaves = [adset for adset in leaves if adset.id in ads]
    elif filters:
        leaves = [leaf for leaf in leaves if _passes(state, leaf, filters, level)]
    return Query(level, account, leaves, ads, slicing, state.now(), curve)


def _ad_passes(state: SandboxState, ad: AdObject, filters: list[Filter]) -> bool:
    """An ad against ``filtering``: bare names and ``ad.*`` read the ad, ``adset.*`` and
    ``campaign.*`` its parents."""
    return matches(filters, lambda name: filter_value(state, ad, name))


def create_report_run(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``POST /{node}/insights``: an async report run of the same parameters (no size limit)."""
    found, period = _rows(state, req, max_cells=None)
    account = _scope(state, req.segments[0])[0]
    run = state.report_runs.create(account.id, found, period, state.now())
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


def _scope(
    state: SandboxState, node_id: str
) -> tuple[Account, list[AdObject], str, AdObject | None]:
    """The account, the ad sets under the node, the node's own level, and the ad when the
    node is one."""
    world = state.world
    account = world.account(node_id)
    if account is not None:
        return account, world.adsets(node_id), "account", None
    obj = world.get(node_id)
    assert obj is not None, "the router checks ids before Insights"
    if obj.kind == "campaign":
        return world.account_of(obj), world.adsets_of(obj.id), "campaign", None
    if obj.kind == "ad":
        return world.account_of(obj), [world.adset_of(obj)], "ad", obj
    return world.account_of(obj), [obj], "adset", None


def _overall(slicing: Slicing) -> Period:
    """From the first day of the first slice to the last day of the last."""
    return (
        min(period[0] for period in slicing.periods),
        max(period[1] for period in slicing.periods),
    )


def _slicing(
    req: GraphRequest, today: date, account: Account, leaves: list[AdObject], fields: list[str]
) -> Slicing:
    """The periods (``time_ranges``, or the period cut by ``time_increment``) and breakdowns."""
    action_columns = check_action_breakdowns(req.param("action_breakdowns"))
    if not action_columns and ACTION_LIST_FIELDS & set(fields):
        action_columns = ["action_type"]  # Meta's default action breakdown
    breakdowns = parse_breakdowns(
        enum_values(req.param("breakdowns"), "breakdowns", BREAKDOWNS),
        action_columns=action_columns,
    )
    check_reporting_options(
        req.param("action_attribution_windows"), req.param("action_report_time")
    )
    increment = parse_time_increment(req.param("time_increment"))
    ranges = parse_time_ranges(req.param("time_ranges"))
    period = _period(req, today, account, leaves)
    # As Graph does: time_ranges wins over time_range and date_preset, and ignores time_increment.
    return Slicing(ranges or slices(period, increment), breakdowns)


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


def _row(
    state: SandboxState,
    row: Row,
    level: str,
    account: Account,
    fields: list[str],
    *,
    unified: bool,
) -> dict[str, Any]:
    """A row as Meta renders it: the metrics of its totals as the client's attribution shows
    them, results per goal, rankings (ads only), identity fields, dates, breakdown columns."""
    offset = currency_offset(account.currency)
    shown = with_attribution(row.totals, unified=unified)
    out = render_metrics(shown, [f for f in fields if f in METRIC_FIELDS], offset=offset)
    for name, cost in (("results", False), ("cost_per_result", True)):
        if name in fields:
            parts = [(goal, with_attribution(part, unified=unified)) for goal, part in row.parts]
            out[name] = results_field(parts, cost=cost, offset=offset)
    if level == "ad" and set(RANKING_FIELDS) & set(fields):
        ad = state.world.objects[row.group]
        ranked = rankings(state.world.factors(ad), shown.impressions)
        out |= {name: ranked[name] for name in RANKING_FIELDS if name in fields}
    identity = _identity(state, row.group, level, account)
    out |= {name: identity[name] for name in fields if name in identity}
    out["date_start"], out["date_stop"] = row.period[0].isoformat(), row.period[1].isoformat()
    return out | row.extra


def _identity(state: SandboxState, key: str, level: str, account: Account) -> dict[str, Any]:
    """The identity fields of a row's object (an ad, ad set or campaign) and its parents."""
    identity: dict[str, Any] = {
        "account_id": account.account_id,
        "account_name": account.name,
        "account_currency": account.currency,
    }
    if level == "account":
        return identity
    obj = state.world.objects[key]
    if obj.kind == "ad":
        identity |= {"ad_id": obj.id, "ad_name": obj.name}
        obj = state.world.adset_of(obj)
    campaign = obj if obj.kind == "campaign" else state.world.campaign_of(obj)
    identity |= {
        "campaign_id": campaign.id,
        "campaign_name": campaign.name,
        "objective": campaign.objective,
    }
    if obj.kind == "adset":
        identity |= {
            "adset_id": obj.id,
            "adset_name": obj.name,
            "optimization_goal": goal_of(obj),
        }
    return identity
