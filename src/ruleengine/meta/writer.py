"""Writes to the Graph API: status, budgets, bids, name, budget schedules, copies — through one
instrumented wrapper.

Status, budget, bid and name writes also go in Batch API calls of up to 50 POSTs
(:meth:`GraphWriter.write_batch`), each sub-request logged and reported like a
write of its own, each answered on its own. A copy too big for ``/copies`` is made as a
tree: the object alone, then its children's copies in Batch API calls
(:meth:`GraphWriter.copy_children`, :mod:`ruleengine.writes.copy_tree`).

Every write is logged (request and response, tokens redacted) and, on failure,
reported to the error sink with the function name, message, stack, the exact
request body and Meta's error. Writes are not retried here: the values written
are absolute, and the engine records a failed write and lets the next
scheduled run decide again.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ruleengine.constants import BATCH_MAX_ITEMS
from ruleengine.errors import ErrorReport, ErrorSink
from ruleengine.meta.batch import SubRequest, SubResult, parse_item
from ruleengine.meta.copies import CopyResult, parse_copy, too_large
from ruleengine.meta.errors import GraphError, MalformedResponseError
from ruleengine.meta.http import READ_WRITE, GraphSession
from ruleengine.redact import REDACTOR
from ruleengine.rules.language.budget_schedules import SCHEDULES, ScheduleSpec
from ruleengine.rules.plan.targets import INTEGER_FIELDS, SPEND_LIMIT_FIELDS

log = logging.getLogger(__name__)

BudgetField = Literal["daily_budget", "lifetime_budget"]


@dataclass(frozen=True)
class WriteContext:
    """Who is writing what, for logs and the error log (never a token)."""

    account_id: str
    entity_id: str
    rule_id: str | None = None
    batch_id: str | None = None


@dataclass(frozen=True)
class FieldWrite:
    """One absolute value for one field of one object (``status``, a budget or ``name``), or
    one budget schedule made or deleted (``field`` ``budget_schedules``, ``schedule``)."""

    ctx: WriteContext
    field: str
    value: Any
    schedule: ScheduleSpec | None = None

    @property
    def function(self) -> str:
        """The writer's name for it, as the log and the error log show it."""
        if self.schedule is not None:
            return "delete_schedule" if self.schedule.op == "delete" else "schedule_budget"
        return _FUNCTIONS[self.field]

    def request(self) -> SubRequest:
        """The Batch API item: ``POST /{id}`` with the field, ``POST /{id}/budget_schedules``,
        or ``DELETE /{schedule_id}``."""
        spec = self.schedule
        if spec is not None and spec.op == "delete":
            return SubRequest(str(spec.schedule_id), {}, method="DELETE")
        if spec is not None:
            return SubRequest(f"{self.ctx.entity_id}/{SCHEDULES}", spec.form(), method="POST")
        return SubRequest(self.ctx.entity_id, self.form(), method="POST")

    def form(self) -> dict[str, str]:
        """The POST parameters: budgets, spend limits and bids as integers in minor units."""
        if self.field in INTEGER_FIELDS:
            return {self.field: str(int(self.value))}
        return {self.field: str(self.value)}


_FUNCTIONS = {
    "status": "set_status",
    "daily_budget": "set_budget",
    "lifetime_budget": "set_budget",
    "name": "set_name",
    "bid_amount": "set_bid",
} | {field: "set_spend_limit" for field in SPEND_LIMIT_FIELDS}


