"""Budget schedules at Meta, read: ``GET /{campaign or ad set}/budget_schedules`` (GET only).

Meta's reference: "time_start — Search period start time. Filters out any HDPs with stop time
<= time_start from the response"
(https://developers.facebook.com/documentation/ads-commerce/marketing-api/reference/ad-campaign-group/budget_schedules).
The write path reads an object's schedules with its live budget — alone
(:func:`read_schedules`) or as a Batch API item (:func:`schedules_request`) — to plan a new one
around those Meta holds, and to settle a schedule whose answer was lost: it was made (it is
listed), or it was not. The POST and the DELETE go through the writer.
"""

from __future__ import annotations

from typing import Any

from ruleengine.meta.batch import SubRequest
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.language.budget_schedules import SCHEDULE_FIELDS, SCHEDULES

#: The most schedules one Batch API item lists; an object with more is read alone, by pages.
ITEM_LIMIT = 100


def schedules_request(object_id: str, *, since: int) -> SubRequest:
    """The Batch API item that lists an object's schedules ending after ``since`` (Unix s)."""
    params = {"fields": SCHEDULE_FIELDS, "limit": str(ITEM_LIMIT), "time_start": str(since)}
    return SubRequest(f"{object_id}/{SCHEDULES}", params)


def listed_in(body: Any) -> list[dict[str, Any]] | None:
    """The schedules of a Batch API item's answer; None when it is not a whole listing (no
    ``data``, or more pages than one item reads)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    paging = body.get("paging")
    if isinstance(paging, dict) and paging.get("next"):
        return None
    return [item for item in body["data"] if isinstance(item, dict)]


async def read_schedules(
    reader: GraphReader, object_id: str, *, token: str, account_id: str, since: int
) -> list[dict[str, Any]]:
    """Every schedule of ``object_id`` ending after ``since`` (Unix seconds), page by page.

    Raises:
        GraphError: Meta could not be read.
    """
    return await reader.edge(
        f"{object_id}/{SCHEDULES}",
        token=token,
        fields=SCHEDULE_FIELDS.split(","),
        account_id=account_id,
        params={"time_start": str(since)},
    )
