"""``ruleengine accounts``: register ad accounts with their tokens and Meta's currency and
timezone, read them again, list them (never a token), make a token-encryption key."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from ruleengine.cli.common import now, run_async, say
from ruleengine.cli.stack import all_accounts, credentials, graph_reader, open_database
from ruleengine.errors import MetaUnreachable, RuleEngineError
from ruleengine.settings import Settings
from ruleengine.store.credentials import check_account


def _read_token(args: argparse.Namespace) -> str:
    if args.token_env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.token_env):
            raise RuleEngineError("--token-env takes the NAME of an environment variable")
        token = os.environ.get(args.token_env, "")
        if not token:
            raise RuleEngineError(f"environment variable {args.token_env} is empty or not set")
        return token
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass("access token (input hidden): ")
    return sys.stdin.readline().strip()


async def _accounts_add(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.accounts.currency import register

    check_account(args.account, args.timezone, args.currency)  # before the token is asked for
    async with open_database(settings) as db:  # and the store: no token typed in vain
        store = credentials(db, settings, create_key=args.create_key)
        token = _read_token(args)
        async with graph_reader(settings) as reader:
            try:
                registered = await register(
                    store,
                    reader,
                    args.account,
                    token,
                    now=now(),
                    name=args.name,
                    timezone=args.timezone,
                    currency=args.currency,
                )
            except MetaUnreachable as exc:
                raise RuleEngineError(
                    f"{exc}; nothing was registered. Try again, or pass both --currency and"
                    " --timezone (the ad account's, as Ads Manager shows them) to register it"
                    " without Meta's word"
                ) from None
    account = registered.account
    print(
        f"{account.id} registered ({account.name}, {account.currency}, {account.timezone},"
        f" token …{account.token_fingerprint})"
    )
    if registered.unchecked:
        print(
            f"note: {account.currency} and {account.timezone} are as given, not checked with"
            " Meta (it could not be asked); the first budget or bid change checks them"
        )
    return 0


async def _accounts_refresh(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.accounts.currency import refresh

    async with open_database(settings) as db, graph_reader(settings) as reader:
        done = await refresh(credentials(db, settings), reader, args.account, now=now())
    changes = done.changes()
    account = done.account
    if not changes:
        print(f"{account.id}: {account.currency}, {account.timezone} — Meta's already")
        return 0
    print(f"{account.id}: {', '.join(changes)} (Meta's)")
    if account.currency != done.before.currency:
        print(f"check its rules: their amounts (budgets, bids) are now read in {account.currency}")
    return 0


async def _accounts_list(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        accounts = await all_accounts(db, settings)
    for account in accounts:
        refused, mismatch = account.token_state, account.currency_state
        say(
            f"{account.id:<20} {account.currency:<4} {account.timezone:<22}"
            f" token …{account.token_fingerprint}  {account.name}"
            + (f"  [TOKEN REFUSED: {refused.describe()}]" if refused else "")
            + (f"  [NOT META'S: {mismatch.describe()}]" if mismatch else "")
        )
    if not accounts:
        print("no ad accounts registered; add one with `ruleengine accounts add act_…`")
    return 0


def cmd_accounts_new_key(args: argparse.Namespace, settings: Settings) -> int:
    """Print a fresh Fernet key for RULEENGINE_TOKEN_ENCRYPTION_KEY."""
    from cryptography.fernet import Fernet

    print(Fernet.generate_key().decode())
    return 0


def add_commands(sub: Any) -> None:
    """``accounts`` and its actions."""
    accounts = sub.add_parser("accounts", help="register ad accounts and their tokens")
    actions = accounts.add_subparsers(dest="accounts_command", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="register an ad account (or replace its token) with Meta's currency and timezone",
        description="The access token is read from standard input (hidden when typed) or from"
        " the environment variable named by --token-env — never from the command line, which"
        " would leave it in shell history and in `ps`. The account's currency and timezone"
        " are read from Meta with that token (GET act_…?fields=currency,timezone_name) and"
        " registered; nothing is registered when Meta refuses the token or the id.",
    )
    add.add_argument("account", help="ad account id, e.g. act_123456")
    add.add_argument("--name", help="display name")
    add.add_argument(
        "--timezone",
        help="the account's timezone: refused unless it is Meta's; needed (with --currency)"
        " only when Meta cannot be asked",
    )
    add.add_argument(
        "--currency",
        help="the account currency: refused unless it is Meta's; needed (with --timezone)"
        " only when Meta cannot be asked",
    )
    add.add_argument("--token-env", metavar="VAR", help="read the token from this variable")
    add.add_argument(
        "--create-key",
        action="store_true",
        help="create the key file under the data dir if no key is configured",
    )
    add.set_defaults(handler=run_async(_accounts_add))
    refresh = actions.add_parser(
        "refresh",
        help="register Meta's currency and timezone again (read with the stored token)",
        description="Reads the ad account's currency and timezone from Meta with its stored"
        " token and registers them; this ends a currency mismatch a job found (budget and"
        " bid changes on the account resume). Check the account's rules when the currency"
        " changes: their amounts are read in it.",
    )
    refresh.add_argument("account", help="ad account id, e.g. act_123456")
    refresh.set_defaults(handler=run_async(_accounts_refresh))
    listing = actions.add_parser("list", help="list accounts (never their tokens)")
    listing.set_defaults(handler=run_async(_accounts_list))
    key = actions.add_parser("new-key", help="print a new token-encryption key")
    key.set_defaults(handler=cmd_accounts_new_key)
