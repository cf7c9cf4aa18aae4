"""``POST /api/batches/{batch_id}/undo``: preview an undo here, carry it out on a worker.

A dry run answers the plan (:mod:`ruleengine.undo.plan`), read from the batch's records and
the live values through the web app's read-only Graph session. Otherwise the undo is
enqueued as the arq job named by its undo batch id (``undo:<batch_id>``, or
``undo:<batch_id>:<digest>`` for chosen ``executions``; the web app has no writer: a worker
writes through the rules' own intent path, :mod:`ruleengine.undo.run`) and answered 202 with
that id; an undo already done is answered 200 with its row, its records and whether it is
``complete``. Approvers and admins only; ``by`` is the caller's token name.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import ValidationError

from ruleengine import constants as c
from ruleengine.errors import FieldError, RuleValidationError
from ruleengine.meta.http import Cost
from ruleengine.store.credentials import token_ref
from ruleengine.undo.plan import (
    UndoRequest,
    plan_undo,
    refuse_running,
    refuse_undo_of_undo,
    select,
    undo_batch_id,
    undone_executions,
)
from ruleengine.web.api.labels import with_accounts
from ruleengine.web.api.records import batch_row, execution_row
from ruleengine.web.auth import actor, require_role
from ruleengine.web.jsonio import invalid, json_response, read_json
from ruleengine.web.state import services


def parse_request(body: Any) -> UndoRequest:
    """The undo request in a body (None: every default); a 422 listing what is wrong."""
    try:
        return UndoRequest.model_validate(body if body is not None else {})
    except ValidationError as exc:
        errors = [FieldError(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        raise invalid("invalid undo request", errors) from None


async def done_undo(request: web.Request, undo_id: str) -> dict[str, Any] | None:
    """The undo batch ``undo_id`` if it is done: its row and records."""
    svc = services(request)
    if await svc.batches.status(undo_id) != "DONE":
        return None
    row = await svc.batches.get(undo_id)
    records = await svc.executions.for_batch(undo_id)
    return {
        "undo_batch_id": undo_id,
        "status": "DONE",
        "complete": row.get("not_reverted_count", 0) == 0,
        "existing": True,
        "batch": batch_row(row),
        "changes": [execution_row(r) for r in records],
    }


async def undo_batch(request: web.Request) -> web.Response:
    """``POST /api/batches/{batch_id}/undo`` ``{"executions"?, "dry_run"?, "pause_copies"?}``."""
    require_role(request, "approver")
    by = actor(request)
    batch_id = request.match_info["batch_id"]
    ask = parse_request(await read_json(request, optional=True))
    svc = services(request)
    try:
        refuse_undo_of_undo(batch_id)
        batch = await svc.batches.get(batch_id)
        refuse_running(batch)
        records = await svc.executions.for_batch(batch_id)
        chosen = select(records, ask.executions)  # unknown executions: 422 before anything
    except RuleValidationError as exc:
        raise invalid("invalid undo request", exc.errors) from None
    undo_id = undo_batch_id(batch_id, chosen if ask.executions else None)
    if ask.dry_run:
        followups = await svc.followups.page(filters={"batch_id": batch_id}, limit=5000)
        token = await svc.credentials.usable_token(token_ref(str(batch["account"])))
        plan = await plan_undo(
            batch,
            records,
            followups.items,
            reader=svc.preview.readers(Cost()).reader,
            token=token,
            executions=ask.executions,
            pause_copies=ask.pause_copies,
            undone=await undone_executions(svc.executions, batch, other_than=undo_id),
        )
        answer = plan.as_json() | {"dry_run": True}
        await with_accounts(request, [answer])  # the plan's money, in the account's currency
        return json_response(answer)
    if (done := await done_undo(request, undo_id)) is not None:
        return json_response(done)
    payload = {
        "batch_id": batch_id,
        "by": by,
        "executions": ask.executions,
        "pause_copies": ask.pause_copies,
    }
    job = await svc.queue.enqueue_job(c.UNDO_JOB, payload, _job_id=undo_id)
    status = await svc.batches.status(undo_id)
    return json_response(
        {
            "undo_batch_id": undo_id,
            "status": status or "QUEUED",
            "queued": job is not None,  # False: this undo is queued or running already
            "by": by,
        },
        status=202,
    )


def add_routes(app: web.Application) -> None:
    """Register the undo route."""
    app.router.add_post("/api/batches/{batch_id}/undo", undo_batch, name="api.batch_undo")
