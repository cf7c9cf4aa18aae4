"""Backtest: what a rule would have done over the last N days, with the numbers it would have seen.

:func:`run_backtest` composes the pieces, for each ad account of the request:

1. **Listing** — the rule's entities as listed today (its filters, with budgets, bids
   and statuses), kept in ``backtest_listings`` for :data:`LISTING_KEPT` so that a
   second backtest a minute later asks Graph nothing.
2. **History** — the Insights the rule's conditions read, per entity per day (and per
   hour of each day for ``today``-style periods), through the history cache
   (:mod:`ruleengine.history`): only what the cache lacks is fetched.
3. **Lag** — the account's attribution-lag curve learned from the engine's own
   execution records (:mod:`ruleengine.lag_history`); where there are too few of them
   the backtest says so and uses matured numbers.
4. **Replay** — every instant the rule would have run, with the engine's own evaluation
   and planning on a simulated state (:mod:`ruleengine.rules.replay`), once with
   matured numbers and, when a curve is known, once as seen at each instant.

Nothing is written to Meta, to records or to intents. The session may only read.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import partial
from time import perf_counter
from typing import Any, Final
from zoneinfo import ZoneInfo

import orjson

from ruleengine import constants as c
from ruleengine.errors import RuleEngineError
from ruleengine.history import HistoryRequest, HistoryResult, InsightsHistory
from ruleengine.lag_history import learn_lag
from ruleengine.meta.adaccount import read_ad_account
from ruleengine.meta.errors import GraphError
from ruleengine.meta.http import READ_AND_BATCH, Cost, GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.action_types import (
    ChangeBidAction,
    DuplicateAction,
    NotifyAction,
    PercentBudgetAction,
    ScaleToTargetAction,
    SetBudgetAction,
)
from ruleengine.rules.basics import MAX_BUDGET
from ruleengine.rules.catalog import resolve_metric
from ruleengine.rules.entity import currency_offset
from ruleengine.rules.history import MAX_DAYS, DayRange
from ruleengine.rules.lag import Curve, share
from ruleengine.rules.model import Rule
from ruleengine.rules.periods import preset_range
from ruleengine.rules.replay import (
    AccountHistory,
    Fire,
    Replay,
    ReplayOptions,
    ReplayResult,
    run_instants,
)
from ruleengine.rules.replay_rows import HistoryPlan, RawHistory, history_plan
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key, token_ref
from ruleengine.store.db import Database
from ruleengine.store.insights_history import InsightsHistoryStore

log = logging.getLogger(__name__)

#: The longest backtest, in days.
MAX_BACKTEST_DAYS: Final = 90
#: Entities replayed between two progress reports (and yields to the event loop).
ENTITIES_PER_STEP: Final = 50
#: How long a listing made for a backtest is reused by the next one.
LISTING_KEPT: Final = timedelta(minutes=15)
BUDGET_ACTIONS: Final = (PercentBudgetAction, SetBudgetAction, ScaleToTargetAction)

#: What no backtest can know; every result carries these.
CAVEATS: Final = (
    "Entities are today's: campaigns or ad sets created or deleted during the period are"
    " not in it, and every entity starts with today's status, budget and name.",
    "Changes made by people (or other tools) during the period are not known: the replay"
    " sees only what the rule itself would have changed.",
    "Delivery is what really happened: a simulated pause or budget change would have"
    " changed spend and results after it, which the replay cannot know.",
)


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
class BacktestRequest:
    """What to backtest (see ``docs/backtest.md``)."""

    rule: Rule
    days: int = 30
    accounts: tuple[str, ...] = ()
    as_seen: bool | None = None
    rule_id: str | None = None
    version: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.days <= MAX_BACKTEST_DAYS:
            raise ValueError(f"days must be 1 to {MAX_BACKTEST_DAYS}, not {self.days}")
        unknown = [a for a in self.accounts if a not in self.rule.ad_accounts]
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is not one of the rule's ad accounts")


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


@dataclass
class _Account:
    """What a backtest gathered about one ad account."""

    account: str
    tz: ZoneInfo
    currency: str
    offset: int
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    min_daily_budget: int | None = None
    history: RawHistory = field(default_factory=lambda: RawHistory({}, {}))
    curve: Curve | None = None
    lag: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Tally:
    graph_calls: int = 0
    cache_hits: int = 0
    caveats: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Count the time spent in ``stage`` (the result's ``seconds``)."""
        started = perf_counter()
        try:
            yield
        finally:
            spent = perf_counter() - started
            self.seconds[stage] = round(self.seconds.get(stage, 0.0) + spent, 3)

    def note(self, text: str) -> None:
        if text not in self.caveats:
            self.caveats.append(text)


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
    zone = rule.zone()
    today = now.astimezone(zone).date()
    first, last = today - timedelta(days=request.days), today - timedelta(days=1)
    since = datetime.combine(first, time(), zone).astimezone(UTC)
    until = datetime.combine(today, time(), zone).astimezone(UTC)
    instants = run_instants(rule, since=since, until=until)
    report = _Reporter(progress, request.days)
    tally = _Tally()
    await report(Progress(0, request.days, "listing"))
    counts = await count_entities(deps, request, now=now, tally=tally)
    check_entities(counts, limit=deps.settings.backtest_max_entities)
    accounts: list[_Account] = []
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
    return _result(
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


def _note_blocked(tally: _Tally, account: str, blocked: dict[str, int]) -> None:
    """Caveats for the actions that passed but that the replay could not take."""
    if blocked.get("beyond_any_budget"):
        tally.note(
            f"{blocked['beyond_any_budget']} budget change(s) on {account} would have passed"
            f" {MAX_BUDGET:,} in the account's currency, more than Meta takes: the replay"
            " stopped raising there (the rule has no max_budget)"
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
    fields = set(rule.entity_fields()) | {"daily_budget", "lifetime_budget"}
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
    tally: _Tally,
    report: _Reporter,
) -> _Account:
    rule = request.rule
    account = await deps.credentials.get(account_id)
    token = await deps.credentials.usable_token(token_ref(account_id))
    offset = currency_offset(account.currency)
    gathered = _Account(account_id, ZoneInfo(account.timezone), account.currency, offset)
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
    deps: BacktestDeps, request: BacktestRequest, *, now: datetime, tally: _Tally | None = None
) -> dict[str, int]:
    """Today's entities of the rule on each ad account of the request that can be listed.

    The listings are kept (:data:`LISTING_KEPT`): the backtest that follows reads them
    again from MongoDB. An account that cannot be listed is left out here; the backtest
    leaves it out too, and says why.
    """
    tally = tally if tally is not None else _Tally()
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
    tally: _Tally,
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
    gathered: _Account,
    *,
    instants: Sequence[datetime],
    token: str,
    now: datetime,
    tally: _Tally,
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
    return RawHistory(daily, hourly)


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
    gathered: _Account, needs: dict[str, frozenset[tuple[str, str | None]]]
) -> AccountHistory:
    return AccountHistory(
        account=gathered.account,
        tz=gathered.tz,
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


# ---------------------------------------------------------------- the result


def _money(value: Any, offset: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    try:
        return round(int(value) / offset, 2) if offset != 1 else int(value)
    except (TypeError, ValueError):
        return value


def _what(fire: Fire) -> dict[str, Any]:
    """When, where and what a fire was (the keys a fire and a difference share)."""
    return {
        "time": fire.time.astimezone(UTC).isoformat(),
        "account": fire.account,
        "entity_id": fire.entity_id,
        "entity_name": fire.entity_name,
        "task": fire.task,
        "action": fire.action,
    }


def _fire_json(fire: Fire, offsets: dict[str, int], *, seen_view: bool) -> dict[str, Any]:
    money = fire.field in ("daily_budget", "bid_amount")
    offset = offsets[fire.account]
    seen, matured = (fire.values, fire.other) if seen_view else (fire.other, fire.values)
    return {
        **_what(fire),
        "field": fire.field,
        "before": _money(fire.before, offset) if money else fire.before,
        "after": _money(fire.after, offset) if money else fire.after,
        "seen": seen,
        "matured": matured if not fire.followup else None,
        "followup": fire.followup,
    }


def _per_day(
    fires: list[Fire],
    days: list[date],
    zone: ZoneInfo,
    offsets: dict[str, int],
    starts: dict[tuple[str, str], dict[str, Any]],
) -> list[dict[str, Any]]:
    affected = {
        (f.account, f.entity_id) for f in fires if f.field == "daily_budget" and not f.followup
    }
    budgets = {
        key: _money(starts[key].get("daily_budget"), offsets[key[0]]) or 0 for key in affected
    }
    rows = []
    by_day: dict[date, list[Fire]] = {}
    for fire in fires:
        by_day.setdefault(fire.time.astimezone(zone).date(), []).append(fire)
    for day in days:
        today = sorted(by_day.get(day, []), key=lambda f: f.time)
        delta = 0.0
        for fire in today:
            if fire.field == "daily_budget" and (fire.account, fire.entity_id) in budgets:
                offset = offsets[fire.account]
                change = (_money(fire.after, offset) or 0) - (_money(fire.before, offset) or 0)
                delta += change
                budgets[(fire.account, fire.entity_id)] = _money(fire.after, offset)
        counted = [f for f in today if not f.followup]
        rows.append(
            {
                "date": day.isoformat(),
                "fires": len(counted),
                "by_task": dict(sorted(Counter(f.task for f in counted).items())),
                "budget_delta": round(delta, 2),
                "budget_total": round(sum(budgets.values()), 2),
                "paused": sum(f.field == "status" and f.after == "PAUSED" for f in today),
                "activated": sum(f.field == "status" and f.after == "ACTIVE" for f in today),
            }
        )
    return rows


def _entities(
    fires: list[Fire],
    offsets: dict[str, int],
    starts: dict[tuple[str, str], dict[str, Any]],
    ends: dict[tuple[str, str], dict[str, Any]],
) -> list[dict[str, Any]]:
    counts = Counter((f.account, f.entity_id) for f in fires if not f.followup)
    names = {(f.account, f.entity_id): f.entity_name for f in fires}
    shown = []
    for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        offset = offsets[key[0]]

        def fields(values: dict[str, Any], offset: int = offset) -> dict[str, Any]:
            return {**values, "daily_budget": _money(values.get("daily_budget"), offset)}

        shown.append(
            {
                "account": key[0],
                "entity_id": key[1],
                "entity_name": names[key],
                "fires": count,
                "before": fields(starts.get(key, {})),
                "after": fields(ends.get(key, {})),
            }
        )
    return shown


def _result(
    request: BacktestRequest,
    accounts: list[_Account],
    views: dict[str, list[Fire] | None],
    starts: dict[tuple[str, str], dict[str, Any]],
    ends: dict[str, dict[tuple[str, str], dict[str, Any]]],
    *,
    runs: int,
    since: date,
    until: date,
    tally: _Tally,
    use_seen: bool,
) -> dict[str, Any]:
    rule, zone = request.rule, request.rule.zone()
    offsets = {a.account: a.offset for a in accounts}
    days = [since + timedelta(days=n) for n in range((until - since).days + 1)]
    shown: dict[str, dict[str, Any] | None] = {}
    for view, fires in views.items():
        if fires is None:
            shown[view] = None
            continue
        fires.sort(key=lambda f: (f.time, f.account, f.entity_id, f.task))
        shown[view] = {
            "runs": runs,
            "fires": [_fire_json(f, offsets, seen_view=view == "as_seen") for f in fires],
            "per_day": _per_day(fires, days, zone, offsets, starts),
            "entities": _entities(fires, offsets, starts, ends[view]),
        }
    main_view = "as_seen" if use_seen else "matured"
    main = shown[main_view]
    assert main is not None
    currencies = {a.currency for a in accounts}
    caveats = list(CAVEATS) + tally.caveats
    if len(currencies) > 1:
        caveats.append(
            f"Budgets of accounts in different currencies ({', '.join(sorted(currencies))})"
            " are summed as plain numbers in per_day."
        )
    if any(isinstance(t.action, NotifyAction) for t in rule.tasks):
        caveats.append("Notifications are counted as fires; no webhook was called.")
    if any(isinstance(t.action, DuplicateAction) for t in rule.tasks):
        caveats.append("Copies are counted as fires; the copies themselves are not simulated.")
    if any(t.execution_count_limit for t in rule.tasks):
        caveats.append("execution_count_limit counts from the start of the backtest.")
    if any(t.respect_learning_phase for t in rule.tasks):
        caveats.append(
            "Past learning phases are unknown: budget changes replay as if never learning."
        )
    if any(t.approval for t in rule.tasks):
        caveats.append("Changes that wait for approval replay as if approved at once.")
    return {
        "rule": {
            "name": rule.name,
            "level": rule.level,
            "rule_id": request.rule_id,
            "version": request.version,
        },
        "since": since.isoformat(),
        "until": until.isoformat(),
        "days": request.days,
        "accounts": [a.account for a in accounts],
        "view": main_view,
        "runs": main["runs"],
        "fires": main["fires"],
        "per_day": main["per_day"],
        "entities": main["entities"],
        "views": shown,
        "differs_as_seen": _differences(views),
        "as_seen": {
            "used": use_seen,
            "accounts": {a.account: a.lag for a in accounts if a.lag},
        },
        "graph_calls": tally.graph_calls,
        "cache_hits": tally.cache_hits,
        "seconds": tally.seconds,
        "caveats": caveats,
    }


def _differences(views: dict[str, list[Fire] | None]) -> list[dict[str, Any]]:
    matured, seen = views.get("matured") or [], views.get("as_seen")
    if seen is None:
        return []
    keys = {
        "matured": {f.key: f for f in matured if not f.followup},
        "as_seen": {f.key: f for f in seen if not f.followup},
    }
    found = []
    for view, other in (("matured", "as_seen"), ("as_seen", "matured")):
        for key, fire in keys[view].items():
            if key not in keys[other]:
                found.append({**_what(fire), "only_in": view})
    found.sort(key=lambda d: (d["time"], d["account"], d["entity_id"], d["task"]))
    return found
