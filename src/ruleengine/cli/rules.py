"""``ruleengine rules``: the rule files and the rule store — schema, validate, migrate,
apply, list, rollback — and the parser of every ``rules`` action (conflicts, Meta's rules
and backtests have their own modules)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from ruleengine.analysis.conflicts import ConflictingRuleError
from ruleengine.cli.backtest import add_backtest
from ruleengine.cli.common import now, run_async, say, whole_number
from ruleengine.cli.conflicts import add_conflicts, print_findings
from ruleengine.cli.files import is_old_format, migrate_file, print_problems, validate_files
from ruleengine.cli.impact import add_impact
from ruleengine.cli.meta_rules import add_export_meta, add_import_meta
from ruleengine.cli.stack import all_accounts, credentials, open_database, rule_store
from ruleengine.errors import RuleEngineError, RuleValidationError
from ruleengine.rules.language.model import rule_json_schema
from ruleengine.rules.language.money import CURRENT_FORMAT
from ruleengine.settings import Settings
from ruleengine.store.ruledocs import Loaded, StoredRuleError
from ruleengine.store.rules import RuleStore

#: The largest version number a command accepts (MongoDB stores 64-bit integers).
MAX_VERSION = 2**62


def cmd_rules_schema(args: argparse.Namespace, settings: Settings) -> int:
    """Print the JSON Schema of a rule."""
    sys.stdout.write(orjson.dumps(rule_json_schema(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_rules_validate(args: argparse.Namespace, settings: Settings) -> int:
    """Validate rule files offline (with ``--registered``, against the registered accounts
    and the configured webhooks, as ``rules apply`` does; ``--live``: and against Meta's
    live objects); exit 1 when any has a problem."""
    accounts: dict[str, str] | None = None
    webhooks: set[str] | None = None
    if args.registered:
        accounts, webhooks = asyncio.run(_registered(settings)), set(settings.webhooks)
    valid = validate_files(
        args.files, sys.stdout, accounts=accounts, webhooks=webhooks, explain_in=args.currency
    )
    for path, rule in valid:
        say(f"{path}: ok ({rule.name}, {len(rule.tasks)} task(s))")
    if args.live and valid:
        from ruleengine.cli.live_check import live_warnings

        asyncio.run(live_warnings(settings, valid, sys.stdout))
    return 0 if len(valid) == len(args.files) else 1


async def _registered(settings: Settings) -> dict[str, str]:
    """The registered accounts and their currencies."""
    async with open_database(
        settings,
        needed_for="the registered accounts",
        instead="validate offline, without --registered",
    ) as db:
        return await credentials(db, settings).currencies()


async def _rules_apply(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        accounts = await credentials(db, settings).currencies()
        webhooks = set(settings.webhooks)
        valid = validate_files(args.files, sys.stdout, accounts=accounts, webhooks=webhooks)
        if len(valid) != len(args.files):
            print("nothing applied: fix the errors above first", file=sys.stderr)
            return 1
        store = rule_store(db, settings)  # each file is checked against those applied before
        refused = 0
        for path, rule in valid:
            try:
                result = await store.save(rule, now=now(), author=args.author, source=str(path))
            except ConflictingRuleError as exc:
                refused += 1
                say(f"{path}: not applied ({rule.name}): it fights active rules", file=sys.stderr)
                print_findings(exc.findings, sys.stderr, prefix=f"{path}: ")
                continue
            state = "created" if result.created else "unchanged"
            state = "new version" if result.new_version and not result.created else state
            say(f"{path}: {result.rule.id} v{result.rule.version} {state} ({rule.name})")
            print_findings(result.warnings, sys.stdout, prefix=f"{path}: warning: ")
        if refused:
            print(
                f"{refused} file(s) not applied: RULEENGINE_REFUSE_CONFLICTING_RULES is set",
                file=sys.stderr,
            )
        return 1 if refused else 0


async def _rules_rollback(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        try:
            changed = await rule_store(db, settings).rollback(
                args.rule_id,
                args.version,
                now=now(),
                expected_version=args.expected_version,
                by=args.author,
            )
        except ConflictingRuleError as exc:
            print(f"error: {exc}", file=sys.stderr)
            print_findings(exc.findings, sys.stderr)
            return 1
    doc = changed.rule
    say(f"{doc.id} v{doc.version} is active ({doc.name}, {doc.status})")
    print_findings(changed.warnings, sys.stdout, prefix="warning: ")
    return 0


async def _rules_migrate(args: argparse.Namespace, settings: Settings) -> int:
    currencies: dict[str, str | None] = {}
    if args.currency is None and any(is_old_format(path) for path in args.files):
        async with open_database(
            settings, needed_for="the registered accounts' currencies", instead="give --currency"
        ) as db:
            currencies = {a.id: a.currency for a in await all_accounts(db, settings)}
    failed = 0
    for path in args.files:
        try:
            migrated = migrate_file(path, currencies, currency=args.currency)
        except RuleValidationError as exc:
            failed += 1
            print_problems(path, exc, sys.stderr)
            continue
        text = orjson.dumps(migrated, option=orjson.OPT_INDENT_2).decode() + "\n"
        if args.write:
            _rewrite(path, text)
            print(f"{path}: format {CURRENT_FORMAT}")
        else:
            sys.stdout.write(text)
    return 1 if failed else 0


def _rewrite(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RuleEngineError(f"{path}: cannot rewrite the file ({exc.strerror})") from None


async def _rules_list(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as db:
        rules = await RuleStore(db).page()
    for item in rules:
        say(_rule_line(item))
    if not rules:
        print("no rules yet; add some with `ruleengine rules apply FILE…`")
    return 0


def _rule_line(item: Loaded) -> str:
    from ruleengine.rules.language.schedule import describe

    if isinstance(item, StoredRuleError):
        return f"{item.rule_id}  v?   HAS_ISSUES {item.name or '?'}: {item.problem}"
    try:
        schedule = describe(item.rule().schedule)
    except StoredRuleError as exc:
        return f"{item.id}  v{item.version:<3} {item.status} {item.name}: {exc.problem}"
    nxt = item.next_execute_at.isoformat() if item.next_execute_at else "-"
    issue = f"  ({item.issue.message})" if item.issue else ""
    return (
        f"{item.id}  v{item.version:<3} {item.status:<7} {schedule:<24} next {nxt}  {item.name}"
        f"{issue}"
    )


def add_commands(sub: Any) -> None:
    """``rules`` and its actions."""
    rules = sub.add_parser("rules", help="validate, apply and list rules").add_subparsers(
        dest="rules_command", required=True, metavar="ACTION"
    )
    schema = rules.add_parser("schema", help="print the JSON Schema of a rule")
    schema.set_defaults(handler=cmd_rules_schema)
    validate = rules.add_parser(
        "validate",
        help="check rule files offline (or against the registered accounts, or Meta's objects)",
        description="Exit 0 when every file is a valid rule; otherwise print each problem as"
        " 'FILE: path: message' and exit 1. Offline by default; --registered also checks what"
        " 'rules apply' and the API check: the ad accounts are registered, the webhooks"
        " configured, and every amount says what it means on each account — per currency"
        ' ({"USD": 20, "JPY": 3000}) where the accounts differ in currency. With --live, each'
        " valid rule also lists its entities (GET only) and a warning names each one its"
        " actions cannot change (a legacy Advantage+ campaign takes status changes only).",
    )
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    validate.add_argument(
        "--live",
        action="store_true",
        help="list the rules' entities with the registered tokens and warn of refusals",
    )
    validate.add_argument(
        "--currency", default="USD", help="explain an old-format file's amounts in this currency"
    )
    validate.add_argument(
        "--registered",
        action="store_true",
        help="check against the registered ad accounts (their currencies) and the configured"
        " webhooks; needs the database",
    )
    validate.set_defaults(handler=cmd_rules_validate)
    _add_migrate(rules)
    apply = rules.add_parser(
        "apply",
        help="create or update rules from files",
        description="Rules are matched by name; a new version is created only when the"
        " definition changed. Prints the id and version of each rule.",
    )
    apply.add_argument("files", nargs="+", type=Path, metavar="FILE")
    apply.add_argument("--author", default=os.environ.get("USER", "cli"), help="recorded author")
    apply.set_defaults(handler=run_async(_rules_apply))
    listing = rules.add_parser("list", help="list rules with status, schedule and next run")
    listing.set_defaults(handler=run_async(_rules_list))
    _add_rollback(rules)
    add_conflicts(rules)
    add_import_meta(rules)
    add_export_meta(rules)
    add_backtest(rules)
    add_impact(rules)


def _add_migrate(rules: Any) -> None:
    migrate = rules.add_parser(
        "migrate",
        help="convert rule files of the old format (budgets in minor units) to format 2",
        description="Prints each file in format 2 (every amount in the account currency's"
        " units: 50000 cents become 500), or rewrites it with --write. The currency is"
        " --currency, else that of the rule's registered ad accounts (one offset needed;"
        " read from MongoDB only when a file is of the old format).",
    )
    migrate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    migrate.add_argument("--currency", help="the ad accounts' currency, e.g. USD or JPY")
    migrate.add_argument("--write", action="store_true", help="rewrite the files in place")
    migrate.set_defaults(handler=run_async(_rules_migrate))


def _add_rollback(rules: Any) -> None:
    back = rules.add_parser(
        "rollback",
        help="make an earlier version of a rule the active one again",
        description="Moves the rule's active-version pointer back to VERSION (compare-and-set,"
        " as POST /api/rules/{id}/rollback does); the rule keeps its status (a rule with issues"
        " comes back PAUSED). Its conflicts with the active rules are printed as warnings; with"
        " RULEENGINE_REFUSE_CONFLICTING_RULES set, a rollback that would leave an ACTIVE rule"
        " fighting active rules is refused.",
        epilog="Exit 0 when VERSION is active; 1 when the rule or version is unknown, the rule"
        " moved off --expected-version, or the rollback was refused (its conflicts on stderr).",
    )
    back.add_argument("rule_id", metavar="RULE_ID", help="the id of a stored rule")
    back.add_argument(
        "version",
        type=whole_number(1, MAX_VERSION),
        metavar="VERSION",
        help="the version to make active",
    )
    back.add_argument(
        "--expected-version",
        type=whole_number(1, MAX_VERSION),
        metavar="N",
        help="refuse unless the active version is still N (someone else may have changed it)",
    )
    back.add_argument("--author", default=os.environ.get("USER", "cli"), help="recorded as who")
    back.set_defaults(handler=run_async(_rules_rollback))
