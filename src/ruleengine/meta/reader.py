"""The read-only Graph client: entity listing, object reads, Insights, ad rules — GET only.

This is the only Graph module the dispatcher imports. Its session is a view
that allows GET and nothing else, so no code path through it can change an ad
account. Reads retry transient errors (tenacity); entity listing makes 3 tries
in total, waiting 1 s then 2 s; rate-limit errors wait as long as Meta's usage
headers say, up to a cap; auth errors (an expired token, 190) are never retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ruleengine.meta.errors import (
    InvalidRequestError,
    MalformedResponseError,
    RateLimitError,
    TransientError,
    is_invalid_cursor,
)
from ruleengine.meta.http import READ_ONLY, GraphSession
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.model import Rule

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
LIST_PAGE_SIZE: Final = 500
ADRULES_PAGE_SIZE: Final = 100
#: The listing edge of each level under an ad account.
EDGES: Final = {"campaign": "campaigns", "adset": "adsets", "ad": "ads"}
#: What an import of Meta's Automated Rules reads of each (``act_…/adrules_library``).
ADRULE_FIELDS: Final = (
    "id",
    "account_id",
    "name",
    "status",
    "evaluation_spec",
    "execution_spec",
    "schedule_spec",
)


class RetryPolicy:
    """Which errors are retried and how long to wait before each retry.

    Args:
        waits_s: the wait before each retry; ``len(waits_s) + 1`` tries in total.
        rate_limit_cap_s: the longest Meta-requested wait we accept; longer → give up now.
        sleep: how to wait (tests pass a recorder instead of sleeping).
        wait_out_rate_limits: False raises rate-limit errors at once, for a caller that
            must not wait while holding something (the account write lock).
    """

    def __init__(
        self,
        waits_s: Sequence[float],
        *,
        rate_limit_cap_s: float,
        sleep: Sleep = asyncio.sleep,
        wait_out_rate_limits: bool = True,
    ) -> None:
        self.waits_s = tuple(waits_s)
        self.rate_limit_cap_s = rate_limit_cap_s
        self.sleep = sleep
        self.wait_out_rate_limits = wait_out_rate_limits

    def without_rate_limit_waits(self) -> RetryPolicy:
        """This policy, but raising rate-limit errors instead of waiting them out."""
        return RetryPolicy(
            self.waits_s,
            rate_limit_cap_s=self.rate_limit_cap_s,
            sleep=self.sleep,
            wait_out_rate_limits=False,
        )

    def retryable(self, exc: BaseException) -> bool:
        """Transient errors and call-count rate limits whose wait fits under the cap."""
        if isinstance(exc, TransientError):
            return True
        if isinstance(exc, RateLimitError) and self.wait_out_rate_limits:
            wait = exc.retry_after_s
            return wait is None or wait <= self.rate_limit_cap_s
        return False

    def rate_limit_wait(self, exc: RateLimitError, *, attempt: int) -> float | None:
        """How long to wait before try ``attempt + 1`` after ``exc``; None to give up."""
        if attempt > len(self.waits_s):
            return None
        wait = max(self.waits_s[attempt - 1], exc.retry_after_s or 0.0)
        return wait if wait <= self.rate_limit_cap_s else None

    def wait(self, state: RetryCallState) -> float:
        """The configured wait for this attempt, or longer when Meta asked for longer."""
        index = min(state.attempt_number - 1, len(self.waits_s) - 1)
        wait = self.waits_s[index] if self.waits_s else 0.0
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RateLimitError) and exc.retry_after_s:
            wait = max(wait, exc.retry_after_s)
        return min(wait, self.rate_limit_cap_s) if isinstance(exc, RateLimitError) else wait

    async def run(self, call: Callable[[], Awaitable[T]], *, what: str) -> T:
        """Run ``call`` under this policy; the last error is re-raised."""

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s failed (try %d of %d), retrying in %.1fs: %s",
                what,
                state.attempt_number,
                len(self.waits_s) + 1,
                self.wait(state),
                exc,
            )

        retrying = AsyncRetrying(
            stop=stop_after_attempt(len(self.waits_s) + 1),
            wait=self.wait,
            retry=retry_if_exception(self.retryable),
            sleep=self.sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await call()
        raise AssertionError("unreachable: tenacity re-raises the last error")


def _data_list(body: Any, what: str) -> list[dict[str, Any]]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise MalformedResponseError(
            f"{what}: expected {{'data': [...]}} from Graph", response=body
        )
    return data


def next_cursor(body: Any) -> str | None:
    """The ``after`` cursor when there is a next page (Meta omits ``paging.next`` on the last)."""
    paging = body.get("paging") if isinstance(body, dict) else None
    if not isinstance(paging, dict) or not paging.get("next"):
        return None
    cursors = paging.get("cursors")
    after = cursors.get("after") if isinstance(cursors, dict) else None
    return after if isinstance(after, str) and after else None


class GraphReader:
    """GET-only access to the Graph API.

    Args:
        session: any Graph session; the reader keeps a GET-only view of it.
        listing: retry policy of entity listing (3 tries: wait 1 s, then 2 s).
        reads: retry policy of other reads.
    """

    def __init__(self, session: GraphSession, *, listing: RetryPolicy, reads: RetryPolicy) -> None:
        self.session = session.view(methods=READ_ONLY, cost=session.cost)
        self.listing = listing
        self.reads = reads

    def with_reads(self, reads: RetryPolicy) -> GraphReader:
        """A reader on the same session and cost with another policy for object reads."""
        return GraphReader(self.session, listing=self.listing, reads=reads)

    @classmethod
    def from_settings(cls, session: GraphSession, *, sleep: Sleep = asyncio.sleep) -> GraphReader:
        """A reader with the retry waits and rate-limit cap of the session's settings."""
        s = session.settings
        cap = s.rate_limit_max_wait_s
        return cls(
            session,
            listing=RetryPolicy(s.listing_retry_waits_s, rate_limit_cap_s=cap, sleep=sleep),
            reads=RetryPolicy(s.read_retry_waits_s, rate_limit_cap_s=cap, sleep=sleep),
        )

    async def _get(
        self, path: str, *, token: str, params: dict[str, Any], account_id: str | None
    ) -> Any:
        return await self.session.request(
            "GET", path, token=token, params=params, account_id=account_id
        )

    async def list_entities(
        self,
        account_id: str,
        level: str,
        *,
        token: str,
        fields: Sequence[str],
        filtering: Sequence[dict[str, Any]] = (),
        page_size: int = LIST_PAGE_SIZE,
    ) -> list[dict[str, Any]]:
        """Every campaign, ad set or ad of an account matching ``filtering``, each once.

        Each page is tried 3 times in total (the listing policy); the last error is raised.
        An entity that leaves the listing between two pages (paused under an
        ``effective_status`` filter, deleted) invalidates the cursor pointing at it: Meta
        answers 2642, and the listing starts again from the first page — once — so no
        entity is skipped; entities are de-duplicated by id, so none is listed twice.
        """
        path = f"{account_id}/{EDGES[level]}"
        params: dict[str, Any] = {"fields": ",".join(fields), "limit": page_size}
        if filtering:
            params["filtering"] = list(filtering)
        for attempt in (1, 2):
            entities: dict[str, dict[str, Any]] = {}
            after: str | None = None
            try:
                while True:
                    page_params = params | ({"after": after} if after else {})
                    body = await self.listing.run(
                        partial(
                            self._get, path, token=token, params=page_params, account_id=account_id
                        ),
                        what=f"listing {level}s of {account_id}",
                    )
                    for item in _data_list(body, f"listing {path}"):
                        entities.setdefault(str(item.get("id", f"#{len(entities)}")), item)
                    after = next_cursor(body)
                    if after is None:
                        return list(entities.values())
            except InvalidRequestError as exc:
                if not is_invalid_cursor(exc) or attempt == 2:
                    raise
                log.info(
                    "listing %ss of %s: %s; listing again from the start", level, account_id, exc
                )
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def list_for_rule(self, rule: Rule, account_id: str, *, token: str) -> list[Entity]:
        """The entities ``rule`` applies to on ``account_id``, with the fields it needs.

        Raises:
            ValueError: an entity Meta sent does not parse.
        """
        raw = await self.list_entities(
            account_id,
            rule.level,
            token=token,
            fields=rule.entity_fields(),
            filtering=rule.filtering(),
        )
        return [Entity.model_validate(item) for item in raw]

    async def get_object(
        self, object_id: str, *, token: str, fields: Sequence[str], account_id: str | None = None
    ) -> dict[str, Any]:
        """One object's ``fields`` (re-read before a write, for the live value)."""
        body = await self.reads.run(
            partial(
                self._get,
                object_id,
                token=token,
                params={"fields": ",".join(fields)},
                account_id=account_id,
            ),
            what=f"reading {object_id}",
        )
        if not isinstance(body, dict) or "id" not in body:
            raise MalformedResponseError(
                f"reading {object_id}: no object in the answer", response=body
            )
        return body

    async def edge(
        self,
        path: str,
        *,
        token: str,
        fields: Sequence[str],
        account_id: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every item of an edge (``{campaign_id}/adsets``, ``{adset_id}/ads``,
        ``{id}/budget_schedules``), page by page; ``params``: the edge's own filters."""
        return await self._every_page(
            path,
            token=token,
            params={"fields": ",".join(fields), "limit": LIST_PAGE_SIZE, **(params or {})},
            account_id=account_id,
            what=f"listing {path}",
        )

    async def insights(
        self, object_id: str, *, token: str, params: dict[str, Any], account_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Insights rows of one object or account, every page."""
        return await self._every_page(
            f"{object_id}/insights",
            token=token,
            params=params,
            account_id=account_id,
            what=f"insights of {object_id}",
        )

    async def _every_page(
        self,
        path: str,
        *,
        token: str,
        params: dict[str, Any],
        account_id: str | None,
        what: str,
    ) -> list[dict[str, Any]]:
        """The ``data`` of every page of an edge, cursor by cursor (the reads policy each)."""
        items: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            page = params | ({"after": after} if after else {})
            body = await self.reads.run(
                partial(self._get, path, token=token, params=page, account_id=account_id),
                what=what,
            )
            items.extend(_data_list(body, what))
            after = next_cursor(body)
            if after is None:
                return items

    async def ad_accounts(self, *, token: str) -> list[dict[str, Any]]:
        """The ad accounts the token can see."""
        params = {
            "fields": "id,account_id,name,currency,timezone_name,account_status",
            "limit": 500,
        }
        body = await self.reads.run(
            partial(self._get, "me/adaccounts", token=token, params=params, account_id=None),
            what="listing ad accounts",
        )
        return _data_list(body, "me/adaccounts")

    async def ad_rules(
        self, account_id: str, *, token: str, page_size: int = ADRULES_PAGE_SIZE
    ) -> list[dict[str, Any]]:
        """Every rule of the account's ``adrules_library`` (Meta's Automated Rules), cursor by
        cursor, with the fields an import needs; specs as Meta reads them back."""
        return await self._every_page(
            f"{account_id}/adrules_library",
            token=token,
            params={"fields": ",".join(ADRULE_FIELDS), "limit": page_size},
            account_id=account_id,
            what=f"ad rules of {account_id}",
        )
