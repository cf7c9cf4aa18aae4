"""The arq queue on Redis: connection, the orjson serializer, and health probes."""

from __future__ import annotations

from arq.connections import ArqRedis, RedisSettings

from ruleengine.constants import QUEUE_NAME
from ruleengine.dispatching.payload import deserialize, serialize
from ruleengine.settings import Settings


def redis_settings(settings: Settings) -> RedisSettings:
    """arq's view of ``RULEENGINE_REDIS_URL`` (used by the worker)."""
    parsed = RedisSettings.from_dsn(settings.redis_url)
    parsed.conn_timeout = 2
    parsed.conn_retries = 60  # a worker started before Redis waits up to a minute for it
    return parsed


def connect_queue(settings: Settings) -> ArqRedis:
    """An arq client that connects lazily: a process can start (and tick) while Redis is down.

    ``aclose()`` closes its connection pool too.
    """
    queue: ArqRedis = ArqRedis.from_url(
        settings.redis_url, socket_connect_timeout=2, socket_timeout=5, max_connections=64
    )
    queue.job_serializer = serialize
    queue.job_deserializer = deserialize
    queue.default_queue_name = QUEUE_NAME
    return queue
