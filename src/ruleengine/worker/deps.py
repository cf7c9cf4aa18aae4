"""The worker's services: every store and client a job needs, built once per worker process.

:class:`Engine` is what the worker's jobs share — the evaluation (:mod:`ruleengine.worker.job`),
follow-ups (:mod:`ruleengine.followups.running`), approved changes
(:mod:`ruleengine.approvals.applying`), undos (:mod:`ruleengine.undo.run`) and the reaper
(:mod:`ruleengine.maintenance.reaper`): the read side (:class:`~ruleengine.worker.stages.Reading`)
and the write path, wired together by :func:`build_engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ruleengine.followups.scheduling import FollowupScheduler, LandedFollowups
from ruleengine.guards.cross_rule import CrossRuleGuards
from ruleengine.meta.batch import BatchReader
from ruleengine.meta.http import READ_WRITE, Cost, GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.meta.writer import GraphWriter
from ruleengine.settings import Settings
from ruleengine.store.approvals import ApprovalStore
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.holds import HoldStore
from ruleengine.store.intents import IntentStore
from ruleengine.store.records import BatchStore, ExecutionStore
from ruleengine.store.rules import RuleStore
from ruleengine.store.snapshots import ListingSnapshots
from ruleengine.worker.stages import Reading, sheets_reader
from ruleengine.writes.executor import ActionExecutor
from ruleengine.writes.lock import AccountLocks
from ruleengine.writes.notify import Notifier
from ruleengine.writes.settling import IntentSettler, Settlement


@dataclass
class Engine(Reading):
    """The worker's services (built once in its startup hook): the read side, and writes."""

    batches: BatchStore
    executions: ExecutionStore
    executor: ActionExecutor
    followups: FollowupScheduler
    rules: RuleStore
    snapshots: ListingSnapshots
    approvals: ApprovalStore
    worker: str = "worker"

    def graph(self, cost: Cost) -> tuple[GraphReader, BatchReader, GraphWriter]:
        """Per-job Graph clients sharing the process session, counting into ``cost``."""
        readers = self.readers(cost)
        return readers.reader, readers.batch, GraphWriter(self.session.view(cost=cost), self.errors)


def build_engine(settings: Settings, *, db: Database, redis: Any, worker: str = "worker") -> Engine:
    """The worker's engine with every store and client it needs."""
    errors = ErrorLog(db)
    intents, batches, executions = IntentStore(db), BatchStore(db), ExecutionStore(db)
    followups = FollowupScheduler(db, queue=redis)
    rules = RuleStore(db)
    settlement = Settlement(
        intents,
        batches,
        executions,
        followups.store,
        on_landed=LandedFollowups(followups, rules),
    )
    executor = ActionExecutor(
        settings,
        intents=intents,
        settler=IntentSettler(settlement, orphan_after_s=settings.orphan_after_s),
        locks=AccountLocks(
            redis,
            intents=intents,
            ttl_s=settings.write_lock_ttl_s,
            wait_s=settings.write_lock_wait_s,
        ),
        notifier=Notifier(settings, errors),
        guards=CrossRuleGuards(settings, intents=intents, holds=HoldStore(db), errors=errors),
    )
    return Engine(
        settings=settings,
        session=GraphSession(settings, methods=READ_WRITE),
        credentials=CredentialStore(db, load_key(settings)),
        intents=intents,
        errors=errors,
        sheets=sheets_reader(settings),
        batches=batches,
        executions=executions,
        executor=executor,
        followups=followups,
        rules=rules,
        snapshots=ListingSnapshots(db),
        approvals=ApprovalStore(db),
        worker=worker,
    )


async def close_engine(engine: Engine) -> None:
    """Close the engine's clients."""
    await engine.close()
    await engine.executor.notifier.close()
