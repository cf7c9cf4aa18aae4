"""Meta's limits on budget writes, as one job sees them: the ad account's minimum daily
budget (read with its currency and timezone, which every budget and bid change checks
first), and the 4 budget changes an ad set may take in an hour — counting changes made
outside the engine without counting the engine's own twice.

Meta limits an ad set to 4 budget changes in a rolling hour, *whoever* makes them, and
answers the 5th with code 17, after which the ad set's budget is blocked for an hour.
The engine's own changes are in its intents; everyone else's only in the ad account's
activity log. :class:`AccountFacts` reads that log (and the ad account) at most once per
job, lazily, and only for jobs that change budgets (or bids: the ad account);
:func:`count_changes` merges the log with the intents: an intent whose value the log
already shows is the same change, counted once; one the log does not show yet (a write
made after the log was read, or one Meta has not logged yet) is added.

The write paths (:mod:`ruleengine.writes.executor`, :mod:`ruleengine.writes.batched`) read the
intents' :class:`~ruleengine.store.intents.BudgetHistory` of the entities they are about
to change (one query for all of them, :func:`budget_history`), ask :func:`budget_check`
before they record an intent, and :func:`refuse` settles a write Meta answered with an
error by what that error means (:func:`read_refusal`: code 17 on an ad set's budget:
blocked for an hour; "budget too low": the decrease is at Meta's minimum).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from ruleengine import constants as c
from ruleengine.accounts.facts import (
    CHANGE_WINDOW,
    ChangeCount,
)
from ruleengine.acting.results import ActResult, JobRun, Outcome, not_applied
from ruleengine.meta.errors import GraphError, is_budget_change_limit, is_budget_too_low
from ruleengine.rules.entity import Entity
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import BUDGET_FIELDS
from ruleengine.store.intents import (
    BUDGET_LIMITED,
    BUDGET_TOO_LOW,
    BudgetHistory,
    Intent,
    IntentStore,
)

log = logging.getLogger(__name__)

#: How long a budget Meta refused as too low keeps targets at or below it from being sent.
TOO_LOW_REMEMBERED: Final = timedelta(hours=24)


def counts_toward_limit(run: JobRun, field: str) -> bool:
    """True for a budget write of an ad set: Meta allows 4 of them an hour."""
    return run.rule.level == "adset" and field in BUDGET_FIELDS


async def budget_history(
    intents: IntentStore, run: JobRun, changes: Iterable[tuple[Entity, str]]
) -> BudgetHistory:
    """The intents' budget history of the entities whose budget these (entity, field)
    changes touch (one query)."""
    ids = sorted({entity.id for entity, field in changes if field in BUDGET_FIELDS})
    now = run.store_now()  # Meta's hour and the day of refusals, by MongoDB's clock
    return await intents.budget_history(ids, now=now, too_low_since=now - TOO_LOW_REMEMBERED)


async def budget_check(
    history: BudgetHistory, run: JobRun, entity: Entity, plan: Plan
) -> ActResult | None:
    """Why this budget change is not sent, if it is not: at Meta's minimum, or over Meta's
    limit for the ad set (:func:`known_too_low`, :func:`budget_limited`)."""
    return known_too_low(history, entity, plan) or await budget_limited(history, run, entity, plan)


async def budget_limited(
    history: BudgetHistory, run: JobRun, entity: Entity, plan: Plan
) -> ActResult | None:
    """Why Meta would refuse this ad set's budget change now, if it would.

    Meta blocks the budget for an hour after answering code 17; otherwise it allows
    4 changes in a rolling hour, counting changes made outside the engine (the
    account's activity log, read once per job) and the engine's own (its intents).
    """
    if not counts_toward_limit(run, plan.field):
        return None
    blocked = history.blocked_until.get(entity.id)
    if blocked is not None:
        message = "Meta blocked this ad set's budget (code 17) until it may change again"
        return _limit_skip(plan, allowed_at=blocked, message=message)
    own = history.changes.get(entity.id, [])
    if run.facts is not None:
        count = await run.facts.changes(entity.id, own, now=run.store_now())
    else:
        count = ChangeCount([change.at for change in own])
    allowed_at = count.allowed_at(c.ADSET_BUDGET_CHANGES_PER_HOUR)
    if allowed_at is None:
        return None
    message = (
        f"the ad set's budget changed {len(count.times)} times in the last hour"
        f" ({count.outside} outside the engine); Meta allows {c.ADSET_BUDGET_CHANGES_PER_HOUR}"
    )
    return _limit_skip(plan, allowed_at=allowed_at, message=message, changes=count)


def _limit_skip(
    plan: Plan, *, allowed_at: datetime, message: str, changes: ChangeCount | None = None
) -> ActResult:
    error: dict[str, Any] = {"message": message, "allowed_at": allowed_at}
    if changes is not None:
        error |= {"changes_last_hour": len(changes.times), "outside_engine": changes.outside}
    return not_applied(plan, "skipped", BUDGET_LIMITED, error)


def known_too_low(history: BudgetHistory, entity: Entity, plan: Plan) -> ActResult | None:
    """A lowered budget Meta refused as too low (or a lower one) is not sent again for a day."""
    after, before = plan.after, plan.before
    if plan.field not in BUDGET_FIELDS or not isinstance(after, int):
        return None
    if not isinstance(before, int) or after >= before:
        return None
    refused = history.too_low.get((entity.id, plan.field))
    if refused is None or after > refused:
        return None
    clamped = [*plan.clamped_by, "min_daily_budget"]
    return ActResult("no_change", "at_min_budget", plan.field, before, before, after, clamped)


@dataclass(frozen=True)
class Refusal:
    """What an error Meta answered to a write means for the record and the intent."""

    outcome: Outcome
    reason: str
    error: dict[str, Any]
    intent: dict[str, Any]  # what the failed intent keeps for later runs


def read_refusal(
    exc: GraphError, run: JobRun, field: str, *, now: datetime, own_answer: bool = True
) -> Refusal:
    """Meta refused a write of ``field`` at ``now``: what it means.

    Code 17 on an ad set's budget is the budget-change limit: the ad set's budget is
    blocked for an hour, and the intent keeps until when (``allowed_at``) so that no run
    tries before. "Budget too low" (100/1885272) means the budget is at Meta's minimum:
    nothing changes, and the refused value is remembered. Anything else failed the write.
    ``own_answer`` is False for an error that refused a whole Batch API call rather than
    this write (a code 17 there is a throttle of the caller, not the ad set's limit).
    """
    error = exc.as_dict()
    if own_answer and counts_toward_limit(run, field) and is_budget_change_limit(exc):
        allowed_at = now + CHANGE_WINDOW
        error |= {"allowed_at": allowed_at}
        intent = {"reason": BUDGET_LIMITED, "allowed_at": allowed_at}
        return Refusal("failed", BUDGET_LIMITED, error, intent)
    if field in BUDGET_FIELDS and is_budget_too_low(exc):
        return Refusal("no_change", BUDGET_TOO_LOW, error, {"reason": BUDGET_TOO_LOW})
    return Refusal("failed", "write_failed", error, {})


async def refuse(
    intents: IntentStore,
    intent: Intent,
    plan: Plan,
    run: JobRun,
    exc: GraphError,
    *,
    now: datetime,
    own_answer: bool = True,
) -> ActResult:
    """A write Meta answered with an error: nothing changed. Settle the intent, say why."""
    refusal = read_refusal(exc, run, plan.field, now=now, own_answer=own_answer)
    await intents.resolve(
        intent.id, status="failed", now=now, error=refusal.error, **refusal.intent
    )
    return not_applied(plan, refusal.outcome, refusal.reason, refusal.error)
