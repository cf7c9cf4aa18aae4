"""The Insights route: ``GET /act_{id}/insights`` and ``GET /{campaign_or_adset_id}/insights``.

Rows are built from the ad sets under the requested node: ``filtering`` picks
ad sets (``campaign.id`` reads each ad set's campaign), ``level`` groups them
into account, campaign or ad set rows, and a group with no impressions in the
period has no row at all.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from graph_sandbox.currencies import offset as currency_offset
from graph_sandbox.delivery import Totals
from graph_sandbox.errors import invalid_param
from graph_sandbox.insights_fields import METRIC_FIELDS, render_metrics, with_attribution
from graph_sandbox.objects import filter_fields, filter_value, getters
from graph_sandbox.periods import Period, parse_time_range, preset_period
from graph_sandbox.protocol import GraphRequest, page_body
from graph_sandbox.query import (
    Filter,
    matches,
    paginate,
    parse_fields,
    parse_filtering,
    parse_limit,
)
from graph_sandbox.state import SandboxState
from graph_sandbox.world import Account, AdObject

LEVELS = ("account", "campaign", "adset")
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
    account, leaves, default_level = _scope(state, req.segments[0])
    level = req.param("level") or default_level
    if level not in LEVELS:
        raise invalid_param(f"level must be one of the following values: {', '.join(LEVELS)}")
    fields = parse_fields(
        req.param("fields"), default=DEFAULT_FIELDS, allowed=INSIGHTS_FIELDS, node="AdsInsights"
    )
    _check_breakdowns(req)
    now = state.now()
    period = _period(req, now.astimezone(account.tz).date(), account, leaves)
    filters = parse_filtering(req.param("filtering"), _FILTER_FIELDS)
    if filters:
        leaves = [leaf for leaf in leaves if _passes(state, leaf, filters, level)]
    unified = (req.param("use_unified_attribution_setting") or "").lower() in ("true", "1")
    rows: list[tuple[str, dict[str, Any]]] = []
    for key, members in _groups(leaves, level, account).items():
        totals = state.insights.totals(members, period, now)
        if totals.impressions:
            totals = with_attribution(totals, unified=unified)
            rows.append((key, _row(state, key, level, account, totals, fields, period)))
    page = paginate(
        rows,
        lambda row: row[0],
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [row for _, row in page.items], page)


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


def _check_breakdowns(req: GraphRequest) -> None:
    if req.param("breakdowns"):
        raise invalid_param("breakdowns are not supported by the sandbox")
    if (req.param("action_breakdowns") or "action_type") != "action_type":
        raise invalid_param("action_breakdowns must be action_type in the sandbox")
    if (req.param("time_increment") or "all_days") != "all_days":
        raise invalid_param("time_increment must be all_days in the sandbox")


def _period(req: GraphRequest, today: date, account: Account, leaves: list[AdObject]) -> Period:
    time_range = req.param("time_range")
    if time_range:
        return parse_time_range(time_range)
    preset = req.param("date_preset") or DEFAULT_PRESET
    earliest = None
    if preset == "maximum" and leaves:
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
