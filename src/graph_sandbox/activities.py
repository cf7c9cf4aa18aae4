"""The activity log: ``GET /act_{id}/activities`` and ``GET /{campaign_or_adset_id}/activities``.

Meta logs every change to an ad account's objects, whoever made it — an app through
the API or a person in Ads Manager — as an ``AdActivity``: ``event_type`` (Meta's
names: ``update_ad_set_budget``, ``update_campaign_budget``, ``update_ad_set_run_status``
…), ``event_time``, the object, the actor and ``extra_data`` (a JSON string with the
old and the new value). The edge lists them newest first; ``since``/``until`` bound
the times (a week back by default), ``category`` picks a kind (``BUDGET``, ``STATUS`` …).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import orjson

from graph_sandbox.errors import invalid_param
from graph_sandbox.protocol import GraphRequest, page_body
from graph_sandbox.query import paginate, parse_fields, parse_limit
from graph_sandbox.world import AdObject

if TYPE_CHECKING:  # the state holds the log: importing it here at run time would be a cycle
    from graph_sandbox.state import SandboxState

#: Without ``since`` the edge answers one week back, as Meta's does.
DEFAULT_SPAN = timedelta(days=7)
#: ``category`` values Meta accepts (the SDK's ``AdActivity.Category``).
CATEGORIES: Final = frozenset(
    {
        "ACCOUNT",
        "AD",
        "AD_SET",
        "AUDIENCE",
        "BID",
        "BUDGET",
        "CAMPAIGN",
        "DATE",
        "STATUS",
        "TARGETING",
    }
)
ACTIVITY_FIELDS: Final = frozenset(
    {
        "actor_id",
        "actor_name",
        "application_id",
        "application_name",
        "date_time_in_timezone",
        "event_time",
        "event_type",
        "extra_data",
        "object_id",
        "object_name",
        "object_type",
        "translated_event_type",
    }
)
DEFAULT_FIELDS = ("event_time", "event_type")

# (kind, field changed) → event type, category, translated event type
_EVENTS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("adset", "budget"): ("update_ad_set_budget", "BUDGET", "Ad set budget updated"),
    ("adset", "status"): ("update_ad_set_run_status", "STATUS", "Ad set status updated"),
    ("adset", "name"): ("update_ad_set_name", "AD_SET", "Ad set name updated"),
    # the SDK's AdActivity.EventType has no update_ad_set_bid_amount: a bid change is "bidding"
    ("adset", "bid_amount"): ("update_ad_set_bidding", "BID", "Ad set bidding updated"),
    ("adset", "optimization_goal"): (
        "update_ad_set_optimization_goal",
        "AD_SET",
        "Ad set optimization goal updated",
    ),
    # the SDK's AdActivity.EventType names these two (its categories are the sandbox's guess)
    ("adset", "spend_cap"): ("update_ad_set_spend_cap", "BUDGET", "Ad set spend cap updated"),
    ("adset", "min_spend_target"): (
        "update_ad_set_min_spend_target",
        "BUDGET",
        "Ad set minimum spend target updated",
    ),
    ("campaign", "budget"): ("update_campaign_budget", "BUDGET", "Campaign budget updated"),
    ("campaign", "status"): ("update_campaign_run_status", "STATUS", "Campaign status updated"),
    ("campaign", "name"): ("update_campaign_name", "CAMPAIGN", "Campaign name updated"),
    ("ad", "status"): ("update_ad_run_status", "STATUS", "Ad status updated"),
    ("ad", "name"): ("update_ad_friendly_name", "AD", "Ad name updated"),
}
_OBJECT_TYPES = {"campaign": "CAMPAIGN", "adset": "ADSET", "ad": "AD"}
#: The fields whose changes share an event type.
_WHAT = {
    "daily_budget": "budget",
    "lifetime_budget": "budget",
    "daily_spend_cap": "spend_cap",
    "lifetime_spend_cap": "spend_cap",
    "daily_min_spend_target": "min_spend_target",
    "lifetime_min_spend_target": "min_spend_target",
}


@dataclass(frozen=True)
class Actor:
    """Who made a change, and through which application."""

    actor_id: str
    actor_name: str
    application_id: str | None
    application_name: str


#: Changes made through the Graph API with a sandbox token.
GRAPH_API: Final = Actor("100000000000001", "Sandbox User", "1000000000000001", "Sandbox App")
#: Changes injected through the admin API as if a person made them in Ads Manager.
ADS_MANAGER: Final = Actor("100000000000002", "Ads Manager User", None, "Ads Manager")


@dataclass(frozen=True)
class Activity:
    """One logged change."""

    serial: int
    at: datetime
    account_id: str
    obj_id: str
    obj_name: str
    kind: str
    event_type: str
    category: str
    translated: str
    actor: Actor
    extra: dict[str, Any]

    def render(self, fields: list[str], tz: Any) -> dict[str, Any]:
        """The requested fields; values Meta would not have are left out."""
        local = self.at.astimezone(tz)
        values: dict[str, Any] = {
            "actor_id": self.actor.actor_id,
            "actor_name": self.actor.actor_name,
            "application_id": self.actor.application_id,
            "application_name": self.actor.application_name,
            "date_time_in_timezone": f"{local:%m/%d/%Y} at {local:%I:%M %p}".lstrip("0"),
            "event_time": self.at.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "event_type": self.event_type,
            "extra_data": orjson.dumps(self.extra).decode(),
            "object_id": self.obj_id,
            "object_name": self.obj_name,
            "object_type": _OBJECT_TYPES[self.kind],
            "translated_event_type": self.translated,
        }
        return {name: values[name] for name in fields if values[name] is not None}


@dataclass
class ActivityLog:
    """Every logged change of the world, per ad account, oldest first."""

    _by_account: dict[str, list[Activity]] = field(default_factory=dict)
    _serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def record(
        self,
        state: SandboxState,
        obj: AdObject,
        name: str,
        old: Any,
        new: Any,
        *,
        actor: Actor,
    ) -> None:
        """Log that ``name`` (a field of ``obj``) went from ``old`` to ``new``."""
        what = _WHAT.get(name, name)
        event_type, category, translated = _EVENTS[(obj.kind, what)]
        account = state.world.account_of(obj)
        extra: dict[str, Any] = {"old_value": old, "new_value": new}
        if what in ("budget", "bid_amount", "spend_cap", "min_spend_target"):
            extra |= {"currency": account.currency, "type": name}
        self._by_account.setdefault(account.id, []).append(
            Activity(
                next(self._serial),
                state.now(),
                account.id,
                obj.id,
                obj.name,
                obj.kind,
                event_type,
                category,
                translated,
                actor,
                extra,
            )
        )

    def of(self, account_id: str) -> list[Activity]:
        """The account's activities, oldest first."""
        return self._by_account.get(account_id, [])


