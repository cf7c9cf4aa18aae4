"""Meta's errors as typed exceptions carrying code, subcode and fbtrace_id.

The class says what to do: retry soon (:class:`TransientError`), wait as the
usage headers say (:class:`RateLimitError`), fix the token (:class:`AuthError`),
fix access (:class:`PermissionDeniedError`), fix the request
(:class:`InvalidRequestError`), or ask for less (:class:`DataTooLargeError`, an Insights
timeout). Messages never contain a token.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from ruleengine.errors import RuleEngineError
from ruleengine.redact import REDACTOR

TRANSIENT_CODES: Final = frozenset({1, 2})
RATE_LIMIT_CODES: Final = frozenset({4, 17, 32, 341, 613, 80000, 80001, 80002, 80003, 80004})
AUTH_CODES: Final = frozenset({102, 190, 104, 463, 467})
# Insights asked for more than Meta could compute in time ("Request Timed Out" in Meta's
# Ads Insights error codes): ask for less — fewer ids, a shorter range — or run a report.
TOO_MUCH_DATA: Final = frozenset({(100, 1504018), (2, 1504038)})
TOO_MUCH_DATA_MESSAGE: Final = "reduce the amount of data"
# Insights load limits (code 4, "Too Many API Requests"): wait before retrying.
INSIGHTS_THROTTLE_SUBCODES: Final = frozenset({1504022, 1504039})
# Code 17 with this subcode is the ad account's call-count throttle, not the budget limit.
ACCOUNT_THROTTLED_SUBCODE: Final = 2446079
# Code 100 with this subcode: "Your Budget Is Too Low" (below the minimum daily budget).
BUDGET_TOO_LOW_SUBCODE: Final = 1885272


class GraphError(RuleEngineError):
    """An error answered by the Graph API (or a response it should not have sent)."""

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        subcode: int | None = None,
        fbtrace_id: str | None = None,
        http_status: int | None = None,
        error_type: str | None = None,
        response: Any = None,
    ) -> None:
        self.message = REDACTOR.text(message)
        self.code = code
        self.subcode = subcode
        self.fbtrace_id = fbtrace_id
        self.http_status = http_status
        self.error_type = error_type
        self.response = REDACTOR.data(response)
        super().__init__(self._describe())

    def _describe(self) -> str:
        parts = [self.message]
        if self.code is not None:
            parts.append(f"(code {self.code}" + (f"/{self.subcode}" if self.subcode else "") + ")")
        if self.fbtrace_id:
            parts.append(f"fbtrace_id={self.fbtrace_id}")
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """The error as stored in records and the error log."""
        return {
            "kind": type(self).__name__,
            "message": self.message,
            "code": self.code,
            "subcode": self.subcode,
            "fbtrace_id": self.fbtrace_id,
            "http_status": self.http_status,
            "type": self.error_type,
        }


class TransientError(GraphError):
    """Worth retrying soon: Meta's codes 1/2, HTTP 5xx, timeouts, broken connections."""


class RateLimitError(GraphError):
    """Too many calls; ``retry_after_s`` says how long Meta wants us to wait (if it said)."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, **kw)

    @property
    def insights_throttle(self) -> bool:
        """True for Meta's Insights load limit (code 4, subcode 1504022 or 1504039)."""
        return self.subcode in INSIGHTS_THROTTLE_SUBCODES


class AuthError(GraphError):
    """The token is missing, invalid or expired (190 …): never retried; re-add the account."""


class PermissionDeniedError(GraphError):
    """The token may not touch this object (codes 10, 200-299)."""


class InvalidRequestError(GraphError):
    """Meta rejected the request as such (code 100 and friends)."""


class DataTooLargeError(GraphError):
    """Insights timed out on the amount asked (100/1504018, 2/1504038, "Please reduce the
    amount of data you're asking for"): retrying the same request fails again; ask for
    fewer ids or a shorter range, or run an asynchronous report."""


class ReportRunError(GraphError):
    """An asynchronous Insights report run failed, was skipped, or did not finish in time."""


class MalformedResponseError(GraphError):
    """Meta answered something that is not what the API promises (not JSON, wrong shape)."""


