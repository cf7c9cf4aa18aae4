"""What undoing a batch would do: its plan, read from the records and the live values.

Read-only (the web app's dry run imports it; the undo itself is :mod:`ruleengine.undo.run`).
Each applied change of the batch (status, daily budget, name, bid) is planned back to its
``before`` when the live value Meta holds now is still the ``after`` the batch wrote; any
other live value is left alone (``changed_by_someone_else``, the live value shown).
Copies made by ``duplicate`` are never deleted: they can be paused (``pause_copies``). A
budget schedule is undone by deleting it at Meta while its window is still ahead or running
(``DELETE /{schedule_id}``); one whose window is over, or that Meta no longer lists, is left
alone (its spend is spent).
Messages cannot be taken back. Follow-ups the batch scheduled that have not run are to be
cancelled. The undo is itself a batch: ``undo:<batch_id>`` for every applied change, or
``undo:<batch_id>:<digest>`` for a chosen set of executions (:func:`undo_batch_id`), so a
later undo can take back what an earlier one did not. An execution an earlier undo of the
batch already set back is left alone (``already_undone``).

Each change ends in one of three states (:func:`revert_state`): ``reverted`` (set back, or
found set back), ``left_alone`` (by design: someone changed it since, a message, a kept
copy, already undone) or ``not_reverted`` (tried and could not: Meta's limits, a failed
write or read). An undo with any ``not_reverted`` change is not complete.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from ruleengine.errors import FieldError, RuleValidationError
from ruleengine.meta.errors import GraphError
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.schedules import read_schedules
from ruleengine.rules.language.budget_schedules import SCHEDULES, ScheduleSpec, listed
from ruleengine.rules.plan.targets import SPEND_LIMIT_FIELDS, live_value
from ruleengine.store.db import Document
from ruleengine.store.records import ExecutionStore

#: The fields an undo sets back (what the write path writes; a budget schedule: deleted).
REVERTIBLE: Final = frozenset(
    {"status", "daily_budget", "name", "bid_amount", SCHEDULES, *SPEND_LIMIT_FIELDS}
)
#: Why a budget schedule is not deleted: its window is over, or Meta no longer lists it.
SCHEDULE_OVER: Final = "schedule_over"
SCHEDULE_GONE: Final = "schedule_gone"
UNDO_PREFIX: Final = "undo:"
CHANGED = "changed_by_someone_else"
#: Why an execution is not set back again: an earlier undo of the batch set it back.
ALREADY_UNDONE: Final = "already_undone"
#: What an undo did with one change (the ``revert`` of its record).
REVERTED: Final = "reverted"
LEFT_ALONE: Final = "left_alone"
NOT_REVERTED: Final = "not_reverted"
#: Reasons an undo leaves a change as it is by design (not a revert that failed).
_LEFT_BY_DESIGN: Final = frozenset(
    {
        CHANGED,
        ALREADY_UNDONE,
        "notification_cannot_be_undone",
        "copy_kept",
        "not_revertible",
        SCHEDULE_OVER,
        SCHEDULE_GONE,
    }
)


def undo_batch_id(batch_id: str, chosen: Sequence[Document] | None = None) -> str:
    """The id of the batch that undoes ``batch_id``: ``undo:<batch_id>`` for every applied
    change (``chosen`` None), ``undo:<batch_id>:<digest>`` for the records ``chosen`` — the
    same set of executions always gets the same id, so asking twice undoes once."""
    if chosen is None:
        return f"{UNDO_PREFIX}{batch_id}"
    ids = "\n".join(sorted({str(r["_id"]) for r in chosen}))
    return f"{UNDO_PREFIX}{batch_id}:{hashlib.sha256(ids.encode()).hexdigest()[:12]}"


def revert_state(action: str, outcome: str, reason: str | None) -> str:
    """``reverted``, ``left_alone`` or ``not_reverted``: what an undo's result means."""
    if outcome == "applied" or reason in ("already_applied", "already_paused"):
        return REVERTED
    if action == "none" or reason in _LEFT_BY_DESIGN:
        return LEFT_ALONE
    return NOT_REVERTED


