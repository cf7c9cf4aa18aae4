"""Meta's token errors as an ad account's ``token_state``, kept by the dispatcher and the worker.

A 190 (invalid or expired token) or a permission error (10, 200–299, e.g. 294 when
the token lacks ``ads_management``) is not a problem of one call: every later call
with that token fails the same way. So the first one seen is kept on the account
(:meth:`~ruleengine.store.credentials.CredentialStore.mark_token`), the dispatcher
stops listing and enqueuing for the account, the worker stops using the token,
``/health/ready`` and ``GET /api/accounts`` name the account — until the token is
replaced. Such errors are never retried (the reader's policy retries transient
errors and rate limits only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ruleengine.meta.errors import GraphError, token_status
from ruleengine.redact import REDACTOR
from ruleengine.store.credentials import CredentialStore, TokenState, fingerprint

log = logging.getLogger(__name__)


def refusal(
    error: GraphError | Mapping[str, Any] | None, *, token: str, now: datetime
) -> TokenState | None:
    """The account-level state an error means for ``token``, or None for any other error.

    ``error`` is a :class:`GraphError` or its stored form (``as_dict()``: code, subcode,
    message), as execution records keep it.
    """
    if error is None:
        return None
    if isinstance(error, GraphError):
        code, subcode, message = error.code, error.subcode, error.message
    else:
        code, subcode = _int(error.get("code")), _int(error.get("subcode"))
        message = str(error.get("message") or "")
    status = token_status(code, subcode)
    if status is None:
        return None
    return TokenState(
        status=status,
        code=code,
        subcode=subcode,
        message=REDACTOR.text(message)[:500],
        at=now,
        token_fingerprint=fingerprint(token),
    )


async def record_refusal(
    credentials: CredentialStore,
    account_id: str,
    error: GraphError | Mapping[str, Any] | None,
    *,
    token: str,
    now: datetime,
) -> TokenState | None:
    """Keep a token error on the account; the state when ``error`` is one (recorded or not)."""
    state = refusal(error, token=token, now=now)
    if state is None:
        return None
    if await credentials.mark_token(account_id, state):
        log.error(
            "Meta refused the token of %s: %s; the account is skipped until its token is"
            " replaced (ruleengine accounts add %s)",
            account_id,
            state.describe(),
            account_id,
        )
    return state


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
