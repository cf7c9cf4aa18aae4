"""Named tokens in the browser: a rule saved with an editor's token shows her name, a
viewer's token is told the role a save needs.

Skipped like ``test_browser.py`` where its browser is absent (its fixtures are shared)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from web_helpers import Client

from ruleengine.store.api_tokens import ApiTokenStore
from ruleengine.store.db import Database

pytestmark = pytest.mark.browser


async def test_the_versions_table_names_the_editor_and_a_viewer_is_refused(
    page: Any,  # noqa: F811
    client: Client,
    db: Database,
) -> None:
    store = ApiTokenStore(db)
    _, alice = await store.add("alice", "editor", now=datetime.now(UTC))
    _, wall = await store.add("wall-screen", "viewer", now=datetime.now(UTC))
    console = await _open(page, f"{client.make_url('/rules')}#token={alice}")
    await page.click("#new-rule")
    await page.wait_for_selector("#validity.ok")
    await page.click("#save-rule")  # "Create"
    by = page.locator("#versions-table tbody tr td:nth-child(3)")
    await by.first.wait_for()
    assert (await by.first.inner_text()).startswith("alice")
    assert "last changed by alice" in await page.inner_text("#detail-version")
    await _shot(page, "tokens-versions-by-editor")
    assert console.errors == []

    await _open(page, f"{client.make_url('/rules')}#token={wall}")
    await page.click("#new-rule")
    await page.wait_for_selector("#validity.ok")
    await page.click("#save-rule")
    await page.wait_for_selector("#flash.error")
    shown = await page.inner_text("#flash")
    assert "'wall-screen' is a viewer token" in shown
    assert "needs the editor role" in shown
    assert await db["rules"].count_documents({}) == 1
