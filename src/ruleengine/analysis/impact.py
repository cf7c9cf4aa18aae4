"""A rule's impact, with I/O: its decisions from the execution records, its entities' hourly
delivery from the Insights history cache, each task measured per currency
(:mod:`ruleengine.rules.impact.measure`).

Decisions are the ``applied``, ``awaiting_approval`` and ``held_out`` records of the runs of
the last ``days`` days, each with the holdout setting of its rule version, what became of
its proposal, and whether an undo put it back. Delivery comes from the history cache the
backtest uses (:class:`ruleengine.backtest.history.InsightsHistory`: Graph only for what it
lacks), per account-local hour: spend, purchases (``omni_purchase``) and their value, in the
account's currency. A task without a holdout is counted, never measured: a before/after of
acted entities alone is not an effect.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

import orjson

from ruleengine.backtest.history import HistoryRequest, HistoryResult
from ruleengine.backtest.service import BacktestDeps
from ruleengine.errors import RuleEngineError
from ruleengine.rules.entity import currency_offset
from ruleengine.rules.impact.measure import (
    WINDOW_HOURS,
    CurrencyImpact,
    Decision,
    Hourly,
    Series,
    TaskImpact,
    measure,
)
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.replay.history import MAX_DAYS, DayRange
from ruleengine.store.approvals import ApprovalStore, approval_id
from ruleengine.store.credentials import Account, token_ref
from ruleengine.store.records import ExecutionStore
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)

#: Action types whose value is a purchase, the first present wins.
PURCHASE_TYPES: Final = ("omni_purchase", "purchase", "offsite_conversion.fb_pixel_purchase")
# Meta leaves off-Meta action metrics (pixel purchases among them) out of hourly breakdowns
# since April 2021 ("Restrictions for off-Meta action metrics",
# https://developers.facebook.com/docs/marketing-api/insights/breakdowns): where they are
# absent an hour has spend and no purchase (docs/impact.md says what that means).
HOURLY_FIELDS: Final = ("spend", "actions", "action_values")
#: The stratum of a decision whose rule version is not stored (nothing to compare it with).
_UNKNOWN_SETTING: Final = "unknown version"


@dataclass(frozen=True)
class ImpactInputs:
    """What a rule's impact is measured from: the rule, each task's decisions, and the
    hourly series of the entities its measured tasks decided on."""

    rule_name: str
    rule: Rule
    decisions: dict[str, list[Decision]]
    series: dict[str, Series]


async def impact_inputs(
    deps: BacktestDeps, rule_id: str, *, days: int, window: str, now: datetime
) -> ImpactInputs:
    """The decisions of the rule's last ``days`` days and its measured entities' delivery.

    Raises:
        NotFoundError: no such rule.
        ValueError: an unknown window, or ``days`` out of 1…90.
    """
    if window not in WINDOW_HOURS:
        raise ValueError(f"window must be one of {', '.join(WINDOW_HOURS)}, not {window!r}")
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be 1…{MAX_DAYS}, not {days}")
    doc = await RuleStore(deps.db).get(rule_id)
    rule = parse_rule(doc.definition)
    decisions = await _decisions(deps, rule_id, since=now - timedelta(days=days))
    # delivery only for the tasks a holdout measures: the others are counted, nothing more
    measured = {task.id for task in rule.tasks if task.holdout is not None}
    wanted = [r for r in decisions if r[0] in measured]
    series = await _delivery(deps, wanted, level=rule.level, window=window, now=now)
    by_task = {task.id: [d for t, _, d in decisions if t == task.id] for task in rule.tasks}
    return ImpactInputs(doc.name, rule, by_task, series)


async def rule_impact(
    deps: BacktestDeps, rule_id: str, *, days: int, window: str, now: datetime
) -> dict[str, Any]:
    """The JSON-ready impact of each task of the rule over its last ``days`` days.

    Raises:
        NotFoundError: no such rule.
        ValueError: an unknown window, or ``days`` out of 1…90.
    """
    inputs = await impact_inputs(deps, rule_id, days=days, window=window, now=now)
    # the windows and intervals are pure CPU: off the event loop (the web app answers meanwhile)
    tasks = await asyncio.to_thread(_measure_all, inputs, window=window, now=now)
    return {
        "rule_id": rule_id,
        "rule_name": inputs.rule_name,
        "days": days,
        "window": window,
        "now": now.isoformat(),
        "tasks": tasks,
    }


def _measure_all(inputs: ImpactInputs, *, window: str, now: datetime) -> list[dict[str, Any]]:
    """Each task measured, as JSON."""
    tasks = []
    for task in inputs.rule.tasks:
        impact = measure(
            task.id,
            inputs.decisions[task.id],
            inputs.series,
            window=window,
            now=now,
            measured=task.holdout is not None,
        )
        tasks.append(task_json(impact, task.holdout.percent if task.holdout else None))
    return tasks


Keyed = tuple[str, str, Decision]  # (task id, account, the decision)


async def _decisions(deps: BacktestDeps, rule_id: str, *, since: datetime) -> list[Keyed]:
    """The rule's decisions since ``since`` with their task and account, each knowing its
    holdout setting, its proposal's fate and whether it was undone."""
    executions = ExecutionStore(deps.db)
    records = await executions.decisions(rule_id, since=since)
    settings = await _settings(deps, rule_id)
    undone = await executions.undone(rule_id, since=since)
    proposals = {
        str(r["key"]): approval_id(str(r["batch_id"]), str(r["task_id"]), str(r["entity_id"]))
        for r in records
        if r["outcome"] == "awaiting_approval"
    }
    statuses = await ApprovalStore(deps.db).statuses(proposals.values())
    keyed = []
    for record in records:
        task_id, key = str(record["task_id"]), str(record["key"])
        at = record["created_at"]
        version = record.get("rule_version")
        setting = settings.get((version, task_id), _UNKNOWN_SETTING)
        decision = Decision(
            str(record["entity_id"]),
            at if at.tzinfo else at.replace(tzinfo=UTC),
            record["outcome"] == "held_out",
            setting=setting,
            approval=statuses.get(proposals[key], "pending") if key in proposals else None,
            undone=key in undone,
        )
        keyed.append((task_id, str(record.get("account")), decision))
    return keyed


