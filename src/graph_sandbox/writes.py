"""Write routes: ``POST /{id}`` (status, budgets, an ad set's bid and optimisation goal, name)
and ``POST /{id}/copies``.

Validation follows Meta: every parameter is checked before anything changes,
so a refused write leaves the object exactly as it was. An ad takes only ``status`` and
``name``. A copy holds at most :data:`SYNC_COPY_LIMIT` objects (the copied campaign or ad
set, plus with ``deep_copy`` its ad sets and ads; an ad's copy is one); a bigger one is
refused (100/1885194) unless it runs inside an asynchronous batch, where it may hold
:data:`ASYNC_COPY_LIMIT`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from graph_sandbox.activities import GRAPH_API, Actor
from graph_sandbox.currencies import min_daily_budget, money
from graph_sandbox.errors import budget_too_low, copy_too_large, invalid_param
from graph_sandbox.learning import after_long_pause, is_significant
from graph_sandbox.protocol import GraphRequest
from graph_sandbox.results import GOALS, META_GOALS
from graph_sandbox.state import SandboxState
from graph_sandbox.world import ACTIVE, PAUSED, AdObject

#: The smallest budget a copy moved into an ad-set-budget campaign gets, in minor units.
MIN_BUDGET = 100

#: Meta's limits on the objects one copy creates: synchronously, and in an async batch.
SYNC_COPY_LIMIT = 3
ASYNC_COPY_LIMIT = 51

#: An ad set's spend limits under an Advantage campaign budget (Meta's ad set reference: "To
#: use this field, daily budget must be specified in the Campaign"; the lifetime twins go with a
#: lifetime budget). 0 removes one.
SPEND_LIMITS = (
    "daily_spend_cap",
    "daily_min_spend_target",
    "lifetime_spend_cap",
    "lifetime_min_spend_target",
)
_UPDATABLE = frozenset(
    {"status", "daily_budget", "lifetime_budget", "bid_amount", "optimization_goal", "name"}
    | set(SPEND_LIMITS)
)
#: What an ad takes: its budget, bid and goal are its ad set's (or campaign's).
_AD_UPDATABLE = frozenset({"status", "name"})
_BUDGETS = frozenset({"daily_budget", "lifetime_budget"})
#: Bid strategies under which an ad set takes a ``bid_amount`` (a cap Meta bids within).
BID_STRATEGIES = frozenset({"LOWEST_COST_WITH_BID_CAP", "COST_CAP"})
#: The largest ``bid_amount`` Graph takes: the field is an int32.
MAX_BID = 2**31 - 1
_COPY_PARAMS = frozenset(
    {"status_option", "rename_options", "deep_copy", "campaign_id", "start_time", "end_time"}
)
#: ``POST /{ad_id}/copies`` (Meta's ``Ad.create_copy``); ``creative_parameters`` is not simulated.
_AD_COPY_PARAMS = frozenset({"status_option", "rename_options", "adset_id"})
_STATUS_OPTIONS = ("ACTIVE", "PAUSED", "INHERITED_FROM_SOURCE")
_RENAME_STRATEGIES = ("DEEP_RENAME", "ONLY_TOP_LEVEL_RENAME", "NO_RENAME")


def _target(state: SandboxState, req: GraphRequest) -> AdObject:
    obj = state.world.get(req.segments[0])
    if obj is None:
        # Ad accounts exist but take no writes here.
        raise invalid_param(f"Unsupported post request on {req.segments[0]}")
    return obj


#: ``smart_promotion_type`` of the campaigns made through Meta's old Advantage+ APIs.
LEGACY_ADVANTAGE = frozenset({"AUTOMATED_SHOPPING_ADS", "SMART_APP_PROMOTION"})


def update(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``POST /{id}``: change status, budgets or name; ``{"success": true}``."""
    target = _target(state, req)
    if set(req.params) - {"status"}:
        check_not_legacy_advantage(state, target, "updated")
    apply_changes(state, target, req.params, actor=GRAPH_API)
    return {"success": True}


