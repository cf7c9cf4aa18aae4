"""The stack a command needs — MongoDB (the store), Redis (the queue), Graph — opened for
one command, and one line naming what to do when MongoDB or Redis cannot be reached.

A command that needs MongoDB asks it first, quickly: every address of the URL refusing a
connection answers at once, and a server that does not answer a ping within
:data:`MONGODB_WAIT_MS` is as good as none. :class:`StackUnreachable` then names the URL (no
password, no options), the setting that moves it and how to start the stack; ``main`` prints
it as one line and exits :data:`UNREACHABLE_EXIT`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pymongo.errors import ConfigurationError as MongoConfigurationError
from pymongo.errors import ConnectionFailure, OperationFailure
from pymongo.uri_parser import parse_uri
from redis.exceptions import RedisError

from ruleengine.analysis.conflicts import ConflictGate
from ruleengine.cli.common import now
from ruleengine.errors import ConfigurationError, RuleEngineError
from ruleengine.queue import connect_queue
from ruleengine.settings import Settings
from ruleengine.store.credentials import Account, CredentialStore, load_key
from ruleengine.store.db import Database, create_client, database, ensure_indexes
from ruleengine.store.formats import migrate_rules
from ruleengine.store.rules import RuleStore

if TYPE_CHECKING:
    from arq.connections import ArqRedis

    from ruleengine.meta.reader import GraphReader

#: The exit status of a command whose MongoDB or Redis cannot be reached (as for bad usage:
#: nothing was done, and running it again once the stack is up is the fix).
UNREACHABLE_EXIT: Final = 2
#: How long a command waits for MongoDB to answer before saying it cannot be reached.
MONGODB_WAIT_MS: Final = 2000
#: How long a command waits for a connection to one address of MongoDB's URL to be refused.
CONNECT_WAIT_S: Final = 1.0


@dataclass(frozen=True)
class Service:
    """A server of the stack: its name, its URL and the setting that holds the URL."""

    name: str
    url: str
    setting: str


def mongodb(settings: Settings) -> Service:
    """The MongoDB the settings name."""
    return Service("MongoDB", settings.mongodb_url, "RULEENGINE_MONGODB_URL")


def redis(settings: Settings) -> Service:
    """The Redis the settings name."""
    return Service("Redis", settings.redis_url, "RULEENGINE_REDIS_URL")


def shown_url(url: str) -> str:
    """``url`` as it may be printed: no password and no options (``?…`` may carry secrets)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "(not a URL)"
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if at:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hosts}" if ":" in userinfo else netloc
    path = path.rstrip("/")
    return f"{scheme}://{netloc}" + (f"{slash}{path}" if path else "")


class StackUnreachable(RuleEngineError):
    """MongoDB or Redis did not answer: one line saying where, and how to start the stack.

    ``needed_for`` says why the command needs it (when that is not plain), ``instead`` how
    to run the command without it.
    """

    def __init__(
        self, service: Service, *, needed_for: str | None = None, instead: str | None = None
    ) -> None:
        self.service = service
        why = f", needed for {needed_for}" if needed_for else ""
        ways = ["start the stack with 'make run' (or 'ruleengine up')"]
        ways += [f"point {service.setting} at yours", *([instead] if instead else [])]
        super().__init__(
            f"cannot reach {service.name} at {shown_url(service.url)} ({service.setting};"
            f" RULEENGINE_PORT_BASE moves the embedded one){why}: {', '.join(ways[:-1])},"
            f" or {ways[-1]}"
        )


async def _refused(host: str, port: int) -> bool:
    """Whether connecting to ``host:port`` fails at once (refused, no such host)."""
    try:
        async with asyncio.timeout(CONNECT_WAIT_S):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return False  # a slow network: the driver's ping decides
    except OSError:
        return True
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


