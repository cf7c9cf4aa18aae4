"""A pooled connection the server closed for idleness never fails a command.

A server closes a connection left unused for long (the embedded one after 300 s; load
balancers and firewalls often sooner). A busy worker's pool opens connections in bursts and
leaves some unused for minutes; the first command sent on one the server closed failed
with ``AutoReconnect: connection closed`` (a job lost before its batch row in a fleet run).
The client closes pooled connections unused for ``MAX_IDLE_MS`` first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from pymongo.errors import AutoReconnect
from secantus.server import SecantusDBServer

from ruleengine.settings import Settings
from ruleengine.store import db as store_db
from ruleengine.store.db import MAX_IDLE_MS, create_client

SERVER_IDLE_S = 0.5


@pytest.fixture(scope="module")
def impatient_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An embedded server that closes a connection idle for ``SERVER_IDLE_S``; its URL."""
    server = SecantusDBServer(
        port=0,
        storage_path=str(tmp_path_factory.mktemp("impatient") / "mongo"),
        replica_set_name=None,
        client_idle_timeout_s=SERVER_IDLE_S,
    )
    server.start()
    try:
        yield f"mongodb://127.0.0.1:{server.port}/?directConnection=true&retryWrites=false"
    finally:
        server.stop()


async def test_the_client_closes_idle_connections_unless_the_url_says_otherwise(
    settings: Settings,
) -> None:
    url = settings.mongodb_url + ("&" if "?" in settings.mongodb_url else "?")
    own = settings.model_copy(update={"mongodb_url": url + "maxIdleTimeMS=5000"})
    for wired, seconds in ((settings, MAX_IDLE_MS / 1000), (own, 5)):
        client = create_client(wired)
        try:
            assert client.options.pool_options.max_idle_time_seconds == seconds
        finally:
            await client.close()
    assert MAX_IDLE_MS == 60_000


@pytest.mark.parametrize("client_idle_ms", [None, 200])
async def test_a_connection_the_server_closed_for_idleness_fails_no_command(
    settings: Settings,
    impatient_server: str,
    monkeypatch: pytest.MonkeyPatch,
    client_idle_ms: int | None,
) -> None:
    """Idle past the server's limit: without the client's own (None) the next insert fails,
    as it did in the fleet; with it (shorter than the server's), it goes through."""
    wired = settings.model_copy(update={"mongodb_url": impatient_server})
    if client_idle_ms is None:  # the driver's default: a pooled connection is kept however idle
        client = create_client(wired, maxIdleTimeMS=None)
    else:  # the engine's, scaled down to this server's limit
        monkeypatch.setattr(store_db, "MAX_IDLE_MS", client_idle_ms)
        client = create_client(wired)
    try:
        table = client["idle"][f"t{client_idle_ms}"]
        await table.insert_one({"n": 1})
        # the one thing waited for is time itself: the connection idle past the server's limit
        await asyncio.sleep(SERVER_IDLE_S * 3)
        if client_idle_ms is None:
            with pytest.raises(AutoReconnect, match="connection closed"):
                await table.insert_one({"n": 2})
        else:
            await table.insert_one({"n": 2})
            assert await table.count_documents({}) == 2
    finally:
        await client.close()
