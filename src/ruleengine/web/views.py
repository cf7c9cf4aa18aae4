"""The screens: server-rendered shells (aiohttp-jinja2) whose plain JS reads the API.

The HTML carries no data of its own, so everything a user or Meta wrote
reaches the page only through the API and is inserted as text by the scripts
(never as HTML). Static files are served from the package with a version query
so a new release is never mixed with cached scripts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import aiohttp_jinja2
import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler

from ruleengine import __version__
from ruleengine.web.state import settings_of

STATIC_DIR: Final = Path(__file__).parent / "static"


@dataclass(frozen=True)
class Page:
    """One screen: its nav entry, template and script."""

    key: str
    title: str
    path: str
    template: str
    script: str


PAGES: Final = (
    Page("rules", "Rules", "/rules", "rules.html", "rules.js"),
    Page("logs", "Rule Logs", "/logs", "logs.html", "logs.js"),
    Page("benchmark", "Benchmark", "/benchmark", "benchmark.html", "benchmark.js"),
    Page("errors", "Errors", "/errors", "errors.html", "errors.js"),
    Page("accounts", "Accounts", "/accounts", "accounts.html", "accounts.js"),
    Page("approvals", "Approvals", "/approvals", "approvals.html", "approvals.js"),
)
#: Reached from an execution of Rule Logs, not from the nav.
ENTITY_PAGE: Final = Page("entity", "Entity timeline", "/entities/{id}", "entity.html", "entity.js")


def asset(name: str) -> str:
    """The URL of a static file, cache-busted by the package version."""
    return f"/static/{name}?v={__version__}"


PageHandler = Callable[[web.Request], Awaitable[web.Response]]


def _handler(page: Page) -> PageHandler:
    async def render(request: web.Request) -> web.Response:
        context = {
            "page": page,
            "pages": PAGES,
            "version": __version__,
            "reads_need_token": settings_of(request).api_reads_require_token,
            "rule_id": request.match_info.get("id", ""),
        }
        return aiohttp_jinja2.render_template(page.template, request, context)

    render.__doc__ = f"``GET {page.path}``: the {page.title} screen."
    return render


def setup(app: web.Application) -> None:
    """Templates, static files and the screen routes."""
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("ruleengine.web", "templates"),
        autoescape=jinja2.select_autoescape(["html"], default_for_string=True),
        undefined=jinja2.StrictUndefined,
        default_helpers=False,
    )
    env.globals["asset"] = asset
    handlers = {page.key: _handler(page) for page in PAGES}
    for page in PAGES:
        app.router.add_get(page.path, handlers[page.key], name=f"page.{page.key}")
    app.router.add_get("/", handlers["rules"], name="page.home")
    app.router.add_get("/rules/{id}", handlers["rules"], name="page.rule")
    # the link of a proposal's notification: the Approvals screen with that one highlighted
    app.router.add_get("/approvals/{id}", handlers["approvals"], name="page.approval")
    app.router.add_get(ENTITY_PAGE.path, _handler(ENTITY_PAGE), name="page.entity")
    app.router.add_get("/static/{name:.+}", _static_handler(), name="static")


def _static_handler() -> Handler:
    # Only the files the package ships, looked up by their path under static/ (e.g.
    # "vendor/uplot/uPlot.min.css"): a path that is not one of them never reaches the
    # filesystem (a 5,000-character name made aiohttp's static route fail with "File name
    # too long" instead of answering 404).
    files = {
        path.relative_to(STATIC_DIR).as_posix(): path
        for path in STATIC_DIR.rglob("*")
        if path.is_file()
    }

    async def static_file(request: web.Request) -> web.FileResponse:
        path = files.get(request.match_info["name"])
        if path is None:
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    return static_file
