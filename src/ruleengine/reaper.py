"""The reaper: batches whose worker died are closed, and their pending intents settled.

A batch still RUNNING after the job timeout (plus a grace period) lost its
worker — killed, OOM, machine gone. The reaper marks it ABANDONED
(compare-and-set, so a batch that finishes meanwhile is left alone) and settles
each pending intent by re-reading the live value: done when Meta holds the
target (the write landed; the cooldown is then written too), failed otherwise.
It never writes to Meta, so the next scheduled run decides afresh and never
applies a change twice.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ruleengine.actions import live_value
from ruleengine.errors import RuleEngineError
from ruleengine.meta.http import READ_ONLY
from ruleengine.meta.reader import GraphReader
from ruleengine.store.credentials import token_ref
from ruleengine.store.records import IntentStore

if TYPE_CHECKING:
    from ruleengine.engine import Engine

log = logging.getLogger(__name__)

GRACE_S = 60
UNVERIFIABLE = frozenset({"copies", "notify"})


class Reaper:
    """Closes abandoned batches; safe to run on every worker (everything is compare-and-set)."""

    def __init__(self, engine: Engine, *, intents: IntentStore) -> None:
        self.engine = engine
        self.intents = intents

    async def reap(self, *, now: datetime) -> int:
        """Abandon stale batches; returns how many were abandoned."""
        cutoff = now - timedelta(seconds=self.engine.settings.job_timeout_s + GRACE_S)
        abandoned = 0
        if self.engine.followups is not None:
            await self.engine.followups.release_stale(older_than=cutoff, now=now)
        for batch in await self.engine.batches.stale_running(older_than=cutoff):
            if await self.engine.batches.abandon(batch["_id"], started_before=cutoff, now=now):
                abandoned += 1
                log.warning("batch %s abandoned (worker lost); settling its intents", batch["_id"])
                await self.settle_batch(batch, now=now)
        return abandoned

    async def settle_batch(self, batch: dict[str, Any], *, now: datetime) -> None:
        """Settle every pending intent of ``batch`` against live values."""
        pending = await self.intents.pending(batch_ids=[batch["_id"]])
        if not pending:
            return
        try:
            token = await self.engine.credentials.token(token_ref(batch["account"]))
        except RuleEngineError as exc:
            log.error("cannot settle intents of %s: %s", batch["_id"], exc)
            return
        reader = GraphReader.from_settings(self.engine.session.view(methods=READ_ONLY))
        for intent in pending:
            await self.settle(intent, reader=reader, token=token, now=now)

    async def settle(
        self, intent: dict[str, Any], *, reader: GraphReader, token: str, now: datetime
    ) -> str:
        """Done if the live value is the intent's target, else failed; returns the status."""
        field = intent["field"]
        if field in UNVERIFIABLE:
            await self.intents.resolve(
                intent["_id"], status="failed", now=now, reason="unverifiable"
            )
            return "failed"
        raw = await reader.get_object(
            intent["entity_id"], token=token, fields=["id", field], account_id=intent.get("account")
        )
        return await self.engine.executor.settler.settle(intent, live_value(raw, field), now=now)
