"""Backtest: what a rule would have done over the last N days, with the numbers it would have seen.

:func:`run_backtest` composes the pieces, for each ad account of the request:

1. **Listing** — the rule's entities as listed today (its filters, with budgets, bids
   and statuses), kept in ``backtest_listings`` for :data:`LISTING_KEPT` so that a
   second backtest a minute later asks Graph nothing.
2. **History** — the Insights the rule's conditions read, per entity per day (and per
   hour of each day for ``today``-style periods), through the history cache
   (:mod:`ruleengine.backtest.history`): only what the cache lacks is fetched.
3. **Lag** — the account's attribution-lag curve learned from the engine's own
   execution records (:mod:`ruleengine.backtest.lag_fit`); where there are too few of them
   the backtest says so and uses matured numbers.
4. **Replay** — every instant the rule would have run, with the engine's own evaluation
   and planning on a simulated state (:mod:`ruleengine.rules.replay.run`), once with
   matured numbers and, when a curve is known, once as seen at each instant.

Nothing is written to Meta, to records or to intents. The session may only read.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import partial
from typing import Any, Final
from zoneinfo import ZoneInfo

import orjson

from ruleengine import constants as c
from ruleengine.backtest.history import HistoryRequest, HistoryResult, InsightsHistory
from ruleengine.backtest.lag_fit import learn_lag
from ruleengine.backtest.result import (
    BacktestRequest,
    Gathered,
    Tally,
    result_of,
)
from ruleengine.errors import RuleEngineError
from ruleengine.meta.adaccount import read_ad_account
from ruleengine.meta.errors import GraphError
from ruleengine.meta.http import READ_AND_BATCH, Cost, GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.basics import MAX_BUDGET
from ruleengine.rules.entity import currency_offset
from ruleengine.rules.language.action_types import (
    ChangeBidAction,
    PercentBudgetAction,
    ScaleToTargetAction,
    SetBudgetAction,
)
from ruleengine.rules.language.catalog import resolve_metric
from ruleengine.rules.language.model import Rule
from ruleengine.rules.language.periods import preset_range
from ruleengine.rules.replay.history import MAX_DAYS, DayRange
from ruleengine.rules.replay.lag import share
from ruleengine.rules.replay.rows import (
    COST_PER_RESULT,
    RESULTS,
    UNIQUE_RESULTS,
    HistoryPlan,
    RawHistory,
    history_plan,
)
from ruleengine.rules.replay.run import (
    AccountHistory,
    Fire,
    Replay,
    ReplayOptions,
    ReplayResult,
    run_instants,
)
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key, token_ref
from ruleengine.store.db import Database
from ruleengine.store.insights_history import InsightsHistoryStore

log = logging.getLogger(__name__)

#: Entities replayed between two progress reports (and yields to the event loop).
ENTITIES_PER_STEP: Final = 50
#: How long a listing made for a backtest is reused by the next one.
LISTING_KEPT: Final = timedelta(minutes=15)
BUDGET_ACTIONS: Final = (PercentBudgetAction, SetBudgetAction, ScaleToTargetAction)


class BacktestRefused(RuleEngineError):
    """A backtest that cannot run; the message says why and what to do."""


class BacktestTooBig(BacktestRefused):
    """A backtest over more entities than ``RULEENGINE_BACKTEST_MAX_ENTITIES``.

    Attributes:
        counts: today's entities of the rule on each ad account listed.
        limit: the most entities one backtest replays.
    """

    def __init__(self, counts: dict[str, int], limit: int) -> None:
        self.counts = counts
        self.limit = limit
        each = ", ".join(f"{account}: {n:,}" for account, n in counts.items())
        super().__init__(
            f"the rule matches {sum(counts.values()):,} entities today ({each}), more than"
            f" one backtest replays (RULEENGINE_BACKTEST_MAX_ENTITIES={limit:,}): backtest"
            ' fewer ad accounts ("accounts" in the API, --account in the CLI) or narrow the'
            " rule's filters"
        )


def check_entities(counts: dict[str, int], *, limit: int) -> None:
    """Raise :class:`BacktestTooBig` when ``counts`` add up to more than ``limit``."""
    if sum(counts.values()) > limit:
        raise BacktestTooBig(counts, limit)


@dataclass(frozen=True)
class Progress:
    """How far a backtest is: days replayed of the total, and the stage it is in."""

    days_done: int
    days_total: int
    stage: str  # listing | history | lag | replay | done

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"days_done": self.days_done, "days_total": self.days_total, "stage": self.stage}


ProgressFn = Callable[[Progress], Awaitable[None]]


class BacktestDeps:
    """What a backtest reads: MongoDB, a Graph session that may only read, the caches."""

    def __init__(self, settings: Settings, db: Database, session: GraphSession) -> None:
        self.settings = settings
        self.db = db
        self.session = session
        self.credentials = CredentialStore(db, load_key(settings))
        self.history = InsightsHistory(InsightsHistoryStore(db), session)

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: Settings, db: Database) -> AsyncIterator[BacktestDeps]:
        """The dependencies, with a Graph session closed on exit."""
        session = GraphSession(settings, methods=READ_AND_BATCH)
        try:
            yield cls(settings, db, session)
        finally:
            await session.close()


def refuse_unreplayable(rule: Rule) -> None:
    """BacktestRefused for a rule the replay cannot plan: rebalance_budget (it moves
    budget between one run's entities at once)."""
    for task in rule.tasks:
        if task.action.type == "rebalance_budget":
            raise BacktestRefused(
                f"task '{task.id}': the replay does not plan rebalance_budget (it moves budget"
                " between the entities of one run at once); preview the rule instead"
            )


async def run_backtest(
    deps: BacktestDeps,
    request: BacktestRequest,
    *,
    now: datetime,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Replay ``request.rule`` over its last ``days`` days; the JSON-ready result.

    Raises:
        BacktestRefused: no account of the request could be backtested (each one's
            reason in the message).
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC inside the engine)")
    rule = request.rule
    refuse_unreplayable(rule)
    zone = rule.zone()
    today = now.astimezone(zone).date()
    first, last = today - timedelta(days=request.days), today - timedelta(days=1)
    since = datetime.combine(first, time(), zone).astimezone(UTC)
    until = datetime.combine(today, time(), zone).astimezone(UTC)
    instants = run_instants(rule, since=since, until=until)
    report = _Reporter(progress, request.days)
    tally = Tally()
    await report(Progress(0, request.days, "listing"))
    counts = await count_entities(deps, request, now=now, tally=tally)
    check_entities(counts, limit=deps.settings.backtest_max_entities)
    accounts: list[Gathered] = []
    refusals: dict[str, str] = {}
    for account_id in request.accounts or tuple(rule.ad_accounts):
        try:
            gathered = await _gather(
                deps, request, account_id, instants=instants, now=now, tally=tally, report=report
            )
        except (RuleEngineError, GraphError) as exc:
            refusals[account_id] = str(exc)
            tally.note(f"{account_id} is left out: {exc}")
            continue
        accounts.append(gathered)
    if not accounts:
        why = "; ".join(f"{a}: {m}" for a, m in refusals.items())
        raise BacktestRefused(f"no ad account of the rule could be backtested ({why})")
    as_seen = request.as_seen
    use_seen = any(a.curve is not None for a in accounts) if as_seen is None else as_seen
    if as_seen and not any(a.curve is not None for a in accounts):
        tally.note("as-seen numbers were asked for, but no account has a lag curve of its own")
        use_seen = False
    options = ReplayOptions(
        max_budget_change_pct=deps.settings.max_budget_change_pct,
        budget_changes_per_hour=c.ADSET_BUDGET_CHANGES_PER_HOUR,
    )
    if request.rule_id is None and any(task.holdout for task in rule.tasks):
        tally.note(
            "a draft's holdout is not replayed (who is held out is drawn with the stored"
            " rule's id): every entity a task matches acts"
        )
    views: dict[str, list[Fire] | None] = {"matured": [], "as_seen": [] if use_seen else None}
    ends: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"matured": {}, "as_seen": {}}
    starts: dict[tuple[str, str], dict[str, Any]] = {}
    runs = 0
    replayed = [v for v, fires in views.items() if fires is not None]
    step, steps = 0, len(replayed) * len(accounts)
    for view in replayed:
        for gathered in accounts:
            seen = view == "as_seen" and gathered.curve is not None
            curve = gathered.curve
            share_fn = partial(share, curve) if curve is not None else None
            replay = Replay(
                rule,
                _account_history(gathered, _needs(rule, today)),
                options,
                instants=instants,
                until=until,
                share=share_fn if seen else None,
                other_share=(None if seen else share_fn) if curve is not None else False,
                rule_id=request.rule_id,
            )
            with tally.timed("replay"):
                done = await _replay(replay, report, view=view, part=(step, steps))
            step += 1
            fires = views[view]
            assert fires is not None
            fires.extend(done.fires)
            for entity_id, fields in done.start.items():
                starts[(gathered.account, entity_id)] = fields
            for entity_id, fields in done.end.items():
                ends[view][(gathered.account, entity_id)] = fields
            runs = max(runs, done.runs)
            _note_blocked(tally, gathered.account, done.blocked)
    await report(Progress(request.days, request.days, "done"))
    return result_of(
        request,
        accounts,
        views,
        starts,
        ends,
        runs=runs,
        since=first,
        until=last,
        tally=tally,
        use_seen=use_seen,
    )


