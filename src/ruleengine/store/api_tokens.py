"""Named API tokens with roles: who may do what through ``/api``, and who did it.

One document per token, ``_id`` = its name (recorded as ``by`` on every write made
with it). Only the SHA-256 of the token is kept: a token is 32 random bytes, so the
hash needs no salt or stretching, and a request's token is found by its hash (an
index), never by comparing token texts. ``last_used_at`` is written at most once a
minute per token, so a busy client costs one indexed read per request, not a write.
A revoked token keeps its document (its name stays taken: records name it).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from ruleengine import constants as c
from ruleengine.errors import ConflictError, NotFoundError, RuleEngineError
from ruleengine.store.db import Database, Document

Role = Literal["viewer", "editor", "approver", "admin"]
#: What each role may do includes what the roles before it may.
ROLES: Final[tuple[Role, ...]] = ("viewer", "editor", "approver", "admin")
#: Every token this store makes starts so (it tells a reader what the secret is for).
TOKEN_PREFIX: Final = "ret_"
#: ``last_used_at`` moves only when it is older than this.
LAST_USED_EVERY: Final = timedelta(minutes=1)
MAX_NAME_CHARS: Final = 64
#: Names a token cannot take: ``api`` is who writes with RULEENGINE_API_TOKEN.
RESERVED_NAMES: Final = frozenset({"api"})
# A name is recorded as `by` and shown in the UI and logs: a short plain word.
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")


def token_hash(token: str) -> str:
    """The hex SHA-256 of a token, as stored (surrogate escapes back to the client's bytes)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def name_problem(name: str) -> str | None:
    """What is wrong with a token name, or None."""
    if len(name) > MAX_NAME_CHARS or not _NAME.fullmatch(name):
        return (
            f"a token name is 1 to {MAX_NAME_CHARS} letters, digits, '.', '_', '@' or '-',"
            f" starting with a letter or digit; not {name[:80]!r}"
        )
    if name in RESERVED_NAMES:
        return f"'{name}' is the name of the configured RULEENGINE_API_TOKEN; pick another name"
    return None


def role_problem(role: str) -> str | None:
    """What is wrong with a role name, or None."""
    if role not in ROLES:
        return f"unknown role {role[:40]!r}; pick one of {', '.join(ROLES)}"
    return None


@dataclass(frozen=True)
class ApiToken:
    """A named token as listed: never the token, nor its hash."""

    name: str
    role: Role
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, doc: Document) -> ApiToken:
        """The token a stored document describes."""
        return cls(
            name=doc["_id"],
            role=doc["role"],
            created_at=doc["created_at"],
            last_used_at=doc.get("last_used_at"),
            revoked_at=doc.get("revoked_at"),
        )


class ApiTokenStore:
    """The ``api_tokens`` collection."""

    def __init__(self, db: Database) -> None:
        self._tokens = db[c.API_TOKENS]

    async def add(self, name: str, role: str, *, now: datetime) -> tuple[ApiToken, str]:
        """Create a token; the token text is returned here and nowhere else, ever.

        Raises:
            RuleEngineError: the name or the role is not valid.
            ConflictError: a token (revoked ones too) already has the name.
        """
        problem = name_problem(name) or role_problem(role)
        if problem is not None:
            raise RuleEngineError(problem)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        doc = {
            "_id": name,
            "role": role,
            "hash": token_hash(token),
            "created_at": now,
            "last_used_at": None,
            "revoked_at": None,
        }
        try:
            await self._tokens.insert_one(doc)
        except DuplicateKeyError:
            existing = await self._tokens.find_one({"_id": name}, {"revoked_at": 1})
            revoked = existing is not None and existing.get("revoked_at") is not None
            raise ConflictError(
                f"a token named '{name}' already exists"
                + (" (revoked; its name stays in the records)" if revoked else "")
                + "; pick another name"
            ) from None
        return ApiToken.of(doc), token

    async def all(self) -> list[ApiToken]:
        """Every token, revoked ones too, by name."""
        cursor = self._tokens.find({}, {"hash": 0}).sort("_id", ASCENDING)
        return [ApiToken.of(d) async for d in cursor]

    async def revoke(self, name: str, *, now: datetime) -> ApiToken:
        """Revoke a token (at once: the next request with it is refused).

        Revoking a revoked token changes nothing. Raises NotFoundError.
        """
        await self._tokens.update_one(
            {"_id": name, "revoked_at": None}, {"$set": {"revoked_at": now}}
        )
        doc = await self._tokens.find_one({"_id": name}, {"hash": 0})
        if doc is None:
            raise NotFoundError(f"no token named '{name}'; `ruleengine tokens list` lists them")
        return ApiToken.of(doc)

    async def any_active(self) -> bool:
        """Whether an unrevoked token exists."""
        return await self._tokens.find_one({"revoked_at": None}, {"_id": 1}) is not None

    async def identify(self, token: str, *, now: datetime) -> ApiToken | None:
        """The token whose text this is (revoked or not), None for an unknown one.

        Moves ``last_used_at`` to ``now`` when it is unset or older than a minute.
        """
        doc = await self._tokens.find_one({"hash": token_hash(token)}, {"hash": 0})
        if doc is None:
            return None
        found = ApiToken.of(doc)
        if found.revoked_at is None and (
            found.last_used_at is None or now - found.last_used_at >= LAST_USED_EVERY
        ):
            # compare-and-set on the value read: of concurrent requests, one writes
            await self._tokens.update_one(
                {"_id": found.name, "last_used_at": found.last_used_at},
                {"$set": {"last_used_at": now}},
            )
        return found
