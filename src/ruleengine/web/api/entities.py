"""``GET /api/entities/{id}/timeline``: one entity's budget and status over the last days.

Built from the entity's execution records alone (one indexed, bounded query: ``entity_id,
created_at``). Every record saw the live entity — its ``before`` when it acted, its
listing snapshot otherwise — so the timeline tells the authors of a change apart:

* a rule (``rule``: name and version), a follow-up (``followup``), an undo (``undo``: of
  which rule version, by whom) or an approved change (``approval``: by whom it was
  approved): a record applied it;
* ``outside``: what a record saw differs from the value the previous engine change (or
  the previous record) left — someone changed the live value without us, and the step is
  placed at the record that first saw it. Reads are placed against the engine's changes by
  the store's order, never by clock stamps: a change by the write-lock fence it was written
  under (each lock holder writes alone, one fence after another), an acting record's
  ``before`` with its change (read live under that lock), and a listing after the changes of
  the fences its batch found finished before listing (``listed_fence``: the holder of a fence
  marks it done when every write it sent was answered). What a listing saw that a later
  change wrote proves nothing — it may have seen that change — so another rule's record of
  the same tick, whose listing predates the change, never states a change nobody made.

Budget schedules (``schedules``): each window a ``schedule_budget`` made — when, the budget
in it, who made it — and, once an undo deleted it, who did.

Action intents need not be read: a write whose job died before recording it becomes a
record when the reaper recovers the batch from its intents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from aiohttp import web

from ruleengine.rules.language.budget_schedules import SCHEDULES, ScheduleSpec
from ruleengine.store.db import Document
from ruleengine.store.intents import IntentStore
from ruleengine.web.api.labels import with_accounts
from ruleengine.web.jsonio import int_param, json_response
from ruleengine.web.state import services

FIELDS: Final = ("daily_budget", "lifetime_budget", "status")
MAX_DAYS: Final = 90
MAX_RECORDS: Final = 2000  # the newest records of the window; older ones are left out
MAX_EXECUTIONS: Final = 200  # rows of the execution list
SPEND: Final = ("spend", "today")  # the condition whose "seen" value is the day's spend


@dataclass
class _Field:
    """The steps of one field and the value the timeline last knew."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    last: Any = None

    def see(self, at: datetime, value: Any, by: dict[str, Any], *, before: Any = None) -> None:
        """A value at ``at``: the first sets the start; a different one is a change by ``by``."""
        if self.steps and at < self.steps[-1]["at"]:
            at = self.steps[-1]["at"]  # shown in the store's order: a step never goes back
        if not self.steps:
            start = value if before is None else before
            self.steps.append({"at": at, "value": start})
            self.last = start
        if value == self.last:
            return
        self.changes.append({"at": at, "before": self.last, "after": value, "by": by})
        self.steps.append({"at": at, "value": value})
        self.last = value


OUTSIDE: Final = {"kind": "outside", "label": "outside the engine"}
#: Record kinds that are an author of their own (any other applied record is the rule's).
_OTHER_AUTHORS: Final = frozenset({"followup", "undo", "approval"})


def _author(record: Document) -> dict[str, Any]:
    kind = record.get("kind") if record.get("kind") in _OTHER_AUTHORS else "rule"
    name, version = record.get("rule_name"), record.get("rule_version")
    label = f"{name} v{version}"
    if kind == "followup":
        label += " (follow-up)"
    elif kind == "undo":
        label = f"undo of {name} v{version} by {record.get('by') or 'unknown'}"
    elif kind == "approval":
        label += f" (approved by {record.get('decided_by') or 'unknown'})"
    return {
        "kind": kind,
        "label": label,
        "rule_id": record.get("rule_id"),
        "rule_name": name,
        "rule_version": version,
        "batch_id": record.get("batch_id"),
    }


@dataclass(frozen=True)
class ReadOrder:
    """What orders the records' reads against the engine's changes (the store's order).

    Attributes:
        listings: batch id → (the account's fence read before the batch's listing, when
            that listing was taken), for batches whose job carried it.
        fences: (batch id, task id) → the fence the entity's intent there was recorded
            under.
    """

    listings: dict[str, tuple[int, datetime]] = field(default_factory=dict)
    fences: dict[tuple[str, str], int | None] = field(default_factory=dict)

    def change_fence(self, record: Document) -> int | None:
        """The fence an acting record's change was written under (None: not known)."""
        return self.fences.get((str(record.get("batch_id")), str(record.get("task_id"))))


