"""``ruleengine rules impact RULE_ID``: what each task of a rule earned, measured against its
holdout (docs/impact.md), as lines for people (money in each currency, with its decimals)
or JSON."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import orjson

from ruleengine.cli.common import now, one_line, run_async
from ruleengine.cli.stack import open_database
from ruleengine.rules.language.money import format_money
from ruleengine.settings import Settings

IMPACT_MAX_DAYS = 90


def _days(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,3}", text) or not 1 <= int(text) <= IMPACT_MAX_DAYS:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a whole number of days from 1 to {IMPACT_MAX_DAYS}"
        )
    return int(text)


async def _rules_impact(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.analysis.impact import rule_impact
    from ruleengine.backtest.service import BacktestDeps

    async with open_database(settings) as db, BacktestDeps.open(settings, db) as deps:
        report = await rule_impact(
            deps, args.rule_id, days=args.days, window=args.window, now=now()
        )
    if args.json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
    else:
        sys.stdout.write(impact_text(report))
    return 0


#: The metrics whose effect is an amount of money (the others: a count, a ratio).
MONEY_METRICS = frozenset({"spend", "revenue", "profit", "cpa"})


def impact_text(report: dict[str, Any]) -> str:
    """The report for a person: per task the counts, then per currency the effect (in that
    currency, with its decimals) and the entities it rests on, or why there is none."""
    lines = [
        f"{report['rule_name']} ({report['rule_id']}): decisions of the last {report['days']}"
        f" days; per entity, the {report['window']} after its first decision against as long"
        " before"
    ]
    for task in report["tasks"]:
        lines.extend(_task_lines(task))
    return "\n".join(one_line(line) for line in lines) + "\n"


def _task_lines(task: dict[str, Any]) -> list[str]:
    counts = task["counts"]
    share = f", holdout {task['holdout_percent']:g} %" if task["holdout_percent"] else ""
    lines = [
        f"  task {task['task_id']}{share}: {counts['acted']} acted and {counts['held_out']}"
        f" held-out decisions on {counts['acted_entities']} and"
        f" {counts['held_out_entities']} entities"
    ]
    caveats = _caveats(counts)
    if caveats:
        lines.append(f"    of the acted: {caveats}")
    if len(task["currencies"]) != 1:
        lines.append(f"    {task['note']}")
    for part in task["currencies"]:
        lines.extend(_currency_lines(part))
    return lines


def _caveats(counts: dict[str, Any]) -> str:
    """What became of acted entities' changes, where not all were simply made."""
    said = [f"{n} proposal(s) {status}" for status, n in counts["approvals"].items()]
    if counts["undone"]:
        said.append(f"{counts['undone']} undone")
    if counts["switched_groups"]:
        said.append(f"{counts['switched_groups']} decided in both groups (counted in their first)")
    if counts["unread"]:
        said.append(f"{counts['unread']} without delivery read")
    return ", ".join(said)


def _currency_lines(part: dict[str, Any]) -> list[str]:
    currency, counts = part["currency"], part["counts"]
    lines = [
        f"    {currency}: {counts['acted_complete']} acted and {counts['held_out_complete']}"
        " held-out entities with the window over"
        + (
            f" ({counts['outside_history']} outside the hours read)"
            if counts["outside_history"]
            else ""
        ),
        f"      {part['note']}",
    ]

    def shown(metric: str, value: float) -> str:
        if metric in MONEY_METRICS:
            return format_money(value, currency, signed=True)
        return f"{value:+,.2f}"

    for name, effect in part["effects"].items():
        lines.append(
            f"      {name:<9} {shown(name, effect['effect'])} per entity (95 % interval"
            f" {shown(name, effect['low'])} … {shown(name, effect['high'])};"
            f" {effect['acted_entities']} acted, {effect['held_out_entities']} held out)"
        )
    if part["total_profit_effect"] is not None:
        low, high = part["total_profit_interval"]
        lines.append(
            "      estimated total profit effect:"
            f" {format_money(part['total_profit_effect'], currency, signed=True)}"
            f" ({format_money(low, currency, signed=True)} …"
            f" {format_money(high, currency, signed=True)}) over"
            f" {part['effects']['profit']['acted_entities']} entities acted on"
        )
    return lines


def add_impact(rules: Any) -> None:
    """``rules impact``."""
    impact = rules.add_parser(
        "impact",
        help="what a rule's tasks earned, measured against their holdouts",
        description="For decisions of the last N days: each entity's outcome over a window"
        " after its first decision minus its baseline before, acted against held-out"
        " entities, per currency, with a 95 %% interval (Welch's t) and the entities it rests"
        " on. A task without a holdout shows counts only.",
    )
    impact.add_argument("rule_id", metavar="RULE_ID")
    impact.add_argument("--days", type=_days, default=14, help="decisions of the last N days")
    impact.add_argument("--window", choices=("24h", "72h", "7d"), default="72h")
    impact.add_argument("--json", action="store_true", help="the API's JSON")
    impact.set_defaults(handler=run_async(_rules_impact))
