"""The per-ad-account write lock: sequential writes per account, fenced and renewed.

Writes to one ad account happen one at a time across every worker. The lock is
a Redis key (``SET NX PX``) whose lifetime is derived from the real Graph
timeouts (:attr:`~ruleengine.settings.Settings.account_lock_ttl_s`) and which a
background task renews while it is held, so a slow Graph call never lets a
second holder in.

Each acquisition takes a new **fence** from the account's counter in MongoDB
(:mod:`ruleengine.store.fences`, which a Redis restart does not reset) and hands the
account's pending intents to it. The holder records and settles intents through the
intent store under its fence, which refuses a fence lower than the account's current
one, and calls :meth:`HeldLock.check` right before every Graph write call, which fails
(and the write is not sent) when the lock is no longer provably ours — renewal failed,
Redis lost the key, someone else holds it now, or a newer holder took the fence
(:class:`~ruleengine.errors.Fenced`). A holder paused past the lock's lifetime (a
stopped process, a stalled event loop) therefore sends and records nothing once
another worker has taken the account over.

Meta does not accept fencing tokens, so a write already on its way when the lock is
lost cannot be stopped; renewal every third of the lifetime makes that window as small
as a stalled event loop or a Redis outage longer than the lifetime, and the fence
keeps its outcome from being recorded by the stale holder (the reaper settles it from
the live value).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pymongo.errors import PyMongoError
from redis.exceptions import RedisError

from ruleengine import constants as c
from ruleengine.errors import Fenced, LockLost, LockTimeout
from ruleengine.store.fences import Fence, FenceStore
from ruleengine.store.intents import IntentStore

log = logging.getLogger(__name__)

# Extend the lock when it is still ours (value = the holder's token); 0 when it is not.
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
    """A lock being held: its fence, renewal, and the check before each write."""

    def __init__(
        self, redis: Any, fences: FenceStore, *, fence: Fence, value: str, ttl_ms: int
    ) -> None:
        self._redis = redis
        self._fences = fences
        self.account = fence.account
        self.fence = fence
        self._key = f"{c.ACCOUNT_LOCK_PREFIX}{fence.account}"
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
        log.warning(
            "write lock of %s (fence %d) lost: %s", self.account, self.fence.value, self._lost
        )

    async def check(self) -> None:
        """Raise :class:`LockLost` unless the lock is still ours (renewing it on the way), and
        :class:`Fenced` when a newer holder has taken the account's fence since."""
        if self._lost is None:
            try:
                if not await self._renew():
                    self._lost = "the lock key was gone or held by another worker before a write"
            except (RedisError, OSError) as exc:
                self._lost = f"Redis did not confirm the lock before a write ({exc})"
        if self._lost is not None:
            raise LockLost(f"write lock of {self.account} (fence {self.fence.value}): {self._lost}")
        try:
            await self._fences.check(self.fence)  # Fenced: a newer holder took the account
        except PyMongoError as exc:
            raise LockLost(f"MongoDB did not confirm the fence of {self.account} ({exc})") from exc

    async def release(self) -> None:
        """Stop renewing and delete the key if it is still ours."""
        self._renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._renewer
        await _release(self._redis, self._key, self._value, self.account)


class AccountLocks:
    """Per-ad-account Redis locks around writes, fenced through the intent store.

    Args:
        redis: a ``redis.asyncio`` client.
        intents: the intent store, which takes each acquisition's fence.
        ttl_s: the lock's lifetime without renewal (longer than the longest locked section).
        wait_s: how long to wait for a busy lock before giving up with :class:`LockTimeout`.
    """

    def __init__(self, redis: Any, *, intents: IntentStore, ttl_s: float, wait_s: float) -> None:
        self._redis = redis
        self._intents = intents
        self.ttl_ms = max(int(ttl_s * 1000), 300)
        self.wait_s = wait_s

    @contextlib.asynccontextmanager
    async def hold(self, account: str) -> AsyncIterator[HeldLock]:
        """Hold the lock of ``account`` for the block; the block checks it before writing."""
        key = f"{c.ACCOUNT_LOCK_PREFIX}{account}"
        token = uuid.uuid4().hex
        await self._acquire(key, token, account)
        try:
            fence = await self._intents.take_fence(account)
        except BaseException:
            await _release(self._redis, key, token, account)
            raise
        held = HeldLock(
            self._redis, self._intents.fences, fence=fence, value=token, ttl_ms=self.ttl_ms
        )
        try:
            yield held
            # the block ended without an error: every write it sent was answered
            with contextlib.suppress(PyMongoError):
                await self._intents.fences.finish(fence)
        finally:
            await held.release()

    async def _acquire(self, key: str, token: str, account: str) -> None:
        """Set the lock key to ``token`` once it is free; LockTimeout after ``wait_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        delay = 0.005
        while not await self._redis.set(key, token, nx=True, px=self.ttl_ms):
            if loop.time() > deadline:
                raise LockTimeout(f"the write lock of {account} stayed busy for {self.wait_s:g}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)


@contextlib.asynccontextmanager
async def turn(redis: Any, key: str, *, ttl_s: float, wait_s: float) -> AsyncIterator[bool]:
    """A turn at ``key`` among processes, for work that only saves work when the first to
    come does it alone: the first takes the turn (it expires after ``ttl_s``) while its block
    runs; the others wait, up to ``wait_s``, until it is given back, then run their blocks
    together without taking it. Yields whether it was taken. Redis not answering: nobody
    waits — so nothing may rely on it for safety."""
    token = uuid.uuid4().hex
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    taken = False
    try:
        taken = bool(await redis.set(key, token, nx=True, px=int(ttl_s * 1000)))
        delay = 0.005
        while not taken and await redis.exists(key) and loop.time() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
    except (RedisError, OSError) as exc:
        log.info("going on without the turn %s: Redis did not answer (%s)", key, exc)
    try:
        yield taken
    finally:
        if taken:
            with contextlib.suppress(RedisError, OSError):
                await redis.eval(_RELEASE, 1, key, token)


async def _release(redis: Any, key: str, value: str, account: str) -> None:
    """Delete the lock key if it still holds ``value``; it expires by itself otherwise."""
    try:
        await redis.eval(_RELEASE, 1, key, value)
    except (RedisError, OSError):
        log.warning("could not release the write lock of %s; it expires by itself", account)


__all__ = ["AccountLocks", "Fenced", "HeldLock", "LockLost", "LockTimeout", "turn"]
