"""An ad account's currency and timezone are Meta's: read when it is registered, checked by
every job that changes a budget or a bid, and a registered value Meta disagrees with kept as
the account's ``currency_state`` until it is fixed.

A rule's amounts are in the account's currency: budgets and bids are written in its minor
units, scaled by the *registered* currency (100 cents to the dollar, 1 for the yen), and a
daily budget resets at midnight in the account's timezone, whose days are the Insights
periods. A wrong registered value is silent and costly — a yen account registered as USD
makes ``max_budget: 10000`` ¥1,000,000 — so:

* :func:`register` (``ruleengine accounts add``, ``POST /api/accounts``) reads
  ``GET act_…?fields=currency,timezone_name`` with the token it is given and registers
  Meta's values. A value given that Meta disagrees with is refused; when Meta cannot be
  asked, the account is registered only if both values are given (unchecked: the first job
  that changes money checks them). Nothing is stored when it refuses.
* A job reads the same fields in its one read of the ad account, the one that also gives
  ``min_daily_budget`` (:class:`~ruleengine.writes.meta_limits.AccountFacts`), before its first
  budget or bid change. When they disagree no such change is made
  (:class:`~ruleengine.errors.AccountMismatch`), and :func:`keep_finding` keeps the
  account's ``currency_state`` and one error group per account; when they agree again,
  the state is cleared.
* :func:`refresh` (``ruleengine accounts refresh``, ``POST /api/accounts/{id}/refresh``)
  registers Meta's values with the stored token, which clears the state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pymongo.errors import PyMongoError

from ruleengine.errors import (
    AccountCheckError,
    CredentialsError,
    ErrorReport,
    MetaUnreachable,
)
from ruleengine.meta.adaccount import AdAccount, read_ad_account
from ruleengine.meta.errors import (
    AuthError,
    GraphError,
    InvalidRequestError,
    PermissionDeniedError,
)
from ruleengine.meta.reader import GraphReader
from ruleengine.store.credentials import (
    Account,
    CredentialStore,
    CurrencyState,
    check_account,
    token_ref,
)
from ruleengine.store.errorlog import ErrorLog

log = logging.getLogger(__name__)

#: The error log's function for the mismatches jobs find (one group per ad account).
FUNCTION: Final = "account_check"


@dataclass(frozen=True)
class Registered:
    """An account as :func:`register` left it.

    Attributes:
        account: the stored account (never its token).
        unchecked: why its currency and timezone were not checked with Meta (Meta could
            not be asked), or ``None`` when they are Meta's.
    """

    account: Account
    unchecked: str | None = None


@dataclass(frozen=True)
class Refreshed:
    """An account before and after :func:`refresh` registered Meta's values."""

    before: Account
    account: Account

    def changes(self) -> list[str]:
        """What changed, e.g. ``["currency USD → JPY", "timezone UTC → Asia/Tokyo"]``."""
        pairs = (
            ("currency", self.before.currency, self.account.currency),
            ("timezone", self.before.timezone, self.account.timezone),
        )
        return [f"{name} {old} → {new}" for name, old, new in pairs if old != new]


async def ask_meta(reader: GraphReader, account_id: str, *, token: str) -> AdAccount:
    """The ad account as Meta holds it, read with ``token``.

    Raises:
        AccountCheckError: Meta refused the token, or shows it no such ad account.
        MetaUnreachable: no answer, a transient error, a rate limit, a malformed answer.
    """
    try:
        return await read_ad_account(reader, account_id, token=token)
    except AuthError as exc:
        raise AccountCheckError(
            f"Meta refused the token for {account_id}: {exc}; use a valid token of a user or"
            " system user with access to the ad account",
            field="token",
        ) from None
    except PermissionDeniedError as exc:
        raise AccountCheckError(
            f"Meta does not let this token read {account_id}: {exc}; check the id (as Ads"
            " Manager shows it, with act_) and the token's access to the ad account",
            field="token",
        ) from None
    except InvalidRequestError as exc:
        raise AccountCheckError(
            f"Meta shows no ad account {account_id} to this token: {exc}; check the id (as"
            " Ads Manager shows it, with act_) and the token's access to it",
            field="id",
        ) from None
    except GraphError as exc:
        raise MetaUnreachable(f"could not read {account_id} from Meta: {exc}") from None


