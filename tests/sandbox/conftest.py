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
