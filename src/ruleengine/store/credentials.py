"""Ad accounts and their access tokens, encrypted at rest with Fernet.

Jobs never carry a token: they carry a *token reference* that the worker
resolves here. The stored document holds the ciphertext and a short
fingerprint (for "which token is this?") — never the plaintext.

When Meta refuses a token (190: invalid or expired; 10/200/294: a permission is
missing) the dispatcher or the worker records it on the account as its
``token_state``; from then on :meth:`CredentialStore.usable_token` refuses to hand
the token out, so no listing, job or write uses it, until the token is replaced
(:meth:`CredentialStore.add`, which clears the state — also when it is the same
token again, once its permission is restored).

An account's currency and timezone are Meta's (:mod:`ruleengine.accounts.currency` reads them
when the account is registered). When a job finds Meta holding others than the registered
ones, it records that as the account's ``currency_state``
(:meth:`CredentialStore.mark_currency`): budget and bid changes on the account stop until
the registered values are Meta's again (:meth:`CredentialStore.set_currency`, or
:meth:`CredentialStore.add` with a currency or timezone, clear it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from cryptography.fernet import Fernet, InvalidToken
from pydantic import BaseModel, ConfigDict
from pymongo import ReturnDocument

from ruleengine import constants as c
from ruleengine.errors import (
    ConfigurationError,
    CredentialsError,
    NotFoundError,
    TokenUnusableError,
)
from ruleengine.rules.basics import is_account_id, timezone_problem
from ruleengine.secret_files import read_secret
from ruleengine.settings import Settings
from ruleengine.store.db import Database, Document

KEY_FILE = "token-encryption.key"
TOKEN_REF_PREFIX = "account:"
_CURRENCY = re.compile(r"[A-Za-z]{3}")  # fullmatch: "$" would accept "USD\n"


def is_currency(value: str) -> bool:
    """True for a 3-letter ISO 4217 code such as ``USD`` (any case)."""
    return _CURRENCY.fullmatch(value) is not None


def check_account(account_id: str, timezone: str | None, currency: str | None) -> None:
    """The same checks as the API's, for callers that are not the API (the CLI); raises
    CredentialsError."""
    if not is_account_id(account_id):
        raise CredentialsError(f"'{account_id[:40]}' is not an ad account id like 'act_123'")
    problem = timezone and timezone_problem(timezone)
    if problem:
        raise CredentialsError(problem)
    if currency and not is_currency(currency):
        raise CredentialsError(f"'{currency[:10]}' is not a 3-letter currency code such as 'USD'")


def load_key(settings: Settings, *, create: bool = False) -> bytes:
    """The Fernet key from the setting, else from ``<data_dir>/token-encryption.key``.

    With ``create`` (embedded mode) a missing key file is generated, 0600 from the start;
    a key file others may read is tightened (:mod:`ruleengine.secret_files`).
    """
    if settings.token_encryption_key is not None:
        key = settings.token_encryption_key.get_secret_value().encode()
    else:
        path = Path(settings.data_dir) / KEY_FILE
        if not path.exists() and not create:
            raise ConfigurationError(
                "no token encryption key: set RULEENGINE_TOKEN_ENCRYPTION_KEY (generate one"
                " with `ruleengine accounts new-key`) or run `ruleengine up` once to create"
                f" {path}"
            )
        key = read_secret(path, create=Fernet.generate_key if create else None)
    try:
        Fernet(key)
    except ValueError:
        raise ConfigurationError(
            "RULEENGINE_TOKEN_ENCRYPTION_KEY is not a Fernet key (32 url-safe base64 bytes)"
        ) from None
    return key


def fingerprint(token: str) -> str:
    """A short, non-reversible tag of a token (to tell tokens apart in listings)."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


def token_ref(account_id: str) -> str:
    """The reference jobs carry instead of the token."""
    return f"{TOKEN_REF_PREFIX}{account_id}"


class TokenState(BaseModel):
    """Why Meta refused an account's token, and when it first did.

    Attributes:
        status: ``invalid`` (190, and 102/104), ``expired`` (190/463) or
            ``missing_permission`` (10, 200–299, e.g. 294 without ``ads_management``).
        code: Meta's error code.
        subcode: Meta's ``error_subcode`` (463 expired, 460 password changed, 467 logged out…).
        message: Meta's message (tokens redacted).
        at: When it was first seen.
        token_fingerprint: Which token it was (a replaced token is not marked by a late report).
    """

    model_config = ConfigDict(frozen=True)

    status: Literal["invalid", "expired", "missing_permission"]
    code: int | None = None
    subcode: int | None = None
    message: str = ""
    at: datetime
    token_fingerprint: str = ""

    def describe(self) -> str:
        """One line for logs, errors and the CLI."""
        code = (
            ""
            if self.code is None
            else f" (code {self.code}" + (f"/{self.subcode})" if self.subcode else ")")
        )
        return f"{self.status.replace('_', ' ')}{code} since {self.at.isoformat()}"


