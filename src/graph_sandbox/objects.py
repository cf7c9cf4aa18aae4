"""Fields of ad accounts, campaigns, ad sets and ads: their values, for rendering and filtering.

A field whose value is ``None`` (a budget the object does not have) is left
out of the rendered object, as Meta leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from graph_sandbox.currencies import min_daily_budget
from graph_sandbox.learning import stage_info
from graph_sandbox.periods import MAX_HISTORY_DAYS
from graph_sandbox.state import SandboxState
from graph_sandbox.world import Account, AdObject

Getter = Callable[[SandboxState, AdObject], Any]


def meta_time(moment: datetime) -> str:
    """Meta's timestamp format, e.g. ``2026-10-01T09:30:00+0000``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S%z")


def spent_cents(state: SandboxState, obj: AdObject, *, lifetime: bool) -> int:
    """What a campaign or ad set has spent today (or since it was created)."""
    now = state.now()
    today = now.astimezone(state.world.account_of(obj).tz).date()
    since = today - timedelta(days=MAX_HISTORY_DAYS) if lifetime else today
    adsets = state.world.adsets_of(obj.id) if obj.kind == "campaign" else [obj]
    return state.insights.totals(adsets, (since, today), now).spend_cents


def _budget_remaining(state: SandboxState, obj: AdObject) -> int | None:
    if obj.daily_budget is not None:
        return max(0, obj.daily_budget - spent_cents(state, obj, lifetime=False))
    if obj.lifetime_budget is not None:
        return max(0, obj.lifetime_budget - spent_cents(state, obj, lifetime=True))
    return None


_COMMON: dict[str, Getter] = {
    "id": lambda s, o: o.id,
    "name": lambda s, o: o.name,
    "status": lambda s, o: o.status,
    "configured_status": lambda s, o: o.status,
    "effective_status": lambda s, o: s.world.effective_status(o),
    "account_id": lambda s, o: o.account_id,
    "daily_budget": lambda s, o: o.daily_budget,
    "lifetime_budget": lambda s, o: o.lifetime_budget,
    "budget_remaining": _budget_remaining,
    "created_time": lambda s, o: o.created_time,
    "updated_time": lambda s, o: o.updated_time,
    "start_time": lambda s, o: o.created_time,
    "bid_strategy": lambda s, o: "LOWEST_COST_WITHOUT_CAP",
}

_CAMPAIGN: dict[str, Getter] = {
    **_COMMON,
    "objective": lambda s, o: o.objective,
    "buying_type": lambda s, o: "AUCTION",
    "source_campaign_id": lambda s, o: o.source_id or "0",
    # Meta's read-only Advantage+ state (its Advantage+ campaigns guide names the
    # advantage_plus_* values; "DISABLED" for the others is the sandbox's word)
    "advantage_state_info": lambda s, o: {"advantage_state": o.advantage_state or "DISABLED"},
    "smart_promotion_type": lambda s, o: o.smart_promotion_type,
    "is_adset_budget_sharing_enabled": lambda s, o: o.budget_sharing,
}

_ADSET: dict[str, Getter] = {
    **_COMMON,
    "campaign_id": lambda s, o: o.campaign_id,
    "campaign": lambda s, o: {"id": o.campaign_id},
    "optimization_goal": lambda s, o: o.optimization_goal,
    "billing_event": lambda s, o: "IMPRESSIONS",
    "source_adset_id": lambda s, o: o.source_id or "0",
    "bid_strategy": lambda s, o: o.bid_strategy,
    # an int32 in minor units, sent as a JSON number (budgets are numeric strings)
    "bid_amount": lambda s, o: Number(o.bid_amount) if o.bid_amount is not None else None,
    "learning_stage_info": lambda s, o: stage_info(s.world, s.insights, o, s.now()),
    "daily_spend_cap": lambda s, o: o.daily_spend_cap,
    "daily_min_spend_target": lambda s, o: o.daily_min_spend_target,
    "lifetime_spend_cap": lambda s, o: o.lifetime_spend_cap,
    "lifetime_min_spend_target": lambda s, o: o.lifetime_min_spend_target,
}

_AD: dict[str, Getter] = {
    name: _COMMON[name]
    for name in (
        "id",
        "name",
        "status",
        "configured_status",
        "effective_status",
        "account_id",
        "created_time",
        "updated_time",
    )
} | {
    "campaign_id": lambda s, o: o.campaign_id,
    "adset_id": lambda s, o: o.adset_id,
    "campaign": lambda s, o: {"id": o.campaign_id},
    "adset": lambda s, o: {"id": o.adset_id},
    "source_ad_id": lambda s, o: o.source_id or "0",
}