def state_of(record: Document) -> str:
    """What an undo's record says became of its change (records kept before ``revert`` was
    recorded, or recovered by the reaper, are read from their outcome)."""
    state = record.get("revert")
    if state is None:
        action = (record.get("action") or {}).get("type", "none")
        state = revert_state(str(action), str(record.get("outcome")), record.get("reason"))
    return str(state)


def set_back(record: Document) -> bool:
    """True when an undo's record set its change back."""
    return state_of(record) == REVERTED


async def undo_records(
    executions: ExecutionStore, batch: Document, *, other_than: str | None = None
) -> list[Document]:
    """The records of every undo of the batch (but ``other_than``)."""
    undos = {*batch.get("undos", []), *([batch["undone_by"]] if batch.get("undone_by") else [])}
    found: list[Document] = []
    for undo_id in sorted(undos - {other_than}):
        found += await executions.for_batch(undo_id)
    return found


def undone_of(records: Sequence[Document]) -> set[str]:
    """The executions these undo records set back (their ids)."""
    return {
        str(r["undoes_execution"]) for r in records if r.get("undoes_execution") and set_back(r)
    }


def not_undone_of(records: Sequence[Document]) -> list[str]:
    """The executions an undo tried and could not set back, and none has since (their ids)."""
    missed = {
        str(r["undoes_execution"])
        for r in records
        if r.get("undoes_execution") and state_of(r) == NOT_REVERTED
    }
    return sorted(missed - undone_of(records))


async def undone_executions(
    executions: ExecutionStore, batch: Document, *, other_than: str
) -> set[str]:
    """The batch's executions an undo other than ``other_than`` set back (their ids)."""
    return undone_of(await undo_records(executions, batch, other_than=other_than))


def refuse_undo_of_undo(batch_id: str) -> None:
    """Raise RuleValidationError when ``batch_id`` is itself an undo."""
    if batch_id.startswith(UNDO_PREFIX):
        message = "an undo batch is not undone; it is the undo of " + batch_id[len(UNDO_PREFIX) :]
        raise RuleValidationError([FieldError("batch_id", message)])


def refuse_running(batch: Document) -> None:
    """Raise RuleValidationError while the batch still runs (its records are not all kept)."""
    if batch.get("status") == "RUNNING":
        message = "the batch is still running; undo it once it has finished"
        raise RuleValidationError([FieldError("batch_id", message)])


