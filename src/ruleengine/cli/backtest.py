"""``ruleengine rules backtest``: what a rule would have done over the last N days, as a
table for people (or JSON), with its progress on stderr."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import orjson

from ruleengine.cli.common import now, one_line, run_async
from ruleengine.cli.files import is_file, load_file, problem_line, validate_files
from ruleengine.cli.stack import all_accounts, open_database
from ruleengine.errors import RuleEngineError, RuleValidationError
from ruleengine.rules.language.model import Rule
from ruleengine.rules.language.money import CURRENT_FORMAT
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

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


async def _backtest_rule(
    source: str, db: Database, registered: Mapping[str, str], settings: Settings
) -> tuple[Rule, str | None, int | None] | None:
    """The rule of a file (None after printing its problems) or of a stored rule's id."""
    if is_file(source):
        path = Path(source)
        try:
            data = load_file(path)
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
    known = {a.id: a.currency for a in await all_accounts(db, settings)}
    return next((known[a] for a in named if isinstance(a, str) and a in known), "USD")


def _backtest_accounts(
    args: argparse.Namespace, rule: Rule, registered: Mapping[str, str]
) -> list[str]:
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

    async with open_database(settings) as db:
        accounts = await all_accounts(db, settings)
        registered = {a.id: a.currency for a in accounts}
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
                result = await run_backtest(deps, request, now=now(), progress=progress)
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


def _money(value: Any, currency: str) -> str:
    from ruleengine.rules.entity import currency_offset

    if not isinstance(value, int | float):
        return "-"
    decimals = 0 if currency_offset(currency) == 1 else 2
    return f"{value:+,.{decimals}f}"


def _day_rows(
    result: dict[str, Any], tasks: list[str], codes: list[str]
) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows: one per day, then the totals; one "budget moved" column
    per currency (two currencies are never added)."""
    days = result.get("per_day") or []
    seen = [t for day in days for t in day.get("by_task", {}) if t not in tasks]
    columns = tasks + list(dict.fromkeys(seen))
    moved = [f"budget moved ({code})" for code in codes]
    header = ["date", "fires", *columns, *moved, "paused", "activated"]
    rows = []
    totals: dict[str, float] = {}
    for day in days:
        by_task, delta = day.get("by_task", {}), day.get("budget_delta") or {}
        cells = {"fires": day.get("fires", 0), "paused": day.get("paused", 0)}
        cells |= {"activated": day.get("activated", 0)}
        cells |= {f"task:{t}": by_task.get(t, 0) for t in columns}
        cells |= {f"budget:{code}": delta.get(code, 0) for code in codes}
        for key, value in cells.items():
            totals[key] = totals.get(key, 0) + (value if isinstance(value, int | float) else 0)
        rows.append(_row(str(day.get("date", "?")), cells, columns, codes))
    rows.append(_row("total", totals, columns, codes))
    return header, rows


def _row(label: str, cells: dict[str, Any], columns: list[str], codes: list[str]) -> list[str]:
    return [
        label,
        str(cells["fires"]),
        *(str(cells[f"task:{t}"]) for t in columns),
        *(_money(cells[f"budget:{code}"], code) for code in codes),
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
    """A backtest's result for a person: fires per task per day, budget moved (a column per
    currency), entities paused and activated, what it cost, which numbers each account used,
    and the caveats."""
    rule = result.get("rule") or {}
    accounts = list(result.get("accounts") or [])
    moved = {code for day in result.get("per_day") or [] for code in day.get("budget_delta") or {}}
    codes = sorted(moved | {currencies[a] for a in accounts if a in currencies})
    header, rows = _day_rows(result, tasks, codes)
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
    return "\n".join(one_line(line) for line in lines) + "\n"


def add_backtest(rules: Any) -> None:
    """``rules backtest``."""
    bt = rules.add_parser(
        "backtest",
        help="what a rule would have done over the last N days",
        description="Replay a rule (a file, or the id of a stored rule: its active version) at"
        " every instant it would have run over the last N days of its ad accounts, against the"
        " Insights history, with the engine's own evaluation, and print what it would have done:"
        " fires per task per day, the budget moved (a column per currency: two are never added),"
        " entities paused and activated, the scheduled runs evaluated, what it cost (graph_calls,"
        " and cache_hits of the Insights history cache), which numbers each ad account used (as"
        " seen at the time, or matured) and what a backtest cannot know. Runs here, read-only:"
        " Graph reads with the accounts' registered tokens; nothing is written to Meta or to the"
        " rules."
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
    bt.set_defaults(handler=run_async(_rules_backtest))
