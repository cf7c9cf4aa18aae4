"""A backtest's result as the API and the CLI answer it: fires per day and task, entities,
both views (as seen, matured) and where they differ, money in the account's currency —
summed per currency, never across two.

Built by :func:`ruleengine.backtest.service.run_backtest` from the replays' fires.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, timedelta
from time import perf_counter
from typing import Any, Final
from zoneinfo import ZoneInfo

from ruleengine.rules.language.action_types import (
    DuplicateAction,
    NotifyAction,
    ScheduleBudgetAction,
)
from ruleengine.rules.language.model import Rule
from ruleengine.rules.replay.lag import Curve
from ruleengine.rules.replay.rows import RawHistory
from ruleengine.rules.replay.run import Fire

#: The longest backtest, in days.
MAX_BACKTEST_DAYS: Final = 90


#: What no backtest can know; every result carries these.
CAVEATS: Final = (
    "Entities are today's: campaigns, ad sets or ads created or deleted during the period are"
    " not in it, and every entity starts with today's status, budget and name.",
    "Changes made by people (or other tools) during the period are not known: the replay"
    " sees only what the rule itself would have changed.",
    "Delivery is what really happened: a simulated pause or budget change would have"
    " changed spend and results after it, which the replay cannot know.",
)


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


@dataclass
class Gathered:
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
class Tally:
    """What a backtest counted on its way: Graph calls, cache hits, caveats, seconds per stage."""

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


@dataclass(frozen=True)
class Unit:
    """An account's money: its currency and minor units per unit."""

    currency: str
    offset: int


def _fire_json(fire: Fire, units: dict[str, Unit], *, seen_view: bool) -> dict[str, Any]:
    money = fire.field in ("daily_budget", "bid_amount")
    unit = units[fire.account]
    seen, matured = (fire.values, fire.other) if seen_view else (fire.other, fire.values)
    return {
        **_what(fire),
        "field": fire.field,
        "before": _money(fire.before, unit.offset) if money else fire.before,
        "after": _money(fire.after, unit.offset) if money else fire.after,
        "currency": unit.currency if money else None,
        "seen": seen,
        "matured": matured if not fire.followup else None,
        "followup": fire.followup,
    }


def _per_day(
    fires: list[Fire],
    days: list[date],
    zone: ZoneInfo,
    units: dict[str, Unit],
    starts: dict[tuple[str, str], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Each day's fires, and its budget moves and totals per currency (``{"EUR": …,
    "USD": …}``): amounts of two currencies are never added together."""
    affected = {
        (f.account, f.entity_id) for f in fires if f.field == "daily_budget" and not f.followup
    }
    budgets = {
        key: _money(starts[key].get("daily_budget"), units[key[0]].offset) or 0 for key in affected
    }
    currencies = sorted({units[account].currency for account, _ in affected})
    rows = []
    by_day: dict[date, list[Fire]] = {}
    for fire in fires:
        by_day.setdefault(fire.time.astimezone(zone).date(), []).append(fire)
    for day in days:
        today = sorted(by_day.get(day, []), key=lambda f: f.time)
        delta = dict.fromkeys(currencies, 0.0)
        for fire in today:
            key = (fire.account, fire.entity_id)
            if fire.field == "daily_budget" and key in budgets:
                unit = units[fire.account]
                after = _money(fire.after, unit.offset)
                delta[unit.currency] += (after or 0) - (_money(fire.before, unit.offset) or 0)
                budgets[key] = after
        totals = dict.fromkeys(currencies, 0.0)
        for (account, _), budget in budgets.items():
            totals[units[account].currency] += budget or 0
        counted = [f for f in today if not f.followup]
        rows.append(
            {
                "date": day.isoformat(),
                "fires": len(counted),
                "by_task": dict(sorted(Counter(f.task for f in counted).items())),
                "budget_delta": {code: round(value, 2) for code, value in delta.items()},
                "budget_total": {code: round(value, 2) for code, value in totals.items()},
                "paused": sum(f.field == "status" and f.after == "PAUSED" for f in today),
                "activated": sum(f.field == "status" and f.after == "ACTIVE" for f in today),
            }
        )
    return rows


def _entities(
    fires: list[Fire],
    units: dict[str, Unit],
    starts: dict[tuple[str, str], dict[str, Any]],
    ends: dict[tuple[str, str], dict[str, Any]],
) -> list[dict[str, Any]]:
    counts = Counter((f.account, f.entity_id) for f in fires if not f.followup)
    names = {(f.account, f.entity_id): f.entity_name for f in fires}
    shown = []
    for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        unit = units[key[0]]

        def fields(values: dict[str, Any], offset: int = unit.offset) -> dict[str, Any]:
            return {**values, "daily_budget": _money(values.get("daily_budget"), offset)}

        shown.append(
            {
                "account": key[0],
                "currency": unit.currency,
                "entity_id": key[1],
                "entity_name": names[key],
                "fires": count,
                "before": fields(starts.get(key, {})),
                "after": fields(ends.get(key, {})),
            }
        )
    return shown


def result_of(
    request: BacktestRequest,
    accounts: list[Gathered],
    views: dict[str, list[Fire] | None],
    starts: dict[tuple[str, str], dict[str, Any]],
    ends: dict[str, dict[tuple[str, str], dict[str, Any]]],
    *,
    runs: int,
    since: date,
    until: date,
    tally: Tally,
    use_seen: bool,
) -> dict[str, Any]:
    rule, zone = request.rule, request.rule.zone()
    units = {a.account: Unit(a.currency, a.offset) for a in accounts}
    days = [since + timedelta(days=n) for n in range((until - since).days + 1)]
    shown: dict[str, dict[str, Any] | None] = {}
    for view, fires in views.items():
        if fires is None:
            shown[view] = None
            continue
        fires.sort(key=lambda f: (f.time, f.account, f.entity_id, f.task))
        shown[view] = {
            "runs": runs,
            "fires": [_fire_json(f, units, seen_view=view == "as_seen") for f in fires],
            "per_day": _per_day(fires, days, zone, units, starts),
            "entities": _entities(fires, units, starts, ends[view]),
        }
    main_view = "as_seen" if use_seen else "matured"
    main = shown[main_view]
    assert main is not None
    caveats = list(CAVEATS) + tally.caveats
    if any(isinstance(t.action, NotifyAction) for t in rule.tasks):
        caveats.append("Notifications are counted as fires; no webhook was called.")
    if any(isinstance(t.action, DuplicateAction) for t in rule.tasks):
        caveats.append("Copies are counted as fires; the copies themselves are not simulated.")
    if any(isinstance(t.action, ScheduleBudgetAction) for t in rule.tasks):
        caveats.append(
            "Budget schedules are counted as fires; the spend of their windows is not simulated."
        )
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
        "currencies": {a.account: a.currency for a in accounts},
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