class UndoRequest(BaseModel):
    """The body of ``POST /api/batches/{batch_id}/undo`` (every field optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executions: list[str] | None = Field(default=None, min_length=1, max_length=5000)
    dry_run: StrictBool = False
    pause_copies: StrictBool = False


@dataclass
class UndoItem:
    """One applied change of the batch and what the undo does with it.

    ``action``: ``revert`` (set ``field`` back to ``before``; a budget schedule: delete it),
    ``pause_copy`` (pause the copy ``entity_id``), ``none`` (nothing can be done: ``reason``
    says why). ``group``: the task of a ``rebalance_budget`` change — its group's raises are
    set back only as far as its lowers freed, so the group never ends above its total (None
    for any other change). ``schedule``: a budget schedule's window, value and id.
    """

    execution_id: str
    record_key: str
    task_id: str
    entity_id: str
    entity_name: str | None
    field: str | None
    before: Any
    after: Any
    live: Any = None
    action: str = "revert"
    will_revert: bool = False
    reason: str | None = None
    group: str | None = None
    schedule: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """The item as the API and the CLI show it (``schedule`` only on a schedule's)."""
        shown = asdict(self)
        return (
            shown
            if self.schedule is not None
            else {k: v for k, v in shown.items() if k != "schedule"}
        )


@dataclass
class UndoPlan:
    """The plan of undoing one batch (or some of its executions)."""

    batch_id: str
    undo_batch_id: str
    account: str
    items: list[UndoItem] = field(default_factory=list)
    followups: list[dict[str, Any]] = field(default_factory=list)
    pause_copies: bool = False

    def as_json(self) -> dict[str, Any]:
        """The plan as the API answers a dry run."""
        return {
            "batch_id": self.batch_id,
            "undo_batch_id": self.undo_batch_id,
            "account": self.account,
            "pause_copies": self.pause_copies,
            "changes": [i.as_json() for i in self.items],
            "followups": self.followups,
            "will_revert": sum(i.will_revert for i in self.items),
            "skipped": sum(not i.will_revert for i in self.items),
        }


def undoable(record: Document) -> bool:
    """True for an applied change of the batch's own evaluation (not a follow-up's)."""
    return record.get("kind") != "followup" and record.get("outcome") == "applied"


def select(records: list[Document], executions: Collection[str] | None) -> list[Document]:
    """The batch's applied changes, or only those of ``executions`` (ids or keys).

    Raises RuleValidationError naming an id that is not an applied change of the batch.
    """
    applied = [r for r in records if undoable(r)]
    if not executions:
        return applied
    known = {str(r["_id"]): r for r in applied} | {str(r["key"]): r for r in applied}
    unknown = [e for e in executions if e not in known]
    if unknown:
        message = f"not an applied change of the batch: {', '.join(sorted(unknown))}"
        raise RuleValidationError([FieldError("executions", message)])
    wanted = {id(known[e]) for e in executions}
    return [r for r in applied if id(r) in wanted]


def item_of(record: Document, *, pause_copies: bool) -> UndoItem:
    """The undo item of an applied record, before its live value is read."""
    item = UndoItem(
        execution_id=str(record["_id"]),
        record_key=str(record["key"]),
        task_id=str(record["task_id"]),
        entity_id=str(record["entity_id"]),
        entity_name=record.get("entity_name"),
        field=record.get("field"),
        before=record.get("before"),
        after=record.get("after"),
    )
    if (record.get("action") or {}).get("type") == "rebalance_budget":
        item.group = item.task_id
    if item.field == "notify":
        item.action, item.reason = "none", "notification_cannot_be_undone"
    elif item.field == "copies":  # the row is about the copy, never its source
        item.entity_id, item.before = str(record.get("after")), None
        item.entity_name = f"copy of {item.entity_name or record.get('entity_id')}"
        if pause_copies:
            item.action, item.field, item.after = "pause_copy", "status", "PAUSED"
        else:
            item.action, item.reason, item.after = "none", "copy_kept", None
    elif item.field == SCHEDULES:
        item.schedule = _schedule_of(record)
        if item.schedule is None:
            item.action, item.reason = "none", "schedule_unknown"
    elif item.field not in REVERTIBLE:
        item.action, item.reason = "none", "not_revertible"
    return item


def _schedule_of(record: Document) -> dict[str, Any] | None:
    """A schedule record's window and value, with the id Meta gave the schedule."""
    spec = ScheduleSpec.from_doc(record.get("schedule"))
    response = record.get("response")
    made = response.get("id") if isinstance(response, dict) else None
    if spec is None or spec.op != "create" or not made:
        return None
    return spec.as_doc() | {"schedule_id": str(made)}


def judge(item: UndoItem, live: Any, *, now: datetime | None = None) -> None:
    """Decide an item from the live value of its field (a budget schedule: the schedules Meta
    lists, and ``now``: a window over is left alone)."""
    item.live = live
    if item.field == SCHEDULES and item.action == "revert":
        _judge_schedule(item, live, now or datetime.now(UTC))
    elif item.action == "revert":
        item.will_revert = live == item.after
        item.reason = None if item.will_revert else CHANGED
    elif item.action == "pause_copy":
        item.will_revert = live != "PAUSED"
        item.reason = None if item.will_revert else "already_paused"


def _judge_schedule(item: UndoItem, live: Any, now: datetime) -> None:
    spec = ScheduleSpec.from_doc(item.schedule)
    assert spec is not None  # item_of found one
    mine = next((s for s in listed(live) if s.id == spec.schedule_id), None)
    item.live = None if mine is None else {"id": mine.id, "time_end": mine.time_end}
    if mine is None:
        item.will_revert, item.reason = False, SCHEDULE_GONE
    elif mine.time_end <= now.timestamp():
        item.will_revert, item.reason = False, SCHEDULE_OVER
    else:
        item.will_revert, item.reason = True, None


async def _read_schedules(
    reader: GraphReader, items: list[UndoItem], *, token: str, account: str, now: datetime
) -> None:
    """Judge each budget schedule item from the schedules Meta lists of its entity."""
    for item in items:
        spec = ScheduleSpec.from_doc(item.schedule)
        assert spec is not None
        try:
            listing = await read_schedules(
                reader, item.entity_id, token=token, account_id=account, since=spec.time_start
            )
        except GraphError as exc:
            item.will_revert, item.reason = False, "live_read_failed"
            item.live = {"error": exc.as_dict()}
            continue
        judge(item, listing, now=now)


async def read_lives(
    reader: GraphReader,
    items: list[UndoItem],
    *,
    token: str,
    account: str,
    now: datetime | None = None,
) -> None:
    """Read the live value of every item that acts, and judge it (a failed read: skipped)."""
    scheduled = [i for i in items if i.action == "revert" and i.field == SCHEDULES]
    at = now or datetime.now(UTC)
    await _read_schedules(reader, scheduled, token=token, account=account, now=at)
    acting = [i for i in items if i.action != "none" and i.field != SCHEDULES]
    fields: dict[str, set[str]] = {}
    for item in acting:
        assert item.field is not None
        fields.setdefault(item.entity_id, set()).add(item.field)
    lives: dict[str, dict[str, Any]] = {}
    for entity_id, wanted in fields.items():
        try:
            lives[entity_id] = await reader.get_object(
                entity_id, token=token, fields=["id", *sorted(wanted)], account_id=account
            )
        except GraphError as exc:
            for item in (i for i in acting if i.entity_id == entity_id):
                item.will_revert, item.reason = False, "live_read_failed"
                item.live = {"error": exc.as_dict()}
    for item in acting:
        if item.entity_id in lives:
            assert item.field is not None
            judge(item, live_value(lives[item.entity_id], item.field))


def followup_row(doc: Document) -> dict[str, Any]:
    """A follow-up the batch scheduled, as the plan lists it."""
    waiting = doc.get("status") in ("pending", "scheduled")
    return {
        "key": doc["_id"],
        "do": doc.get("do"),
        "entity_id": doc.get("entity_id"),
        "due_at": doc.get("due_at"),
        "status": doc.get("status"),
        "will_cancel": waiting,
    }


async def plan_undo(
    batch: Document,
    records: list[Document],
    followups: list[Document],
    *,
    reader: GraphReader,
    token: str,
    executions: Collection[str] | None = None,
    pause_copies: bool = False,
    undone: Collection[str] = (),
) -> UndoPlan:
    """The plan of undoing ``batch`` (its row, its execution records and follow-ups);
    ``undone``: the executions an earlier undo of the batch set back (left alone)."""
    batch_id = str(batch["_id"])
    selected = select(records, executions)
    items = [item_of(r, pause_copies=pause_copies) for r in selected]
    for item in items:
        if item.execution_id in undone:
            item.action, item.reason = "none", ALREADY_UNDONE
    account = str(batch["account"])
    await read_lives(reader, items, token=token, account=account)
    chosen = {(r["task_id"], r["entity_id"]) for r in selected}
    rows = [
        followup_row(f)
        for f in followups
        if f.get("batch_id") == batch_id and (f.get("task_id"), f.get("entity_id")) in chosen
    ]
    return UndoPlan(
        batch_id=batch_id,
        undo_batch_id=undo_batch_id(batch_id, selected if executions else None),
        account=account,
        items=items,
        followups=rows,
        pause_copies=pause_copies,
    )
