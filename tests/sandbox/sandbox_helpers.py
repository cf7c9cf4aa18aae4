"""Helpers for the sandbox tests: start an app on a loopback port, talk Graph to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from graph_sandbox import create_app
from graph_sandbox.admin import SandboxAdmin

TOKEN = "EAAB-sandbox-test-token-0123456789abcdef"
#: 10:00 in New York, 16:00 in Berlin, 22:00 in Jakarta.
NOON_ISH = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)


@dataclass
class Reply:
    """A Graph answer: status, parsed body, headers, and the raw text."""

    status: int
    body: Any
    headers: dict[str, str]
    text: str

    @property
    def error(self) -> dict[str, Any]:
        """The ``error`` object of a failed call."""
        assert "error" in self.body, self.body
        return dict(self.body["error"])

    def usage(self, name: str) -> Any:
        """A usage header, parsed."""
        return orjson.loads(self.headers[name])


@dataclass
class Sandbox:
    """A running sandbox: its URLs, an HTTP session and the admin client."""

    url: str
    session: aiohttp.ClientSession
    admin: SandboxAdmin

    @property
    def graph(self) -> str:
        """The versioned Graph root."""
        return f"{self.url}/v27.0"

    async def get(self, path: str, *, token: str | None = TOKEN, **params: Any) -> Reply:
        """``GET {graph}{path}`` with JSON-encoded non-string parameters."""
        query = {
            k: v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in params.items()
        }
        if token is not None:
            query["access_token"] = token
        return await self.fetch("GET", f"{self.graph}{path}", params=query)

    async def post(self, path: str, *, token: str | None = TOKEN, **form: Any) -> Reply:
        """``POST {graph}{path}`` form-encoded, as Meta's SDKs send it."""
        data = {k: v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in form.items()}
        if token is not None:
            data["access_token"] = token
        return await self.fetch("POST", f"{self.graph}{path}", data=data)

    async def batch(self, items: list[dict[str, Any]], **form: Any) -> Reply:
        """A Batch API call."""
        return await self.post("/", batch=items, **form)

    async def fetch(self, method: str, url: str, **kwargs: Any) -> Reply:
        """Any HTTP call; the body is parsed as JSON."""
        async with self.session.request(method, url, **kwargs) as response:
            text = await response.text()
            return Reply(response.status, orjson.loads(text), dict(response.headers), text)


@contextlib.asynccontextmanager
async def running_sandbox(**options: Any) -> AsyncIterator[Sandbox]:
    """Serve ``create_app(**options)`` on a free loopback port for the duration (``TOKEN``
    is accepted for every ad account unless ``tokens`` says otherwise)."""
    options.setdefault("tokens", (TOKEN,))
    runner = web.AppRunner(create_app(**options))
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as session:
            yield Sandbox(url, session, SandboxAdmin(url, session))
    finally:
        await runner.cleanup()
