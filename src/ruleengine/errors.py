"""The few exception types of ruleengine.

Every message says what was wrong and, where it helps, what to do about it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Protocol


class RuleEngineError(Exception):
    """Base class of every error raised on purpose by ruleengine."""


@dataclass(frozen=True)
class FieldError:
    """One validation problem: where (a JSON path such as ``tasks[0].action.percent``) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class RuleValidationError(RuleEngineError):
    """A rule (or another user input) failed validation; ``errors`` lists every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


class NotFoundError(RuleEngineError):
    """The thing asked for does not exist."""


class ConflictError(RuleEngineError):
    """A compare-and-set lost: someone else changed the document first. Re-read and retry."""


class ConfigurationError(RuleEngineError):
    """A setting is missing or wrong; the message names the setting."""


class LockTimeout(RuleEngineError):
    """An ad account's write lock stayed busy for longer than the wait allows."""


class LockLost(RuleEngineError):
    """A write lock is no longer provably ours: nothing may be written under it."""


class Fenced(LockLost):
    """A newer holder took an ad account's write lock over (its fence is higher): the old
    holder may neither send a write nor move an intent of the account any more."""


class CredentialsError(RuleEngineError):
    """An ad account has no usable token (not registered, or it cannot be decrypted)."""


class TokenUnusableError(CredentialsError):
    """Meta refused an ad account's token (190, or a missing permission): nothing is sent with
    it until it is replaced (``ruleengine accounts add``, ``POST /api/accounts``)."""


class AccountCheckError(CredentialsError):
    """Meta's answer about an ad account being registered stands against the registration:
    it refused the token, does not show the account to it, or holds another currency or
    timezone than the one given. ``field`` is the input it is about (``token``, ``id``,
    ``currency``, ``timezone``)."""

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(message)


class MetaUnreachable(RuleEngineError):
    """Meta could not be asked about an ad account being registered (no answer, a transient
    error, a rate limit): try again, or give its currency and timezone explicitly."""


class AccountMismatch(RuleEngineError):
    """An ad account's registered currency or timezone is not Meta's: no change whose amount
    is in its currency (budgets, bids) is made on it until that is fixed.

    ``reason`` is the record's (``account_currency_mismatch``,
    ``account_timezone_mismatch``); ``details`` the registered and Meta's values.
    """

    def __init__(self, message: str, *, reason: str, details: dict[str, object]) -> None:
        self.reason = reason
        self.details = details
        super().__init__(message)


class ListingExpired(RuleEngineError):
    """A job's stored entity listing is gone (expired or deleted): the job evaluates nothing.

    Its batch is ``FAILED`` with ``reason`` ``listing_expired``; the rule's next run lists
    the account again.
    """

    reason = "listing_expired"


class NoAmountForCurrency(RuleEngineError):
    """A rule gives an amount per currency but none in the currency of an ad account it runs
    on (the account was registered with another currency after the rule was saved): nothing
    of the rule runs there, since no amount says what it means in that currency.

    A batch that meets it is ``FAILED`` with ``reason`` ``no_amount_for_currency``.
    """

    reason = "no_amount_for_currency"

    def __init__(self, path: str, currency: str) -> None:
        self.path = path
        self.currency = currency
        super().__init__(
            f"{path} gives no amount in {currency}, the ad account's currency: add"
            f' "{currency}" to it (in that currency\'s units) and save the rule again'
        )


@dataclass(frozen=True)
class ErrorReport:
    """One failure for the error log: where, what, and the exact (redacted) exchange.

    Attributes:
        function: the function that failed (the error log groups by it).
        message: the error message.
        stack: the formatted stack trace.
        params: the request as sent (method, path, parameters), tokens removed.
        response: what the other side answered (e.g. Meta's error body).
        context: rule, batch, account, entity … for finding the failure again.
    """

    function: str
    message: str
    stack: str = ""
    params: dict[str, object] | None = None
    response: object = None
    context: dict[str, object] | None = None

    @classmethod
    def of(
        cls,
        exc: BaseException,
        *,
        function: str,
        message: str | None = None,
        params: dict[str, object] | None = None,
        response: object = None,
        context: dict[str, object] | None = None,
    ) -> ErrorReport:
        """A report of ``exc`` with its stack; the message defaults to ``Type: text``."""
        return cls(
            function=function,
            message=message if message is not None else f"{type(exc).__name__}: {exc}",
            stack="".join(traceback.format_exception(exc)),
            params=params,
            response=response,
            context=context,
        )


class ErrorSink(Protocol):
    """Somewhere failures are reported to (the MongoDB error log implements it)."""

    async def report(self, report: ErrorReport) -> None:
        """Record ``report``; must not raise."""
        ...