def _note_blocked(tally: Tally, account: str, blocked: dict[str, int]) -> None:
    """Caveats for the actions that passed but that the replay could not take."""
    if blocked.get("beyond_any_budget"):
        tally.note(
            f"{blocked['beyond_any_budget']} budget change(s) on {account} would have passed"
            f" {MAX_BUDGET:,} in the account's currency, more than Meta takes: the replay"
            " stopped raising there (the rule has no max_budget)"
        )
    if blocked.get("held_out"):
        tally.note(
            f"{blocked['held_out']} action(s) on {account} were held out by the task's holdout,"
            " as the engine holds them out (docs/impact.md): not counted as fires"
        )
    if blocked.get("meta_budget_change_limit"):
        tally.note(
            f"{blocked['meta_budget_change_limit']} budget change(s) on {account} were held"
            " back by Meta's limit of 4 budget changes per ad set per hour"
        )


class _Reporter:
    """Progress, sent at most once per stage change or replayed day."""

    def __init__(self, progress: ProgressFn | None, days: int) -> None:
        self.progress = progress
        self.days = days

    async def __call__(self, value: Progress) -> None:
        if self.progress is not None:
            await self.progress(value)


# ---------------------------------------------------------------- gathering


def _needs(rule: Rule, today: date) -> dict[str, frozenset[tuple[str, str | None]]]:
    return _plan(rule, today).needs


