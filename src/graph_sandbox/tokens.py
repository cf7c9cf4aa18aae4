"""Access tokens: the sandbox accepts only the ones it issued, and answers the rest as Meta does.

Issued tokens are:

* one **demo token per ad account** of the world, deterministic from the seed
  (``GET /_sandbox/tokens`` shows them), scoped to that account;
* the **operator's tokens** given when the app is built (``--token``): they see every
  ad account and survive resets, so a test suite or ``ruleengine up`` can register
  one token once;
* tokens **created through the admin API** (``POST /_sandbox/tokens``), with the
  accounts, permissions and expiry the caller asks for; a reset forgets them.

The admin API can also expire a token, invalidate it (the user changed their
password, or logged out) and take a permission away. What a caller then gets is
Meta's answer: no token → 104; a token never issued → 190; expired → 190/463;
password changed → 190/460; logged out → 190/467; a write without
``ads_management`` → 294; a read without ``ads_read``/``ads_management`` → 200;
an ad account the token does not cover → what Meta says of an object it cannot see.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from graph_sandbox.errors import (
    expired_token,
    logged_out_token,
    malformed_token,
    missing_ads_management,
    missing_ads_read,
    missing_token,
    password_changed_token,
)

ADS_MANAGEMENT: Final = "ads_management"
ADS_READ: Final = "ads_read"
PERMISSIONS: Final = (ADS_MANAGEMENT, ADS_READ)
Invalidation = Literal["password_changed", "logged_out"]
INVALIDATIONS: Final = ("password_changed", "logged_out")


def demo_token(seed: int, account_id: str) -> str:
    """The token the sandbox issues for one ad account of a world built from ``seed``."""
    digest = hashlib.sha256(f"demo-token:{seed}:{account_id}".encode()).hexdigest()[:40]
    return f"EAAGsbx{digest}"


@dataclass
class Grant:
    """One issued token: whom it lets in, to do what, until when.

    Attributes:
        token: The token itself.
        accounts: The ``act_…`` ids it covers; ``None`` covers every ad account.
        permissions: Of ``ads_management`` and ``ads_read``.
        expires_at: When it stops working (``None``: never).
        invalidated: Why it stopped working before it expired, if it did.
        origin: ``demo``, ``operator`` or ``admin`` (who asked for it).
    """

    token: str
    accounts: frozenset[str] | None
    permissions: set[str] = field(default_factory=lambda: set(PERMISSIONS))
    expires_at: datetime | None = None
    invalidated: Invalidation | None = None
    origin: str = "admin"

    def covers(self, account_id: str) -> bool:
        """True when the token may touch ``account_id``."""
        return self.accounts is None or account_id in self.accounts

    def describe(self, now: datetime) -> dict[str, Any]:
        """The grant as the admin API shows it; tokens the caller chose are masked."""
        shown = self.token if self.origin in ("demo", "admin-issued") else _mask(self.token)
        return {
            "token": shown,
            "origin": self.origin,
            "accounts": None if self.accounts is None else sorted(self.accounts),
            "permissions": sorted(self.permissions),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "status": self.status(now),
        }

    def status(self, now: datetime) -> str:
        """``valid``, ``expired``, ``password_changed`` or ``logged_out``."""
        if self.invalidated is not None:
            return self.invalidated
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "valid"


class Tokens:
    """Every token the sandbox accepts, for one world.

    Args:
        accounts: The world's ad account ids (each gets its demo token).
        seed: The world's seed (demo tokens and generated tokens derive from it).
        operator_tokens: Tokens that see every account (they outlive resets).
    """

    def __init__(
        self, accounts: Iterable[str], *, seed: int, operator_tokens: Iterable[str]
    ) -> None:
        self._grants: dict[str, Grant] = {}
        self._rng = random.Random(f"tokens:{seed}")
        for account_id in accounts:
            token = demo_token(seed, account_id)
            self._grants[token] = Grant(token, frozenset({account_id}), origin="demo")
        for token in operator_tokens:
            self._grants[token] = Grant(token, None, origin="operator")

    def issue(
        self,
        *,
        token: str | None = None,
        accounts: Iterable[str] | None = None,
        permissions: Iterable[str] = PERMISSIONS,
        expires_at: datetime | None = None,
    ) -> Grant:
        """Register ``token`` (or make one up) for ``accounts`` (``None``: all of them).

        Raises:
            ValueError: An unknown permission, or an empty token.
        """
        wanted = set(permissions)
        unknown = wanted - set(PERMISSIONS)
        if unknown:
            raise ValueError(f"unknown permission {sorted(unknown)[0]!r}; use {PERMISSIONS}")
        if token is not None and not token.strip():
            raise ValueError("a token cannot be empty")
        origin = "admin" if token else "admin-issued"
        value = token or f"EAAGsbx{self._rng.getrandbits(160):040x}"
        scope = None if accounts is None else frozenset(accounts)
        grant = Grant(value, scope, wanted, expires_at, origin=origin)
        self._grants[value] = grant
        return grant

    def grant(self, token: str) -> Grant | None:
        """The grant of ``token``, whatever its state, or ``None``."""
        return self._grants.get(token)

    def all(self) -> list[Grant]:
        """Every grant, in the order they were issued."""
        return list(self._grants.values())

    def check(self, token: str | None, now: datetime) -> Grant:
        """The grant a call may use, or Meta's error for the token it carried.

        Raises:
            GraphError: 104 (no token) or 190 with Meta's subcodes.
        """
        if not token:
            raise missing_token()
        grant = self._grants.get(token)
        if grant is None:
            raise malformed_token()
        if grant.invalidated == "password_changed":
            raise password_changed_token()
        if grant.invalidated == "logged_out":
            raise logged_out_token()
        if grant.expires_at is not None and now >= grant.expires_at:
            raise expired_token(grant.expires_at, now)
        return grant

    @staticmethod
    def authorize(grant: Grant, *, write: bool, account_id: str) -> None:
        """Check the grant's permissions for a read or a write on ``account_id``.

        Raises:
            GraphError: 294 for a write without ``ads_management``, 200 for a read
                without ``ads_read`` or ``ads_management``.
        """
        if write and ADS_MANAGEMENT not in grant.permissions:
            raise missing_ads_management()
        if not write and not grant.permissions & set(PERMISSIONS):
            raise missing_ads_read(account_id)


def _mask(token: str) -> str:
    # Admin answers are response bodies too: a token the caller chose is never echoed whole.
    return f"…{token[-4:]}" if len(token) > 8 else "…"
