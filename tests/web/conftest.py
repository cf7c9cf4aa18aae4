"""Fixtures of the web tests: the app of ``create_app(settings)`` on a real loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr
from web_helpers import API_TOKEN, Client, start_client

from ruleengine.settings import Settings
from ruleengine.store.db import Database


@pytest.fixture
def web_settings(settings: Settings) -> Settings:
    """The session's settings with an API token configured."""
    return settings.model_copy(update={"api_token": SecretStr(API_TOKEN)})


@pytest.fixture
async def client(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> AsyncIterator[Client]:
    """The web app with the sandbox's accounts registered, on a real port."""
    client = await start_client(web_settings)
    try:
        yield client
    finally:
        await client.close()
