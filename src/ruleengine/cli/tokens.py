"""``ruleengine tokens``: named API tokens with roles — add (printed once), list, revoke."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

import orjson

from ruleengine.cli.common import now, run_async, say
from ruleengine.cli.stack import open_database
from ruleengine.settings import Settings
from ruleengine.store.api_tokens import ROLES, ApiToken, ApiTokenStore


async def _tokens_add(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        token, text = await ApiTokenStore(db).add(args.name, args.role, now=now())
    print(text)
    print(
        f"API token '{token.name}' ({token.role}) created; it will not be shown again: only"
        " its hash is stored. Send it as 'Authorization: Bearer <token>'.",
        file=sys.stderr,
    )
    return 0


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%SZ")


def _token_json(token: ApiToken) -> dict[str, Any]:
    return {
        "name": token.name,
        "role": token.role,
        "created_at": token.created_at.isoformat(),
        "last_used_at": None if token.last_used_at is None else token.last_used_at.isoformat(),
        "revoked_at": None if token.revoked_at is None else token.revoked_at.isoformat(),
    }


async def _tokens_list(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        tokens = await ApiTokenStore(db).all()
    if args.json:
        print(orjson.dumps({"items": [_token_json(t) for t in tokens]}).decode())
        return 0
    if not tokens:
        print("no named API tokens; create one with `ruleengine tokens add NAME --role ROLE`")
        return 0
    print(f"{'NAME':<24} {'ROLE':<9} {'CREATED':<21} {'LAST USED':<21} REVOKED")
    for t in tokens:
        say(
            f"{t.name:<24} {t.role:<9} {_when(t.created_at):<21} {_when(t.last_used_at):<21}"
            f" {_when(t.revoked_at)}"
        )
    return 0


async def _tokens_revoke(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        token = await ApiTokenStore(db).revoke(args.name, now=now())
    say(f"API token '{token.name}' revoked at {_when(token.revoked_at)}")
    return 0


_ROLES_HELP = (
    "viewer: reads (when RULEENGINE_API_READS_REQUIRE_TOKEN is set); editor: also saves,"
    " pauses, activates and rolls back rules, imports, previews and backtests, clears holds,"
    " resolves errors; approver: also decides approvals and undoes batches; admin: also"
    " manages ad accounts"
)


def add_commands(sub: Any) -> None:
    """``tokens`` and its actions."""
    tokens = sub.add_parser(
        "tokens",
        help="named API tokens with roles (who may do what through the API)",
        description="Named tokens for the web API. Every write made with a token records its"
        " name as who did it. RULEENGINE_API_TOKEN keeps working as an admin token named"
        f" 'api'. Roles, each with what the one before may do: {_ROLES_HELP}.",
    )
    actions = tokens.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="create a token and print it once (only its hash is stored)",
        description="Create a named token with a role and print it on standard output, once:"
        " only its SHA-256 is stored, so it cannot be shown again (revoke it and add another"
        f" if it is lost). Roles: {_ROLES_HELP}.",
    )
    add.add_argument("name", help="who uses it, e.g. alice or ci-deploy (recorded as `by`)")
    add.add_argument("--role", required=True, choices=ROLES, help="what it may do")
    add.set_defaults(handler=run_async(_tokens_add))
    listing = actions.add_parser(
        "list", help="list tokens: name, role, created, last used, revoked (never the token)"
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object instead")
    listing.set_defaults(handler=run_async(_tokens_list))
    revoke = actions.add_parser(
        "revoke", help="revoke a token at once (its name stays taken in the records)"
    )
    revoke.add_argument("name", help="the token's name (see `tokens list`)")
    revoke.set_defaults(handler=run_async(_tokens_revoke))