#: Record reasons of a change whose amount is in the account's currency, not made.
CURRENCY_MISMATCH: Final = "account_currency_mismatch"
TIMEZONE_MISMATCH: Final = "account_timezone_mismatch"


class CurrencyState(BaseModel):
    """The registered currency or timezone of an ad account is not Meta's.

    Attributes:
        currency: the registered currency.
        timezone: the registered timezone.
        meta_currency: Meta's (``None``: Meta did not say).
        meta_timezone: Meta's ``timezone_name`` (``None``: Meta did not say).
        at: when a job first found them apart.
    """

    model_config = ConfigDict(frozen=True)

    currency: str
    timezone: str
    meta_currency: str | None = None
    meta_timezone: str | None = None
    at: datetime

    @property
    def currency_differs(self) -> bool:
        """True when Meta's currency is known and not the registered one."""
        return self.meta_currency is not None and self.meta_currency != self.currency

    @property
    def reason(self) -> str:
        """The record reason of a change this state stops."""
        return CURRENCY_MISMATCH if self.currency_differs else TIMEZONE_MISMATCH

    def describe(self) -> str:
        """One line for logs, errors and the CLI: which registered value is not Meta's."""
        parts = []
        if self.currency_differs:
            parts.append(f"currency {self.currency} is registered, Meta's is {self.meta_currency}")
        if self.meta_timezone is not None and self.meta_timezone != self.timezone:
            parts.append(f"timezone {self.timezone} is registered, Meta's is {self.meta_timezone}")
        return "; ".join(parts) + f" (since {self.at.isoformat()})"

    def explain(self, account_id: str) -> str:
        """What the state stops and how to end it, for records, the error log and the API."""
        return (
            f"{account_id}: {self.describe()}; no budget or bid change is made on it until the"
            f" registered values are Meta's (ruleengine accounts refresh {account_id}, or"
            f" POST /api/accounts/{account_id}/refresh)"
        )