def parse_time(raw: str | None, name: str) -> datetime | None:
    """``since``/``until``: Unix seconds, a date (``2026-12-01``, UTC) or an ISO 8601 time.

    Raises:
        GraphError: 100 for anything else.
    """
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        moment = datetime.fromisoformat(text.replace("+0000", "+00:00"))
    except ValueError:
        raise invalid_param(f"Param {name} must be a Unix time or a date") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def list_activities(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """One page of the activities of an ad account (or of one campaign or ad set), newest first."""
    node = req.segments[0]
    account = state.world.account(node)
    obj = None if account is not None else state.world.get(node)
    if account is None:
        assert obj is not None, "the router checks ids before reads"
        account = state.world.account_of(obj)
    fields = parse_fields(
        req.param("fields"), default=DEFAULT_FIELDS, allowed=ACTIVITY_FIELDS, node="AdActivity"
    )
    now = state.now()
    since = parse_time(req.param("since"), "since") or now - DEFAULT_SPAN
    until = parse_time(req.param("until"), "until") or now
    category = req.param("category")
    if category is not None and category.upper() not in CATEGORIES:
        raise invalid_param(f"Param category must be one of {{{', '.join(sorted(CATEGORIES))}}}")
    selected = [
        item
        for item in reversed(state.activity.of(account.id))
        if since <= item.at <= until
        and (obj is None or item.obj_id == obj.id)
        and (category is None or item.category == category.upper())
    ]
    page = paginate(
        selected,
        lambda item: str(item.serial),
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [item.render(fields, account.tz) for item in page.items], page)