def _plan(rule: Rule, today: date) -> HistoryPlan:
    pairs = []
    for task in rule.tasks:
        for condition in task.conditions:
            pairs.append((condition.period, condition.spec))
            if condition.compare_to is not None:
                pairs.append((condition.compare_period, condition.compare_to.spec))
        if isinstance(task.action, ScaleToTargetAction):
            pairs.append((task.action.period, resolve_metric(task.action.metric)))
    return history_plan(pairs, today=today)


def _listing_fields(rule: Rule) -> list[str]:
    fields = set(rule.entity_fields())
    if rule.level != "ad":  # an ad has no budget of its own (its ad set's or campaign's)
        fields |= {"daily_budget", "lifetime_budget"}
    if rule.level == "adset" and any(isinstance(t.action, ChangeBidAction) for t in rule.tasks):
        fields |= {"bid_amount", "bid_strategy"}
    return sorted(fields)


async def _gather(
    deps: BacktestDeps,
    request: BacktestRequest,
    account_id: str,
    *,
    instants: Sequence[datetime],
    now: datetime,
    tally: Tally,
    report: _Reporter,
) -> Gathered:
    rule = request.rule
    account = await deps.credentials.get(account_id)
    # a rule with amounts per currency but none in this account's cannot be replayed there
    # (NoAmountForCurrency): the account is left out before anything is read for it
    rule.in_currency(account.currency)
    token = await deps.credentials.usable_token(token_ref(account_id))
    offset = currency_offset(account.currency)
    gathered = Gathered(account_id, ZoneInfo(account.timezone), account.currency, offset)
    await report(Progress(0, request.days, "listing"))
    cost = Cost()
    reader = GraphReader.from_settings(deps.session.view(cost=cost))
    with tally.timed("listing"):
        gathered.items, gathered.min_daily_budget = await _listing(
            deps, reader, rule, account_id, token=token, now=now, tally=tally
        )
    tally.graph_calls += cost.counted_calls
    if not gathered.items:
        tally.note(f"{account_id}: no entity matches the rule's filters today")
        return gathered
    await report(Progress(0, request.days, "history"))
    with tally.timed("history"):
        gathered.history = await _history(
            deps, rule, gathered, instants=instants, token=token, now=now, tally=tally
        )
    if request.as_seen is not False:
        await report(Progress(0, request.days, "lag"))
        with tally.timed("lag"):
            try:
                learning = await learn_lag(
                    deps.db,
                    deps.history,
                    account_id=account_id,
                    level=rule.level,
                    timezone=account.timezone,
                    token=token,
                    now=now,
                )
            except (GraphError, RuleEngineError) as exc:
                tally.note(
                    f"{account_id}: its lag curve could not be learned ({exc});"
                    " matured numbers used"
                )
                return gathered
        tally.graph_calls += learning.graph_calls
        tally.cache_hits += learning.cache_hits
        fit = learning.fit
        gathered.curve = fit.curve if fit.enough else None
        gathered.lag = {
            "observations": fit.observations,
            "enough": fit.enough,
            "curve": [list(point) for point in fit.curve] if fit.curve else None,
            "why": fit.why,
        }
        if not fit.enough:
            tally.note(f"{account_id}: {fit.why}")
    return gathered


