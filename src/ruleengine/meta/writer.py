"""Writes to the Graph API: status, budgets, name, copies — through one instrumented wrapper.

A copy too big for ``/copies`` is started as an asynchronous batch
(:meth:`GraphWriter.copy_async`, see :mod:`ruleengine.meta.copies`).

Every write is logged (request and response, tokens redacted) and, on failure,
reported to the error sink with the function name, message, stack, the exact
request body and Meta's error. Writes are not retried here: the values written
are absolute, and the engine records a failed write and lets the next
scheduled run decide again.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

from ruleengine.errors import ErrorReport, ErrorSink
from ruleengine.meta.copies import CopyResult, parse_copy, too_large
from ruleengine.meta.errors import GraphError, MalformedResponseError
from ruleengine.meta.http import READ_WRITE, GraphSession, encode_params
from ruleengine.redact import REDACTOR

log = logging.getLogger(__name__)

BudgetField = Literal["daily_budget", "lifetime_budget"]


@dataclass(frozen=True)
class WriteContext:
    """Who is writing what, for logs and the error log (never a token)."""

    account_id: str
    entity_id: str
    rule_id: str | None = None
    batch_id: str | None = None


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

    async def set_name(self, name: str, *, token: str, ctx: WriteContext) -> Any:
        """Rename the object."""
        return await self._write("set_name", ctx.entity_id, {"name": name}, token, ctx)

    async def copy(
        self,
        *,
        status_option: str,
        rename_suffix: str,
        deep_copy: bool,
        token: str,
        ctx: WriteContext,
    ) -> CopyResult:
        """``POST /{id}/copies``: the copy and every object it created.

        Raises:
            GraphError: Meta's refusal — 100/1885194 when the copy is too big to be made
                at once (nothing was copied: use :meth:`copy_async`).
        """
        form = _copy_form(status_option, rename_suffix, deep_copy)
        body = await self._write(
            "copy", f"{ctx.entity_id}/copies", form, token, ctx, expected=too_large
        )
        return parse_copy(body)

    async def copy_async(
        self,
        *,
        status_option: str,
        rename_suffix: str,
        deep_copy: bool,
        token: str,
        ctx: WriteContext,
    ) -> str:
        """The same copy as an asynchronous batch; the request set's id (Meta copies later)."""
        # As in the Batch API, a request's body is form-encoded.
        body = urlencode(encode_params(_copy_form(status_option, rename_suffix, deep_copy)))
        form = {
            "name": f"ruleengine copy of {ctx.entity_id} ({ctx.batch_id or 'no batch'})"[:200],
            "adbatch": [{"name": "copy", "relative_url": f"{ctx.entity_id}/copies", "body": body}],
        }
        answer = await self._write(
            "copy_async", f"{ctx.account_id}/async_batch_requests", form, token, ctx
        )
        set_id = answer.get("id") if isinstance(answer, dict) else None
        if not set_id:
            raise MalformedResponseError(
                "async_batch_requests answered without a request set id", response=answer
            )
        return str(set_id)

    async def _write(
        self,
        function: str,
        path: str,
        form: dict[str, Any],
        token: str,
        ctx: WriteContext,
        *,
        expected: Callable[[GraphError], bool] = lambda exc: False,
    ) -> Any:
        """The instrumented wrapper every write goes through.

        A refusal the caller ``expected`` (and handles: a copy too big to be made at once)
        is logged but not reported to the error log.
        """
        request = {"method": "POST", "path": path, "params": REDACTOR.data(form)}
        log.info(
            "graph write %s %s %s (account %s, batch %s)",
            function,
            path,
            request["params"],
            ctx.account_id,
            ctx.batch_id,
        )
        try:
            body = await self.session.request(
                "POST", path, token=token, form=form, account_id=ctx.account_id
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


def _copy_form(status_option: str, rename_suffix: str, deep_copy: bool) -> dict[str, Any]:
    return {
        "status_option": status_option,
        "rename_options": {"rename_suffix": rename_suffix},
        "deep_copy": deep_copy,
    }