def check_not_legacy_advantage(state: SandboxState, obj: AdObject, verb: str) -> None:
    """Meta's v25.0 changelog: "Creation, duplication, and updates to Advantage+ shopping
    campaigns and Advantage+ app campaigns is no longer allowed" (all versions since
    2026-05-19). Their objects take a status change only (the changelog does not say
    whether one counts; the sandbox lets it through). The error's wording is the sandbox's:
    Meta's is not in its stored sources."""
    campaign = obj if obj.kind == "campaign" else state.world.get(obj.campaign_id or "")
    if campaign is not None and campaign.smart_promotion_type in LEGACY_ADVANTAGE:
        raise invalid_param(
            f"This object belongs to a legacy Advantage+ campaign ({campaign.smart_promotion_type})"
            f" and cannot be {verb} through the Marketing API; create an Advantage+ campaign"
            " instead (advantage_state)"
        )


def apply_changes(
    state: SandboxState, obj: AdObject, params: Mapping[str, str], *, actor: Actor
) -> None:
    """Validate and apply a change of status, budgets or name, made by ``actor``.

    Budget changes of an ad set count toward Meta's hourly limit whoever makes
    them, and every change lands in the activity log.

    Raises:
        GraphError: 100 for invalid parameters (100/1885272 below the minimum budget),
            17 when the ad set's budget may not change now.
    """
    currency = state.world.account_of(obj).currency
    campaign = state.world.get(obj.campaign_id or "") if obj.kind == "adset" else None
    changes = _validated(obj, params, currency, campaign)
    now = state.now()
    budget_change = obj.kind == "adset" and bool(
        {"daily_budget", "lifetime_budget"} & changes.keys()
    )
    if budget_change:
        state.budget_changes.check(obj.id, now)
    via_api = actor == GRAPH_API
    for name, value in changes.items():
        old = getattr(obj, name)
        _restart_learning(state, obj, name, old, value)
        if name == "status":
            # Logged with its time: delivery stops (or starts) at this instant, not at midnight.
            state.world.set_status(obj, value, now, via_api=via_api)
        else:
            if name in _BUDGETS:
                # Logged with its time too: delivery follows the new budget from this instant.
                state.world.log_budget(obj, old, value, now, via_api=via_api)
            setattr(obj, name, value)
        if old != value:
            state.activity.record(state, obj, name, old, value, actor=actor)
    obj.updated_time = now
    if budget_change:
        state.budget_changes.record(obj.id, now)


def _restart_learning(state: SandboxState, obj: AdObject, name: str, old: Any, new: Any) -> None:
    """Log a significant edit (:mod:`graph_sandbox.learning`) on the ad sets it restarts:
    the ad set itself, or every ad set sharing a campaign's budget."""
    world, now = state.world, state.now()
    if name == "status":
        significant = obj.kind == "adset" and new == ACTIVE and old != ACTIVE
        significant = significant and after_long_pause(world, obj, now)
    else:
        significant = is_significant(obj, name, old, new)
    if significant:
        for adset in world.adsets_of(obj.id) if obj.kind == "campaign" else [obj]:
            world.significant_edit(adset.id, now)


def _spend_limit(obj: AdObject, field: str, raw: str, campaign: AdObject | None) -> int | None:
    """A new spend limit of an ad set under a campaign budget of the same kind (0: none)."""
    if obj.kind != "adset":
        raise invalid_param(f"Param {field} is not supported on a {obj.kind}: set it on ad sets")
    budget = "daily_budget" if field.startswith("daily_") else "lifetime_budget"
    if campaign is None or getattr(campaign, budget) is None:
        raise invalid_param(
            f"Param {field} needs a campaign {budget.replace('_', ' ')}: to use this field,"
            f" {budget.split('_')[0]} budget must be specified in the Campaign"
        )
    try:
        value = int(raw)
    except ValueError as exc:
        raise invalid_param(f"Param {field} must be an integer in minor units") from exc
    if value < 0:
        raise invalid_param(f"Param {field} must be 0 or more")
    return value or None