async def count_entities(
    deps: BacktestDeps, request: BacktestRequest, *, now: datetime, tally: Tally | None = None
) -> dict[str, int]:
    """Today's entities of the rule on each ad account of the request that can be listed.

    The listings are kept (:data:`LISTING_KEPT`): the backtest that follows reads them
    again from MongoDB. An account that cannot be listed is left out here; the backtest
    leaves it out too, and says why.
    """
    tally = tally if tally is not None else Tally()
    counts: dict[str, int] = {}
    for account_id in request.accounts or tuple(request.rule.ad_accounts):
        cost = Cost()
        reader = GraphReader.from_settings(deps.session.view(cost=cost))
        try:
            token = await deps.credentials.usable_token(token_ref(account_id))
            with tally.timed("listing"):
                items, _ = await _listing(
                    deps, reader, request.rule, account_id, token=token, now=now, tally=tally
                )
        except (RuleEngineError, GraphError):
            continue
        finally:
            tally.graph_calls += cost.counted_calls
        counts[account_id] = len(items)
    return counts


def _listing_key(rule: Rule, account_id: str, fields: list[str]) -> str:
    raw = orjson.dumps([account_id, rule.level, rule.filtering(), fields])
    return hashlib.sha256(raw).hexdigest()


async def _listing(
    deps: BacktestDeps,
    reader: GraphReader,
    rule: Rule,
    account_id: str,
    *,
    token: str,
    now: datetime,
    tally: Tally,
) -> tuple[dict[str, dict[str, Any]], int | None]:
    """Today's entities of the rule on the account, and its minimum daily budget: from
    ``backtest_listings`` when listed less than :data:`LISTING_KEPT` ago."""
    fields = _listing_fields(rule)
    key = _listing_key(rule, account_id, fields)
    listings = deps.db[c.BACKTEST_LISTINGS]
    kept = await listings.find_one({"_id": key, "expires_at": {"$gt": now}})
    if kept is not None:
        items = orjson.loads(kept["items"])
        tally.note(_listed_at(kept["listed_at"]))
        return {str(i["id"]): i for i in items}, kept.get("min_daily_budget")
    raw = await reader.list_entities(
        account_id, rule.level, token=token, fields=fields, filtering=rule.filtering()
    )
    minimum = None
    if any(isinstance(t.action, BUDGET_ACTIONS) for t in rule.tasks):
        minimum = (await read_ad_account(reader, account_id, token=token)).min_daily_budget
    await listings.replace_one(
        {"_id": key},
        {
            "_id": key,
            "account": account_id,
            "items": orjson.dumps(raw).decode(),
            "min_daily_budget": minimum,
            "listed_at": now,
            "expires_at": now + LISTING_KEPT,
        },
        upsert=True,
    )
    tally.note(_listed_at(now))
    return {str(i["id"]): i for i in raw}, minimum


def _listed_at(when: datetime) -> str:
    stamp = when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"Entities and their starting state as listed at {stamp}."


def _history_days(
    rule: Rule, instants: Sequence[datetime], tz: ZoneInfo
) -> tuple[date, date] | None:
    """The account's days the replay reads: from the earliest day a period reaches back
    to at the first instant, to the account's day of the last instant."""
    if not instants:
        return None
    first_day = instants[0].astimezone(tz).date()
    last_day = instants[-1].astimezone(tz).date()
    starts = [first_day]
    for period in _plan(rule, first_day).needs:
        span = preset_range(period, first_day)
        if span is not None:
            starts.append(span[0])
    return min(starts), last_day


def _pieces(since: date, until: date) -> list[DayRange]:
    """``since``..``until`` as ranges of at most :data:`MAX_DAYS` days each (one history
    request each)."""
    pieces, start = [], since
    while start <= until:
        end = min(until, start + timedelta(days=MAX_DAYS - 1))
        pieces.append(DayRange(start, end))
        start = end + timedelta(days=1)
    return pieces


