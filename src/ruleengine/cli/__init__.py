"""The ``ruleengine`` command: run everything, manage rules and ad accounts."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import orjson
from pydantic import ValidationError

from ruleengine import __version__
from ruleengine.analysis.conflicts import (
    ConflictGate,
    ConflictingRuleError,
    add_live_entities,
    findings_json,
    stored_entries,
)
from ruleengine.approvals.deciding import decide
from ruleengine.devstack.supervise import MAX_RESTARTS, RESTART_WINDOW_S
from ruleengine.errors import FieldError, MetaUnreachable, RuleEngineError, RuleValidationError
from ruleengine.queue import connect_queue
from ruleengine.rules.conflicts import Finding, RuleEntry, find_conflicts
from ruleengine.rules.model import Rule, parse_rule, rule_json_schema
from ruleengine.rules.money import (
    CURRENT_FORMAT,
    document_format,
    explain_old_format,
    migrate_stored,
)
from ruleengine.settings import PORT_LAYOUT, Settings
from ruleengine.store.api_tokens import ROLES, ApiToken, ApiTokenStore
from ruleengine.store.approvals import STATUSES, ApprovalStore
from ruleengine.store.credentials import CredentialStore, check_account, load_key
from ruleengine.store.db import Database, create_client, database, ensure_indexes
from ruleengine.store.formats import migrate_rules
from ruleengine.store.ruledocs import Loaded, StoredRuleError
from ruleengine.store.rules import RuleStore

if TYPE_CHECKING:
    from ruleengine.meta.reader import GraphReader

Handler = Callable[[argparse.Namespace, Settings], int]


def _now() -> datetime:
    return datetime.now(UTC)


@contextlib.asynccontextmanager
async def _database(settings: Settings) -> AsyncIterator[Database]:
    """The engine's database for one command: indexes ensured, orphan versions repaired,
    rules of an old format migrated."""
    client = create_client(settings)
    try:
        db = database(client, settings)
        await ensure_indexes(db)
        await RuleStore(db).repair_orphans(now=_now())
        await migrate_rules(db, now=_now())
        yield db
    finally:
        await client.close()


# ---------------------------------------------------------------- rules


def _rule_store(db: Database, settings: Settings) -> RuleStore:
    """The rule store of a command that saves, activates or rolls back rules: every such
    change passes the conflict check (``RULEENGINE_REFUSE_CONFLICTING_RULES``)."""
    return RuleStore(db, admit=ConflictGate(refuse=settings.refuse_conflicting_rules))


def _load_file(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except OSError as exc:
        raise RuleValidationError([_file_error(f"cannot read the file ({exc.strerror})")]) from None
    except orjson.JSONDecodeError as exc:
        raise RuleValidationError([_file_error(f"not valid JSON ({exc})")]) from None


def _file_error(message: str) -> FieldError:
    return FieldError(path="", message=message)


def validate_files(
    paths: Sequence[Path],
    out: TextIO,
    *,
    accounts: set[str] | None = None,
    webhooks: set[str] | None = None,
    explain_in: str | None = None,
) -> list[tuple[Path, Rule]]:
    """Parse every file; print ``FILE: path: message`` per problem. Returns the valid rules.

    What ``rules validate`` (offline) and ``rules apply`` (against the registered accounts
    and configured webhooks, as the API validates) run. Only the current format is
    valid; with ``explain_in`` a format-1 file is explained: its minor-unit amounts in
    that currency, and the command that converts it.
    """
    valid: list[tuple[Path, Rule]] = []
    for path in paths:
        data: Any = None
        try:
            data = _load_file(path)
            rule = parse_rule(data, accounts=accounts, webhooks=webhooks, new=True)
            valid.append((path, rule))
        except RuleValidationError as exc:
            for error in exc.errors:
                print(problem_line(path, error), file=out)
            if explain_in and isinstance(data, dict) and document_format(data) == 1:
                for line in explain_old_format(data, explain_in, path=str(path)):
                    print(_one_line(f"{path}: {line}"), file=out)
    return valid


def problem_line(path: Path, error: FieldError) -> str:
    """``FILE: path: message`` on one line: control characters a rule carried are escaped."""
    where = f"{error.path}: " if error.path else ""
    return _one_line(f"{path}: {where}{error.message}")


def _one_line(text: str) -> str:
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def cmd_rules_schema(args: argparse.Namespace, settings: Settings) -> int:
    """Print the JSON Schema of a rule."""
    sys.stdout.write(orjson.dumps(rule_json_schema(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_rules_validate(args: argparse.Namespace, settings: Settings) -> int:
    """Validate rule files offline; exit 1 when any has a problem."""
    valid = validate_files(args.files, sys.stdout, explain_in=args.currency)
    for path, rule in valid:
        print(f"{path}: ok ({rule.name}, {len(rule.tasks)} task(s))")
    return 0 if len(valid) == len(args.files) else 1


async def _rules_apply(args: argparse.Namespace, settings: Settings) -> int:
    async with _database(settings) as db:
        accounts = await CredentialStore(db, load_key(settings, create=False)).ids()
        webhooks = set(settings.webhooks)
        valid = validate_files(args.files, sys.stdout, accounts=accounts, webhooks=webhooks)
        if len(valid) != len(args.files):
            print("nothing applied: fix the errors above first", file=sys.stderr)
            return 1
        store = _rule_store(db, settings)  # each file is checked against those applied before
        refused = 0
        for path, rule in valid:
            try:
                result = await store.save(rule, now=_now(), author=args.author, source=str(path))
            except ConflictingRuleError as exc:
                refused += 1
                print(f"{path}: not applied ({rule.name}): it fights active rules", file=sys.stderr)
                _print_findings(exc.findings, sys.stderr, prefix=f"{path}: ")
                continue
            state = "created" if result.created else "unchanged"
            state = "new version" if result.new_version and not result.created else state
            print(f"{path}: {result.rule.id} v{result.rule.version} {state} ({rule.name})")
            _print_findings(result.warnings, sys.stdout, prefix=f"{path}: warning: ")
        if refused:
            print(
                f"{refused} file(s) not applied: RULEENGINE_REFUSE_CONFLICTING_RULES is set",
                file=sys.stderr,
            )
        return 1 if refused else 0


async def _rules_rollback(args: argparse.Namespace, settings: Settings) -> int:
    async with _database(settings) as db:
        try:
            changed = await _rule_store(db, settings).rollback(
                args.rule_id,
                args.version,
                now=_now(),
                expected_version=args.expected_version,
                by=args.author,
            )
        except ConflictingRuleError as exc:
            print(f"error: {exc}", file=sys.stderr)
            _print_findings(exc.findings, sys.stderr)
            return 1
    doc = changed.rule
    print(f"{doc.id} v{doc.version} is active ({doc.name}, {doc.status})")
    _print_findings(changed.warnings, sys.stdout, prefix="warning: ")
    return 0


_FIRE_WORDS = {
    "can_fire_together": "can fire together",
    "may_fire_together": "may fire together",
    "cannot_fire_together": "cannot fire together",
}


def finding_lines(finding: Finding) -> list[str]:
    """A finding for people: the verdict, both tasks, why, and any live entities."""
    head = "CONFLICT" if finding.severity == "conflict" else "note"
    scope = "scopes overlap" if finding.scope == "overlap" else "scopes may overlap"
    lines = [
        f"{head}: {finding.field} ({finding.kind.replace('_', ' ')}; {scope};"
        f" {_FIRE_WORDS[finding.conditions]})"
        + ("" if finding.both_active else " — not both active")
    ]
    for side in (finding.a, finding.b):
        lines.append(
            f"  {side.rule_name} [{side.rule_id}, {side.status}] task {side.task_id}: {side.does}"
        )
    lines.append(f"  why: {finding.why}")
    for entity in finding.entities or []:
        if "error" in entity:
            lines.append(f"  live: {entity['ad_account']}: {entity['error']}")
        else:
            lines.append(f"  live: {entity['ad_account']} {entity['id']} {entity['name']!r}")
    if finding.entities == []:
        lines.append("  live: no current entity is in both scopes")
    return [_one_line(line) for line in lines]


def _print_findings(findings: Sequence[Finding], out: TextIO, *, prefix: str = "") -> None:
    for finding in findings:
        for line in finding_lines(finding):
            print(f"{prefix}{line}", file=out)


async def _conflict_entries(
    args: argparse.Namespace, settings: Settings, db: Database
) -> tuple[list[RuleEntry], set[str] | None] | None:
    """The rules to analyse and which of them the command asks about (None: all)."""
    stored = await stored_entries(RuleStore(db), active_only=not args.all)
    if not args.files:
        return stored, None
    accounts = await CredentialStore(db, load_key(settings, create=False)).ids()
    valid = validate_files(
        args.files, sys.stderr, accounts=accounts, webhooks=set(settings.webhooks)
    )
    if len(valid) != len(args.files):
        return None
    files = [RuleEntry(str(path), rule.name, rule, rule.status) for path, rule in valid]
    names = {e.name for e in files}  # a file replaces the stored rule it would update
    kept = [e for e in stored if e.name not in names]
    return [*kept, *files], {e.id for e in files}


async def _rules_conflicts(args: argparse.Namespace, settings: Settings) -> int:
    async with _database(settings) as db:
        found = await _conflict_entries(args, settings, db)
        if found is None:
            print("nothing checked: fix the errors above first", file=sys.stderr)
            return 2
        entries, asked = found
        findings = find_conflicts(entries, only_involving=asked)
        if args.live and findings:
            findings = await _live_findings(settings, db, findings, entries)
    if args.json:
        data = {"findings": findings_json(findings), "checked_rules": len(entries)}
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_findings(findings, sys.stdout)
        conflicts = sum(1 for f in findings if f.severity == "conflict")
        print(
            f"{conflicts} conflict(s), {len(findings) - conflicts} note(s)"
            f" among {len(entries)} rule(s)"
        )
    return 1 if any(f.severity == "conflict" for f in findings) else 0


async def _live_findings(
    settings: Settings, db: Database, findings: list[Finding], entries: list[RuleEntry]
) -> list[Finding]:
    from ruleengine.meta.http import GraphSession
    from ruleengine.meta.reader import GraphReader

    session = GraphSession(settings)
    try:
        return await add_live_entities(
            findings,
            {e.id: e.rule for e in entries},
            reader=GraphReader.from_settings(session),
            credentials=CredentialStore(db, load_key(settings, create=False)),
        )
    finally:
        await session.close()


async def _rules_migrate(args: argparse.Namespace, settings: Settings) -> int:
    currencies: dict[str, str | None] = {}
    if args.currency is None:  # the registered accounts' currencies
        async with _database(settings) as db:
            accounts = await CredentialStore(db, load_key(settings, create=False)).all()
        currencies = {a.id: a.currency for a in accounts}
    failed = 0
    for path in args.files:
        try:
            migrated = migrate_file(path, currencies, currency=args.currency)
        except RuleValidationError as exc:
            failed += 1
            for error in exc.errors:
                print(problem_line(path, error), file=sys.stderr)
            continue
        text = orjson.dumps(migrated, option=orjson.OPT_INDENT_2).decode() + "\n"
        if args.write:
            path.write_text(text, encoding="utf-8")
            print(f"{path}: format {CURRENT_FORMAT}")
        else:
            sys.stdout.write(text)
    return 1 if failed else 0


def migrate_file(
    path: Path, currencies: dict[str, str | None], *, currency: str | None
) -> dict[str, Any]:
    """The rule file at ``path`` in the current format (unchanged when it already is).

    Raises:
        RuleValidationError: the file is not a valid rule, or cannot be converted.
    """
    data = _load_file(path)
    rule = parse_rule(data)  # a format-1 document must be valid as it is
    if rule.format == CURRENT_FORMAT:
        return dict(data)
    if currency is not None:
        currencies = dict.fromkeys(rule.ad_accounts, currency)
    migration = migrate_stored(data, currencies)
    if migration.definition is None:
        hint = "; or give the currency: --currency CODE" if currency is None else ""
        raise RuleValidationError([FieldError("", f"not converted: {migration.problem}{hint}")])
    parse_rule(migration.definition, new=True)
    return migration.definition


async def _rules_list(args: argparse.Namespace, settings: Settings) -> int:
    async with _database(settings) as db:
        rules = await RuleStore(db).page()
    for item in rules:
        print(_rule_line(item))
    if not rules:
        print("no rules yet; add some with `ruleengine rules apply FILE…`")
    return 0


def _rule_line(item: Loaded) -> str:
    from ruleengine.rules.schedule import describe

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


# ---------------------------------------------------------------- backtest

BACKTEST_MAX_DAYS = 90


def _days(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,3}", text) or not 1 <= int(text) <= BACKTEST_MAX_DAYS:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a whole number of days from 1 to {BACKTEST_MAX_DAYS}"
        )
    return int(text)


def _account(text: str) -> str:
    from ruleengine.rules.basics import is_account_id

    if not is_account_id(text):
        raise argparse.ArgumentTypeError(f"'{text}' is not an ad account id like act_123")
    return text


def _is_file(source: str) -> bool:
    """A FILE_OR_ID names a file when one exists there, or when it looks like a path."""
    return Path(source).exists() or source.endswith(".json") or "/" in source or os.sep in source


async def _backtest_rule(
    source: str, db: Database, registered: set[str], settings: Settings
) -> tuple[Rule, str | None, int | None] | None:
    """The rule of a file (None after printing its problems) or of a stored rule's id."""
    if _is_file(source):
        path = Path(source)
        try:
            data = _load_file(path)
        except RuleValidationError as exc:
            for error in exc.errors:
                print(problem_line(path, error), file=sys.stderr)
            return None
        currency = await _currency_of(db, settings, data)
        valid = validate_files(
            [path],
            sys.stderr,
            accounts=registered,
            webhooks=set(settings.webhooks),
            explain_in=currency,
        )
        return (valid[0][1], None, None) if valid else None
    doc = await RuleStore(db).get(source)
    rule = doc.rule()
    if rule.format != CURRENT_FORMAT:
        raise RuleEngineError(
            f"rule '{doc.id}' is stored in the old format {rule.format} (budgets in minor"
            f" units); a backtest replays format {CURRENT_FORMAT}: save a format-"
            f"{CURRENT_FORMAT} version of it first (`ruleengine rules apply FILE` or"
            f" PUT /api/rules/{doc.id})"
        )
    return rule, doc.id, doc.version