async def _settings(deps: BacktestDeps, rule_id: str) -> dict[tuple[Any, str], str]:
    """(rule version, task) → its holdout setting, as a stratum's name (percent and salt; a
    task without a holdout in that version has ``none``)."""
    out: dict[tuple[Any, str], str] = {}
    for version in await RuleStore(deps.db).versions(rule_id):
        try:
            rule = parse_rule(version.definition)
        except RuleEngineError:  # an old version no longer valid: its decisions stand apart
            continue
        for task in rule.tasks:
            held = task.holdout
            out[(version.version, task.id)] = (
                f"{held.percent:g} % salt {held.salt!r}" if held else "none"
            )
    return out


async def _delivery(
    deps: BacktestDeps, decisions: Sequence[Keyed], *, level: str, window: str, now: datetime
) -> dict[str, Series]:
    """entity → its hourly delivery around every decision, from the history cache (an entity
    whose delivery could not be read is absent: its decisions are counted, not measured)."""
    by_account: dict[str, list[Decision]] = defaultdict(list)
    for _, account, decision in decisions:
        by_account[account].append(decision)
    series: dict[str, Series] = {}
    span = timedelta(hours=WINDOW_HOURS[window] + 1)
    for account_id, mine in by_account.items():
        try:
            registered = await deps.credentials.get(account_id)
            token = await deps.credentials.usable_token(token_ref(account_id))
        except RuleEngineError as exc:  # removed, or its token refused: its decisions wait
            log.warning("impact: no delivery of %s: %s", account_id, exc)
            continue
        first = min(d.at for d in mine) - span
        last = min(max(d.at for d in mine) + span, now)
        ids = tuple(sorted({d.entity_id for d in mine}))
        series.update(
            await _account_series(
                deps, registered, token, ids, level=level, span=(first, last), now=now
            )
        )
    return series


async def _account_series(
    deps: BacktestDeps,
    account: Account,
    token: str,
    ids: tuple[str, ...],
    *,
    level: str,
    span: tuple[datetime, datetime],
    now: datetime,
) -> dict[str, Series]:
    """The hourly series of one account's entities over ``span`` (read in ranges of at most
    :data:`MAX_DAYS` days, the history's longest request)."""
    tz = ZoneInfo(account.timezone)
    since_day, until_day = (moment.astimezone(tz).date() for moment in span)
    hours: dict[str, dict[datetime, Hourly]] = {entity: {} for entity in ids}
    failed: set[str] = set()
    for days in DayRange.spanning(since_day, until_day):
        request = HistoryRequest(
            account.id, level, ids, fields=("spend",), days=days, hourly_fields=HOURLY_FIELDS
        )
        result = await deps.history.get(request, token=token, timezone=account.timezone, now=now)
        failed |= set(result.errors)
        for entity, by_hour in _hourly(result, ids, days, tz).items():
            hours[entity].update(by_hour)
    covered_since = _midnight(since_day, tz)
    covered_until = min(_midnight(until_day + timedelta(days=1), tz), now)
    # an entity Graph did not answer for has no hours: not "nothing delivered"
    return {
        entity: Series(account.currency, account.timezone, by_hour, covered_since, covered_until)
        for entity, by_hour in hours.items()
        if entity not in failed
    }


