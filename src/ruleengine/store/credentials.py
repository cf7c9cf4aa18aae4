"""Ad accounts and their access tokens, encrypted at rest with Fernet.

Jobs never carry a token: they carry a *token reference* that the worker
resolves here. The stored document holds the ciphertext and a short
fingerprint (for "which token is this?") — never the plaintext.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from pydantic import BaseModel, ConfigDict
from pymongo import ReturnDocument

from ruleengine import constants as c
from ruleengine.errors import ConfigurationError, CredentialsError, NotFoundError
from ruleengine.rules.basics import is_account_id, timezone_problem
from ruleengine.settings import Settings
from ruleengine.store.db import Database, Document

KEY_FILE = "token-encryption.key"
TOKEN_REF_PREFIX = "account:"
_CURRENCY = re.compile(r"[A-Za-z]{3}")  # fullmatch: "$" would accept "USD\n"


def is_currency(value: str) -> bool:
    """True for a 3-letter ISO 4217 code such as ``USD`` (any case)."""
    return _CURRENCY.fullmatch(value) is not None


def _check_account(account_id: str, timezone: str | None, currency: str | None) -> None:
    """The same checks as the API's, for callers that are not the API (the CLI)."""
    if not is_account_id(account_id):
        raise CredentialsError(f"'{account_id[:40]}' is not an ad account id like 'act_123'")
    problem = timezone and timezone_problem(timezone)
    if problem:
        raise CredentialsError(problem)
    if currency and not is_currency(currency):
        raise CredentialsError(f"'{currency[:10]}' is not a 3-letter currency code such as 'USD'")


def load_key(settings: Settings, *, create: bool = False) -> bytes:
    """The Fernet key from the setting, else from ``<data_dir>/token-encryption.key``.

    With ``create`` (embedded mode) a missing key file is generated (mode 0600).
    """
    if settings.token_encryption_key is not None:
        key = settings.token_encryption_key.get_secret_value().encode()
    else:
        path = Path(settings.data_dir) / KEY_FILE
        if not path.exists():
            if not create:
                raise ConfigurationError(
                    "no token encryption key: set RULEENGINE_TOKEN_ENCRYPTION_KEY (generate one"
                    " with `ruleengine accounts new-key`) or run `ruleengine up` once to create"
                    f" {path}"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(Fernet.generate_key())
            path.chmod(0o600)
        key = path.read_bytes().strip()
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

    @classmethod
    def from_mongo(cls, doc: Document) -> Account:
        """Build from an ``accounts`` document (the ciphertext is left out)."""
        fields = {k: v for k, v in doc.items() if k not in ("_id", "token_encrypted")}
        return cls(id=doc["_id"], **fields)


class CredentialStore:
    """Register accounts, list them, and resolve token references."""

    def __init__(self, db: Database, key: bytes) -> None:
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
    ) -> Account:
        """Register an account, or rotate its token (what is not given is kept).

        A new account without ``timezone``/``currency`` gets UTC/USD.
        """
        if not token.strip():
            raise CredentialsError("the access token is empty")
        _check_account(account_id, timezone, currency)
        given = {"name": name, "timezone": timezone, "currency": currency and currency.upper()}
        changes = {k: v for k, v in given.items() if v}
        defaults = {"name": account_id, "timezone": "UTC", "currency": "USD"}
        doc = await self._accounts.find_one_and_update(
            {"_id": account_id},
            {
                "$set": {
                    **changes,
                    "token_encrypted": self._fernet.encrypt(token.strip().encode()),
                    "token_fingerprint": fingerprint(token.strip()),
                    "updated_at": now,
                },
                "$setOnInsert": {
                    "created_at": now,
                    **{k: v for k, v in defaults.items() if k not in changes},
                },
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return Account.from_mongo(doc)

    async def all(self) -> list[Account]:
        """Every registered account, by id."""
        return [Account.from_mongo(d) async for d in self._accounts.find({}).sort("_id")]

    async def get(self, account_id: str) -> Account:
        """One account; raises NotFoundError."""
        doc = await self._accounts.find_one({"_id": account_id})
        if doc is None:
            raise NotFoundError(f"ad account '{account_id}' is not registered")
        return Account.from_mongo(doc)

    async def ids(self) -> set[str]:
        """The ids of every registered account."""
        return {d["_id"] async for d in self._accounts.find({}, {"_id": 1})}

    async def token(self, ref: str) -> str:
        """The plaintext token behind a token reference."""
        account_id = ref.removeprefix(TOKEN_REF_PREFIX)
        doc = await self._accounts.find_one({"_id": account_id}, {"token_encrypted": 1})
        if doc is None:
            raise CredentialsError(f"ad account '{account_id}' is not registered")
        try:
            return self._fernet.decrypt(doc["token_encrypted"]).decode()
        except InvalidToken:
            raise CredentialsError(
                f"the token of '{account_id}' cannot be decrypted with the configured key;"
                " was RULEENGINE_TOKEN_ENCRYPTION_KEY changed? Re-add the account."
            ) from None
