"""``ruleengine batches undo``: set a batch's changes back, through the write path, from
this shell (``--dry-run`` shows the plan and needs no Redis)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any

import orjson

from ruleengine.cli.common import cli_actor, now, one_line, run_async
from ruleengine.cli.stack import open_database, open_queue
from ruleengine.rules.language.money import field_words, format_field_change, format_value
from ruleengine.settings import Settings
from ruleengine.store.credentials import account_labels

if TYPE_CHECKING:
    from ruleengine.worker.deps import Engine


async def _batches_undo(args: argparse.Namespace, settings: Settings) -> int:
    from ruleengine.worker.deps import build_engine, close_engine

    async with contextlib.AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(settings))
        # the undo takes the ad account's write lock in Redis; its plan reads only
        queue = await stack.enter_async_context(open_queue(settings, ping=not args.dry_run))
        engine = build_engine(settings, db=db, redis=queue, worker=args.by)
        stack.push_async_callback(close_engine, engine)
        data = await _undo(engine, args)
        data |= await _account_of(db, data)
    if args.json:
        options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
        sys.stdout.write(orjson.dumps(data, option=options, default=str).decode() + "\n")
    else:
        sys.stdout.write(undo_table(data))
    return UNDO_INCOMPLETE if data.get("complete") is False else 0


async def _undo(engine: Engine, args: argparse.Namespace) -> dict[str, Any]:
    """The undo's plan (``--dry-run``) or its result, as JSON."""
    from ruleengine.undo.run import preview, undo_batch

    chosen = {"executions": args.executions, "pause_copies": args.pause_copies}
    if args.dry_run:
        plan = await preview(engine, args.batch_id, **chosen, now=now())
        return plan.as_json()
    return await undo_batch(engine, args.batch_id, by=args.by, **chosen, now=now())


async def _account_of(db: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The account's name and currency (``account_name``, ``currency``) for the table: its
    money is shown in the account's currency."""
    account = data.get("account") or (data.get("batch") or {}).get("account")
    label = (await account_labels(db, [str(account)])).get(str(account)) if account else None
    return {
        "account_name": label.name if label else None,
        "currency": label.currency if label else None,
    }


#: ``batches undo``'s exit status when the undo ran but some change could not be set back.
UNDO_INCOMPLETE = 3


def undo_table(data: dict[str, Any]) -> str:
    """An undo plan (``--dry-run``) or an undo's result as a text table; budgets and bids in
    the account's currency (``data["currency"]``) with the change in percent, the account
    named in the first line."""
    if "changes" in data and "undo_batch_id" in data and "batch" in data:
        head = f"{data['undo_batch_id']}: undoes {data['batch'].get('undoes')}"
        if data.get("complete") is False:
            missed = data["batch"].get("not_reverted_count")
            head += f" (incomplete: {missed} change(s) could not be set back)"
        header, rows = ["entity", "field", "change", "outcome", "reason", "undo"], _done_rows(data)
    else:
        head = f"undo of {data['batch_id']} (would be {data['undo_batch_id']}), dry run"
        header = ["entity", "field", "the batch changed", "live", "will revert", "reason"]
        rows = _plan_rows(data)
    rows = [[one_line(cell) for cell in row] for row in rows]
    head += _on_account(data)
    widths = [max(len(x) for x in column) for column in zip(header, *rows, strict=False)]
    lines = [one_line(head), "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _done_rows(data: dict[str, Any]) -> list[list[str]]:
    """An undo's records: what each set back (before → after), and how it went."""
    currency = data.get("currency")
    return [
        [
            str(r.get("entity_name") or r.get("entity_id")),
            field_words(r.get("field")),
            format_field_change(
                r.get("field"), r.get("before"), r.get("after"), currency, r.get("schedule")
            ),
            str(r.get("outcome")),
            str(r.get("reason") or ""),
            str(r.get("revert") or ""),
        ]
        for r in data["changes"]
    ]


def _plan_rows(data: dict[str, Any]) -> list[list[str]]:
    """A plan's changes — what the batch changed (before → after), which the undo sets back
    to the value before — and its follow-ups."""
    currency = data.get("currency")
    rows = [
        [
            str(c.get("entity_name") or c.get("entity_id")),
            field_words(c.get("field")),
            format_field_change(
                c.get("field"), c.get("before"), c.get("after"), currency, c.get("schedule")
            ),
            format_value(c.get("field"), c.get("live"), currency),
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
            str(f["status"]),
            "cancel" if f["will_cancel"] else "no",
            "",
        ]
        for f in data.get("followups", [])
    ]
    return rows


def _on_account(data: dict[str, Any]) -> str:
    account = data.get("account") or (data.get("batch") or {}).get("account")
    if not account:
        return ""
    name = data.get("account_name")
    shown = f"{name} ({account})" if name and name != account else str(account)
    return f", account {shown}" + (
        f", amounts in {data['currency']}" if data.get("currency") else ""
    )


def add_commands(sub: Any) -> None:
    """``batches`` and its actions."""
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
        " --execution; 2 MongoDB (or, without --dry-run, Redis) cannot be reached.",
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
        "--by", default=cli_actor(), help="who undoes, recorded on the undo (default: cli:USER)"
    )
    undo.set_defaults(handler=run_async(_batches_undo))
