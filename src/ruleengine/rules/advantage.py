"""Legacy Advantage+ campaigns: what Meta no longer lets the API change, and why. Pure.

Meta's v25.0 changelog (2026-02-18, "Advantage+ Shopping Campaigns and Advantage+ App
Campaigns deprecation"): "Applies to v25.0+. Will apply to all versions May 19, 2026.
Creation, duplication, and updates to Advantage+ shopping campaigns and Advantage+ app
campaigns is no longer allowed." (The v24.0 changelog says the same of v24.0.) Such a
campaign is one created through the old APIs: ``smart_promotion_type``
``AUTOMATED_SHOPPING_ADS`` (Advantage+ shopping) or ``SMART_APP_PROMOTION`` (Advantage+
app) — Meta's Advantage+ campaigns guide. Campaigns made the new way carry a read-only
``advantage_state_info.advantage_state`` (``advantage_plus_sales``, ``advantage_plus_app``
…) and stay editable.

So a budget, bid, name or copy action on a legacy campaign — or on one of its ad sets or
ads — is refused before any write, with the reason ``advantage_plus_legacy``. A status
change is let through: Meta's changelog does not say whether pausing counts as an
"update" (its v26.0 plan pauses the remaining such campaigns itself), and pausing is the
lever an advertiser still has; if Meta refuses it, the record shows Meta's error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: ``smart_promotion_type`` of the campaigns Meta locked, and what people call them.
LEGACY_PROMOTION_TYPES: Final = {
    "AUTOMATED_SHOPPING_ADS": "legacy Advantage+ shopping campaign",
    "SMART_APP_PROMOTION": "legacy Advantage+ app campaign",
}
#: The record's reason for an action refused on such a campaign.
REASON: Final = "advantage_plus_legacy"
#: The action types a legacy Advantage+ campaign still takes (status, and messages).
ALLOWED_ACTIONS: Final = frozenset({"pause", "activate", "notify"})

_STATE_FIELDS: Final = "smart_promotion_type,advantage_state_info,is_adset_budget_sharing_enabled"
#: How much of an ad set's daily budget Meta may move to the campaign's other ad sets itself
#: when the campaign shares ad set budgets (``is_adset_budget_sharing_enabled``; Meta's
#: SDK 24.0.0 release notes: "up to 20% of an ad set's daily budget").
META_SHARED_PCT: Final = 20


def advantage_fields(level: str) -> list[str]:
    """What a listing or a live read asks for to know the campaign's state: Advantage+ (a
    legacy one refuses most actions) and ad set budget sharing — the campaign's own fields,
    or its campaign's through field expansion."""
    if level == "campaign":
        return _STATE_FIELDS.split(",")
    return [f"campaign{{{_STATE_FIELDS}}}"]


def merged_fields(fields: list[str]) -> list[str]:
    """``fields`` with each parent's expansions merged into one, in order: Graph answers
    one ``campaign`` per object, so ``campaign{a}`` and ``campaign{b}`` become ``campaign{a,b}``."""
    plain: list[str] = []
    subfields: dict[str, list[str]] = {}
    for name in fields:
        parent, brace, rest = name.partition("{")
        if not brace:
            plain += [] if name in plain else [name]
            continue
        if parent not in subfields:
            subfields[parent] = []
            plain.append(parent + "{")
        subfields[parent] += [s for s in rest.rstrip("}").split(",") if s not in subfields[parent]]
    return [f"{n}{','.join(subfields[n[:-1]])}}}" if n.endswith("{") else n for n in plain]


def _own_or_campaigns(obj: Mapping[str, Any], name: str) -> Any:
    campaign = obj.get("campaign")
    if name in obj or not isinstance(campaign, Mapping):
        return obj.get(name)
    return campaign.get(name)


def legacy_kind(obj: Mapping[str, Any]) -> str | None:
    """``legacy Advantage+ shopping campaign`` (or app) when ``obj`` is one or belongs to
    one (read from its own fields or its ``campaign{…}`` expansion); None otherwise."""
    return LEGACY_PROMOTION_TYPES.get(str(_own_or_campaigns(obj, "smart_promotion_type")))


def advantage_state(obj: Mapping[str, Any]) -> str | None:
    """``advantage_state_info.advantage_state`` of the object's campaign, if read."""
    info = _own_or_campaigns(obj, "advantage_state_info")
    state = info.get("advantage_state") if isinstance(info, Mapping) else None
    return str(state) if state else None


def shares_budget(obj: Mapping[str, Any]) -> bool:
    """True when the object's campaign lets Meta move ad set budget between its ad sets."""
    return _own_or_campaigns(obj, "is_adset_budget_sharing_enabled") in (True, "true", "1")


def refusal_message(kind: str, action_type: str) -> str:
    """Why ``action_type`` is not sent for an object of a ``kind`` campaign."""
    return (
        f"{action_type} on a {kind}: Meta no longer allows creating, duplicating or "
        "updating these campaigns through the API (all versions since 2026-05-19; Meta's "
        "v25.0 changelog); status changes still go through"
    )


def refuses(action_type: str) -> bool:
    """True for the action types refused on a legacy Advantage+ campaign."""
    return action_type not in ALLOWED_ACTIONS
