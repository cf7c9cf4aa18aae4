"""Each sandbox test gets its own app on a real loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sandbox_helpers import NOON_ISH, Sandbox, running_sandbox


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    """The demo world (seed 1) with its clock frozen at ``NOON_ISH``."""
    async with running_sandbox(seed=1) as box:
        await box.admin.set_clock(NOON_ISH)
        yield box


@pytest.fixture
async def legacy_sandbox() -> AsyncIterator[Sandbox]:
    """The same world played by an app created before 2026-11-04, which may still use
    Graph's legacy features (multi-ID reads, asynchronous batches, …)."""
    async with running_sandbox(seed=1, app="legacy") as box:
        await box.admin.set_clock(NOON_ISH)
        yield box
