"""``ruleengine rules import-meta`` and ``export-meta``: Meta's Automated Rules in and out.

What the conversions need of the stack: a registered account's currency and timezone (none
with ``--currency``), its token to read ``adrules_library`` (``--account`` without FILE), and
the rule store to save (``--apply``) or to read a rule by id.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ruleengine.cli.common import now, one_line, run_async
from ruleengine.cli.conflicts import print_findings
from ruleengine.cli.files import is_file, load_file, print_problems
from ruleengine.cli.stack import all_accounts, open_database, rule_store
from ruleengine.errors import RuleEngineError, RuleValidationError
from ruleengine.rules.basics import LEVELS
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

if TYPE_CHECKING:
    from ruleengine.meta.reader import GraphReader

#: How to convert without the registered account's currency (and so without MongoDB).
_GIVE_CURRENCY = "give --currency (and --timezone) to convert without the registered account"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "rule"


def _meta_documents(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(source, document) of every FILE; RuleValidationError names a file that is not JSON."""
    documents = []
    for path in args.files:
        try:
            documents.append((str(path), load_file(path)))
        except RuleValidationError as exc:
            raise RuleEngineError(f"{path}: {exc}") from None
    return documents


async def _import_context(
    args: argparse.Namespace, settings: Settings, stack: contextlib.AsyncExitStack
) -> tuple[Database | None, GraphReader | None]:
    """The database (unless the files need none of it) and, for --account, a Graph reader."""
    from ruleengine.meta.http import GraphSession
    from ruleengine.meta.reader import GraphReader

    offline = args.files and args.currency and not args.apply
    db = None
    if not offline:
        if args.apply:
            needed_for, instead = "saving the rules (--apply)", None
        elif args.files:
            needed_for, instead = "the ad account's currency", _GIVE_CURRENCY
        else:
            needed_for, instead = "the ad account's token (--account without FILE)", None
        opened = open_database(settings, needed_for=needed_for, instead=instead)
        db = await stack.enter_async_context(opened)
    reader = None
    if args.account and not args.files:
        session = GraphSession(settings)
        stack.push_async_callback(session.close)
        reader = GraphReader.from_settings(session)
    return db, reader