def is_budget_change_limit(exc: GraphError) -> bool:
    """True when ``exc``, answered to a budget write of an **ad set**, is Meta's limit of 4
    budget changes per ad set an hour.

    Meta answers the 5th change with the generic code 17, "User request limit reached",
    and no subcode; only the call that met it tells it apart from the ad account's
    call-count throttle (code 17 with subcode 2446079). Ask this about nothing else.
    """
    return (
        isinstance(exc, RateLimitError)
        and exc.code == 17
        and exc.subcode != ACCOUNT_THROTTLED_SUBCODE
    )


def is_budget_too_low(exc: GraphError) -> bool:
    """True for Meta's "Your Budget Is Too Low" (code 100, subcode 1885272)."""
    return exc.code == 100 and exc.subcode == BUDGET_TOO_LOW_SUBCODE


def error_class(code: int | None, http_status: int | None) -> type[GraphError]:
    """Which exception class a Meta error code (or bare HTTP status) maps to."""
    if code in TRANSIENT_CODES:
        return TransientError
    if code in RATE_LIMIT_CODES:
        return RateLimitError
    if code in AUTH_CODES:
        return AuthError
    if code is not None and (code == 10 or 200 <= code <= 299):
        return PermissionDeniedError
    if code is None and http_status is not None and http_status >= 500:
        return TransientError
    return InvalidRequestError


def too_much_data(code: int | None, subcode: int | None, *messages: Any) -> bool:
    """True for an Insights timeout Meta answers when a request asks for too much."""
    if (code, subcode) in TOO_MUCH_DATA:
        return True
    return code in (1, 2, 100) and any(
        isinstance(m, str) and TOO_MUCH_DATA_MESSAGE in m.lower() for m in messages
    )


def error_from_body(
    body: Any,
    *,
    http_status: int | None,
    retry_after_s: float | None = None,
    throttle_wait_s: float = 0.0,
) -> GraphError:
    """Build the right exception from a Graph error body ``{"error": {...}}``.

    ``throttle_wait_s`` is the least wait after Meta's Insights load limit, which names
    no time of its own: Meta only says to wait before retrying.
    """
    error = body.get("error") if isinstance(body, dict) else None
    kind: type[GraphError]
    if not isinstance(error, dict):
        kind = TransientError if (http_status or 0) >= 500 else MalformedResponseError
        return kind(f"HTTP {http_status} without a Graph error body", http_status=http_status)
    code, subcode = _int(error.get("code")), _int(error.get("error_subcode"))
    kind = error_class(code, http_status)
    if error.get("is_transient") and kind is InvalidRequestError:
        kind = TransientError
    if too_much_data(code, subcode, error.get("message"), error.get("error_user_msg")):
        kind = DataTooLargeError
    fields: dict[str, Any] = {
        "code": code,
        "subcode": subcode,
        "fbtrace_id": error.get("fbtrace_id"),
        "http_status": http_status,
        "error_type": error.get("type"),
        "response": body,
    }
    message = str(error.get("message") or "Graph API error")
    if kind is RateLimitError:
        if subcode in INSIGHTS_THROTTLE_SUBCODES:
            retry_after_s = max(retry_after_s or 0.0, throttle_wait_s)
        return RateLimitError(message, retry_after_s=retry_after_s, **fields)
    return kind(message, **fields)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


#: Meta's code for an ``after``/``before`` cursor whose item has left the listing.
INVALID_CURSOR_CODE: Final = 2642
#: Subcode of 190 for an expired session (the others: 460 password changed, 467 logged out…).
TOKEN_EXPIRED_SUBCODE: Final = 463

#: What an error says about the token that got it, kept on the account (``token_state``).
TokenStatus = Literal["invalid", "expired", "missing_permission"]


def token_status(code: int | None, subcode: int | None) -> TokenStatus | None:
    """``invalid``/``expired`` for Meta's token errors (190, 102, 104 …), ``missing_permission``
    for its permission errors (10, 200–299, e.g. 294 without ``ads_management``), else None."""
    kind = error_class(code, None)
    if kind is AuthError:
        return "expired" if subcode == TOKEN_EXPIRED_SUBCODE else "invalid"
    if kind is PermissionDeniedError:
        return "missing_permission"
    return None


def is_invalid_cursor(error: GraphError) -> bool:
    """True for Meta's answer to a cursor it cannot use any more (error 2642)."""
    return error.code == INVALID_CURSOR_CODE