class Account(BaseModel):
    """A registered ad account, without its token."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    timezone: str
    currency: str
    token_fingerprint: str
    created_at: datetime
    updated_at: datetime
    #: who registered the account or rotated its token last (an API token's name)
    updated_by: str | None = None
    token_state: TokenState | None = None
    currency_state: CurrencyState | None = None

    def disagreement(
        self, *, currency: str | None, timezone: str | None, now: datetime
    ) -> CurrencyState | None:
        """The state Meta's ``currency`` and ``timezone`` put the account in: ``None`` when
        they are the registered ones (a value Meta did not give is no disagreement)."""
        currency = currency.upper() if currency else None
        if currency in (None, self.currency) and timezone in (None, self.timezone):
            return None
        if self.currency_state is not None:
            now = self.currency_state.at  # the first time it was seen stays
        return CurrencyState(
            currency=self.currency,
            timezone=self.timezone,
            meta_currency=currency,
            meta_timezone=timezone,
            at=now,
        )

    @classmethod
    def from_mongo(cls, doc: Document) -> Account:
        """Build from an ``accounts`` document (the ciphertext is left out)."""
        fields = {k: v for k, v in doc.items() if k not in ("_id", "token_encrypted")}
        return cls(id=doc["_id"], **fields)


@dataclass(frozen=True)
class AccountLabel:
    """How an account is shown to a person: its name, and the currency of its money."""

    name: str
    currency: str


async def account_labels(db: Database, ids: Iterable[str] | None = None) -> dict[str, AccountLabel]:
    """Name and currency of the registered accounts among ``ids`` (all: ``None``), by id;
    one query, reading neither tokens nor anything else."""
    query: Document = {} if ids is None else {"_id": {"$in": sorted(set(ids))}}
    return {
        d["_id"]: AccountLabel(str(d.get("name") or d["_id"]), str(d.get("currency") or ""))
        async for d in db[c.ACCOUNTS].find(query, {"name": 1, "currency": 1})
    }


class CredentialStore:
    """Register accounts, list them, and resolve token references."""

    def __init__(self, db: Database, key: bytes) -> None:
        self._db = db
        self._accounts = db[c.ACCOUNTS]
        self._fernet = Fernet(key)

    async def add(
        self,
        account_id: str,
        token: str,
        *,
        now: datetime,
        name: str | None = None,
        timezone: str | None = None,
        currency: str | None = None,
        by: str | None = None,
    ) -> Account:
        """Register an account, or rotate its token (what is not given is kept).

        A new account without ``timezone``/``currency`` gets UTC/USD — this is the store:
        the CLI and the API give Meta's (:func:`ruleengine.accounts.currency.register`). Giving a
        token clears the account's ``token_state``: the engine uses the account again; giving
        a currency or timezone clears its ``currency_state`` (a job checks them again before
        its next budget or bid change). ``by`` is who did (``updated_by``).
        """
        secret = self._token_fields(token, now=now) | {"updated_by": by}
        check_account(account_id, timezone, currency)
        given = {"name": name, "timezone": timezone, "currency": currency and currency.upper()}
        changes = {k: v for k, v in given.items() if v}
        defaults = {"name": account_id, "timezone": "UTC", "currency": "USD"}
        cleared = {"token_state": ""}
        if timezone or currency:
            cleared["currency_state"] = ""
        doc = await self._accounts.find_one_and_update(
            {"_id": account_id},
            {
                "$set": {**changes, **secret},
                "$setOnInsert": {
                    "created_at": now,
                    **{k: v for k, v in defaults.items() if k not in changes},
                },
                "$unset": cleared,
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return Account.from_mongo(doc)

    def _token_fields(self, token: str, *, now: datetime) -> dict[str, Any]:
        """What storing ``token`` sets: its ciphertext and fingerprint (never the token).

        Raises:
            CredentialsError: an empty token.
        """
        if not token.strip():
            raise CredentialsError("the access token is empty")
        return {
            "token_encrypted": self._fernet.encrypt(token.strip().encode()),
            "token_fingerprint": fingerprint(token.strip()),
            "updated_at": now,
        }

    async def replace_token(
        self, account_id: str, token: str, *, now: datetime, by: str | None = None
    ) -> Account:
        """Rotate a registered account's token (clearing its ``token_state``); NotFoundError.

        ``by`` is who did (``updated_by``).
        """
        secret = self._token_fields(token, now=now) | {"updated_by": by}
        doc = await self._accounts.find_one_and_update(
            {"_id": account_id},
            {
                "$set": secret,
                "$unset": {"token_state": ""},
            },
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            raise NotFoundError(f"ad account '{account_id}' is not registered")
        return Account.from_mongo(doc)

    async def set_currency(
        self, account_id: str, *, currency: str, timezone: str, now: datetime, by: str | None = None
    ) -> Account:
        """Register Meta's currency and timezone for an account, clearing its ``currency_state``.

        Raises:
            CredentialsError: not a currency code or not a timezone.
            NotFoundError: the account is not registered.
        """
        check_account(account_id, timezone, currency)
        doc = await self._accounts.find_one_and_update(
            {"_id": account_id},
            {
                "$set": {
                    "currency": currency.upper(),
                    "timezone": timezone,
                    "updated_at": now,
                    "updated_by": by,
                },
                "$unset": {"currency_state": ""},
            },
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            raise NotFoundError(f"ad account '{account_id}' is not registered")
        return Account.from_mongo(doc)

    async def remove(self, account_id: str) -> None:
        """Forget an account and its token; NotFoundError when it is not registered."""
        result = await self._accounts.delete_one({"_id": account_id})
        if result.deleted_count == 0:
            raise NotFoundError(f"ad account '{account_id}' is not registered")

    async def all(self) -> list[Account]:
        """Every registered account, by id."""
        return [Account.from_mongo(d) async for d in self._accounts.find({}).sort("_id")]

    async def get(self, account_id: str) -> Account:
        """One account; raises NotFoundError."""
        doc = await self._accounts.find_one({"_id": account_id})
        if doc is None:
            raise NotFoundError(f"ad account '{account_id}' is not registered")
        return Account.from_mongo(doc)

    async def labels(self, ids: Iterable[str] | None = None) -> dict[str, AccountLabel]:
        """Name and currency of the accounts ``ids`` (every account: ``None``) that are
        registered: what a screen or a CLI table shows money and accounts with."""
        return await account_labels(self._db, ids)

    async def ids(self) -> set[str]:
        """The ids of every registered account."""
        return {d["_id"] async for d in self._accounts.find({}, {"_id": 1})}

    async def currencies(self) -> dict[str, str]:
        """Every registered account's currency, by id: what a rule is validated against
        (:func:`~ruleengine.rules.language.model.parse_rule`'s ``accounts``)."""
        cursor = self._accounts.find({}, {"_id": 1, "currency": 1})
        return {d["_id"]: d["currency"] async for d in cursor}

    async def mark_token(self, account_id: str, state: TokenState) -> bool:
        """Record that Meta refused the account's token; True when this call recorded it.

        Only the token that failed is marked (compare-and-set on its fingerprint, so a report
        arriving after the token was replaced changes nothing), and only once: the first
        refusal's time stays.
        """
        result = await self._accounts.update_one(
            {
                "_id": account_id,
                "token_fingerprint": state.token_fingerprint,
                "token_state": None,
            },
            {"$set": {"token_state": state.model_dump()}},
        )
        return result.modified_count == 1

    async def mark_currency(self, account_id: str, state: CurrencyState) -> bool:
        """Record that Meta holds another currency or timezone; True when this call recorded it.

        Compare-and-set on the registered values ``state`` was found against (a fix made
        meanwhile is not marked by a late report), and only once: the first time stays.
        """
        result = await self._accounts.update_one(
            {
                "_id": account_id,
                "currency": state.currency,
                "timezone": state.timezone,
                "currency_state": None,
            },
            {"$set": {"currency_state": state.model_dump()}},
        )
        return result.modified_count == 1

    async def clear_currency(self, account_id: str, *, currency: str, timezone: str) -> bool:
        """Forget the ``currency_state`` of an account Meta agrees with again (its registered
        ``currency`` and ``timezone`` still these); True when this call cleared it."""
        result = await self._accounts.update_one(
            {
                "_id": account_id,
                "currency": currency,
                "timezone": timezone,
                "currency_state": {"$ne": None},
            },
            {"$unset": {"currency_state": ""}},
        )
        return result.modified_count == 1

    async def mismatched(self) -> list[Account]:
        """The accounts whose registered currency or timezone Meta disagrees with, by id."""
        found = self._accounts.find({"currency_state": {"$ne": None}}).sort("_id")
        return [Account.from_mongo(d) async for d in found]

    async def unusable(self) -> list[Account]:
        """The accounts whose token Meta refused, by id."""
        found = self._accounts.find({"token_state": {"$ne": None}}).sort("_id")
        return [Account.from_mongo(d) async for d in found]

    async def usable_token(self, ref: str) -> str:
        """The plaintext token behind a reference, unless Meta refused it.

        Raises:
            TokenUnusableError: the account has a ``token_state``.
            CredentialsError: not registered, or the token cannot be decrypted.
        """
        account_id = ref.removeprefix(TOKEN_REF_PREFIX)
        doc = await self._accounts.find_one(
            {"_id": account_id}, {"token_encrypted": 1, "token_state": 1}
        )
        return self._usable(account_id, doc)

    async def account_and_token(self, ref: str) -> tuple[Account, str]:
        """The account behind a token reference and its usable token, in one read (a job's).

        Raises: as :meth:`usable_token`.
        """
        account_id = ref.removeprefix(TOKEN_REF_PREFIX)
        doc = await self._accounts.find_one({"_id": account_id})
        token = self._usable(account_id, doc)
        assert doc is not None  # _usable raised for a missing account
        return Account.from_mongo(doc), token

    def _usable(self, account_id: str, doc: Document | None) -> str:
        if doc is not None and doc.get("token_state"):
            state = TokenState.model_validate(doc["token_state"])
            raise TokenUnusableError(
                f"Meta refused the token of {account_id}: {state.describe()}; nothing is sent"
                f" with it until it is replaced (`ruleengine accounts add {account_id}"
                " --token-env NAME` or POST /api/accounts)"
            )
        return self._decrypt(account_id, doc)

    async def token(self, ref: str) -> str:
        """The plaintext token behind a token reference."""
        account_id = ref.removeprefix(TOKEN_REF_PREFIX)
        doc = await self._accounts.find_one({"_id": account_id}, {"token_encrypted": 1})
        return self._decrypt(account_id, doc)

    def _decrypt(self, account_id: str, doc: Document | None) -> str:
        if doc is None:
            raise CredentialsError(f"ad account '{account_id}' is not registered")
        try:
            return self._fernet.decrypt(doc["token_encrypted"]).decode()
        except InvalidToken:
            raise CredentialsError(
                f"the token of '{account_id}' cannot be decrypted with the configured key;"
                " was RULEENGINE_TOKEN_ENCRYPTION_KEY changed? Re-add the account."
            ) from None