async def all_refused(url: str) -> bool:
    """Whether every address of a ``mongodb://`` URL refuses a connection: the driver would
    wait its whole server selection timeout to say so. Other URLs (``mongodb+srv://``, a Unix
    socket) are left to the driver."""
    if not url.startswith("mongodb://"):
        return False
    nodes = parse_uri(url)["nodelist"]
    if any(port is None for _, port in nodes):  # a Unix socket
        return False
    refused = await asyncio.gather(*(_refused(host, port) for host, port in nodes))
    return all(refused)


@contextlib.asynccontextmanager
async def open_database(
    settings: Settings, *, needed_for: str | None = None, instead: str | None = None
) -> AsyncIterator[Database]:
    """The engine's database for one command: reachable, indexes ensured, orphan versions
    repaired, rules of an old format migrated.

    Raises:
        StackUnreachable: MongoDB did not answer (now, or while the command ran).
        ConfigurationError: ``RULEENGINE_MONGODB_URL`` is not a MongoDB URL.
    """
    unreachable = StackUnreachable(mongodb(settings), needed_for=needed_for, instead=instead)
    try:
        if await all_refused(settings.mongodb_url):
            raise unreachable
        client = create_client(settings, serverSelectionTimeoutMS=MONGODB_WAIT_MS)
    except MongoConfigurationError as exc:
        raise ConfigurationError(f"setting RULEENGINE_MONGODB_URL: {exc}") from None
    try:
        await client.admin.command("ping")
        db = database(client, settings)
        await ensure_indexes(db)
        await RuleStore(db).repair_orphans(now=now())
        await migrate_rules(db, now=now())
        yield db
    except ConnectionFailure:  # includes a server selection that timed out
        raise unreachable from None
    except OperationFailure as exc:
        if exc.code not in _LOGIN_REFUSED:
            raise
        raise ConfigurationError(
            f"MongoDB at {shown_url(settings.mongodb_url)} refused the login of"
            " RULEENGINE_MONGODB_URL: check its user and password"
        ) from None
    finally:
        await client.close()


#: MongoDB's codes for a refused login (AuthenticationFailed, Unauthorized).
_LOGIN_REFUSED: Final = frozenset({18, 13})


@contextlib.asynccontextmanager
async def open_queue(settings: Settings, *, ping: bool = True) -> AsyncIterator[ArqRedis]:
    """The queue for one command, closed afterwards; with ``ping``, known to answer.

    Raises:
        StackUnreachable: Redis did not answer the ping.
        ConfigurationError: ``RULEENGINE_REDIS_URL`` is not a Redis URL.
    """
    try:
        queue = connect_queue(settings)
    except ValueError as exc:
        raise ConfigurationError(f"setting RULEENGINE_REDIS_URL: {exc}") from None
    try:
        if ping:
            await _ping(queue, settings)
        yield queue
    finally:
        await queue.aclose()


async def _ping(queue: ArqRedis, settings: Settings) -> None:
    try:
        await queue.ping()
    except (RedisError, OSError):
        raise StackUnreachable(redis(settings)) from None


@contextlib.asynccontextmanager
async def graph_reader(settings: Settings) -> AsyncIterator[GraphReader]:
    """A GET-only Graph reader for one command, its session closed afterwards."""
    from ruleengine.meta.http import GraphSession
    from ruleengine.meta.reader import GraphReader

    session = GraphSession(settings)
    try:
        yield GraphReader.from_settings(session)
    finally:
        await session.close()


def rule_store(db: Database, settings: Settings) -> RuleStore:
    """The rule store of a command that saves, activates or rolls back rules: every such
    change passes the conflict check (``RULEENGINE_REFUSE_CONFLICTING_RULES``)."""
    return RuleStore(db, admit=ConflictGate(refuse=settings.refuse_conflicting_rules))


def credentials(db: Database, settings: Settings, *, create_key: bool = False) -> CredentialStore:
    """The registered ad accounts and their tokens."""
    return CredentialStore(db, load_key(settings, create=create_key))


async def all_accounts(db: Database, settings: Settings) -> list[Account]:
    """Every registered ad account (never its token)."""
    return await credentials(db, settings).all()
