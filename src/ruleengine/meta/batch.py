"""Batched reads through Meta's Batch API: ≤ 50 GET sub-requests per HTTP call.

The Batch API is a POST, so this module is not part of the read-only client the
dispatcher uses; it only ever carries GET sub-requests, and its session must allow
``BATCH`` — a Batch API call the session refuses unless every sub-request is a GET
(the preview's session allows that and GET, nothing else). Chunks are sent
concurrently (bounded). Each item comes back on its own: a body, or an error,
or — when Meta is having a moment — ``null``; null and transient items are
retried in a further round, rate-limited items too after waiting as Meta asks
(bounded by the rate-limit cap), and whatever still fails is reported per item.
A chunk carrying Insights requests first waits as the Insights throttle asks
(:mod:`ruleengine.meta.pacing`), and the throttle its items report is kept.
:class:`SubRequest` and :func:`parse_item` also serve the writer's Batch API calls of
POSTs (:meth:`~ruleengine.meta.writer.GraphWriter.write_batch`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlencode

import orjson

from ruleengine.constants import BATCH_MAX_ITEMS
from ruleengine.meta.errors import (
    GraphError,
    MalformedResponseError,
    RateLimitError,
    TransientError,
    error_from_body,
)
from ruleengine.meta.http import BATCH, READ_AND_BATCH, GraphSession, Usage, encode_params
from ruleengine.meta.pacing import InsightsPacer
from ruleengine.meta.reader import RetryPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SubRequest:
    """One request inside a batch: a Graph path and its parameters (a GET, or the POST of a
    write, :meth:`~ruleengine.meta.writer.GraphWriter.write_batch`)."""

    path: str
    params: dict[str, Any]
    method: str = "GET"

    @property
    def insights(self) -> bool:
        """True for an Insights request (paced by the Insights throttle)."""
        return self.path.rstrip("/").endswith("insights")

    @property
    def relative_url(self) -> str:
        """``path?query`` as the Batch API wants it."""
        query = urlencode(encode_params(self.params))
        return f"{self.path.lstrip('/')}?{query}" if query else self.path.lstrip("/")

    def item(self) -> dict[str, Any]:
        """The batch item: a GET's parameters go in its URL, a POST's in its form body."""
        if self.method == "GET":
            return {"method": "GET", "relative_url": self.relative_url}
        body = urlencode(encode_params(self.params))
        return {"method": self.method, "relative_url": self.path.lstrip("/"), "body": body}


@dataclass(frozen=True)
class SubResult:
    """One item's outcome: ``body`` on success, else ``error``."""

    request: SubRequest
    body: Any = None
    error: GraphError | None = None


def _item_headers(item: dict[str, Any]) -> dict[str, str]:
    headers = item.get("headers")
    if not isinstance(headers, list):
        return {}
    return {
        str(h.get("name")): str(h.get("value"))
        for h in headers
        if isinstance(h, dict) and h.get("name")
    }


def parse_item(request: SubRequest, item: Any, *, throttle_wait_s: float = 0.0) -> SubResult | None:
    """A batch item as a result; None for a ``null`` item (to be retried)."""
    if item is None:
        return None
    if not isinstance(item, dict) or not isinstance(item.get("code"), int):
        return SubResult(
            request, error=MalformedResponseError("malformed batch item", response=item)
        )
    try:
        body = orjson.loads(item.get("body") or "null")
    except orjson.JSONDecodeError:
        return SubResult(request, error=MalformedResponseError("batch item body is not JSON"))
    code = item["code"]
    if code >= 400 or (isinstance(body, dict) and "error" in body):
        usage = Usage.from_headers(_item_headers(item))
        return SubResult(
            request,
            error=error_from_body(
                body,
                http_status=code,
                retry_after_s=usage.regain_access_s,
                throttle_wait_s=throttle_wait_s,
            ),
        )
    return SubResult(request, body=body)