CAMPAIGN_FIELDS = frozenset(_CAMPAIGN)
#: The parents each kind's reads may expand (``adset{id,name}`` on an ad).
EXPANDABLE: dict[str, tuple[str, ...]] = {
    "campaign": (),
    "adset": ("campaign",),
    "ad": ("adset", "campaign"),
}
ADSET_FIELDS = frozenset(_ADSET)
AD_FIELDS = frozenset(_AD)

# Fields ``filtering`` accepts, bare or prefixed with the object's kind.
_FILTERABLE = (
    "id",
    "name",
    "status",
    "configured_status",
    "effective_status",
    "account_id",
    "daily_budget",
    "lifetime_budget",
    "created_time",
    "updated_time",
)
_CAMPAIGN_FILTERS = frozenset((*_FILTERABLE, "objective"))
_ADSET_FILTERS = frozenset((*_FILTERABLE, "campaign_id"))
_AD_FILTERS = frozenset(
    (*(f for f in _FILTERABLE if not f.endswith("_budget")), "campaign_id", "adset_id")
)

ACCOUNT_FIELDS = frozenset(
    {
        "id",
        "account_id",
        "name",
        "currency",
        "timezone_name",
        "account_status",
        "business_name",
        "min_daily_budget",
    }
)


def getters(kind: str) -> dict[str, Getter]:
    """Field getters of a ``campaign``, an ``adset`` or an ``ad``."""
    if kind == "ad":
        return _AD
    return _CAMPAIGN if kind == "campaign" else _ADSET


class Number(int):
    """An integer Graph sends as a JSON number, not as a string like budgets."""


def _rendered(value: Any) -> Any:
    if isinstance(value, Number):
        return int(value)
    if isinstance(value, datetime):
        return meta_time(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def render_object(
    state: SandboxState,
    obj: AdObject,
    fields: list[str],
    expanded: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The requested fields of a campaign, ad set or ad; budgets as strings, as Meta sends
    them. A parent in ``expanded`` (``campaign``, ``adset``) is rendered with its fields.

    Like Graph, the answer (and every object in it) always carries its ``id``, asked for or
    not.
    """
    table = getters(obj.kind)
    out: dict[str, Any] = {}
    for name in (*fields, "id"):
        if expanded and name in expanded:
            parent = state.world.objects[getattr(obj, f"{name}_id")]
            out[name] = render_object(state, parent, expanded[name])
            continue
        value = table[name](state, obj)
        if value is not None:
            out[name] = _rendered(value)
    return out


def render_account(account: Account, fields: list[str]) -> dict[str, Any]:
    """The requested fields of an ad account, and always its ``id``, as Graph answers."""
    values: dict[str, Any] = {
        "id": account.id,
        "account_id": account.account_id,
        "name": account.name,
        "currency": account.currency,
        "timezone_name": account.timezone_name,
        "account_status": account.account_status,
        "business_name": "Sandbox Business",
        # an unsigned int in minor units (a number, unlike campaign budgets)
        "min_daily_budget": min_daily_budget(account.currency),
    }
    return {name: values[name] for name in (*fields, "id")}


def filter_fields(kind: str) -> frozenset[str]:
    """The ``filtering`` fields valid on a listing of ``kind`` objects."""
    if kind == "ad":
        own = _AD_FILTERS
    else:
        own = _CAMPAIGN_FILTERS if kind == "campaign" else _ADSET_FILTERS
    names = set(own) | {f"{kind}.{name}" for name in own}
    if kind in ("adset", "ad"):
        names |= {f"campaign.{name}" for name in _CAMPAIGN_FILTERS}
    if kind == "ad":
        names |= {f"adset.{name}" for name in _ADSET_FILTERS}
    return frozenset(names)


def filter_value(state: SandboxState, obj: AdObject, field: str) -> Any:
    """The value ``filtering`` compares for ``field`` of ``obj``; ``campaign.x`` reads the parent.

    Times compare as Unix seconds, as Meta's filters take them.
    """
    prefix, _, name = field.rpartition(".")
    target = obj
    if prefix == "campaign" and obj.kind in ("adset", "ad"):
        target = state.world.campaign_of(obj)
    elif prefix == "adset" and obj.kind == "ad":
        target = state.world.adset_of(obj)
    value = getters(target.kind)[name](state, target)
    return int(value.timestamp()) if isinstance(value, datetime) else value