def _validated(
    obj: AdObject, params: Mapping[str, str], currency: str, campaign: AdObject | None
) -> dict[str, Any]:
    _check_params(obj, params)
    changes: dict[str, Any] = {}
    if "status" in params:
        if params["status"] not in (ACTIVE, PAUSED):
            raise invalid_param("Param status must be one of {ACTIVE, PAUSED}")
        changes["status"] = params["status"]
    for field in ("daily_budget", "lifetime_budget"):
        if field in params:
            changes[field] = _budget(obj, field, params[field], currency)
    if "bid_amount" in params:
        changes["bid_amount"] = _bid(obj, params["bid_amount"])
    for field in SPEND_LIMITS:
        if field in params:
            changes[field] = _spend_limit(obj, field, params[field], campaign)
    if "optimization_goal" in params:
        changes["optimization_goal"] = _goal(obj, params["optimization_goal"])
    if "name" in params:
        if not params["name"].strip():
            raise invalid_param("Param name must be a non-empty string")
        changes["name"] = params["name"]
    return changes


def _check_params(obj: AdObject, params: Mapping[str, str]) -> None:
    unknown = sorted(params.keys() - _UPDATABLE)
    if unknown:
        raise invalid_param(
            f"Param {unknown[0]} is not supported; send status, daily_budget, lifetime_budget,"
            " bid_amount or name"
        )
    if not params:
        raise invalid_param(
            "Nothing to update: send status, daily_budget, lifetime_budget, bid_amount or name"
        )
    if obj.kind == "ad" and params.keys() - _AD_UPDATABLE:
        name = sorted(params.keys() - _AD_UPDATABLE)[0]
        raise invalid_param(
            f"Param {name} cannot be set on an ad: an ad takes status and name; budgets, bids"
            " and optimization goals are its ad set's or campaign's"
        )


def _budget(obj: AdObject, field: str, raw: str, currency: str) -> int:
    if getattr(obj, field) is None:
        raise invalid_param(_no_budget(obj, field))
    try:
        value = int(raw)
    except ValueError as exc:
        raise invalid_param(f"Param {field} must be an integer in minor units") from exc
    minimum = min_daily_budget(currency)
    if value < minimum:
        raise budget_too_low(obj.kind, money(minimum, currency))
    return value


def _bid(obj: AdObject, raw: str) -> int:
    """A new ``bid_amount``: an ad set's, an integer in minor units, under a strategy with a cap."""
    if obj.kind != "adset":
        raise invalid_param(f"Param bid_amount is not supported on a {obj.kind}: set it on ad sets")
    try:
        value = int(raw)
    except ValueError as exc:
        raise invalid_param("Param bid_amount must be an integer in minor units") from exc
    if not 0 < value <= MAX_BID:
        raise invalid_param(f"Param bid_amount must be between 1 and {MAX_BID}")
    if obj.bid_strategy not in BID_STRATEGIES:
        raise invalid_param(
            f"Param bid_amount cannot be set: the ad set's bid_strategy {obj.bid_strategy}"
            " takes no bid; use LOWEST_COST_WITH_BID_CAP or COST_CAP"
        )
    return value


def _goal(obj: AdObject, raw: str) -> str:
    """A new ``optimization_goal``: an ad set's, one of Meta's goals the sandbox delivers for."""
    if obj.kind != "adset":
        raise invalid_param(
            f"Param optimization_goal is not supported on a {obj.kind}: set it on ad sets"
        )
    if raw not in META_GOALS:
        raise invalid_param(f"Param optimization_goal must be one of {{{', '.join(META_GOALS)}}}")
    if raw not in GOALS:
        raise invalid_param(
            f"optimization_goal {raw} is not supported by the sandbox; use one of "
            f"{', '.join(GOALS)}"
        )
    return raw