async def _history(
    deps: BacktestDeps,
    rule: Rule,
    gathered: Gathered,
    *,
    instants: Sequence[datetime],
    token: str,
    now: datetime,
    tally: Tally,
) -> RawHistory:
    """Every entity's history over the days the replay reads (Graph only for the gaps)."""
    days = _history_days(rule, instants, gathered.tz)
    plan = _plan(rule, now.astimezone(gathered.tz).date())
    for metric, why in plan.unsupported.items():
        tally.note(f"{metric}: {why}")
    if rule.custom_metrics is not None:
        tally.note(
            "custom:<name> metrics have no history (the sheet holds today's values only):"
            " read as no data"
        )
    daily: dict[str, dict[date, tuple[dict[str, Any], datetime | None]]] = {}
    hourly: dict[str, dict[date, dict[str, Any]]] = {}
    if days is None or not plan.fields:
        return RawHistory(daily, hourly)
    for piece in _pieces(*days):
        result = await deps.history.get(
            HistoryRequest(
                gathered.account,
                rule.level,
                tuple(gathered.items),
                plan.fields,
                piece,
                plan.hourly_fields,
            ),
            token=token,
            timezone=str(gathered.tz),
            now=now,
        )
        tally.graph_calls += result.graph_calls
        tally.cache_hits += result.cache_hits
        _keep(daily, hourly, result)
        if result.errors:
            sample = next(iter(result.errors.values()))
            tally.note(
                f"{gathered.account}: Graph refused the history of {len(result.errors)}"
                f" entit(ies) for {piece} ({sample}); their days read as no data"
            )
    raw = RawHistory(daily, hourly)
    if any(
        name in (RESULTS, COST_PER_RESULT) for needs in plan.needs.values() for name, _ in needs
    ):
        _note_results(tally, gathered.account, raw)
    return raw


def _note_results(tally: Tally, account: str, history: RawHistory) -> None:
    """Caveats for results the replay reads as no data or as no one result."""
    kinds = history.result_indicators()
    people = sum(1 for found in kinds.values() if found & UNIQUE_RESULTS)
    changed = sum(1 for found in kinds.values() if len(found) > 1)
    if people:
        tally.note(
            f"{account}: {people} entit(ies) count their results as people reached (ad sets"
            " optimising for reach): they do not add up over days and read as no data"
        )
    if changed:
        tally.note(
            f"{account}: the optimisation goal of {changed} entit(ies) changed within the"
            " period: over days holding both goals they have no one result (as Meta's row)"
        )


def _keep(
    daily: dict[str, dict[date, tuple[dict[str, Any], datetime | None]]],
    hourly: dict[str, dict[date, dict[str, Any]]],
    result: HistoryResult,
) -> None:
    for entity_id, days in result.daily.items():
        kept = daily.setdefault(entity_id, {})
        for day, numbers in days.items():
            kept[day] = (numbers.values, numbers.oldest_fetch)
    for entity_id, days in result.hourly.items():
        by_hour = hourly.setdefault(entity_id, {})
        for day, numbers in days.items():
            by_hour[day] = numbers.values


def _account_history(
    gathered: Gathered, needs: dict[str, frozenset[tuple[str, str | None]]]
) -> AccountHistory:
    return AccountHistory(
        account=gathered.account,
        tz=gathered.tz,
        currency=gathered.currency,
        currency_offset=gathered.offset,
        min_daily_budget=gathered.min_daily_budget,
        items=gathered.items,
        history=gathered.history,
        needs=needs,
    )


async def _replay(
    replay: Replay, report: _Reporter, *, view: str, part: tuple[int, int]
) -> ReplayResult:
    """Replay a few entities at a time, reporting between them; ``part`` is (this
    replay, of how many) for the progress."""
    total = max(1, len(replay.ids))
    stage = f"replay ({view.replace('_', '-')})"
    # in a thread: the web process keeps answering while a replay computes (numpy lets go
    # of the GIL for its arrays; the rest is sliced by the interpreter's switch interval)
    while await asyncio.to_thread(replay.step, ENTITIES_PER_STEP):
        share = (part[0] + replay.done / total) / part[1]
        await report(Progress(int(report.days * share), report.days, stage))
    await report(Progress(int(report.days * (part[0] + 1) / part[1]), report.days, stage))
    return replay.finish()
