"""Asynchronous Insights report runs, for what a synchronous request cannot answer in time.

Meta's async workflow: ``POST act_…/insights`` with the parameters of the synchronous
edge answers ``{"report_run_id": …}``; ``GET /{report_run_id}`` is the ``AdReportRun``,
polled until ``async_status`` is ``Job Completed`` and ``async_percent_completion`` is
100; ``GET /{report_run_id}/insights`` pages the rows. The other statuses are
``Job Not Started``, ``Job Started``, ``Job Running`` (wait), ``Job Failed`` (Meta's
error fields say why) and ``Job Skipped`` (the job expired: submit it again, once).

The POST creates a report and changes no ad object, so it goes through the narrow
``REPORT`` permission (:mod:`ruleengine.meta.http`), which the preview holds too.
Polls back off (doubling, at most ``POLL_MAX_S`` apart) and stop after ``max_wait_s``
in all; a run that fails, is skipped twice or takes too long raises
:class:`ReportRunError`, which the caller records per entity.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from ruleengine.meta.errors import MalformedResponseError, ReportRunError
from ruleengine.meta.http import REPORT, GraphSession
from ruleengine.meta.pacing import InsightsPacer
from ruleengine.meta.reader import RetryPolicy, next_cursor

log = logging.getLogger(__name__)

Percent = Callable[[float], Awaitable[None]]
COMPLETED: Final = "Job Completed"
FAILED: Final = "Job Failed"
SKIPPED: Final = "Job Skipped"
POLL_MAX_S: Final = 30.0
PAGE_SIZE: Final = 500
_ERROR_FIELDS: Final = ("error_code", "error_subcode", "error_message", "error_user_msg")


@dataclass(frozen=True)
class RunStatus:
    """One poll's answer: the run's status and percent, and Meta's error fields if failed."""

    status: str
    percent: float
    body: dict[str, Any]

    @property
    def done(self) -> bool:
        """Completed: the rows can be read."""
        return self.status == COMPLETED and self.percent >= 100

    def error(self, run_id: str) -> ReportRunError:
        """The run's failure as an error (Meta's code, subcode and message when it sent them)."""
        code, subcode, message, user_msg = (self.body.get(k) for k in _ERROR_FIELDS)
        text = user_msg or message or f"the report run ended as '{self.status}'"
        return ReportRunError(
            f"Insights report run {run_id}: {self.status}: {text}",
            code=_integer(code),
            subcode=_integer(subcode),
            response=self.body,
        )


class ReportRunner:
    """Run Insights as asynchronous report runs.

    Args:
        session: a session allowed ``REPORT`` (the worker's and the preview's are).
        policy: retry policy of each call (POST, poll, page).
        poll_first_s: the first wait between polls; each next one doubles (≤ ``POLL_MAX_S``).
        max_wait_s: the most a run may be waited for in all.
        pacer: spaces calls out as the Insights throttle asks (none: no pacing).
    """

    def __init__(
        self,
        session: GraphSession,
        *,
        policy: RetryPolicy,
        poll_first_s: float,
        max_wait_s: float,
        pacer: InsightsPacer | None = None,
    ) -> None:
        self.session = session.view(methods=frozenset({"GET", REPORT}), cost=session.cost)
        self.policy = policy
        self.poll_first_s = poll_first_s
        self.max_wait_s = max_wait_s
        self.pacer = pacer

    async def rows(
        self,
        account_id: str,
        params: dict[str, Any],
        *,
        token: str,
        on_percent: Percent | None = None,
    ) -> list[dict[str, Any]]:
        """Every row of an async report with ``params`` on ``account_id``.

        Raises:
            ReportRunError: the run failed, was skipped twice, or did not complete in time.
            GraphError: a call failed after its retries.
        """
        for attempt in (1, 2):
            run_id = await self._start(account_id, params, token)
            status = await self._wait(run_id, account_id, token, on_percent)
            if status.done:
                return await self._results(run_id, account_id, token)
            if status.status != SKIPPED or attempt == 2:
                raise status.error(run_id)
            log.warning("report run %s was skipped by Meta; submitting it again", run_id)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _call(
        self, method: str, path: str, account_id: str, token: str, **kw: Any
    ) -> dict[str, Any]:
        if self.pacer is not None:
            await self.pacer.before_call(account_id)
        body = await self.policy.run(
            partial(self.session.request, method, path, token=token, account_id=account_id, **kw),
            what=f"{method} {path}",
        )
        if not isinstance(body, dict):
            raise MalformedResponseError(f"{method} {path}: expected an object", response=body)
        return body

    async def _start(self, account_id: str, params: dict[str, Any], token: str) -> str:
        body = await self._call(REPORT, f"{account_id}/insights", account_id, token, form=params)
        run_id = body.get("report_run_id") or body.get("id")
        if not isinstance(run_id, str | int) or isinstance(run_id, bool) or not str(run_id):
            raise MalformedResponseError("report run without report_run_id", response=body)
        log.info("report run %s started for %s", run_id, account_id)
        return str(run_id)

    async def _wait(
        self, run_id: str, account_id: str, token: str, on_percent: Percent | None
    ) -> RunStatus:
        waited, wait = 0.0, self.poll_first_s
        while True:
            # No ``fields``: the defaults carry the status and, since v25.0, the error fields.
            body = await self._call("GET", run_id, account_id, token, params={})
            status = parse_status(body)
            if on_percent is not None:
                await on_percent(status.percent)
            if status.done or status.status in (FAILED, SKIPPED):
                return status
            if waited >= self.max_wait_s:
                raise ReportRunError(
                    f"Insights report run {run_id} did not complete within "
                    f"{self.max_wait_s:.0f}s ({status.status}, {status.percent:.0f}%)",
                    response=body,
                )
            step = min(wait, self.max_wait_s - waited)
            await self.policy.sleep(step)
            waited, wait = waited + step, min(wait * 2, POLL_MAX_S)

    async def _results(self, run_id: str, account_id: str, token: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": PAGE_SIZE} | ({"after": after} if after else {})
            body = await self._call("GET", f"{run_id}/insights", account_id, token, params=params)
            data = body.get("data")
            if not isinstance(data, list):
                raise MalformedResponseError("report rows without data", response=body)
            rows.extend(row for row in data if isinstance(row, dict))
            after = next_cursor(body)
            if after is None:
                return rows


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_status(body: dict[str, Any]) -> RunStatus:
    """An ``AdReportRun`` read as a status.

    Raises:
        MalformedResponseError: the answer has no ``async_status``.
    """
    status = body.get("async_status")
    percent = body.get("async_percent_completion")
    if not isinstance(status, str):
        raise MalformedResponseError("report run without async_status", response=body)
    number = (
        float(percent)
        if isinstance(percent, int | float) and not isinstance(percent, bool)
        else 0.0
    )
    return RunStatus(status=status, percent=number, body=body)
