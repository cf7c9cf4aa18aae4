"""``ruleengine approvals``: changes waiting for a person — list, approve, reject.

Deciding needs MongoDB only: the decision is recorded there, and an approved change's write
is enqueued on Redis at once; when Redis does not answer, a worker's reaper enqueues it
:data:`~ruleengine.approvals.deciding.REQUEUE_AFTER` after the decision (a note on stderr says
so).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any, Literal

from ruleengine.approvals.deciding import REQUEUE_AFTER, decide
from ruleengine.cli.common import cli_actor, run_async, say, whole_number
from ruleengine.cli.stack import StackUnreachable, open_database, open_queue, shown_url
from ruleengine.rules.language.money import field_words, format_field_change
from ruleengine.settings import Settings
from ruleengine.store.approvals import STATUSES, ApprovalStore
from ruleengine.store.credentials import AccountLabel, account_labels

if TYPE_CHECKING:
    from arq.connections import ArqRedis

#: The most approvals one ``approvals list`` prints (a bound MongoDB's limit takes).
MAX_LIMIT = 100_000


def _approval_line(doc: dict[str, Any], accounts: dict[str, AccountLabel]) -> str:
    """One approval: the change in the account's currency, with its percentage, and on which
    account (by name)."""
    decided = f"  by {doc['decided_by']}" if doc.get("decided_by") else ""
    account = str(doc.get("account") or "")
    label = accounts.get(account)
    field = doc.get("field")
    currency = label.currency if label else None
    change = format_field_change(
        field, doc.get("before"), doc.get("after"), currency, doc.get("schedule")
    )
    on = f" on {label.name} ({account})" if label else f" on {account}" if account else ""
    return (
        f"{doc['_id']}  {doc['status']:<23} {doc.get('rule_name')} / {doc.get('task_id')}:"
        f" {doc.get('entity_name')} ({doc.get('entity_id')}){on}: {field_words(field)} {change}"
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
    async with open_database(settings) as db:
        store = ApprovalStore(db)
        await store.expire_due(now=await store.now())
        docs = await store.page(status=args.status, limit=args.limit, skip=0)
        accounts = await account_labels(db, {str(d.get("account")) for d in docs})
    for doc in docs:
        say(_approval_line(doc, accounts))
    if not docs:
        print(f"no {args.status or ''} approvals".replace("  ", " "))
    return 0


async def _approvals_decide(args: argparse.Namespace, settings: Settings) -> int:
    status: Literal["approved", "rejected"] = (
        "approved" if args.approvals_command == "approve" else "rejected"
    )
    async with open_database(settings) as db, contextlib.AsyncExitStack() as stack:
        queue = await _queue(settings, stack) if status == "approved" else None
        store = ApprovalStore(db)  # an approval's expiry is by MongoDB's clock
        decision = await decide(
            store, queue, args.id, status=status, by=args.by, now=await store.now()
        )
        accounts = await account_labels(db, [str(decision.doc.get("account"))])
    say(_approval_line(decision.doc, accounts))
    if not decision.changed:
        print(f"error: not {status}: {decision.reason}", file=sys.stderr)
        return 1
    if status == "approved":
        print("a worker writes the change if the live value is still the one before")
    return 0


async def _queue(settings: Settings, stack: contextlib.AsyncExitStack) -> ArqRedis | None:
    """The queue for an approval's write; None (and a note) when Redis does not answer."""
    try:
        return await stack.enter_async_context(open_queue(settings))
    except StackUnreachable as exc:
        print(
            f"note: {exc.service.name} is not reachable at {shown_url(exc.service.url)}"
            f" ({exc.service.setting}): the decision is recorded; a worker's reaper enqueues"
            f" its write {REQUEUE_AFTER.total_seconds() / 60:g} minutes after it, once Redis"
            " answers",
            file=sys.stderr,
        )
        return None


def add_commands(sub: Any) -> None:
    """``approvals`` and its actions."""
    approvals = sub.add_parser("approvals", help="changes waiting for a person: list, decide")
    actions = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="approvals, newest first (default: pending)")
    listing.add_argument("--status", choices=STATUSES, default="pending")
    listing.add_argument("--limit", type=whole_number(1, MAX_LIMIT), default=50)
    listing.set_defaults(handler=run_async(_approvals_list))
    for verb, what in (("approve", "write the change (by a worker)"), ("reject", "never write it")):
        deciding = actions.add_parser(verb, help=f"{verb} a pending change: {what}")
        deciding.add_argument("id", help="the approval's id (approvals list)")
        deciding.add_argument("--by", default=cli_actor(), help="who decides (default: cli:USER)")
        deciding.set_defaults(handler=run_async(_approvals_decide))