def settle(
    account_id: str, meta: AdAccount | None, *, currency: str | None, timezone: str | None
) -> tuple[str, str]:
    """The currency and timezone to register: Meta's; a given one only where Meta said none.

    Raises:
        AccountCheckError: a given value is not Meta's, or a value is known from nowhere.
    """
    chosen: list[str] = []
    for name, given, said in (
        ("currency", currency.upper() if currency else None, meta.currency if meta else None),
        ("timezone", timezone, meta.timezone if meta else None),
    ):
        if given and said and given != said:
            raise AccountCheckError(
                f"Meta holds {account_id} in the {name} {said}, not {given}: leave the {name}"
                f" out to register Meta's (budgets are scaled and days counted by it)",
                field=name,
            )
        value = said or given
        if not value:
            raise AccountCheckError(
                f"Meta did not say the {name} of {account_id}: give it explicitly", field=name
            )
        chosen.append(value)
    return chosen[0], chosen[1]


async def register(
    credentials: CredentialStore,
    reader: GraphReader,
    account_id: str,
    token: str,
    *,
    now: datetime,
    name: str | None = None,
    currency: str | None = None,
    timezone: str | None = None,
    by: str | None = None,
) -> Registered:
    """Register an account (or re-register it with a new token) with Meta's currency and
    timezone, read with ``token``; nothing is stored when this raises.

    The input is checked before Meta is asked. Without an answer from Meta the account is
    registered only with both ``currency`` and ``timezone`` given (``unchecked`` says why).

    Raises:
        CredentialsError: a malformed id, currency, timezone or an empty token.
        AccountCheckError: Meta refused the token or the id, or a value given is not Meta's.
        MetaUnreachable: Meta could not be asked and a value is missing.
    """
    check_account(account_id, timezone, currency)
    if not token.strip():
        raise CredentialsError("the access token is empty")
    meta: AdAccount | None = None
    unchecked = None
    try:
        meta = await ask_meta(reader, account_id, token=token.strip())
    except MetaUnreachable as exc:
        if not (currency and timezone):
            raise
        unchecked = str(exc)
    chosen_currency, chosen_timezone = settle(
        account_id, meta, currency=currency, timezone=timezone
    )
    account = await credentials.add(
        account_id,
        token,
        now=now,
        name=name,
        currency=chosen_currency,
        timezone=chosen_timezone,
        by=by,
    )
    if unchecked:
        log.warning("%s registered without Meta's word on its currency: %s", account_id, unchecked)
    return Registered(account, unchecked)


async def refresh(
    credentials: CredentialStore,
    reader: GraphReader,
    account_id: str,
    *,
    now: datetime,
    by: str | None = None,
) -> Refreshed:
    """Register Meta's currency and timezone for a registered account, read with its token;
    clears its ``currency_state``.

    Raises:
        NotFoundError: the account is not registered.
        TokenUnusableError: Meta refused its token before (replace it: ``register``).
        AccountCheckError, MetaUnreachable: as :func:`ask_meta`; or Meta said no currency or
            timezone.
    """
    before = await credentials.get(account_id)
    token = await credentials.usable_token(token_ref(account_id))
    meta = await ask_meta(reader, account_id, token=token)
    currency, timezone = settle(account_id, meta, currency=None, timezone=None)
    account = await credentials.set_currency(
        account_id, currency=currency, timezone=timezone, now=now, by=by
    )
    return Refreshed(before, account)


async def keep_finding(
    credentials: CredentialStore,
    errors: ErrorLog,
    registered: Account,
    read: AdAccount | None,
    *,
    now: datetime,
    context: dict[str, object] | None = None,
) -> CurrencyState | None:
    """Keep what a job's read of its ad account says of the registered currency and timezone.

    ``read`` is ``None`` when the job did not read the account (no budget or bid change) or
    could not: the last finding then stands. A disagreement is recorded on the account
    (once: :meth:`~ruleengine.store.credentials.CredentialStore.mark_currency`) and in the
    account's error group (each job it stopped); an agreement clears an earlier finding.
    """
    if read is None:
        return None
    state = registered.disagreement(currency=read.currency, timezone=read.timezone, now=now)
    if state is None:
        if registered.currency_state is not None and await credentials.clear_currency(
            registered.id, currency=registered.currency, timezone=registered.timezone
        ):
            log.info("%s: Meta's currency and timezone are the registered ones", registered.id)
        return None
    message = state.explain(registered.id)
    if await credentials.mark_currency(registered.id, state):
        log.error("%s", message)
    report = ErrorReport(function=FUNCTION, message=message, context=context)
    try:
        await errors.record(report, now=now, group=registered.id)
    except PyMongoError:  # the state is kept; a broken error log must not fail the job
        log.exception("could not write to the error log: %s", FUNCTION)
    return state
