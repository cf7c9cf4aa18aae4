"""The per-ad-account write lock: sequential writes per account, fenced and renewed.

Writes to one ad account happen one at a time across every worker. The lock is
a Redis key (``SET NX PX``) whose lifetime is derived from the real Graph
timeouts (:attr:`~ruleengine.settings.Settings.account_lock_ttl_s`) and which a
background task renews while it is held, so a slow Graph call never lets a
second holder in. Each acquisition takes a new fencing token; the holder calls
:meth:`HeldLock.check` right before every write, which fails (and the write is
not sent) when the lock is no longer provably ours — renewal failed, Redis
lost the key, or someone else holds it now.

Meta does not accept fencing tokens, so a write already sent when the lock is
lost cannot be stopped; renewal every third of the lifetime makes that window
as small as a stalled event loop or a Redis outage longer than the lifetime.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.errors import LockLost, LockTimeout

log = logging.getLogger(__name__)

# Take the lock with a new fencing token (value = token|fence), or answer 0 when it is held.
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. fence, 'PX', ARGV[2])
return fence
"""

# Extend the lock when it is still ours (value = token|fence); 0 when it is not.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class HeldLock:
    """A lock being held: its fencing token, renewal, and the check before each write."""

    def __init__(self, redis: Any, *, account: str, value: str, fence: int, ttl_ms: int) -> None:
        self._redis = redis
        self.account = account
        self.fence = fence
        self._key = f"{c.ACCOUNT_LOCK_PREFIX}{account}"
        self._value = value
        self._ttl_ms = ttl_ms
        self._lost: str | None = None
        loop = asyncio.get_running_loop()
        self._renewed_at = loop.time()
        self._renewer = loop.create_task(self._keep())

    async def _renew(self) -> bool:
        ok = bool(await self._redis.eval(_RENEW, 1, self._key, self._value, self._ttl_ms))
        if ok:
            self._renewed_at = asyncio.get_running_loop().time()
        return ok

    async def _keep(self) -> None:
        """Renew every third of the lifetime; give up once the key is not ours any more."""
        loop = asyncio.get_running_loop()
        while self._lost is None:
            await asyncio.sleep(self._ttl_ms / 3000)
            try:
                if not await self._renew():
                    self._lost = "the lock key was gone or held by another worker at renewal"
            except (RedisError, OSError) as exc:
                if loop.time() - self._renewed_at >= self._ttl_ms / 1000:
                    self._lost = f"could not renew the lock for its whole lifetime ({exc})"
        log.warning("write lock of %s (fence %d) lost: %s", self.account, self.fence, self._lost)

    async def check(self) -> None:
        """Raise :class:`LockLost` unless the lock is still ours (renewing it on the way)."""
        if self._lost is None:
            try:
                if not await self._renew():
                    self._lost = "the lock key was gone or held by another worker before a write"
            except (RedisError, OSError) as exc:
                self._lost = f"Redis did not confirm the lock before a write ({exc})"
        if self._lost is not None:
            raise LockLost(f"write lock of {self.account} (fence {self.fence}): {self._lost}")

    async def release(self) -> None:
        """Stop renewing and delete the key if it is still ours."""
        self._renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._renewer
        try:
            await self._redis.eval(_RELEASE, 1, self._key, self._value)
        except (RedisError, OSError):
            log.warning(
                "could not release the write lock of %s; it expires by itself", self.account
            )


class AccountLocks:
    """Per-ad-account Redis locks around writes.

    Args:
        redis: a ``redis.asyncio`` client.
        ttl_s: the lock's lifetime without renewal (longer than the longest locked section).
        wait_s: how long to wait for a busy lock before giving up with :class:`LockTimeout`.
    """

    def __init__(self, redis: Any, *, ttl_s: float, wait_s: float) -> None:
        self._redis = redis
        self.ttl_ms = max(int(ttl_s * 1000), 300)
        self.wait_s = wait_s

    @contextlib.asynccontextmanager
    async def hold(self, account: str) -> AsyncIterator[HeldLock]:
        """Hold the lock of ``account`` for the block; the block checks it before writing."""
        key = f"{c.ACCOUNT_LOCK_PREFIX}{account}"
        fence_key = f"{c.ACCOUNT_FENCE_PREFIX}{account}"
        token = uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        delay = 0.005
        while not (
            fence := int(await self._redis.eval(_ACQUIRE, 2, key, fence_key, token, self.ttl_ms))
        ):
            if loop.time() > deadline:
                raise LockTimeout(f"the write lock of {account} stayed busy for {self.wait_s:g}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
        held = HeldLock(
            self._redis, account=account, value=f"{token}|{fence}", fence=fence, ttl_ms=self.ttl_ms
        )
        try:
            yield held
        finally:
            await held.release()


__all__ = ["AccountLocks", "HeldLock", "LockLost", "LockTimeout"]
