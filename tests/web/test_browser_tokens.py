"""Named tokens in the browser: a rule saved with an editor's token shows her name, a
viewer's token finds saving disabled, with the role it needs on hover.

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
#: The screen has read the link's token (same screen, new hash: no new page load, so wait).
TOKEN_TAKEN = "() => !location.hash.includes('token=')"


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

    asked: list[str] = []

    async def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    page.once("dialog", accept)  # the link's token replaces the kept one only when asked
    await _open(page, f"{client.make_url('/rules')}#token={wall}")
    await page.wait_for_function(TOKEN_TAKEN)
    assert asked and "Replace the kept token" in asked[0]
    # the header names the token; what its role cannot do is disabled, saying why
    await page.wait_for_selector('#token-state[data-role="viewer"]')
    assert await page.inner_text("#token-state") == "wall-screen · viewer"
    assert await page.locator("#new-rule").is_disabled()
    why = await page.locator("#new-rule").get_attribute("title")
    assert why == "needs the editor role; the token 'wall-screen' is a viewer token"
    assert await db["rules"].count_documents({}) == 1


async def test_a_link_never_swaps_the_kept_token_without_asking(
    page: Any,  # noqa: F811
    client: Client,
    db: Database,
) -> None:
    store = ApiTokenStore(db)
    _, mine = await store.add("mine", "editor", now=datetime.now(UTC))
    _, theirs = await store.add("theirs", "admin", now=datetime.now(UTC))
    await _open(page, f"{client.make_url('/rules')}#token={mine}")
    kept = "localStorage.getItem('ruleengine.apiToken')"
    assert await page.evaluate(kept) == mine
    asked: list[str] = []

    async def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        await dialog.dismiss()

    page.once("dialog", dismiss)
    await _open(page, f"{client.make_url('/rules')}#token={theirs}")
    await page.wait_for_function(TOKEN_TAKEN)
    assert len(asked) == 1
    assert await page.evaluate(kept) == mine  # a link someone sent did not make us them
    assert "token=" not in page.url  # and it left the address bar anyway
    await page.wait_for_selector("#flash")
    assert "was not taken" in await page.inner_text("#flash")