class GraphWriter:
    """The only code that changes objects at Meta."""

    def __init__(self, session: GraphSession, sink: ErrorSink) -> None:
        self.session = session.view(methods=READ_WRITE, cost=session.cost)
        self.sink = sink

    async def set_status(self, status: str, *, token: str, ctx: WriteContext) -> Any:
        """Set ``status`` (ACTIVE or PAUSED)."""
        return await self._write("set_status", ctx.entity_id, {"status": status}, token, ctx)

    async def set_budget(
        self, field: BudgetField, amount: int, *, token: str, ctx: WriteContext
    ) -> Any:
        """Write an absolute budget in minor units."""
        return await self._write("set_budget", ctx.entity_id, {field: str(amount)}, token, ctx)

    async def set_spend_limit(
        self, field: str, amount: int, *, token: str, ctx: WriteContext
    ) -> Any:
        """Write an ad set's absolute spend cap or minimum spend target in minor units."""
        if field not in SPEND_LIMIT_FIELDS:
            raise ValueError(f"{field} is not a spend limit")
        return await self._write("set_spend_limit", ctx.entity_id, {field: str(amount)}, token, ctx)

    async def set_bid(self, amount: int, *, token: str, ctx: WriteContext) -> Any:
        """Write an ad set's absolute ``bid_amount`` in minor units."""
        return await self._write("set_bid", ctx.entity_id, {"bid_amount": str(amount)}, token, ctx)

    async def set_name(self, name: str, *, token: str, ctx: WriteContext) -> Any:
        """Rename the object."""
        return await self._write("set_name", ctx.entity_id, {"name": name}, token, ctx)

    async def write_schedule(self, spec: ScheduleSpec, *, token: str, ctx: WriteContext) -> Any:
        """Make a budget schedule of ``ctx.entity_id`` (Meta answers ``{"id"}``), or delete the
        schedule ``spec.schedule_id`` (an undo; Meta's ``HighDemandPeriod.api_delete``)."""
        write = FieldWrite(ctx, SCHEDULES, None, spec)
        request = write.request()
        return await self._write(
            write.function, request.path, request.params, token, ctx, method=request.method
        )

    async def write_batch(
        self, writes: Sequence[FieldWrite], *, token: str
    ) -> list[SubResult | None]:
        """Send up to 50 writes of one ad account as one Batch API call.

        Returns each write's answer in order: a body, Meta's error for that write alone,
        or None when Meta answered the item ``null`` (it did not process it: whether it
        landed is for the caller to read back).

        Raises:
            GraphError: the call as a whole failed — refused by Meta (nothing was
                written), or unanswered (any of the writes may have landed).
        """
        if not writes or len(writes) > BATCH_MAX_ITEMS:
            raise ValueError(
                f"a write batch holds 1 to {BATCH_MAX_ITEMS} writes, not {len(writes)}"
            )
        requests = [w.request() for w in writes]
        for write, request in zip(writes, requests, strict=True):
            self._log_request(
                write.function, request.path, request.params, write.ctx, method=request.method
            )
        form = {"batch": [r.item() for r in requests], "include_headers": False}
        account = writes[0].ctx.account_id
        try:
            body = await self.session.request(
                "POST", "", token=token, form=form, counted_calls=len(writes), account_id=account
            )
        except GraphError as exc:
            log.warning("graph write batch of %d failed: %s", len(writes), exc)
            for write, request in zip(writes, requests, strict=True):
                await self._report(write.function, exc, _request_of(request), write.ctx)
            raise
        if not isinstance(body, list) or len(body) != len(writes):
            raise MalformedResponseError(
                "the batch answer does not match the request", response=REDACTOR.data(body)
            )
        results = [parse_item(r, item) for r, item in zip(requests, body, strict=True)]
        for write, result in zip(writes, results, strict=True):
            await self._log_answer(write, result)
        return results

    async def _log_answer(self, write: FieldWrite, result: SubResult | None) -> None:
        path = write.request().path
        if result is None:
            log.warning("graph write %s %s: Meta did not process it (null)", write.function, path)
        elif result.error is not None:
            log.warning("graph write %s %s failed: %s", write.function, path, result.error)
            await self._report(write.function, result.error, _request_of(result.request), write.ctx)
        else:
            log.info("graph write %s %s -> %s", write.function, path, REDACTOR.data(result.body))

    async def copy(
        self,
        *,
        status_option: str,
        rename_suffix: str,
        deep_copy: bool | None,
        token: str,
        ctx: WriteContext,
    ) -> CopyResult:
        """``POST /{id}/copies``: the copy and every object it created.

        Raises:
            GraphError: Meta's refusal — 100/1885194 when the copy is too big to be made
                at once (nothing was copied: copy it as a tree).
        """
        form = _copy_form(status_option, rename_suffix, deep_copy)
        body = await self._write(
            "copy", f"{ctx.entity_id}/copies", form, token, ctx, expected=too_large
        )
        return parse_copy(body)

    async def copy_children(
        self, copies: Sequence[tuple[str, dict[str, Any]]], *, token: str, ctx: WriteContext
    ) -> list[SubResult | None]:
        """Up to 50 ``POST /{id}/copies`` (``(source id, form)``: e.g. an ad set copied into
        ``campaign_id``, an ad into ``adset_id``) as one Batch API call; each answer in order
        (None: Meta answered the item ``null``, it may or may not have copied).

        A big copy is made this way — the top object alone, then its children — since new
        apps may not use asynchronous batch requests (:mod:`ruleengine.writes.copy_tree`).

        Raises:
            GraphError: the call as a whole failed (refused, or unanswered: any may have landed).
        """
        if not copies or len(copies) > BATCH_MAX_ITEMS:
            raise ValueError(f"a copy batch holds 1 to {BATCH_MAX_ITEMS} copies, not {len(copies)}")
        requests = [SubRequest(f"{source}/copies", form, method="POST") for source, form in copies]
        for request in requests:
            self._log_request("copy", request.path, request.params, ctx)
        form = {"batch": [r.item() for r in requests], "include_headers": False}
        try:
            body = await self.session.request(
                "POST",
                "",
                token=token,
                form=form,
                counted_calls=len(requests),
                account_id=ctx.account_id,
            )
        except GraphError as exc:
            log.warning("graph copy batch of %d failed: %s", len(requests), exc)
            await self._report("copy", exc, _request_of(requests[0]), ctx)
            raise
        if not isinstance(body, list) or len(body) != len(requests):
            raise MalformedResponseError(
                "the batch answer does not match the request", response=REDACTOR.data(body)
            )
        results = [parse_item(r, item) for r, item in zip(requests, body, strict=True)]
        for result in results:
            if result is not None and result.error is not None:
                await self._report("copy", result.error, _request_of(result.request), ctx)
        return results

    async def _write(
        self,
        function: str,
        path: str,
        form: dict[str, Any],
        token: str,
        ctx: WriteContext,
        *,
        expected: Callable[[GraphError], bool] = lambda exc: False,
        method: str = "POST",
    ) -> Any:
        """The instrumented wrapper every write goes through (a POST, or a DELETE).

        A refusal the caller ``expected`` (and handles: a copy too big to be made at once)
        is logged but not reported to the error log.
        """
        request = self._log_request(function, path, form, ctx, method=method)
        try:
            body = await self.session.request(
                method,
                path,
                token=token,
                form=form if method == "POST" else None,
                account_id=ctx.account_id,
            )
        except GraphError as exc:
            if expected(exc):
                log.info("graph write %s %s refused, as it may be: %s", function, path, exc)
                raise
            log.warning("graph write %s %s failed: %s", function, path, exc)
            await self._report(function, exc, request, ctx)
            raise
        log.info("graph write %s %s -> %s", function, path, REDACTOR.data(body))
        return body

    def _log_request(
        self,
        function: str,
        path: str,
        form: dict[str, Any],
        ctx: WriteContext,
        *,
        method: str = "POST",
    ) -> dict[str, Any]:
        request = {"method": method, "path": path, "params": REDACTOR.data(form)}
        log.info(
            "graph write %s %s %s (account %s, batch %s)",
            function,
            path,
            request["params"],
            ctx.account_id,
            ctx.batch_id,
        )
        return request

    async def _report(
        self, function: str, exc: GraphError, request: dict[str, Any], ctx: WriteContext
    ) -> None:
        report = ErrorReport(
            function=f"meta.writer.{function}",
            message=exc.message,
            stack=REDACTOR.text("".join(traceback.format_exception(exc))),
            params=request,
            response=exc.response if exc.response is not None else exc.as_dict(),
            context={
                "account": ctx.account_id,
                "entity_id": ctx.entity_id,
                "rule_id": ctx.rule_id,
                "batch_id": ctx.batch_id,
                "code": exc.code,
            },
        )
        try:
            await self.sink.report(report)
        except Exception:  # the sink must never hide the write's own error
            log.exception("could not record a write failure in the error log")


def _copy_form(status_option: str, rename_suffix: str, deep_copy: bool | None) -> dict[str, Any]:
    form: dict[str, Any] = {
        "status_option": status_option,
        "rename_options": {"rename_suffix": rename_suffix},
    }
    if deep_copy is not None:  # None: an ad, which Meta copies without the parameter
        form["deep_copy"] = deep_copy
    return form


def _request_of(request: SubRequest) -> dict[str, Any]:
    """A batch item as the error log keeps a write's request (tokens redacted)."""
    return {"method": request.method, "path": request.path, "params": REDACTOR.data(request.params)}
