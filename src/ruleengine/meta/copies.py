"""Copies at Meta: what ``/copies`` answers, and the request sets of older background copies.

Meta copies a small tree at once (``POST /{id}/copies``: at most 3 objects, the
copied campaign or ad set and, with ``deep_copy``, its ad sets and ads) and
refuses a bigger one with error 100/1885194 without copying anything; the engine then
makes it as a tree (:mod:`ruleengine.writes.copy_tree`). Earlier releases sent such a
copy as an asynchronous batch (``POST /act_{id}/async_batch_requests``), which apps
created since 2026-11-04 may not use; a pending intent of one is still settled from
``GET /{set_id}/requests`` (:func:`read_async_copy`). The POSTs go through the writer;
this module parses answers and reads request sets (GET only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Literal

from ruleengine.meta.errors import GraphError, MalformedResponseError, error_from_body
from ruleengine.meta.reader import GraphReader

#: Meta's subcode (with code 100) for a copy too big to be made synchronously.
COPY_TOO_LARGE_SUBCODE: Final = 1885194
#: Statuses of an asynchronous request that are still on their way.
_RUNNING: Final = frozenset({"INITIAL", "IN_PROGRESS", "PENDING_DEPENDENCY"})

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class CopyResult:
    """A copy Meta made: the copy's id and every object it created.

    Attributes:
        copied_id: The new campaign, ad set or ad (``copied_ad_id``: an ad is copied alone,
            into its own ad set).
        objects: ``[{"ad_object_type", "source_id", "copied_id"}]``, the copy first: for a
            deep copy also every ad set and ad it created.
        mode: ``sync`` (``/copies``), ``tree`` (the copy alone, then its children in Batch
            API calls: :mod:`ruleengine.writes.copy_tree`) or ``async`` (an asynchronous
            batch, as copies were made before new apps lost them).
        request_set_id: The asynchronous batch's request set, if one was used.
        complete: False for a tree copy that stopped part-way (what was made is listed).
        level: A tree copy's top object: ``campaign`` or ``adset``.
        planned: How many objects a tree copy makes when whole (the top one included).
    """

    copied_id: str
    objects: list[dict[str, str]] = field(default_factory=list)
    mode: Literal["sync", "async", "tree"] = "sync"
    request_set_id: str | None = None
    complete: bool = True
    level: str | None = None
    planned: int | None = None

    def as_response(self) -> dict[str, Any]:
        """What the intent and the execution record keep of it."""
        response: dict[str, Any] = {
            "copied_id": self.copied_id,
            "copied_ids": [o["copied_id"] for o in self.objects] or [self.copied_id],
            "objects": self.objects,
            "mode": self.mode,
            "request_set_id": self.request_set_id,
            "complete": self.complete,
        }
        if self.mode == "tree":
            response |= {"level": self.level, "planned": self.planned}
        return response


def parse_copy(
    body: Any, *, mode: Literal["sync", "async"] = "sync", request_set_id: str | None = None
) -> CopyResult:
    """A ``/copies`` answer as a :class:`CopyResult`.

    Raises:
        MalformedResponseError: the answer names no copy.
    """
    copied = None
    if isinstance(body, dict):
        copied = (
            body.get("copied_campaign_id")
            or body.get("copied_adset_id")
            or body.get("copied_ad_id")
        )
    if not copied:
        raise MalformedResponseError("copies answered without the id of the copy", response=body)
    raw = body.get("ad_object_ids") if isinstance(body, dict) else None
    objects = [
        {k: str(o[k]) for k in ("ad_object_type", "source_id", "copied_id") if k in o}
        for o in (raw if isinstance(raw, list) else [])
        if isinstance(o, dict) and o.get("copied_id")
    ]
    return CopyResult(str(copied), objects, mode, request_set_id)


def too_large(error: GraphError) -> bool:
    """True when Meta refused a synchronous copy as too big (nothing was copied)."""
    return error.code == 100 and error.subcode == COPY_TOO_LARGE_SUBCODE


async def read_async_copy(
    reader: GraphReader, set_id: str, *, token: str, account_id: str
) -> CopyResult | GraphError | None:
    """The copy an asynchronous batch made; Meta's error when the copy failed; None while
    Meta is still copying.

    Raises:
        GraphError: the set could not be read (the copy may still be made).
    """
    params = {"fields": "id,status,result"}
    body = await reader.reads.run(
        partial(
            reader.session.request,
            "GET",
            f"{set_id}/requests",
            token=token,
            params=params,
            account_id=account_id,
        ),
        what=f"reading the asynchronous batch {set_id}",
    )
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise MalformedResponseError(
            f"the asynchronous batch {set_id} has no request", response=body
        )
    request = data[0]
    status = str(request.get("status") or "")
    if status in _RUNNING:
        return None
    result = request.get("result")
    if status == "SUCCESS":
        return parse_copy(result, mode="async", request_set_id=set_id)
    return error_from_body(
        result if isinstance(result, dict) else {"error": {"message": f"copy {status}"}},
        http_status=400,
    )


async def read_copies(
    reader: GraphReader, source_id: str, *, token: str, account_id: str
) -> list[str]:
    """The ids of every copy Meta holds of ``source_id`` (a campaign, ad set or ad):
    ``GET /{id}/copies``, each page. Meta documents the edge for all three:
    https://developers.facebook.com/docs/marketing-api/reference/ad-campaign-group/copies/,
    https://developers.facebook.com/docs/marketing-api/reference/ad-campaign/copies/ (ad sets)
    and https://developers.facebook.com/docs/graph-api/reference/adgroup/copies/ (ads). What
    settles a copy whose answer was lost: it was made, or it was not."""
    found: list[str] = []
    after: str | None = None
    while True:
        params = {"fields": "id", "limit": "100"} | ({"after": after} if after else {})
        body = await reader.reads.run(
            partial(
                reader.session.request,
                "GET",
                f"{source_id}/copies",
                token=token,
                params=params,
                account_id=account_id,
            ),
            what=f"reading the copies of {source_id}",
        )
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            message = f"the copies of {source_id} came without data"
            raise MalformedResponseError(message, response=body)
        found += [str(d["id"]) for d in data if isinstance(d, dict) and d.get("id")]
        paging = body.get("paging") if isinstance(body, dict) else None
        if not isinstance(paging, dict) or not paging.get("next"):
            return found
        cursors = paging.get("cursors")
        after = cursors.get("after") if isinstance(cursors, dict) else None
        if not after:
            return found


async def read_tree_copy(
    reader: GraphReader, copy: dict[str, Any], *, token: str, account_id: str
) -> CopyResult:
    """A tree copy as Meta holds it: the copy's top object and every ad set and ad under it,
    each with the object it was copied from (``source_adset_id``, ``source_ad_id``: fields
    of Meta's ad set and ad, in its SDK's ``AdSet.Field`` and ``Ad.Field``). GET only.

    ``copy`` is what the intent noted (:meth:`CopyResult.as_response`, mode ``tree``). A
    worker killed while a Batch API call of children was on its way noted none of that
    call's copies, though Meta made them; this lists them all, and says the copy is
    ``complete`` when it holds as many objects as the tree has.

    Raises:
        GraphError: the copy's children could not be read (the caller tries again later).
    """
    copied_id = str(copy["copied_id"])
    noted = [o for o in copy.get("objects") or [] if isinstance(o, dict)]
    top = [o for o in noted if o.get("copied_id") == copied_id] or noted[:1]
    objects: list[dict[str, str]] = [dict(o) for o in top]
    kinds = [("ad", "ads", "source_ad_id")]
    if copy.get("level") == "campaign":
        kinds.insert(0, ("ad_set", "adsets", "source_adset_id"))
    for kind, edge, source in kinds:
        listed = await reader.edge(
            f"{copied_id}/{edge}", token=token, fields=["id", source], account_id=account_id
        )
        objects += [
            {
                "ad_object_type": kind,
                "source_id": str(o.get(source) or ""),
                "copied_id": str(o["id"]),
            }
            for o in listed
            if o.get("id")
        ]
    planned = copy.get("planned")
    whole = isinstance(planned, int) and len(objects) >= planned
    level = copy.get("level")
    return CopyResult(
        copied_id,
        objects,
        "tree",
        complete=whole,
        level=str(level) if level else None,
        planned=planned if isinstance(planned, int) else None,
    )
