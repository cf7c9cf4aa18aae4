"""Graph API errors in Meta's shape, the catalogue of codes the sandbox uses, and its own base.

Meta answers every failure with ``{"error": {message, type, code, error_subcode,
fbtrace_id, is_transient}}``; clients decide what to do from ``code`` and
``error_subcode``, not from the HTTP status, so the catalogue below keeps Meta's
codes and messages and picks plausible statuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

#: Subcode Meta sends with 80000/80004 ("too many calls to this ad account").
ACCOUNT_THROTTLED_SUBCODE = 2446079
#: Subcode of error 100 for a budget below the ad account's minimum ("Your Budget Is Too Low").
BUDGET_TOO_LOW_SUBCODE = 1885272
#: Subcode of error 190 for an expired or invalidated session.
TOKEN_EXPIRED_SUBCODE = 463
#: Subcode of error 100 for an object that does not exist.
NONEXISTENT_OBJECT_SUBCODE = 33


@dataclass(frozen=True)
class _Default:
    message: str
    status: int
    is_transient: bool = False


_DEFAULTS: dict[int, _Default] = {
    1: _Default("An unknown error occurred", 500, True),
    2: _Default("An unexpected error has occurred. Please retry your request later.", 503, True),
    4: _Default("(#4) Application request limit reached", 400, True),
    17: _Default("(#17) User request limit reached", 400, True),
    100: _Default("(#100) Invalid parameter", 400),
    104: _Default("An access token is required to request this resource.", 400),
    190: _Default("Error validating access token: Session has expired.", 400),
    200: _Default("(#200) Permissions error", 403),
    368: _Default("The action attempted has been deemed abusive or is otherwise disallowed", 400),
    613: _Default("(#613) Calls to this api have exceeded the rate limit.", 400, True),
    803: _Default("(#803) Some of the aliases you requested do not exist", 404),
    80000: _Default(
        "(#80000) There have been too many calls from this ad-account. Wait a bit and try again.",
        400,
        True,
    ),
    80004: _Default(
        "(#80004) There have been too many calls to this ad-account. Wait a bit and try again.",
        400,
        True,
    ),
}


class SandboxError(Exception):
    """Base of the errors the sandbox raises to its Python callers (the admin client).

    Graph and Sheets failures are not among them: those are answers the simulated
    services send over HTTP (:class:`GraphError` renders Meta's).
    """


class GraphError(Exception):
    """A Graph API failure; ``body()`` renders it the way Meta does.

    Args:
        code: Meta's error code (``100``, ``190``, ``80004`` …).
        message: The human message; defaults to Meta's wording for ``code``.
        subcode: ``error_subcode``, omitted from the body when ``None`` (as Meta does).
        status: HTTP status; defaults from the catalogue.
        is_transient: Overrides the catalogue's ``is_transient``.
        user_title: Optional ``error_user_title``.
        user_msg: Optional ``error_user_msg``.
        error_type: ``type`` in the body: ``OAuthException`` for most errors, as Meta's.
    """

    def __init__(
        self,
        code: int,
        message: str | None = None,
        *,
        subcode: int | None = None,
        status: int | None = None,
        is_transient: bool | None = None,
        user_title: str | None = None,
        user_msg: str | None = None,
        error_type: str = "OAuthException",
    ) -> None:
        default = _DEFAULTS.get(code, _Default(f"(#{code}) Simulated error", 400))
        self.error_type = error_type
        self.code = code
        self.message = message or default.message
        self.subcode = subcode
        self.status = status or default.status
        self.is_transient = default.is_transient if is_transient is None else is_transient
        self.user_title = user_title
        self.user_msg = user_msg
        super().__init__(self.message)

    def body(self, fbtrace_id: str) -> dict[str, Any]:
        """The JSON body Meta would send for this error."""
        error: dict[str, Any] = {
            "message": self.message,
            "type": self.error_type,
            "code": self.code,
        }
        if self.subcode is not None:
            error["error_subcode"] = self.subcode
        error["is_transient"] = self.is_transient
        if self.user_title:
            error["error_user_title"] = self.user_title
        if self.user_msg:
            error["error_user_msg"] = self.user_msg
        error["fbtrace_id"] = fbtrace_id
        return {"error": error}


def invalid_param(message: str) -> GraphError:
    """Error 100 with ``message`` prefixed the way Meta prefixes it."""
    return GraphError(100, f"(#100) {message}")


def nonexistent_object(object_id: str, method: str = "get") -> GraphError:
    """Error 100/33: the id names nothing this token can see (a ``GraphMethodException``)."""
    return GraphError(
        100,
        f"Unsupported {method.lower()} request. Object with ID '{object_id}' does not exist, "
        "cannot be loaded due to missing permissions, or does not support this operation. "
        "Please read the Graph API documentation at https://developers.facebook.com/docs/graph-api",
        subcode=NONEXISTENT_OBJECT_SUBCODE,
        error_type="GraphMethodException",
    )


def missing_aliases(ids: list[str]) -> GraphError:
    """Error 803 for ``?ids=`` naming unknown objects."""
    return GraphError(
        803, f"(#803) Some of the aliases you requested do not exist: {','.join(ids)}"
    )


def missing_token() -> GraphError:
    """Error 104: no access token at all."""
    return GraphError(104)


def invalid_token() -> GraphError:
    """Error 190/463: the token was revoked (the sandbox never says which token)."""
    return GraphError(190, subcode=TOKEN_EXPIRED_SUBCODE)


def no_permission(account_id: str) -> GraphError:
    """Error 200: the ad account is not one this token may use."""
    return GraphError(
        200,
        f"(#200) Ad account owner has NOT grant ads_management or ads_read permission "
        f"({account_id} is not an ad account of this sandbox)",
    )


def account_throttled(*, insights: bool) -> GraphError:
    """Error 80000 (Insights) or 80004 (ads management): the ad account is over its hourly quota."""
    return GraphError(80000 if insights else 80004, subcode=ACCOUNT_THROTTLED_SUBCODE)


def budget_change_limit() -> GraphError:
    """Error 17 as Meta sends it for an ad set whose budget changed too often within an hour.

    Meta tells this limit apart from its other code-17 limits only by the call that met it
    (a budget write of an ad set): there is no subcode and no user title.
    """
    return GraphError(17)


def budget_too_low(kind: str, minimum: str) -> GraphError:
    """Error 100/1885272: a budget below the minimum (``minimum`` as people read it)."""
    label = "ad set" if kind == "adset" else kind
    return GraphError(
        100,
        "Invalid parameter",
        subcode=BUDGET_TOO_LOW_SUBCODE,
        user_title="Your Budget Is Too Low",
        user_msg=f"The minimum budget for this {label} is {minimum} per day.",
    )


#: Code Meta sends for an ``after``/``before`` cursor it cannot use any more.
INVALID_CURSOR_CODE = 2642
#: Subcodes of error 190 (Meta's "authentication error subcodes").
TOKEN_PASSWORD_CHANGED_SUBCODE = 460
TOKEN_INVALID_SUBCODE = 467
#: Subcode of error 100 for a synchronous copy of more objects than Meta copies at once.
COPY_TOO_LARGE_SUBCODE = 1885194
# Meta writes the times of an expired session in Pacific time.
_PACIFIC = ZoneInfo("America/Los_Angeles")


def invalid_cursor() -> GraphError:
    """Error 2642: the cursor's item left the listing (deleted, or filtered out since)."""
    return GraphError(INVALID_CURSOR_CODE, "(#2642) Invalid cursors values")


def malformed_token() -> GraphError:
    """Error 190 without a subcode: a token Meta never issued (or cannot parse)."""
    return GraphError(190, "Invalid OAuth access token - Cannot parse access token")


def expired_token(expired_at: datetime, now: datetime) -> GraphError:
    """Error 190/463 with Meta's wording (times in Pacific time, as Meta writes them)."""

    def pacific(moment: datetime) -> str:
        return moment.astimezone(_PACIFIC).strftime("%A, %d-%b-%y %H:%M:%S %Z")

    return GraphError(
        190,
        f"Error validating access token: Session has expired on {pacific(expired_at)}. "
        f"The current time is {pacific(now)}.",
        subcode=TOKEN_EXPIRED_SUBCODE,
    )


def password_changed_token() -> GraphError:
    """Error 190/460: the user changed their password, which ends every session."""
    return GraphError(
        190,
        "Error validating access token: The session has been invalidated because the user "
        "changed their password or Facebook has changed the session for security reasons.",
        subcode=TOKEN_PASSWORD_CHANGED_SUBCODE,
    )


def logged_out_token() -> GraphError:
    """Error 190/467: the session was ended (the user logged out, the token was revoked)."""
    return GraphError(
        190,
        "Error validating access token: The session is invalid because the user logged out.",
        subcode=TOKEN_INVALID_SUBCODE,
    )


def missing_ads_management() -> GraphError:
    """Error 294: a write with a token that lacks ``ads_management``."""
    return GraphError(
        294,
        "(#294) Managing advertisements requires an access token with the extended "
        "permission for ads_management",
        status=403,
    )


def missing_ads_read(account_id: str) -> GraphError:
    """Error 200: a read with a token that has neither ``ads_read`` nor ``ads_management``."""
    return GraphError(
        200,
        f"(#200) Ad account owner has NOT grant ads_management or ads_read permission "
        f"({account_id})",
        status=403,
    )


def copy_too_large(objects: int, limit: int) -> GraphError:
    """Error 100/1885194: a synchronous deep copy of more objects than Meta copies at once."""
    return GraphError(
        100,
        f"(#100) The number of objects to copy ({objects}) is more than {limit}: copy them "
        "with an asynchronous batch request (POST /act_{ad_account_id}/async_batch_requests)",
        subcode=COPY_TOO_LARGE_SUBCODE,
        user_title="Too many objects to copy",
        user_msg=f"A copy made at once can hold at most {limit} objects.",
    )
