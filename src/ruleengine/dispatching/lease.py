"""One active dispatcher: a Redis lease with a fencing token.

The leader holds ``ruleengine:dispatcher:lease`` (``SET NX PX``) and renews it
every tick and, while a sweep runs, every third of its lifetime; a standby
tries to take it every tick and wins once the leader has stopped renewing
(crash, SIGKILL, network partition). Each acquisition by a new owner takes a
new, larger fencing token. A leader whose lease lapsed while nobody else took
it (a sweep slowed down by Graph) takes it back with the *same* token, so it
goes on dispatching. Every job is enqueued by one Lua script that checks the
lease holds this owner's token *and* enqueues, atomically: a deposed leader
cannot enqueue alongside the new one, not even between a check and a write.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms

from ruleengine.constants import FENCE_KEY, LEASE_KEY

log = logging.getLogger(__name__)

# Renew when we hold it; take it back with our token when it lapsed and nobody took a newer
# one; otherwise acquire with SET NX PX and a new fencing token.
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
if tonumber(ARGV[3]) > 0 and redis.call('GET', KEYS[2]) == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[3], 'PX', ARGV[2])
  return tonumber(ARGV[3])
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

# What arq's enqueue_job does (job key with expiry + queue entry), plus the dispatched
# marker, only while the lease holds our token: -1 lost lease, 0 duplicate, 1 enqueued.
# KEYS: lease, job, result, queue, marker. ARGV: owner|fence, job bytes, expires ms,
# job id, score, marker value, marker ttl s.
_ENQUEUE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[5]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then
  redis.call('SET', KEYS[5], ARGV[6], 'EX', ARGV[7])
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
redis.call('SET', KEYS[5], ARGV[6], 'EX', ARGV[7])
return 1
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
            await self._redis.eval(
                _ACQUIRE, 2, LEASE_KEY, FENCE_KEY, self.owner, self.ttl_ms, self.fence or 0
            )
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

    async def enqueue(
        self,
        fence: int,
        *,
        function: str,
        payload: dict[str, Any],
        job_id: str,
        queue_name: str,
        expires: timedelta,
        marker: str,
        marker_value: str,
        marker_ttl_s: int,
    ) -> bool | None:
        """Enqueue an arq job if (and only if) the lease still holds ``fence``, atomically.

        Returns True when enqueued, False for a duplicate (the marker or the job
        exists), None when the lease is no longer ours.
        """
        now_ms = timestamp_ms()
        job = serialize_job(
            function, (payload,), {}, None, now_ms, serializer=self._redis.job_serializer
        )
        result = int(
            await self._redis.eval(
                _ENQUEUE,
                5,
                LEASE_KEY,
                job_key_prefix + job_id,
                result_key_prefix + job_id,
                queue_name,
                marker,
                f"{self.owner}|{fence}",
                job,
                int(expires.total_seconds() * 1000),
                job_id,
                now_ms,
                marker_value,
                marker_ttl_s,
            )
        )
        return None if result < 0 else result == 1

    async def release(self) -> None:
        """Give the lease up (clean shutdown) so a standby takes over at once."""
        if self.fence is not None:
            await self._redis.eval(_RELEASE, 1, LEASE_KEY, f"{self.owner}|{self.fence}")
            self.fence = None
