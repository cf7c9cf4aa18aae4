"""What the ad account itself says: its minimum daily budget, currency and timezone, and the
budget changes in its activity log (GET only).

Meta logs every change to an ad account's objects, whoever made it — this engine,
another tool, a person in Ads Manager — in the account's ``activities`` edge. A budget
change is an event of type ``update_ad_set_budget`` or ``update_campaign_budget`` whose
``extra_data`` (a JSON string) carries the new value. Meta documents neither the exact
shape of ``extra_data`` nor its unit, so :func:`parse_budget_event` reads the new value
defensively and leaves it out when it cannot tell.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Any, Final

from ruleengine.meta.errors import MalformedResponseError
from ruleengine.meta.reader import GraphReader, next_cursor
from ruleengine.rules.entity import parse_meta_time

BUDGET_EVENTS: Final = frozenset({"update_ad_set_budget", "update_campaign_budget"})
#: What the engine reads of the ad account itself, in one GET.
ACCOUNT_FIELDS: Final = ("id", "min_daily_budget", "currency", "timezone_name")
_CURRENCY: Final = re.compile(r"[A-Za-z]{3}")
_MAX_TIMEZONE_CHARS: Final = 64
ACTIVITY_FIELDS: Final = ("event_time", "event_type", "object_id", "object_type", "extra_data")
ACTIVITY_PAGE_SIZE: Final = 500


@dataclass(frozen=True)
class BudgetEvent:
    """A budget change in the activity log.

    Attributes:
        object_id: the campaign or ad set.
        at: when Meta logged it (aware UTC).
        new_value: the budget it set, as Meta wrote it in ``extra_data`` (``None`` if absent).
    """

    object_id: str
    at: datetime
    new_value: Decimal | None = None


def _time(raw: Any) -> datetime:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return datetime.fromtimestamp(raw, UTC)
    if isinstance(raw, str) and raw.strip().isdigit():
        return datetime.fromtimestamp(int(raw), UTC)
    if isinstance(raw, str):
        moment = parse_meta_time(raw.strip())
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    raise ValueError(f"not a time: {raw!r}")


def _number(raw: Any) -> Decimal | None:
    if isinstance(raw, bool) or raw is None:
        return None
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def new_value(extra_data: Any) -> Decimal | None:
    """The new value in ``extra_data``: ``{"new_value": 6000, …}``, or nested
    ``{"new_value": {"new_value": 6000, …}}``, as an object or a JSON string."""
    data = extra_data
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return None
    if not isinstance(data, dict):
        return None
    value = data.get("new_value")
    if isinstance(value, dict):
        value = value.get("new_value")
    return _number(value)


def parse_budget_event(item: Any) -> BudgetEvent | None:
    """The budget event in one activity; ``None`` for any other kind of activity.

    Raises:
        MalformedResponseError: a budget event without a readable time or object.
    """
    if not isinstance(item, dict) or item.get("event_type") not in BUDGET_EVENTS:
        return None
    object_id = item.get("object_id")
    try:
        at = _time(item.get("event_time"))
    except (ValueError, OverflowError, OSError):
        at = None
    if at is None or not isinstance(object_id, str | int) or isinstance(object_id, bool):
        raise MalformedResponseError(
            "activities: a budget event without its time or object", response=item
        )
    return BudgetEvent(str(object_id), at, new_value(item.get("extra_data")))


def _items(body: Any) -> Sequence[Any]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise MalformedResponseError("activities: expected {'data': [...]}", response=body)
    return data


async def read_budget_events(
    reader: GraphReader, account_id: str, *, token: str, since: datetime
) -> list[BudgetEvent]:
    """Budget changes of every campaign and ad set of the account since ``since``, by anyone.

    One request per 500 activities (``category=BUDGET`` keeps other events out).
    """
    params: dict[str, Any] = {
        "fields": ",".join(ACTIVITY_FIELDS),
        "since": int(since.timestamp()),
        "category": "BUDGET",
        "limit": ACTIVITY_PAGE_SIZE,
    }
    path = f"{account_id}/activities"
    events: list[BudgetEvent] = []
    after: str | None = None
    while True:
        page = params | ({"after": after} if after else {})
        call = partial(
            reader.session.request, "GET", path, token=token, params=page, account_id=account_id
        )
        body = await reader.reads.run(call, what=f"activities of {account_id}")
        parsed = (parse_budget_event(item) for item in _items(body))
        events.extend(e for e in parsed if e is not None and e.at >= since)
        after = next_cursor(body)
        if after is None:
            return events


@dataclass(frozen=True)
class AdAccount:
    """The ad account as Meta holds it; ``None`` where Meta sent nothing usable.

    Attributes:
        min_daily_budget: the least daily budget Meta accepts, in the currency's minor units.
        currency: the ISO 4217 code, upper case (``JPY``).
        timezone: Meta's ``timezone_name`` (``Asia/Tokyo``).
    """

    min_daily_budget: int | None = None
    currency: str | None = None
    timezone: str | None = None


def parse_ad_account(body: Any) -> AdAccount:
    """The fields of :data:`ACCOUNT_FIELDS` in Meta's answer; never raises (a field Meta
    sent in a shape it does not document is ``None``: no word from Meta on it)."""
    if not isinstance(body, dict):
        return AdAccount()
    minimum = _number(body.get("min_daily_budget"))
    if minimum is None or minimum < 0 or minimum != minimum.to_integral_value():
        minimum = None
    currency = body.get("currency")
    timezone = body.get("timezone_name")
    return AdAccount(
        min_daily_budget=None if minimum is None else int(minimum),
        currency=(
            currency.upper()
            if isinstance(currency, str) and _CURRENCY.fullmatch(currency)
            else None
        ),
        timezone=(
            timezone
            if isinstance(timezone, str) and 0 < len(timezone) <= _MAX_TIMEZONE_CHARS
            else None
        ),
    )


async def read_ad_account(reader: GraphReader, account_id: str, *, token: str) -> AdAccount:
    """The account's minimum daily budget, currency and timezone: one GET."""
    body = await reader.get_object(
        account_id, token=token, fields=list(ACCOUNT_FIELDS), account_id=account_id
    )
    return parse_ad_account(body)
