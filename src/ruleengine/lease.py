"""One active dispatcher: a Redis lease with a fencing token.

The leader holds ``ruleengine:dispatcher:lease`` (``SET NX PX``) and renews it
every tick; a standby tries to take it every tick and wins once the leader has
stopped renewing (crash, SIGKILL, network partition). Each acquisition takes a
new, larger fencing token; the leader checks that it still holds the lease
with *its* token right before enqueuing, so a leader that stalled past its
lease does not enqueue alongside the new one.
"""

from __future__ import annotations

import logging
from typing import Any

from ruleengine.constants import FENCE_KEY, LEASE_KEY

log = logging.getLogger(__name__)

# Renew when we hold it; otherwise acquire with SET NX PX and take a new fencing token.
_ACQUIRE = """
local current = redis.call('GET', KEYS[1])
if current then
  local owner, fence = string.match(current, '^(.*)|(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(fence)
  end
  return -1
end
local fence = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1] .. '|' .. fence, 'NX', 'PX', ARGV[2]) then
  return fence
end
return -1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Lease:
    """The dispatcher lease.

    Args:
        redis: a ``redis.asyncio`` client.
        owner: this instance's id (host:pid:random).
        ttl_ms: how long the lease lives without renewal (a few ticks).
    """

    def __init__(self, redis: Any, *, owner: str, ttl_ms: int) -> None:
        self._redis = redis
        self.owner = owner
        self.ttl_ms = ttl_ms
        self.fence: int | None = None
        self._role: str | None = None  # for logging changes of role only

    async def acquire(self) -> int | None:
        """Take or renew the lease; the fencing token when we hold it, else None."""
        result = int(
            await self._redis.eval(_ACQUIRE, 2, LEASE_KEY, FENCE_KEY, self.owner, self.ttl_ms)
        )
        fence = result if result > 0 else None
        role = "leader" if fence is not None else "standby"
        if role != self._role or fence != self.fence:
            if fence is not None:
                log.info("dispatcher %s is now the leader (fence %d)", self.owner, fence)
            else:
                log.info(
                    "dispatcher %s is on standby: another instance holds the lease", self.owner
                )
        self.fence, self._role = fence, role
        return fence

    async def holds(self, fence: int) -> bool:
        """True when the lease is still ours with this fencing token (checked before enqueue)."""
        value = await self._redis.get(LEASE_KEY)
        return (
            bool(value)
            and (value.decode() if isinstance(value, bytes) else value) == f"{self.owner}|{fence}"
        )

    async def release(self) -> None:
        """Give the lease up (clean shutdown) so a standby takes over at once."""
        if self.fence is not None:
            await self._redis.eval(_RELEASE, 1, LEASE_KEY, f"{self.owner}|{self.fence}")
            self.fence = None