@dataclass(frozen=True)
class _Seen:
    """One read of the entity: a change's live ``before`` (and what it wrote), or a listing."""

    key: tuple[Any, ...]  # where it falls in the store's order
    at: datetime
    record: Document
    change: bool
    fence: int | None


def _reads(records: list[Document], order: ReadOrder) -> list[_Seen] | None:
    """The records' reads in the store's order: changes by the fence they were written
    under, a listing after the changes of its ``listed_fence`` and older ones, before newer
    ones. None when a change's fence is not known (records from before fences were kept)."""
    seen: list[_Seen] = []
    for n, record in enumerate(records):
        at = record["created_at"]
        if record.get("outcome") == "applied" and record.get("field") in FIELDS:
            fence = order.change_fence(record)
            if fence is None:
                return None
            seen.append(_Seen((fence, 1, at, n), at, record, True, fence))
        listing = order.listings.get(str(record.get("batch_id")))
        if listing is not None and record.get("entity"):
            fence, listed_at = listing
            seen.append(_Seen((fence, 2, listed_at, n), listed_at, record, False, fence))
    return sorted(seen, key=lambda s: s.key)


def _later_values(reads: list[_Seen]) -> dict[str, list[tuple[int, Any]]]:
    """field → (fence, value written) of every change, to explain what a listing saw."""
    written: dict[str, list[tuple[int, Any]]] = {name: [] for name in FIELDS}
    for read in reads:
        if read.change and read.fence is not None:
            written[read.record["field"]].append((read.fence, read.record.get("after")))
    return written


def _observe(fields: dict[str, _Field], reads: list[_Seen]) -> None:
    """Every field's steps from the reads, in the store's order.

    A change's ``before`` was read live under the account's write lock, after every change
    of an older fence: a different value there was set outside. A listing follows the
    changes of its fence and older ones, and maybe some newer ones — so what it saw is
    outside only when no newer change wrote that value."""
    written = _later_values(reads)
    for read in reads:
        record = read.record
        for name, steps in fields.items():
            if read.change and name == record["field"]:
                if steps.steps and record.get("before") != steps.last:
                    steps.see(read.at, record.get("before"), OUTSIDE)
                steps.see(
                    read.at, record.get("after"), _author(record), before=record.get("before")
                )
                continue
            if read.change or name not in record["entity"]:
                continue
            value = record["entity"][name]
            if any(f > (read.fence or 0) and v == value for f, v in written[name]):
                continue  # it may have seen that change: neither a start nor evidence
            steps.see(read.at, value, OUTSIDE)


def _observe_unordered(fields: dict[str, _Field], records: list[Document]) -> None:
    """Records from before fences were kept: only changes and their live ``before`` speak
    (a listing's time cannot be placed against a change's), in the order they were made; a
    listing only starts a field no change has touched yet."""
    for record in records:
        name = str(record.get("field"))
        acted = record.get("outcome") == "applied" and name in fields
        for other, value in (record.get("entity") or {}).items():
            if other in fields and other != (name if acted else None) and not fields[other].steps:
                fields[other].see(record["created_at"], value, OUTSIDE)
        if not acted:
            continue
        steps, at = fields[name], record["created_at"]
        if steps.steps and record.get("before") != steps.last:
            steps.see(at, record.get("before"), OUTSIDE)
        steps.see(at, record.get("after"), _author(record), before=record.get("before"))


def _daily_spend(records: list[Document]) -> list[dict[str, Any]]:
    """Per UTC day, the largest "spend today" a rule saw (spend only grows during a day)."""
    days: dict[str, float] = {}
    for record in records:
        for cond in record.get("conditions") or []:
            if (cond.get("metric"), cond.get("period")) == SPEND and cond.get("actual") is not None:
                day = record["created_at"].date().isoformat()
                days[day] = max(days.get(day, 0.0), float(cond["actual"]))
    return [{"date": d, "spend": v} for d, v in sorted(days.items())]


def _main_metric(records: list[Document]) -> dict[str, Any] | None:
    """The first condition's metric of the most recent rule that acted, and what it saw."""
    acting = [
        r for r in records if r.get("kind") not in _OTHER_AUTHORS and r.get("outcome") == "applied"
    ]
    if not acting or not acting[-1].get("conditions"):
        return None
    rule_id, first = acting[-1]["rule_id"], acting[-1]["conditions"][0]
    key = (first.get("metric"), first.get("period"))
    points = [
        {"at": r["created_at"], "value": r["conditions"][0].get("actual")}
        for r in records
        if r.get("rule_id") == rule_id
        and r.get("conditions")
        and (r["conditions"][0].get("metric"), r["conditions"][0].get("period")) == key
    ]
    return {"metric": key[0], "period": key[1], "rule_id": rule_id, "points": points}


