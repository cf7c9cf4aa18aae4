"""What the all-in-one demo needs beside Graph: a Google Sheet of custom metrics and a webhook sink.

* The Sheets v4 simulator (:mod:`graph_sandbox.sheets_api`) is mounted under
  ``/sheets``; in the ``demo`` scenario it holds the spreadsheet ``demo-margins``
  (tab ``targets``): each campaign's id, name and a break-even ``target_roas``,
  which the example rule "Margin guard" reads as ``custom:target_roas``.
* ``POST /_sandbox/webhooks/{name}`` accepts notifications (Slack-compatible
  JSON) and ``GET /_sandbox/webhooks`` lists what arrived, newest last.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from graph_sandbox.sheets_api import SheetsStore, add_sheets_routes
from graph_sandbox.world import World

SHEETS: web.AppKey[SheetsStore] = web.AppKey("sandbox_sheets", SheetsStore)
WEBHOOKS: web.AppKey[list[dict[str, Any]]] = web.AppKey("sandbox_webhooks", list)
DEMO_SPREADSHEET = "demo-margins"
DEMO_WORKSHEET = "targets"
WEBHOOKS_KEPT = 500


def demo_sheet(world: World, seed: int) -> list[list[str]]:
    """Rows of the demo spreadsheet: campaign id, name and a target ROAS per campaign."""
    rng = random.Random(f"sheet:{seed}")
    rows = [["campaign_id", "campaign_name", "target_roas"]]
    for account in sorted(world.accounts):
        for campaign in world.campaigns(account):
            rows.append([campaign.id, campaign.name, f"{rng.uniform(1.4, 2.6):.2f}"])
    return rows


def seed_sheets(app: web.Application, world: World, *, seed: int, scenario: str) -> None:
    """(Re)load the demo spreadsheet for ``world``."""
    store = app[SHEETS]
    store.clear()
    if scenario == "demo":
        store.put(DEMO_SPREADSHEET, DEMO_WORKSHEET, demo_sheet(world, seed))
    app[WEBHOOKS].clear()


async def _receive(request: web.Request) -> web.Response:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return web.json_response({"ok": False, "error": "the body is not JSON"}, status=400)
    received = request.app[WEBHOOKS]
    received.append(
        {"name": request.match_info["name"], "at": datetime.now(UTC).isoformat(), "body": body}
    )
    del received[:-WEBHOOKS_KEPT]
    return web.json_response({"ok": True})


async def _received(request: web.Request) -> web.Response:
    return web.Response(body=orjson.dumps(request.app[WEBHOOKS]), content_type="application/json")


def add_extras(app: web.Application) -> None:
    """Mount the Sheets simulator and the webhook sink (before the Graph catch-all route)."""
    app[SHEETS] = SheetsStore()
    app[WEBHOOKS] = []
    add_sheets_routes(app, app[SHEETS], prefix="/sheets")
    app.router.add_post("/_sandbox/webhooks/{name}", _receive)
    app.router.add_get("/_sandbox/webhooks", _received)


def write_sheets_credentials(path: Path, sandbox_url: str) -> Path:
    """A service-account key file whose token exchange goes to the sandbox's Sheets simulator.

    The key is a fresh throwaway RSA key (mode 0600); nothing leaves loopback.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "ruleengine-sandbox",
        "private_key_id": "sandbox",
        "private_key": pem,
        "client_email": "ruleengine@sandbox.invalid",
        "client_id": "1",
        "token_uri": f"{sandbox_url.rstrip('/')}/sheets/token",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(info))
    path.chmod(0o600)
    return path
