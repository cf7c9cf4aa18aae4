"""``ruleengine rules conflicts``: rules that fight, and how a finding reads for people
(``rules apply``, ``rollback`` and ``import-meta`` print theirs the same way)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson

from ruleengine.analysis.conflicts import add_live_entities, findings_json, stored_entries
from ruleengine.cli.common import one_line, run_async
from ruleengine.cli.files import validate_files
from ruleengine.cli.stack import StackUnreachable, credentials, open_database, shown_url
from ruleengine.rules.advantage import REASON
from ruleengine.rules.conflicts import Finding, RuleEntry, find_conflicts
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

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
            line = f"  live: {entity['ad_account']} {entity['id']} {entity['name']!r}"
            if entity.get("advantage"):  # Meta refuses budget, bid, name and copy changes
                line += f" — a {entity['advantage']}: only status changes reach it ({REASON})"
            lines.append(line)
    if finding.entities == []:
        lines.append("  live: no current entity is in both scopes")
    return [one_line(line) for line in lines]


def print_findings(findings: Sequence[Finding], out: TextIO, *, prefix: str = "") -> None:
    """Every finding's lines on ``out``, each after ``prefix``."""
    for finding in findings:
        for line in finding_lines(finding):
            print(f"{prefix}{line}", file=out)


async def _conflict_entries(
    args: argparse.Namespace, settings: Settings, db: Database | None
) -> tuple[list[RuleEntry], set[str] | None] | None:
    """The rules to analyse and which of them the command asks about (None: all); without
    ``db``, the files alone."""
    stored: list[RuleEntry] = []
    if db is not None:
        stored = await stored_entries(RuleStore(db), active_only=not args.all)
    if not args.files:
        return stored, None
    accounts = await credentials(db, settings).currencies() if db is not None else None
    valid = validate_files(
        args.files, sys.stderr, accounts=accounts, webhooks=set(settings.webhooks)
    )
    if len(valid) != len(args.files):
        return None
    files = [RuleEntry(str(path), rule.name, rule, rule.status) for path, rule in valid]
    names = {e.name for e in files}  # a file replaces the stored rule it would update
    kept = [e for e in stored if e.name not in names]
    return [*kept, *files], {e.id for e in files}


async def _store(
    args: argparse.Namespace, settings: Settings, stack: contextlib.AsyncExitStack
) -> Database | None:
    """The store; None when it cannot be reached and the files can be checked alone."""
    try:
        return await stack.enter_async_context(
            open_database(settings, needed_for="the live entities" if args.live else None)
        )
    except StackUnreachable as exc:
        if not args.files or args.live:
            raise
        print(
            f"note: {exc.service.name} is not reachable at {shown_url(exc.service.url)}: the"
            " files are checked among themselves only, not against the stored rules or the"
            " registered ad accounts",
            file=sys.stderr,
        )
        return None


async def _rules_conflicts(args: argparse.Namespace, settings: Settings) -> int:
    async with contextlib.AsyncExitStack() as stack:
        db = await _store(args, settings, stack)
        found = await _conflict_entries(args, settings, db)
        if found is None:
            print("nothing checked: fix the errors above first", file=sys.stderr)
            return 2
        entries, asked = found
        findings = find_conflicts(entries, only_involving=asked)
        if args.live and findings and db is not None:
            findings = await _live_findings(settings, db, findings, entries)
    if args.json:
        data = {"findings": findings_json(findings), "checked_rules": len(entries)}
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_findings(findings, sys.stdout)
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
            credentials=credentials(db, settings),
        )
    finally:
        await session.close()


def add_conflicts(rules: Any) -> None:
    """``rules conflicts``."""
    conflicts = rules.add_parser(
        "conflicts",
        help="find rules that fight (one scales a budget up, another cuts it down …)",
        description="Find pairs of tasks, of one rule or of two, that can act on the same field"
        " of the same entities in opposite ways: pause vs activate, a budget or bid up vs down"
        " or set, a rename that drops what another appends, a `then` that undoes another"
        " task. Without FILE: the stored ACTIVE rules (--all: and the PAUSED ones). With FILE:"
        " each file against the stored active rules and the other files (a file replaces the"
        " stored rule of its name); when MongoDB cannot be reached, the files among"
        " themselves (a note on stderr says so). Exit 0 when there is no conflict, 1 when"
        " there is one (a pair whose thresholds cannot both pass is printed as a note and does"
        " not count), 2 on bad usage, an invalid file, or a store that cannot be reached"
        " (without FILE, or with --live). See docs/rules.md, 'Rules that fight'.",
        epilog="Example: ruleengine rules conflicts examples/rules/09-fight-scale-up.json --live",
    )
    conflicts.add_argument("files", nargs="*", type=Path, metavar="FILE")
    conflicts.add_argument(
        "--live", action="store_true", help="list up to 5 current entities both rules act on"
    )
    conflicts.add_argument("--json", action="store_true", help="print the findings as JSON")
    conflicts.add_argument("--all", action="store_true", help="include the stored PAUSED rules too")
    conflicts.set_defaults(handler=run_async(_rules_conflicts))