class BatchReader:
    """Send many GETs as Batch API calls.

    Args:
        session: a session allowed ``BATCH`` (the Batch API call of GETs).
        policy: retry policy for a whole batch call that fails.
        concurrency: batch calls in flight at once.
        item_rounds: extra rounds for ``null``, transient and rate-limited items.
        pacer: spaces out chunks carrying Insights requests (none: no pacing).
    """

    def __init__(
        self,
        session: GraphSession,
        *,
        policy: RetryPolicy,
        concurrency: int = 4,
        item_rounds: int = 2,
        pacer: InsightsPacer | None = None,
    ) -> None:
        self.session = session.view(methods=READ_AND_BATCH, cost=session.cost)
        self.policy = policy
        self._limit = asyncio.Semaphore(concurrency)
        self.item_rounds = item_rounds
        self.pacer = pacer

    async def get_many(
        self, requests: Sequence[SubRequest], *, token: str, account_id: str | None = None
    ) -> list[SubResult]:
        """Results in the order of ``requests``."""
        results: dict[int, SubResult] = {}
        pending = list(range(len(requests)))
        for round_number in range(self.item_rounds + 1):
            outcome = await self._round([requests[i] for i in pending], token, account_id)
            retry: list[int] = []
            waits: list[float] = [0.0]
            for index, result in zip(pending, outcome, strict=True):
                last = round_number >= self.item_rounds
                wait = (
                    None if last or result is None else self._rate_limit_wait(result, round_number)
                )
                if wait is not None:
                    waits.append(wait)
                if (
                    result is None
                    or wait is not None
                    or (isinstance(result.error, TransientError) and not last)
                ):
                    retry.append(index)
                if result is not None:
                    results[index] = result
            if not retry:
                break
            log.info("retrying %d batch item(s): empty, transient or rate-limited", len(retry))
            if max(waits) > 0:
                await self.policy.sleep(max(waits))
            pending = retry
        empty = TransientError("the batch item came back empty (null) after retries")
        return [results.get(i) or SubResult(requests[i], error=empty) for i in range(len(requests))]

    async def get_objects(
        self,
        ids: Sequence[str],
        *,
        token: str,
        fields: Sequence[str],
        account_id: str | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Several objects by id: one ``GET /{id}?fields=`` per object in Batch API calls.

        Not ``GET /?ids=…`` (a multi-ID request): since 2026-11-04 new apps may not use
        multi-ID requests, in any version (Meta's blog, "Introducing Graph API v27.0 and
        Marketing API v27.0", 2026-11-04). As a multi-ID read did, it fails whole when any
        object could not be read.

        Raises:
            GraphError: the first object that could not be read, after the item retries.
        """
        joined = ",".join(fields)
        requests = [SubRequest(object_id, {"fields": joined}) for object_id in ids]
        results = await self.get_many(requests, token=token, account_id=account_id)
        objects: dict[str, dict[str, Any]] = {}
        for object_id, result in zip(ids, results, strict=True):
            if result.error is not None:
                raise result.error
            if not isinstance(result.body, dict):
                raise MalformedResponseError(f"reading {object_id}: no object in the answer")
            objects[object_id] = result.body
        return objects

    def _rate_limit_wait(self, result: SubResult, round_number: int) -> float | None:
        """The wait before retrying a rate-limited item; None when it is not retried."""
        error = result.error
        if not isinstance(error, RateLimitError) or not self.policy.retryable(error):
            return None
        return self.policy.rate_limit_wait(error, attempt=round_number + 1)

    async def _round(
        self, requests: Sequence[SubRequest], token: str, account_id: str | None
    ) -> list[SubResult | None]:
        chunks = [
            list(requests[i : i + BATCH_MAX_ITEMS])
            for i in range(0, len(requests), BATCH_MAX_ITEMS)
        ]
        answers = await asyncio.gather(*(self._chunk(c, token, account_id) for c in chunks))
        return [item for answer in answers for item in answer]

    async def _chunk(
        self, chunk: list[SubRequest], token: str, account_id: str | None
    ) -> list[SubResult | None]:
        batch = [r.item() for r in chunk]
        form = {"batch": batch, "include_headers": True}
        async with self._limit:
            if self.pacer is not None and any(r.insights for r in chunk):
                await self.pacer.before_call(account_id)
            try:
                body = await self.policy.run(
                    partial(self._post, form, token, len(chunk), account_id),
                    what=f"batch of {len(chunk)}",
                )
            except GraphError as exc:
                return [SubResult(r, error=exc) for r in chunk]
        if not isinstance(body, list) or len(body) != len(chunk):
            error = MalformedResponseError(
                "the batch answer does not match the request", response=body
            )
            return [SubResult(r, error=error) for r in chunk]
        wait_s = self.session.settings.insights_throttle_wait_s
        for item in body:
            if isinstance(item, dict):
                self.session.record_throttle(_item_headers(item), account_id)
        return [
            parse_item(r, item, throttle_wait_s=wait_s) for r, item in zip(chunk, body, strict=True)
        ]

    async def _post(
        self, form: dict[str, Any], token: str, items: int, account_id: str | None
    ) -> Any:
        return await self.session.request(
            BATCH, "", token=token, form=form, counted_calls=items, account_id=account_id
        )