async def _rules_import_meta(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.interop import meta_rules as interop
    from ruleengine.rules.meta.importing import ImportOptions, import_document

    if not args.files and not args.account:
        raise RuleEngineError("give FILE… (Meta rules as JSON) or --account act_… (or both)")
    inputs = _meta_documents(args) if args.files else []  # a bad file before the stack
    async with contextlib.AsyncExitStack() as stack:
        db, reader = await _import_context(args, settings, stack)
        key = load_key(settings, create=False) if db is not None else None
        credentials = CredentialStore(db, key) if db is not None and key else None
        if not args.files:
            assert credentials is not None
            assert reader is not None
            inputs = [(args.account, await interop.read_library(reader, credentials, args.account))]
        options = ImportOptions(webhook=args.webhook, activate=args.activate, level=args.level)
        results = []
        for source, document in inputs:
            account_id = args.account or interop.account_of_document(document)
            if account_id is None:
                raise RuleEngineError(
                    f"{source}: which ad account are these rules of? give --account"
                )
            account = await interop.meta_account(
                account_id,
                credentials=credentials,
                reader=reader,
                currency=args.currency,
                timezone=args.timezone,
            )
            for result in import_document(document, account=account, options=options):
                results.append((source, result))
        saved = await _apply_imported(args, settings, db, credentials, [r for _, r in results])
    _write_imported(args, results, saved)
    imported = sum(1 for _, r in results if r.rule is not None)
    print(f"{imported} of {len(results)} Meta rule(s) converted", file=sys.stderr)
    refused = sum(1 for s in saved.values() if s.refused)
    if refused:
        print(
            f"{refused} rule(s) not saved: they fight active rules and"
            " RULEENGINE_REFUSE_CONFLICTING_RULES is set",
            file=sys.stderr,
        )
    return 0 if imported == len(results) and not refused else 1


async def _apply_imported(
    args: argparse.Namespace,
    settings: Settings,
    db: Database | None,
    credentials: CredentialStore | None,
    results: list[Any],
) -> dict[int, Any]:
    from ruleengine.interop import meta_rules as interop

    if not args.apply:
        return {}
    assert db is not None
    assert credentials is not None
    saved = await interop.save_imported(
        rule_store(db, settings),
        results,
        accounts=await credentials.currencies(),
        webhooks=set(settings.webhooks),
        now=now(),
        author=args.author,
        source="import-meta",
    )
    return {
        id(r): s for r, s in zip([r for r in results if r.rule is not None], saved, strict=True)
    }


def _write_imported(args: argparse.Namespace, results: list[Any], saved: dict[int, Any]) -> None:
    """The report on stderr; the rules in --out, else (without --apply) on stdout."""
    documents = []
    names: set[str] = set()
    for source, result in results:
        head = f"{source} [{result.index}] {result.name}"
        head += f" (Meta {result.meta_id})" if result.meta_id else ""
        where = ""
        if result.rule is not None and args.out:
            stem = base = _slug(result.name)
            number = 1
            while stem in names:
                number += 1
                stem = f"{base}-{number}"
            names.add(stem)
            path = _write_rule(args.out / f"{stem}.json", result.rule)
            where = f" → {path}"
        elif result.rule is not None:
            documents.append(result.rule)
        state = "converted" if result.rule is not None else "NOT CONVERTED"
        stored = saved.get(id(result))
        if stored is not None:
            state += f", {stored.line()}"
        print(one_line(f"{head}: {state}{where}"), file=sys.stderr)
        for problem in result.problems:
            print(one_line(f"    {problem.line()}"), file=sys.stderr)
        if stored is not None:  # its conflicts: why it was refused, or warnings
            prefix = "    " if stored.refused else "    warning: "
            print_findings(stored.findings, sys.stderr, prefix=prefix)
    if documents and not args.out and not args.apply:
        shown = documents[0] if len(documents) == 1 else documents
        sys.stdout.write(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode() + "\n")


def _write_rule(path: Path, rule: Any) -> Path:
    """Write one converted rule to ``path`` (its directory made if need be)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(rule, option=orjson.OPT_INDENT_2) + b"\n")
    except OSError as exc:
        raise RuleEngineError(f"--out: cannot write {path} ({exc.strerror})") from None
    return path


def cmd_rules_export_meta(args: argparse.Namespace, settings: Settings) -> int:
    """Print rules as Meta's Automated Rules; exit 1 when something could not be expressed."""
    from ruleengine.rules.meta.exporting import export_rule

    files = _rule_files([item for item in args.rules if is_file(item)])
    if files is None:
        print("nothing exported: fix the errors above first", file=sys.stderr)
        return 1
    known: dict[str, Any] = {}
    rules = dict(files)
    ids = set(args.rules) - set(files)
    if ids or not args.currency:
        stored, known = asyncio.run(_stored_rules(args, settings, ids))
        rules |= stored
    exported, complete = [], True
    for source in args.rules:
        result = export_rule(rules[source], accounts=_meta_accounts(args, rules[source], known))
        exported += [r.as_dict() for r in result.rules]
        complete = complete and result.complete
        for problem in result.problems:
            print(one_line(f"{source}: {problem.line()}"), file=sys.stderr)
    sys.stdout.write(orjson.dumps(exported, option=orjson.OPT_INDENT_2).decode() + "\n")
    if not complete:
        print("not everything could be expressed in Meta's rules (see above)", file=sys.stderr)
    return 0 if complete else 1


def _rule_files(sources: list[str]) -> dict[str, Rule] | None:
    """The rule of each file; None after printing every file's problems."""
    rules, failed = {}, False
    for source in sources:
        try:
            rules[source] = parse_rule(load_file(Path(source)))
        except RuleValidationError as exc:
            failed = True
            print_problems(source, exc, sys.stderr)
    return None if failed else rules


def _meta_accounts(args: argparse.Namespace, rule: Rule, known: dict[str, Any]) -> dict[str, Any]:
    from ruleengine.rules.meta.vocab import MetaAccount

    accounts = {}
    for account_id in rule.ad_accounts:
        account = known.get(account_id)
        currency = args.currency or (account.currency if account else None)
        if currency:
            timezone = args.timezone or (account.timezone if account else None)
            accounts[account_id] = MetaAccount(account_id, currency, timezone)
    return accounts


async def _stored_rules(
    args: argparse.Namespace, settings: Settings, ids: set[str]
) -> tuple[dict[str, Rule], dict[str, Any]]:
    needed_for = "the stored rules" if ids else "the ad accounts' currencies"
    instead = None if ids else "give --currency (and --timezone)"
    async with open_database(settings, needed_for=needed_for, instead=instead) as db:
        store = RuleStore(db)
        rules = {rule_id: (await store.get(rule_id)).rule() for rule_id in ids}
        accounts = {a.id: a for a in await all_accounts(db, settings)}
    return rules, accounts


def add_import_meta(rules: Any) -> None:
    """``rules import-meta``."""
    imp = rules.add_parser(
        "import-meta",
        help="convert Meta's Automated Rules (adrules_library) into rules",
        description="Convert Meta's Automated Rules into ruleengine rules (format 2: money in the"
        " account currency's units, times in the ad account's timezone). FILE holds one Meta"
        ' rule, a list, or {"data": [...]} as GET act_…/adrules_library answers; without FILE,'
        " --account reads the account's rules from Meta (read-only, with its registered token)."
        " Each rule gets a report on stderr: every construct that does not map, with its JSON"
        " path in Meta's rule and why (TRIGGER rules, ROTATE, REBALANCE_BUDGET, PING_ENDPOINT …"
        " are not converted; '(warning)' marks a rule converted with a difference to review)."
        " The rules go to stdout, to --out DIR, or with --apply into the rule store.",
        epilog="Exit 0 when every rule was converted (and, with --apply, saved), 1 when some"
        " were not (the others are still written or saved): a rule that would be ACTIVE and"
        " fights active rules is not saved when RULEENGINE_REFUSE_CONFLICTING_RULES is set."
        " Migration walkthrough: docs/meta-rules.md.",
    )
    imp.add_argument("files", nargs="*", type=Path, metavar="FILE", help="Meta rules as JSON")
    imp.add_argument(
        "--account",
        metavar="ACT",
        help="the ad account (act_…) the rules belong to; without FILE its rules are read"
        " from Meta",
    )
    imp.add_argument(
        "--currency",
        help="the account currency, when the account is not registered (Meta's money is in"
        " its minor units: cents, or whole yen)",
    )
    imp.add_argument(
        "--timezone", help="the account's timezone, when it is not registered (default UTC)"
    )
    imp.add_argument(
        "--level",
        choices=LEVELS,
        help="the level of rules that name objects by id without an entity_type",
    )
    imp.add_argument(
        "--webhook",
        default="meta-rules",
        help="the webhook (RULEENGINE_WEBHOOKS name) Meta's NOTIFICATION becomes (meta-rules)",
    )
    imp.add_argument("--out", type=Path, metavar="DIR", help="write one JSON file per rule")
    imp.add_argument(
        "--apply", action="store_true", help="save the rules (PAUSED unless --activate)"
    )
    imp.add_argument(
        "--activate",
        action="store_true",
        help="rules enabled at Meta come ACTIVE (pause the Meta rules first: both would act)",
    )
    imp.add_argument("--author", default=os.environ.get("USER", "cli"), help="recorded author")
    imp.set_defaults(handler=run_async(_rules_import_meta))


def add_export_meta(rules: Any) -> None:
    """``rules export-meta``."""
    exp = rules.add_parser(
        "export-meta",
        help="print rules as Meta's Automated Rules",
        description="Print each rule (a file, or the id of a stored rule) as the bodies of POST"
        " act_…/adrules_library: one Meta rule per task and ad account (one per condition for"
        " 'any' with pause/activate; a 'then' at a time of day becomes a second rule). What"
        " Meta's rules cannot express is printed on stderr with its JSON path in the rule.",
        epilog="Exit 1 when something could not be expressed. Money is converted to the account"
        " currency's minor units: the currency comes from the registered account or --currency.",
    )
    exp.add_argument("rules", nargs="+", metavar="FILE_OR_ID", help="a rule file or a rule id")
    exp.add_argument("--currency", help="the currency of every ad account of the rules")
    exp.add_argument("--timezone", help="the ad accounts' timezone (default: as registered)")
    exp.set_defaults(handler=cmd_rules_export_meta)