def _schedules(records: list[Document]) -> list[dict[str, Any]]:
    """The budget schedules the records made (oldest first), each with its window, the daily
    budget before and in it, who made it, and who deleted it (an undo), if one did."""
    made: dict[str, dict[str, Any]] = {}
    for record in records:
        spec = ScheduleSpec.from_doc(record.get("schedule"))
        if record.get("field") != SCHEDULES or record.get("outcome") != "applied" or spec is None:
            continue
        if spec.op == "delete" and spec.schedule_id in made:
            made[spec.schedule_id] |= {
                "deleted_at": record["created_at"],
                "deleted_by": _author(record),
            }
            continue
        response = record.get("response")
        schedule_id = response.get("id") if isinstance(response, dict) else None
        if spec.op == "create" and schedule_id:
            made[str(schedule_id)] = {
                "schedule_id": str(schedule_id),
                "time_start": datetime.fromtimestamp(spec.time_start, UTC),
                "time_end": datetime.fromtimestamp(spec.time_end, UTC),
                "budget_value_type": spec.value_type,
                "budget_value": spec.budget_value,
                "before": record.get("before"),
                "after": record.get("after"),
                "at": record["created_at"],
                "by": _author(record),
                "deleted_at": None,
                "deleted_by": None,
            }
    return list(made.values())


def _execution(record: Document) -> dict[str, Any]:
    keys = ("batch_id", "rule_id", "rule_name", "rule_version", "task_id", "outcome", "reason")
    more = ("field", "before", "after", "created_at")
    return {
        "id": str(record["_id"]) if "_id" in record else str(record.get("key")),
        "kind": record.get("kind") or "evaluation",
        **{k: record.get(k) for k in keys + more},
    }


def build_timeline(
    entity_id: str,
    newest_first: list[Document],
    *,
    since: datetime,
    order: ReadOrder | None = None,
) -> Document:
    """The timeline of ``entity_id`` from its records (newest first, as the store gives them)
    and what orders their reads (:class:`ReadOrder`; without it no listing is evidence)."""
    records = sorted(newest_first, key=lambda r: r["created_at"])
    fields = {name: _Field() for name in FIELDS}
    reads = _reads(records, order or ReadOrder())
    if reads is None:
        _observe_unordered(fields, records)
    else:
        _observe(fields, reads)
    latest = newest_first[0] if newest_first else {}
    return {
        "entity_id": entity_id,
        "entity_name": latest.get("entity_name"),
        "account": latest.get("account"),
        "level": latest.get("level"),
        "since": since,
        "truncated": len(newest_first) >= MAX_RECORDS,
        "fields": {
            name: {"steps": f.steps, "changes": f.changes} for name, f in fields.items() if f.steps
        },
        "spend": _daily_spend(records),
        "schedules": _schedules(records),
        "metric": _main_metric(records),
        "executions": [_execution(r) for r in newest_first[:MAX_EXECUTIONS]],
    }


async def entity_timeline(request: web.Request) -> web.Response:
    """``GET /api/entities/{id}/timeline?days=14``: steps, who changed them, spend, records."""
    days = int_param(request, "days", default=14, low=1, high=MAX_DAYS)
    entity_id = request.match_info["id"]
    since = datetime.now(UTC) - timedelta(days=days)
    svc = services(request)
    records = await svc.executions.for_entity(entity_id, since=since, limit=MAX_RECORDS)
    batch_ids = {str(r.get("batch_id")) for r in records}
    acting = {str(r.get("batch_id")) for r in records if r.get("outcome") == "applied"}
    order = ReadOrder(
        listings=await svc.batches.listings(batch_ids),
        fences=await IntentStore(svc.db).fences_of(entity_id, acting) if acting else {},
    )
    timeline = build_timeline(entity_id, records, since=since, order=order) | {"days": days}
    await with_accounts(request, [timeline])  # its money in the account's currency
    return json_response(timeline)


def add_routes(app: web.Application) -> None:
    """Register the entity timeline route."""
    app.router.add_get("/api/entities/{id}/timeline", entity_timeline, name="api.entity_timeline")