def _midnight(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(0), tz).astimezone(UTC)


def _hourly(
    result: HistoryResult, ids: Iterable[str], days: DayRange, tz: ZoneInfo
) -> dict[str, dict[datetime, Hourly]]:
    """entity → UTC start of each account-local hour → delivery (Meta's hours are the
    account's: ``hourly_stats_aggregated_by_advertiser_time_zone``)."""
    out: dict[str, dict[datetime, Hourly]] = {}
    for entity_id in ids:
        series: dict[datetime, Hourly] = {}
        day = days.since
        while day <= days.until:
            for hour, values in result.hour_values(entity_id, day).items():
                series[_instant(day, hour, tz)] = Hourly(
                    spend=_number(values.get("spend")),
                    purchases=_action(values.get("actions")),
                    revenue=_action(values.get("action_values")),
                )
            day += timedelta(days=1)
        out[entity_id] = series
    return out


def _instant(day: date, hour: int, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(hour), tz).astimezone(UTC)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _action(value: Any) -> float:
    """The purchase entry of an Insights ``actions``/``action_values`` list (JSON text or a
    list; 0 without one)."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return 0.0
    if not isinstance(value, list):
        return 0.0
    found: Mapping[str, Any] = {
        str(a.get("action_type")): a.get("value") for a in value if isinstance(a, dict)
    }
    for kind in PURCHASE_TYPES:
        if kind in found:
            return _number(found[kind])
    return 0.0


# ---------------------------------------------------------------- the answer's shape


def task_json(impact: TaskImpact, percent: float | None) -> dict[str, Any]:
    """A task's impact as the API and ``--json`` give it: counts across currencies, and per
    currency its effects (money in that currency's units, never added across currencies)."""
    return {
        "task_id": impact.task_id,
        "holdout_percent": percent,
        "measured": impact.measured,
        "enough_data": impact.enough,
        "note": impact.note,
        "counts": asdict(impact.counts),
        "currencies": [currency_json(c) for c in impact.currencies],
    }


def currency_json(impact: CurrencyImpact) -> dict[str, Any]:
    """One currency's part of a task's impact."""
    total = impact.total_profit_effect
    return {
        "currency": impact.currency,
        # how many decimals its amounts are shown with (none for JPY: Meta's offset 1)
        "decimals": 0 if currency_offset(impact.currency) == 1 else 2,
        "enough_data": impact.enough,
        "note": impact.note,
        "counts": {
            "acted_entities": impact.acted_entities,
            "held_out_entities": impact.held_out_entities,
            "acted_complete": impact.acted_complete,
            "held_out_complete": impact.held_out_complete,
            "outside_history": impact.outside_history,
        },
        "effects": {name: asdict(effect) for name, effect in impact.effects.items()},
        "total_profit_effect": total[0] if total else None,
        "total_profit_interval": [total[1], total[2]] if total else None,
        "chart": {"bucket": "day" if impact.window == "7d" else "hour", **impact.chart},
    }


def ranked_items(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A report's measured tasks as rows of the Benchmark's ranking: one per task and
    currency (a task nothing of which was read yet: one row without a currency)."""
    items = []
    for task in report["tasks"]:
        if not task["measured"]:
            continue
        for part in task["currencies"] or [None]:
            items.append(
                {
                    "rule_id": report["rule_id"],
                    "rule_name": report["rule_name"],
                    "task_id": task["task_id"],
                    "holdout_percent": task["holdout_percent"],
                    "currency": part["currency"] if part else None,
                    "decimals": part["decimals"] if part else None,
                    "counts": part["counts"] if part else None,
                    "enough_data": bool(part and part["enough_data"]),
                    "profit": part["effects"].get("profit") if part else None,
                    "total_profit_effect": part["total_profit_effect"] if part else None,
                    "note": part["note"] if part else task["note"],
                }
            )
    return items


def rank(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured effects first — grouped by currency (amounts in two currencies are not
    compared), the largest estimated total first — then those without enough data yet."""
    return sorted(
        items,
        key=lambda i: (
            i["total_profit_effect"] is None,
            i["currency"] or "",
            -(i["total_profit_effect"] or 0),
        ),
    )