def _no_budget(obj: AdObject, field: str) -> str:
    label = field.replace("_", " ")
    if obj.kind == "adset" and obj.daily_budget is None and obj.lifetime_budget is None:
        return (
            f"This ad set has no {label}: its campaign's budget is shared across its ad sets "
            "(campaign budget optimization)"
        )
    if obj.daily_budget is None and obj.lifetime_budget is None:
        return f"This campaign has no {label}: its budgets are set on its ad sets"
    return f"This {obj.kind.replace('adset', 'ad set')} has no {label}; it uses another budget type"


def copy(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``POST /{id}/copies``: a new campaign or ad set (with ``deep_copy``, its children too)."""
    source = _target(state, req)
    check_not_legacy_advantage(state, source, "duplicated")
    if source.kind == "ad":
        return copy_ad(state, source, req.params)
    options = _CopyOptions.parse(req.params)
    objects = copy_size(state, source, deep=options.deep_copy)
    limit = ASYNC_COPY_LIMIT if req.in_async_batch else SYNC_COPY_LIMIT
    if objects > limit:
        raise copy_too_large(objects, limit)
    if source.kind == "campaign":
        campaign = _clone(state, source, options, top_level=True)
        ids = [_copied("campaign", source, campaign)]
        if options.deep_copy:
            for adset in list(state.world.adsets_of(source.id)):
                ids += _clone_adset(state, adset, options, campaign, top_level=False)
        return {"copied_campaign_id": campaign.id, "ad_object_ids": ids}
    parent = state.world.campaign_of(source)
    if options.campaign_id:
        parent = _copy_target(state, source, options.campaign_id)
    ids = _clone_adset(state, source, options, parent, top_level=True)
    return {"copied_adset_id": ids[0]["copied_id"], "ad_object_ids": ids}


def copy_ad(state: SandboxState, source: AdObject, params: Mapping[str, str]) -> dict[str, Any]:
    """``POST /{ad_id}/copies``: a new ad in the source's ad set, or in ``adset_id``'s;
    ``{"copied_ad_id"}`` as Meta answers it. The copy delivers from its creation on."""
    unknown = sorted(params.keys() - _AD_COPY_PARAMS)
    if "creative_parameters" in unknown:
        raise invalid_param(
            "Param creative_parameters is not supported by the sandbox: its ads have no creatives"
        )
    if unknown:
        raise invalid_param(f"Param {unknown[0]} is not supported by /copies of an ad")
    options = _CopyOptions.parse({k: v for k, v in params.items() if k != "adset_id"})
    adset = state.world.adset_of(source)
    if params.get("adset_id"):
        adset = _ad_copy_target(state, source, params["adset_id"])
    copied = _clone_ad(state, source, options, adset, top_level=True)
    return {"copied_ad_id": copied.id}


def _ad_copy_target(state: SandboxState, source: AdObject, adset_id: str) -> AdObject:
    target = state.world.get(adset_id)
    if target is None or target.kind != "adset" or target.account_id != source.account_id:
        raise invalid_param(f"Param adset_id must be an ad set of act_{source.account_id}")
    return target


def copy_size(state: SandboxState, source: AdObject, *, deep: bool) -> int:
    """How many objects a copy of ``source`` creates (itself, and with ``deep`` its children)."""
    if not deep:
        return 1
    if source.kind == "campaign":
        return 1 + len(state.world.adsets_of(source.id)) + len(state.world.ads_of(source.id))
    return 1 + len(state.world.ads_of(source.id))


def _clone_adset(
    state: SandboxState,
    adset: AdObject,
    options: _CopyOptions,
    parent: AdObject,
    *,
    top_level: bool,
) -> list[dict[str, str]]:
    """Copy an ad set (and with ``deep_copy`` its ads) under ``parent``; the copied ids."""
    copied = _clone(state, adset, options, top_level=top_level, parent=parent)
    ids = [_copied("ad_set", adset, copied)]
    if options.deep_copy:
        for ad in list(state.world.ads_of(adset.id)):
            ids.append(_copied("ad", ad, _clone_ad(state, ad, options, copied, top_level=False)))
    return ids


def _clone_ad(
    state: SandboxState,
    source: AdObject,
    options: _CopyOptions,
    adset: AdObject,
    *,
    top_level: bool,
) -> AdObject:
    now = state.now()
    copied = replace(
        source,
        id=state.world.next_id("ad"),
        name=options.name(source.name, top_level=top_level),
        status=options.status(source.status),
        created_time=now,
        updated_time=now,
        source_id=source.id,
        campaign_id=adset.campaign_id,
        adset_id=adset.id,
    )
    state.world.add(copied)
    return copied


def _copied(kind: str, source: AdObject, copied: AdObject) -> dict[str, str]:
    return {"ad_object_type": kind, "source_id": source.id, "copied_id": copied.id}


def _copy_target(state: SandboxState, source: AdObject, campaign_id: str) -> AdObject:
    target = state.world.get(campaign_id)
    if target is None or target.kind != "campaign" or target.account_id != source.account_id:
        raise invalid_param(f"Param campaign_id must be a campaign of act_{source.account_id}")
    return target


@dataclass(frozen=True)
class _CopyOptions:
    """The parameters of ``/copies``, checked."""

    status_option: str
    prefix: str
    suffix: str
    strategy: str
    deep_copy: bool
    campaign_id: str | None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> _CopyOptions:
        unknown = sorted(params.keys() - _COPY_PARAMS)
        if unknown:
            raise invalid_param(f"Param {unknown[0]} is not supported by /copies")
        status_option = params.get("status_option") or "PAUSED"
        if status_option not in _STATUS_OPTIONS:
            raise invalid_param(
                f"Param status_option must be one of {{{', '.join(_STATUS_OPTIONS)}}}"
            )
        rename = _rename_options(params.get("rename_options"))
        strategy = str(rename.get("rename_strategy", "ONLY_TOP_LEVEL_RENAME"))
        if strategy not in _RENAME_STRATEGIES:
            raise invalid_param(f"rename_strategy must be one of {', '.join(_RENAME_STRATEGIES)}")
        return cls(
            status_option=status_option,
            prefix=str(rename.get("rename_prefix", "")),
            # Meta appends " - Copy" when the caller says nothing about names.
            suffix=str(rename.get("rename_suffix", "" if rename else " - Copy")),
            strategy=strategy,
            deep_copy=(params.get("deep_copy") or "").lower() in ("true", "1"),
            campaign_id=params.get("campaign_id") or None,
        )

    def name(self, original: str, *, top_level: bool) -> str:
        renamed = self.strategy == "DEEP_RENAME" or (
            top_level and self.strategy == "ONLY_TOP_LEVEL_RENAME"
        )
        return f"{self.prefix}{original}{self.suffix}" if renamed else original

    def status(self, source_status: str) -> str:
        return (
            source_status if self.status_option == "INHERITED_FROM_SOURCE" else self.status_option
        )


def _rename_options(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_param("rename_options must be a JSON object") from exc
    if not isinstance(value, dict):
        raise invalid_param("rename_options must be a JSON object")
    return value


def _clone(
    state: SandboxState,
    source: AdObject,
    options: _CopyOptions,
    *,
    top_level: bool,
    parent: AdObject | None = None,
) -> AdObject:
    """A fresh copy of ``source``: new id, created now, so it has no Insights history."""
    now = state.now()
    copied = replace(
        source,
        id=state.world.next_id(source.kind),
        name=options.name(source.name, top_level=top_level),
        status=options.status(source.status),
        created_time=now,
        updated_time=now,
        source_id=source.id,
    )
    if parent is not None:
        copied.campaign_id = parent.id
        cbo = parent.daily_budget is not None or parent.lifetime_budget is not None
        if cbo:
            copied.daily_budget = copied.lifetime_budget = None
        elif copied.daily_budget is None and copied.lifetime_budget is None:
            # Moving into an ad-set-budget campaign: an ad set there needs its own budget.
            copied.daily_budget = max(
                MIN_BUDGET, source.profile.spend_cents if source.profile else 0
            )
    state.world.add(copied)
    return copied
