"""Meta's errors as typed exceptions carrying code, subcode and fbtrace_id.

The class says what to do: retry soon (:class:`TransientError`), wait as the
usage headers say (:class:`RateLimitError`), fix the token (:class:`AuthError`),
fix access (:class:`PermissionDeniedError`), or fix the request
(:class:`InvalidRequestError`). Messages never contain a token.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from ruleengine.errors import RuleEngineError
from ruleengine.redact import REDACTOR

TRANSIENT_CODES: Final = frozenset({1, 2})
RATE_LIMIT_CODES: Final = frozenset({4, 17, 32, 341, 613, 80000, 80001, 80002, 80003, 80004})
AUTH_CODES: Final = frozenset({102, 190, 104, 463, 467})
# Meta's ad-set limit of budget changes per hour (code 17 with this subcode).
BUDGET_CHANGE_LIMIT_SUBCODE: Final = 1885172


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
    def budget_change_limit(self) -> bool:
        """True for the ad-set budget-change limit (not a call-count limit)."""
        return self.subcode == BUDGET_CHANGE_LIMIT_SUBCODE


class AuthError(GraphError):
    """The token is missing, invalid or expired (190 …): never retried; re-add the account."""


class PermissionDeniedError(GraphError):
    """The token may not touch this object (codes 10, 200-299)."""


class InvalidRequestError(GraphError):
    """Meta rejected the request as such (code 100 and friends)."""


class MalformedResponseError(GraphError):
    """Meta answered something that is not what the API promises (not JSON, wrong shape)."""


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


def error_from_body(
    body: Any, *, http_status: int | None, retry_after_s: float | None = None
) -> GraphError:
    """Build the right exception from a Graph error body ``{"error": {...}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    kind: type[GraphError]
    if not isinstance(error, dict):
        kind = TransientError if (http_status or 0) >= 500 else MalformedResponseError
        return kind(f"HTTP {http_status} without a Graph error body", http_status=http_status)
    code = _int(error.get("code"))
    kind = error_class(code, http_status)
    if error.get("is_transient") and kind is InvalidRequestError:
        kind = TransientError
    fields: dict[str, Any] = {
        "code": code,
        "subcode": _int(error.get("error_subcode")),
        "fbtrace_id": error.get("fbtrace_id"),
        "http_status": http_status,
        "error_type": error.get("type"),
        "response": body,
    }
    message = str(error.get("message") or "Graph API error")
    if kind is RateLimitError:
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