async def _currency_of(db: Database, settings: Settings, data: Any) -> str:
    """The currency a format-1 file's amounts are explained in: its first registered account's."""
    named = data.get("ad_accounts") if isinstance(data, dict) else None
    if not isinstance(named, list):
        return "USD"
    known = {a.id: a.currency for a in await _all_accounts(db, settings)}
    return next((known[a] for a in named if isinstance(a, str) and a in known), "USD")


def _backtest_accounts(args: argparse.Namespace, rule: Rule, registered: set[str]) -> list[str]:
    """Problems with --account (or, without it, with the rule's accounts)."""
    problems = []
    for account in args.account or ():
        if account not in rule.ad_accounts:
            problems.append(
                f"--account {account}: not one of the rule's ad accounts"
                f" ({', '.join(rule.ad_accounts)})"
            )
        elif account not in registered:
            problems.append(f"--account {account}: ad account '{account}' is not registered")
    if not args.account:
        missing = [a for a in rule.ad_accounts if a not in registered]
        if missing:
            problems.append(
                f"the rule's ad account(s) {', '.join(missing)} are not registered: register"
                " them (`ruleengine accounts add`) or name the others with --account"
            )
    return problems


class ProgressLine:
    """The backtest's progress on a stream: one line rewritten on a terminal, else a line
    per change of stage or of days done."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()
        self._last: tuple[str, int] | None = None
        self._width = 0

    async def __call__(self, progress: Any) -> None:
        """Show ``progress`` (the service's Progress)."""
        key = (progress.stage, progress.days_done)
        if key == self._last:
            return
        self._last = key
        text = f"backtest: {progress.stage}, {progress.days_done}/{progress.days_total} days"
        if self._tty:
            self._out.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self._out.write(text + "\n")
        self._out.flush()

    def end(self) -> None:
        """End the rewritten line on a terminal."""
        if self._tty and self._width:
            self._out.write("\n")
            self._out.flush()


async def _rules_backtest(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.backtest.result import BacktestRequest
    from ruleengine.backtest.service import (
        BacktestDeps,
        BacktestRefused,
        run_backtest,
    )

    async with _database(settings) as db:
        accounts = await _all_accounts(db, settings)
        registered = {a.id for a in accounts}
        loaded = await _backtest_rule(args.rule, db, registered, settings)
        if loaded is None:
            print("nothing run: fix the errors above first", file=sys.stderr)
            return 1
        rule, rule_id, version = loaded
        problems = _backtest_accounts(args, rule, registered)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            return 1
        request = BacktestRequest(
            rule=rule,
            days=args.days,
            accounts=tuple(dict.fromkeys(args.account or ())),
            as_seen=args.as_seen,
            rule_id=rule_id,
            version=version,
        )
        progress = ProgressLine(sys.stderr)
        try:
            async with BacktestDeps.open(settings, db) as deps:
                result = await run_backtest(deps, request, now=_now(), progress=progress)
        except BacktestRefused as exc:
            progress.end()
            print(f"error: the backtest was refused: {exc}", file=sys.stderr)
            return 1
        progress.end()
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    else:
        currencies = {a.id: a.currency for a in accounts}
        tasks = [task.id for task in rule.tasks]
        sys.stdout.write(backtest_table(result, tasks=tasks, currencies=currencies))
    return 0


def _money(value: Any, currency: str | None) -> str:
    from ruleengine.rules.entity import currency_offset

    if not isinstance(value, int | float):
        return "-"
    decimals = 0 if currency is not None and currency_offset(currency) == 1 else 2
    return f"{value:+,.{decimals}f}"


def _day_rows(
    result: dict[str, Any], tasks: list[str], currency: str | None
) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows: one per day, then the totals."""
    days = result.get("per_day") or []
    seen = [t for day in days for t in day.get("by_task", {}) if t not in tasks]
    columns = tasks + list(dict.fromkeys(seen))
    header = ["date", "fires", *columns, "budget moved", "paused", "activated"]
    rows = []
    totals: dict[str, float] = {}
    for day in days:
        by_task = day.get("by_task", {})
        cells = {"fires": day.get("fires", 0), "paused": day.get("paused", 0)}
        cells |= {"activated": day.get("activated", 0), "budget": day.get("budget_delta", 0)}
        cells |= {f"task:{t}": by_task.get(t, 0) for t in columns}
        for key, value in cells.items():
            totals[key] = totals.get(key, 0) + (value if isinstance(value, int | float) else 0)
        rows.append(_row(str(day.get("date", "?")), cells, columns, currency))
    rows.append(_row("total", totals, columns, currency))
    return header, rows


def _row(label: str, cells: dict[str, Any], columns: list[str], currency: str | None) -> list[str]:
    return [
        label,
        str(cells["fires"]),
        *(str(cells[f"task:{t}"]) for t in columns),
        _money(cells["budget"], currency),
        str(cells["paused"]),
        str(cells["activated"]),
    ]


def _as_seen_lines(result: dict[str, Any]) -> list[str]:
    info = result.get("as_seen") or {}
    used = bool(info.get("used"))
    lines = []
    states = info.get("accounts") or {}
    for account in sorted(set(states) | set(result.get("accounts") or [])):
        state = states.get(account)
        if not state:
            lines.append(f"  {account}: matured numbers (no attribution-lag curve learnt)")
            continue
        view = "as-seen numbers" if used and state.get("enough") else "matured numbers"
        why = f"; {state['why']}" if state.get("why") else ""
        lines.append(f"  {account}: {view} ({state.get('observations', 0)} observations{why})")
    differs = result.get("differs_as_seen") or []
    if differs:
        only = {
            view: sum(1 for d in differs if d.get("only_in") == view)
            for view in ("as_seen", "matured")
        }
        lines.append(
            f"  {len(differs)} fire(s) differ between the views: {only['as_seen']} only with"
            f" as-seen numbers, {only['matured']} only with matured numbers"
        )
    return lines


def backtest_table(result: dict[str, Any], *, tasks: list[str], currencies: dict[str, str]) -> str:
    """A backtest's result for a person: fires per task per day, budget moved, entities
    paused and activated, what it cost, which numbers each account used, and the caveats."""
    rule = result.get("rule") or {}
    accounts = list(result.get("accounts") or [])
    known = sorted({currencies[a] for a in accounts if a in currencies})
    currency = known[0] if len(known) == 1 else None
    unit = currency or (f"mixed: {', '.join(known)}" if known else "account currency")
    header, rows = _day_rows(result, tasks, currency)
    header[header.index("budget moved")] = f"budget moved ({unit})"
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        f"Backtest of '{rule.get('name', '?')}' ({rule.get('level', '?')}) on"
        f" {', '.join(accounts) or '-'}: {result.get('since')} to {result.get('until')}"
        f" ({result.get('days')} days)",
        f"view: {result.get('view')} numbers · runs {result.get('runs')} · graph_calls"
        f" {result.get('graph_calls')} · cache_hits {result.get('cache_hits')}",
        "",
    ]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    entities = result.get("entities") or []
    lines += ["", f"entities changed or notified: {len(entities)}", "as seen:"]
    lines += _as_seen_lines(result) or ["  -"]
    lines.append("caveats:")
    lines += [f"  - {caveat}" for caveat in result.get("caveats") or []] or ["  -"]
    return "\n".join(_one_line(line) for line in lines) + "\n"


# ---------------------------------------------------------------- Meta's Automated Rules


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "rule"


def _meta_documents(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(source, document) of every FILE; RuleValidationError names a file that is not JSON."""
    return [(str(path), _load_file(path)) for path in args.files]


async def _import_context(
    args: argparse.Namespace, settings: Settings, stack: contextlib.AsyncExitStack
) -> tuple[Database | None, GraphReader | None]:
    """The database (unless the files need none of it) and, for --account, a Graph reader."""
    from ruleengine.meta.http import GraphSession
    from ruleengine.meta.reader import GraphReader

    offline = args.files and args.currency and not args.apply
    db = None if offline else await stack.enter_async_context(_database(settings))
    reader = None
    if args.account and not args.files:
        session = GraphSession(settings)
        stack.push_async_callback(session.close)
        reader = GraphReader.from_settings(session)
    return db, reader


async def _rules_import_meta(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.interop import meta_rules as interop
    from ruleengine.rules.meta_import import ImportOptions, import_document

    if not args.files and not args.account:
        raise RuleEngineError("give FILE… (Meta rules as JSON) or --account act_… (or both)")
    async with contextlib.AsyncExitStack() as stack:
        db, reader = await _import_context(args, settings, stack)
        key = load_key(settings, create=False) if db is not None else None
        credentials = CredentialStore(db, key) if db is not None and key else None
        if args.files:
            inputs = _meta_documents(args)
        else:
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
        _rule_store(db, settings),
        results,
        accounts=await credentials.ids(),
        webhooks=set(settings.webhooks),
        now=_now(),
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
            path = args.out / f"{stem}.json"
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_bytes(orjson.dumps(result.rule, option=orjson.OPT_INDENT_2) + b"\n")
            where = f" → {path}"
        elif result.rule is not None:
            documents.append(result.rule)
        state = "converted" if result.rule is not None else "NOT CONVERTED"
        stored = saved.get(id(result))
        if stored is not None:
            state += f", {stored.line()}"
        print(_one_line(f"{head}: {state}{where}"), file=sys.stderr)
        for problem in result.problems:
            print(_one_line(f"    {problem.line()}"), file=sys.stderr)
        if stored is not None:  # its conflicts: why it was refused, or warnings
            prefix = "    " if stored.refused else "    warning: "
            _print_findings(stored.findings, sys.stderr, prefix=prefix)
    if documents and not args.out and not args.apply:
        shown = documents[0] if len(documents) == 1 else documents
        sys.stdout.write(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode() + "\n")


def cmd_rules_export_meta(args: argparse.Namespace, settings: Settings) -> int:
    """Print rules as Meta's Automated Rules; exit 1 when something could not be expressed."""
    from ruleengine.rules.meta_export import export_rule

    files = {item: parse_rule(_load_file(Path(item))) for item in args.rules if Path(item).exists()}
    known: dict[str, Any] = {}
    rules = dict(files)
    if len(files) < len(args.rules) or not args.currency:
        stored, known = asyncio.run(_stored_rules(args, settings, set(args.rules) - set(files)))
        rules |= stored
    exported, complete = [], True
    for source in args.rules:
        result = export_rule(rules[source], accounts=_meta_accounts(args, rules[source], known))
        exported += [r.as_dict() for r in result.rules]
        complete = complete and result.complete
        for problem in result.problems:
            print(_one_line(f"{source}: {problem.line()}"), file=sys.stderr)
    sys.stdout.write(orjson.dumps(exported, option=orjson.OPT_INDENT_2).decode() + "\n")
    if not complete:
        print("not everything could be expressed in Meta's rules (see above)", file=sys.stderr)
    return 0 if complete else 1


def _meta_accounts(args: argparse.Namespace, rule: Rule, known: dict[str, Any]) -> dict[str, Any]:
    from ruleengine.rules.meta_vocab import MetaAccount

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
    async with _database(settings) as db:
        store = RuleStore(db)
        rules = {rule_id: (await store.get(rule_id)).rule() for rule_id in ids}
        accounts = {a.id: a for a in await _all_accounts(db, settings)}
    return rules, accounts


async def _all_accounts(db: Database, settings: Settings) -> list[Any]:
    key = load_key(settings, create=False)
    return await CredentialStore(db, key).all()


# ---------------------------------------------------------------- accounts


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


@contextlib.asynccontextmanager
async def _graph_reader(settings: Settings) -> AsyncIterator[GraphReader]:
    """A GET-only Graph reader for one command, its session closed afterwards."""
    from ruleengine.meta.http import GraphSession
    from ruleengine.meta.reader import GraphReader

    session = GraphSession(settings)
    try:
        yield GraphReader.from_settings(session)
    finally:
        await session.close()


async def _accounts_add(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.accounts.currency import register

    check_account(args.account, args.timezone, args.currency)  # before the token is asked for
    token = _read_token(args)
    async with _database(settings) as db, _graph_reader(settings) as reader:
        store = CredentialStore(db, load_key(settings, create=args.create_key))
        try:
            registered = await register(
                store,
                reader,
                args.account,
                token,
                now=_now(),
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

    async with _database(settings) as db, _graph_reader(settings) as reader:
        store = CredentialStore(db, load_key(settings, create=False))
        done = await refresh(store, reader, args.account, now=_now())
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
    async with _database(settings) as db:
        accounts = await CredentialStore(db, load_key(settings, create=False)).all()
    for account in accounts:
        refused, mismatch = account.token_state, account.currency_state
        print(
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


# ---------------------------------------------------------------- tokens


async def _tokens_add(args: argparse.Namespace, settings: Settings) -> int:
    async with _database(settings) as db:
        token, text = await ApiTokenStore(db).add(args.name, args.role, now=_now())
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
    async with _database(settings) as db:
        tokens = await ApiTokenStore(db).all()
    if args.json:
        print(orjson.dumps({"items": [_token_json(t) for t in tokens]}).decode())
        return 0
    if not tokens:
        print("no named API tokens; create one with `ruleengine tokens add NAME --role ROLE`")
        return 0
    print(f"{'NAME':<24} {'ROLE':<9} {'CREATED':<21} {'LAST USED':<21} REVOKED")
    for t in tokens:
        print(
            f"{t.name:<24} {t.role:<9} {_when(t.created_at):<21} {_when(t.last_used_at):<21}"
            f" {_when(t.revoked_at)}"
        )
    return 0


async def _tokens_revoke(args: argparse.Namespace, settings: Settings) -> int:
    async with _database(settings) as db:
        token = await ApiTokenStore(db).revoke(args.name, now=_now())
    print(f"API token '{token.name}' revoked at {_when(token.revoked_at)}")
    return 0


# ---------------------------------------------------------------- up


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """Start everything on embedded defaults."""
    from ruleengine.devstack.up import run_up

    return run_up(settings, demo=not args.no_demo, workers=args.workers)


# ---------------------------------------------------------------- parser


def _run_async(fn: Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]) -> Handler:
    return lambda args, settings: asyncio.run(fn(args, settings))


class _Parser(argparse.ArgumentParser):
    """No abbreviated options: ``--token`` must not silently mean ``--token-env``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


_PORT_NAMES = {
    "web_port": "web",
    "sandbox_port": "sandbox",
    "redis_port": "Redis",
    "mongodb_port": "MongoDB",
    "dispatcher_metrics_port": "dispatcher metrics",
    "worker_metrics_port": "worker metrics",
}


def _port_layout() -> str:
    """``web 8080 (N), sandbox 8081 (N+1), …`` from the settings' defaults and layout."""
    fields = Settings.model_fields
    return ", ".join(
        f"{_PORT_NAMES[name]} {fields[name].default} (N{f'+{offset}' if offset else ''})"
        for name, offset in PORT_LAYOUT.items()
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``ruleengine`` command."""
    parser = _Parser(
        prog="ruleengine",
        description="Automation rules for Meta advertising. Settings come from RULEENGINE_*"
        " environment variables (see the README).",
    )
    parser.add_argument("--version", action="version", version=f"ruleengine {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    up = sub.add_parser(
        "up",
        help="start everything on embedded defaults (Ctrl-C stops it)",
        description="Start the embedded MongoDB-compatible server, Redis, the Graph sandbox, the"
        " dispatcher, the workers and the web app on loopback; print each address and pid,"
        f" then 'ready'. Ports (with --port-base N): {_port_layout()}, one more per extra"
        " worker; a RULEENGINE_*_PORT setting moves one of them, metrics port 0 turns metrics"
        " off. A taken port is refused before anything starts. A dispatcher, worker or web"
        f" process that exits is restarted (at most {MAX_RESTARTS} times in"
        f" {RESTART_WINDOW_S / 60:g} minutes); MongoDB, Redis or the sandbox exiting stops"
        " everything. Data lives under RULEENGINE_DATA_DIR (default ./var).",
        epilog="Run the CLI (`ruleengine rules apply`, `accounts add`) with the same"
        " RULEENGINE_* settings (RULEENGINE_PORT_BASE rather than --port-base) to reach this"
        " stack's database.",
    )
    up.add_argument("--no-demo", action="store_true", help="do not load the demo rules")
    up.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (1)")
    up.add_argument(
        "--port-base",
        type=int,
        metavar="N",
        help="move every port of the stack to N, N+1, … (overrides RULEENGINE_PORT_BASE)",
    )
    up.set_defaults(handler=cmd_up)

    _add_rules(sub)
    _add_accounts(sub)
    _add_tokens(sub)
    _add_approvals(sub)
    _add_batches(sub)
    return parser


def _add_rules(sub: Any) -> None:
    rules = sub.add_parser("rules", help="validate, apply and list rules").add_subparsers(
        dest="rules_command", required=True, metavar="ACTION"
    )
    schema = rules.add_parser("schema", help="print the JSON Schema of a rule")
    schema.set_defaults(handler=cmd_rules_schema)
    validate = rules.add_parser(
        "validate",
        help="check rule files offline",
        description="Exit 0 when every file is a valid rule; otherwise print each problem as"
        " 'FILE: path: message' and exit 1.",
    )
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    validate.add_argument(
        "--currency", default="USD", help="explain an old-format file's amounts in this currency"
    )
    validate.set_defaults(handler=cmd_rules_validate)
    migrate = rules.add_parser(
        "migrate",
        help="convert rule files of the old format (budgets in minor units) to format 2",
        description="Prints each file in format 2 (every amount in the account currency's"
        " units: 50000 cents become 500), or rewrites it with --write. The currency is"
        " --currency, else that of the rule's registered ad accounts (one offset needed).",
    )
    migrate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    migrate.add_argument("--currency", help="the ad accounts' currency, e.g. USD or JPY")
    migrate.add_argument("--write", action="store_true", help="rewrite the files in place")
    migrate.set_defaults(handler=_run_async(_rules_migrate))
    apply = rules.add_parser(
        "apply",
        help="create or update rules from files",
        description="Rules are matched by name; a new version is created only when the"
        " definition changed. Prints the id and version of each rule.",
    )
    apply.add_argument("files", nargs="+", type=Path, metavar="FILE")
    apply.add_argument("--author", default=os.environ.get("USER", "cli"), help="recorded author")
    apply.set_defaults(handler=_run_async(_rules_apply))
    listing = rules.add_parser("list", help="list rules with status, schedule and next run")
    listing.set_defaults(handler=_run_async(_rules_list))
    _add_rollback(rules)
    _add_conflicts(rules)
    _add_import_meta(rules)
    _add_export_meta(rules)
    _add_backtest(rules)


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
    back.add_argument("version", type=int, metavar="VERSION", help="the version to make active")
    back.add_argument(
        "--expected-version",
        type=int,
        metavar="N",
        help="refuse unless the active version is still N (someone else may have changed it)",
    )
    back.add_argument("--author", default=os.environ.get("USER", "cli"), help="recorded as who")
    back.set_defaults(handler=_run_async(_rules_rollback))


def _add_conflicts(rules: Any) -> None:
    conflicts = rules.add_parser(
        "conflicts",
        help="find rules that fight (one scales a budget up, another cuts it down …)",
        description="Find pairs of tasks, of one rule or of two, that can act on the same field"
        " of the same entities in opposite ways: pause vs activate, a budget or bid up vs down"
        " or set, a rename that drops what another appends, a `then` that undoes another"
        " task. Without FILE: the stored ACTIVE rules (--all: and the PAUSED ones). With FILE:"
        " each file against the stored active rules and the other files (a file replaces the"
        " stored rule of its name). Exit 0 when there is no conflict, 1 when there is one (a"
        " pair whose thresholds cannot both pass is printed as a note and does not count),"
        " 2 on bad usage or an invalid file. See docs/rules.md, 'Rules that fight'.",
        epilog="Example: ruleengine rules conflicts examples/rules/09-fight-scale-up.json --live",
    )
    conflicts.add_argument("files", nargs="*", type=Path, metavar="FILE")
    conflicts.add_argument(
        "--live", action="store_true", help="list up to 5 current entities both rules act on"
    )
    conflicts.add_argument("--json", action="store_true", help="print the findings as JSON")
    conflicts.add_argument("--all", action="store_true", help="include the stored PAUSED rules too")
    conflicts.set_defaults(handler=_run_async(_rules_conflicts))


def _add_import_meta(rules: Any) -> None:
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
        choices=("campaign", "adset"),
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
    imp.set_defaults(handler=_run_async(_rules_import_meta))


def _add_export_meta(rules: Any) -> None:
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


def _add_backtest(rules: Any) -> None:
    bt = rules.add_parser(
        "backtest",
        help="what a rule would have done over the last N days",
        description="Replay a rule (a file, or the id of a stored rule: its active version) at"
        " every instant it would have run over the last N days of its ad accounts, against the"
        " Insights history, with the engine's own evaluation, and print what it would have done:"
        " fires per task per day, the budget moved (in the account currency's units), entities"
        " paused and activated, the scheduled runs evaluated, what it cost (graph_calls, and"
        " cache_hits of the Insights history cache), which numbers each ad account used (as seen"
        " at the time, or matured) and what a backtest cannot know. Runs here, read-only: Graph"
        " reads with the accounts' registered tokens; nothing is written to Meta or to the rules."
        " Progress goes to stderr.",
        epilog="Example: ruleengine rules backtest examples/rules/02-scale-winners.json --days 14"
        " --account act_1001 --matured. Exit 0 when the backtest ran; 1 when the file is not a"
        " valid rule (each problem as 'FILE: path: message'), the id is unknown, an account is"
        " not the rule's or not registered, or the backtest was refused; 2 for a wrong option."
        " See docs/backtest.md.",
    )
    bt.add_argument("rule", metavar="FILE_OR_ID", help="a rule file, or the id of a stored rule")
    bt.add_argument(
        "--days",
        type=_days,
        default=30,
        metavar="N",
        help=f"days to replay: the last N days in the rule's timezone (1 to {BACKTEST_MAX_DAYS};"
        " default 30)",
    )
    bt.add_argument(
        "--account",
        action="append",
        type=_account,
        metavar="ACT",
        help="only this ad account of the rule (repeat for several; default: all of them)",
    )
    view = bt.add_mutually_exclusive_group()
    view.add_argument(
        "--as-seen",
        dest="as_seen",
        action="store_const",
        const=True,
        help="scale conversions to what each run would have seen then (attribution lag)",
    )
    view.add_argument(
        "--matured",
        dest="as_seen",
        action="store_const",
        const=False,
        help="use the numbers as they are today (matured)",
    )
    bt.set_defaults(as_seen=None)
    bt.add_argument(
        "--json", action="store_true", help="print the result as one JSON object instead"
    )
    bt.set_defaults(handler=_run_async(_rules_backtest))


def _add_accounts(sub: Any) -> None:
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
    add.set_defaults(handler=_run_async(_accounts_add))
    refresh = actions.add_parser(
        "refresh",
        help="register Meta's currency and timezone again (read with the stored token)",
        description="Reads the ad account's currency and timezone from Meta with its stored"
        " token and registers them; this ends a currency mismatch a job found (budget and"
        " bid changes on the account resume). Check the account's rules when the currency"
        " changes: their amounts are read in it.",
    )
    refresh.add_argument("account", help="ad account id, e.g. act_123456")
    refresh.set_defaults(handler=_run_async(_accounts_refresh))
    listing = actions.add_parser("list", help="list accounts (never their tokens)")
    listing.set_defaults(handler=_run_async(_accounts_list))
    key = actions.add_parser("new-key", help="print a new token-encryption key")
    key.set_defaults(handler=cmd_accounts_new_key)


_ROLES_HELP = (
    "viewer: reads (when RULEENGINE_API_READS_REQUIRE_TOKEN is set); editor: also saves,"
    " pauses, activates and rolls back rules, imports, previews and backtests, clears holds,"
    " resolves errors; approver: also decides approvals and undoes batches; admin: also"
    " manages ad accounts"
)


def _add_tokens(sub: Any) -> None:
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
    add.set_defaults(handler=_run_async(_tokens_add))
    listing = actions.add_parser(
        "list", help="list tokens: name, role, created, last used, revoked (never the token)"
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object instead")
    listing.set_defaults(handler=_run_async(_tokens_list))
    revoke = actions.add_parser(
        "revoke", help="revoke a token at once (its name stays taken in the records)"
    )
    revoke.add_argument("name", help="the token's name (see `tokens list`)")
    revoke.set_defaults(handler=_run_async(_tokens_revoke))


# ---------------------------------------------------------------- approvals


def _cli_actor() -> str:
    """Who an undo or a decision made from this shell is recorded as: ``cli:<login name>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name in the environment or the password database
        return "cli:unknown"


def _approval_line(doc: dict[str, Any]) -> str:
    decided = f"  by {doc['decided_by']}" if doc.get("decided_by") else ""
    return (
        f"{doc['_id']}  {doc['status']:<23} {doc.get('rule_name')} / {doc.get('task_id')}:"
        f" {doc.get('entity_name')} ({doc.get('entity_id')}) {doc.get('field')}"
        f" {doc.get('before')} → {doc.get('after')}"
        f"  expires {doc['expires_at']:%Y-%m-%d %H:%M} UTC{decided}{_retrying(doc)}"
    )


def _retrying(doc: dict[str, Any]) -> str:
    """An approved change's failed attempts so far, and when it is tried again."""
    error, retry_at = doc.get("last_error"), doc.get("retry_at")
    if doc["status"] != "approved" or not error or retry_at is None:
        return ""
    return (
        f"  attempt {doc.get('attempts', 0)}: {error.get('reason')},"
        f" tried again {retry_at:%H:%M} UTC"
    )


async def _approvals_list(args: argparse.Namespace, settings: Settings) -> int:
    async with _database(settings) as db:
        store = ApprovalStore(db)
        await store.expire_due(now=_now())
        docs = await store.page(status=args.status, limit=args.limit, skip=0)
    for doc in docs:
        print(_approval_line(doc))
    if not docs:
        print(f"no {args.status or ''} approvals".replace("  ", " "))
    return 0


async def _approvals_decide(args: argparse.Namespace, settings: Settings) -> int:
    status: Literal["approved", "rejected"] = (
        "approved" if args.approvals_command == "approve" else "rejected"
    )
    queue = connect_queue(settings)
    try:
        async with _database(settings) as db:
            decision = await decide(
                ApprovalStore(db), queue, args.id, status=status, by=args.by, now=_now()
            )
    finally:
        await queue.aclose()
    print(_approval_line(decision.doc))
    if not decision.changed:
        print(f"error: not {status}: {decision.reason}", file=sys.stderr)
        return 1
    if status == "approved":
        print("a worker writes the change if the live value is still the one before")
    return 0


def _add_approvals(sub: Any) -> None:
    approvals = sub.add_parser("approvals", help="changes waiting for a person: list, decide")
    actions = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="approvals, newest first (default: pending)")
    listing.add_argument("--status", choices=STATUSES, default="pending")
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(handler=_run_async(_approvals_list))
    for verb, what in (("approve", "write the change (by a worker)"), ("reject", "never write it")):
        deciding = actions.add_parser(verb, help=f"{verb} a pending change: {what}")
        deciding.add_argument("id", help="the approval's id (approvals list)")
        deciding.add_argument("--by", default=_cli_actor(), help="who decides (default: cli:USER)")
        deciding.set_defaults(handler=_run_async(_approvals_decide))


# ---------------------------------------------------------------- batches


async def _batches_undo(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.queue import connect_queue
    from ruleengine.undo.run import preview, undo_batch
    from ruleengine.worker.deps import build_engine, close_engine

    who = args.by
    async with _database(settings) as db:
        queue = connect_queue(settings)
        engine = build_engine(settings, db=db, redis=queue, worker=who)
        try:
            if args.dry_run:
                plan = await preview(
                    engine,
                    args.batch_id,
                    executions=args.executions,
                    pause_copies=args.pause_copies,
                    now=_now(),
                )
                data: dict[str, Any] = plan.as_json()
            else:
                data = await undo_batch(
                    engine,
                    args.batch_id,
                    by=who,
                    executions=args.executions,
                    pause_copies=args.pause_copies,
                    now=_now(),
                )
        finally:
            await close_engine(engine)
            await queue.aclose()
    if args.json:
        options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
        sys.stdout.write(orjson.dumps(data, option=options, default=str).decode() + "\n")
    else:
        sys.stdout.write(undo_table(data))
    return UNDO_INCOMPLETE if data.get("complete") is False else 0


#: ``batches undo``'s exit status when the undo ran but some change could not be set back.
UNDO_INCOMPLETE = 3


def undo_table(data: dict[str, Any]) -> str:
    """An undo plan (``--dry-run``) or an undo's result as a text table."""
    if "changes" in data and "undo_batch_id" in data and "batch" in data:
        head = f"{data['undo_batch_id']}: undoes {data['batch'].get('undoes')}"
        if data.get("complete") is False:
            missed = data["batch"].get("not_reverted_count")
            head += f" (incomplete: {missed} change(s) could not be set back)"
        header = ["entity", "field", "from", "to", "outcome", "reason", "undo"]
        rows = [
            [
                str(r.get("entity_name") or r.get("entity_id")),
                str(r.get("field")),
                str(r.get("before")),
                str(r.get("after")),
                str(r.get("outcome")),
                str(r.get("reason") or ""),
                str(r.get("revert") or ""),
            ]
            for r in data["changes"]
        ]
    else:
        head = f"undo of {data['batch_id']} (would be {data['undo_batch_id']}), dry run"
        header = ["entity", "field", "now", "back to", "live", "will revert", "reason"]
        rows = [
            [
                str(c.get("entity_name") or c.get("entity_id")),
                str(c.get("field")),
                str(c.get("after")),
                str(c.get("before")),
                str(c.get("live")),
                "yes" if c.get("will_revert") else "no",
                str(c.get("reason") or ""),
            ]
            for c in data["changes"]
        ]
        rows += [
            [
                "follow-up " + str(f["key"]),
                str(f["do"]),
                "",
                "",
                str(f["status"]),
                "cancel" if f["will_cancel"] else "no",
                "",
            ]
            for f in data.get("followups", [])
        ]
    widths = [max(len(x) for x in column) for column in zip(header, *rows, strict=False)]
    lines = [head, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _add_batches(sub: Any) -> None:
    batches = sub.add_parser("batches", help="act on the batches rules ran")
    actions = batches.add_subparsers(dest="batches_command", required=True, metavar="ACTION")
    undo = actions.add_parser(
        "undo",
        help="set a batch's changes back (preview with --dry-run)",
        description="Set every change of the batch back to exactly its value before, where the"
        " live value is still the one the batch wrote (otherwise it is skipped as"
        " changed_by_someone_else); cancel the follow-ups it scheduled. The engine's caps"
        " (max_budget_change_pct, the change budget) do not hold an undo; Meta's limits do."
        " The undo is the batch undo:BATCH_ID (undo:BATCH_ID:DIGEST with --execution) and"
        " happens once however often it is asked for; a later undo naming other executions"
        " (--execution) sets back what an earlier one did not.",
        epilog="Exit status: 0 every change it tried was set back (or --dry-run); 1 an error"
        " stopped it (see stderr; asking again resumes it); 3 the undo ran but some change"
        " could not be set back (Meta's 4-an-hour budget limit, its minimum budget, a failed"
        " write): the table's undo column says not_reverted; undo those again later with"
        " --execution.",
    )
    undo.add_argument("batch_id", metavar="BATCH_ID")
    undo.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    undo.add_argument("--pause-copies", action="store_true", help="pause the copies it made")
    undo.add_argument(
        "--execution",
        dest="executions",
        action="append",
        metavar="ID",
        help="undo only this execution (id or key; repeatable)",
    )
    undo.add_argument("--json", action="store_true", help="print JSON instead of a table")
    undo.add_argument(
        "--by", default=_cli_actor(), help="who undoes, recorded on the undo (default: cli:USER)"
    )
    undo.set_defaults(handler=_run_async(_batches_undo))


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Settings given as options (they win over RULEENGINE_* variables)."""
    port_base = getattr(args, "port_base", None)
    return {} if port_base is None else {"port_base": port_base}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ruleengine`` console script."""
    args = build_parser().parse_args(argv)
    try:
        settings = Settings(**_overrides(args))
        handler: Handler = args.handler
        return handler(args, settings)
    except RuleEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        for error in exc.errors():
            name = "RULEENGINE_" + "_".join(str(p) for p in error["loc"]).upper()
            print(f"error: setting {name}: {error['msg']}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
