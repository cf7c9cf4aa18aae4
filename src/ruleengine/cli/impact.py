"""``ruleengine rules impact RULE_ID``: what each task of a rule earned, measured against its
holdout (docs/impact.md), as lines for people or JSON."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import orjson

from ruleengine.cli.common import now, one_line, run_async
from ruleengine.cli.stack import open_database
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


def impact_text(report: dict[str, Any]) -> str:
    """The report for a person: per task the counts, then the effect or why there is none."""
    lines = [
        f"{report['rule_name']} ({report['rule_id']}): decisions of the last {report['days']}"
        f" days, {report['window']} after each against as long before"
    ]
    for task in report["tasks"]:
        counts = task["counts"]
        share = f", holdout {task['holdout_percent']:g} %" if task["holdout_percent"] else ""
        lines.append(
            f"  task {task['task_id']}{share}: {counts['acted']} acted, {counts['held_out']}"
            f" held out ({counts['acted_complete']} and {counts['held_out_complete']} with the"
            " window over)"
        )
        lines.append(f"    {task['note']}")
        for name, effect in task["effects"].items():
            lines.append(
                f"    {name:<9} {effect['effect']:+,.2f} per decision"
                f" (95 % interval {effect['low']:+,.2f} … {effect['high']:+,.2f})"
            )
        if task["total_profit_effect"] is not None:
            lines.append(
                f"    estimated total profit effect: {task['total_profit_effect']:+,.2f}"
                f" over {counts['acted']} decisions acted on"
            )
    return "\n".join(one_line(line) for line in lines) + "\n"


def add_impact(rules: Any) -> None:
    """``rules impact``."""
    impact = rules.add_parser(
        "impact",
        help="what a rule's tasks earned, measured against their holdouts",
        description="For decisions of the last N days: each entity's outcome over a window"
        " after its decision minus its baseline before, acted against held-out entities, with"
        " a 95 %% bootstrap interval. A task without a holdout shows counts only.",
    )
    impact.add_argument("rule_id", metavar="RULE_ID")
    impact.add_argument("--days", type=_days, default=14, help="decisions of the last N days")
    impact.add_argument("--window", choices=("24h", "72h", "7d"), default="72h")
    impact.add_argument("--json", action="store_true", help="the API's JSON")
    impact.set_defaults(handler=run_async(_rules_impact))
