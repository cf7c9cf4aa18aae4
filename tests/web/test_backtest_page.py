"""The rules screen loads its scripts and styles from the app alone: no CDN, no network.

The Backtest panel's chart library (uPlot) is vendored under ``static/vendor/uplot/`` and
served by the app's static route like the app's own files.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from web_helpers import Client

from ruleengine.web.views import STATIC_DIR

VENDOR = STATIC_DIR / "vendor" / "uplot"


class _Refs(HTMLParser):
    """Every URL a page loads by itself: scripts, stylesheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in ("script", "img", "iframe") and values.get("src"):
            self.urls.append(str(values["src"]))
        if tag == "link" and values.get("href"):
            self.urls.append(str(values["href"]))


async def test_the_rules_screen_references_only_the_apps_own_files(client: Client) -> None:
    response = await client.get("/rules")
    assert response.status == 200
    refs = _Refs()
    refs.feed(await response.text())
    urls = [u for u in refs.urls if not u.startswith("data:")]
    assert "/static/vendor/uplot/uPlot.iife.min.js?v=" in " ".join(urls)
    assert "/static/backtest.js?v=" in " ".join(urls)
    for url in urls:
        assert url.startswith("/static/"), f"{url} is not one of the app's own files"
        asset = await client.get(url)
        assert asset.status == 200, url
        assert len(await asset.read()) > 100, url


async def test_only_shipped_files_are_served_from_static_subfolders(client: Client) -> None:
    for path in ("vendor/uplot/LICENSE", "vendor/uplot/uPlot.min.css"):
        assert (await client.get(f"/static/{path}")).status == 200
    for path in ("vendor/uplot", "vendor/", "vendor/uplot/nope.js"):
        assert (await client.get(f"/static/{path}")).status == 404, path


def test_the_vendored_library_is_the_documented_version_with_its_licence() -> None:
    header = (VENDOR / "uPlot.iife.min.js").read_text(encoding="utf-8")[:80]
    version = re.search(r"uPlot \(v([\d.]+)\)", header)
    assert version is not None, header
    docs = (Path(__file__).resolve().parents[2] / "docs" / "backtest.md").read_text("utf-8")
    assert f"uPlot {version[1]}" in docs
    assert "MIT License" in (VENDOR / "LICENSE").read_text(encoding="utf-8")
    assert "sourceMappingURL" not in header  # nothing the browser would try to fetch
