"""Insights rows of the past, pure: what a condition would have read at an instant.

A backtest replays a rule against history kept per entity per day (and per hour of each
day). For an instant ``t`` and a period, the row a live evaluation would have got from
Meta is rebuilt here: the period's dates at
``t`` (:func:`~ruleengine.rules.language.periods.preset_range`
in the ad account's calendar), whole days before the account's day of ``t``, and of that
day itself the hours already over plus the running hour pro rata (Meta's ``today`` at
10:15 holds a quarter of the 10:00 hour). The sums are of the additive Insights fields
only — spend, impressions, clicks, link clicks and the per-type counts and values of
actions and conversions — and every ratio is computed from them the way Meta computes
it (ROAS = purchase value / spend, cost per action = spend / actions, CTR = clicks /
impressions × 100 …). Reach, frequency and the ``unique_*`` fields do not add up over
days: :func:`history_plan` reports them as not replayable.

**Results.** ``results`` are kept per indicator (``results:<indicator>``, the ad set's
optimisation event) and add up over days like actions; ``cost_per_result`` is spend ÷
results of that indicator, as Meta computes it. Results counted as people reached
(indicator ``reach``) do not add up over days and read as no data. Results mature with
the lag curve unless their indicator is counted at once (:data:`IMMEDIATE_RESULTS`:
impressions, link clicks, landing page views …).

**As seen, not as matured.** A day's conversions keep arriving for days after it ended.
Given a lag curve (``share(age_h)``: the part of a day's conversions visible ``age_h``
hours after its end), each day's conversion counts and values are scaled to what they
were at ``t``: ``cached × share(age at t) / share(age when cached)``. Spend,
impressions and clicks are final at once and never scaled. Ages are counted from the
start of the hour of ``t`` (one scaling per hour, not per instant: the curve moves by
well under 1 % an hour).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from ruleengine.rules.language.catalog import PERIOD_SPEND_KEYS, MetricSpec, Source
from ruleengine.rules.language.periods import preset_range

#: Additive plain fields: a range's value is the sum of its days'.
PLAIN_ADDITIVE: Final = ("spend", "impressions", "clicks", "inline_link_clicks")
#: Additive list fields of ``[{action_type, value}]``.
LIST_ADDITIVE: Final = ("actions", "action_values", "conversions", "conversion_values")
#: List fields whose values are conversions (they mature with the lag curve).
CONVERSION_LISTS: Final = frozenset(LIST_ADDITIVE)
#: ``[{indicator, values: [{value}]}]`` fields: the count of each row's optimisation event.
RESULTS: Final = "results"
#: ``cost_per_result``: spend ÷ ``results`` of the same indicator.
COST_PER_RESULT: Final = "cost_per_result"
#: Result indicators counted when delivered (they do not mature with the lag curve).
IMMEDIATE_RESULTS: Final = frozenset(
    {
        "impressions",
        "actions:link_click",
        "actions:landing_page_view",
        "actions:post_engagement",
        "actions:page_engagement",
        "actions:video_view",
    }
)
#: Result indicators that count people, which do not add up over days.
UNIQUE_RESULTS: Final = frozenset({"reach"})
#: Ratio fields → (numerator, denominator, factor), all of additive fields.
PLAIN_RATIOS: Final[dict[str, tuple[str, str, float]]] = {
    "ctr": ("clicks", "impressions", 100.0),
    "inline_link_click_ctr": ("inline_link_clicks", "impressions", 100.0),
    "cpc": ("spend", "clicks", 1.0),
    "cpm": ("spend", "impressions", 1000.0),
    "cost_per_inline_link_click": ("spend", "inline_link_clicks", 1.0),
}
#: List ratio fields → (the list field counted, whether spend is the numerator).
LIST_RATIOS: Final[dict[str, tuple[str, bool]]] = {
    "purchase_roas": ("action_values", False),
    "website_purchase_roas": ("action_values", False),
    "mobile_app_purchase_roas": ("action_values", False),
    "cost_per_action_type": ("actions", True),
    "cost_per_conversion": ("conversions", True),
}
Share = Callable[[float], float]


@dataclass(frozen=True)
class HistoryPlan:
    """What history a rule's Insights metrics need.

    Attributes:
        fields: Insights fields to fetch per day (additive ones only).
        hourly_fields: fields to fetch per hour too (for periods that include today).
        needs: period → the (field, action type or None) pairs its rows must hold.
        unsupported: metric → why it cannot be replayed (it reads as no data).
    """

    fields: tuple[str, ...]
    hourly_fields: tuple[str, ...]
    needs: dict[str, frozenset[tuple[str, str | None]]]
    unsupported: dict[str, str] = field(default_factory=dict)


def _sources(spec: MetricSpec) -> tuple[str, ...] | None:
    """The additive fields a metric is computed from; None when it cannot be replayed."""
    name = spec.field or ""
    if name in PLAIN_ADDITIVE or name in LIST_ADDITIVE:
        return (name,)
    if name in PLAIN_RATIOS:
        numerator, denominator, _ = PLAIN_RATIOS[name]
        return numerator, denominator
    if name in LIST_RATIOS:
        return LIST_RATIOS[name][0], "spend"
    if name == RESULTS:
        return (RESULTS,)
    if name == COST_PER_RESULT:
        return RESULTS, "spend"
    return None


def includes_today(period: str, today: date) -> bool:
    """True when ``period`` covers the ad account's current day (hours are needed)."""
    span = preset_range(period, today)
    return span is not None and span[1] >= today


def history_plan(metrics: Iterable[tuple[str | None, MetricSpec]], *, today: date) -> HistoryPlan:
    """The fields to fetch for ``(period, spec)`` pairs (conditions, comparisons, actions)."""
    daily: set[str] = set()
    hourly: set[str] = set()
    needs: dict[str, set[tuple[str, str | None]]] = {}
    unsupported: dict[str, str] = {}
    for period, spec in metrics:
        sources: tuple[str, ...]
        if spec.source is Source.DERIVED:  # budget spent today (or over the period): spend
            own = period if spec.name in PERIOD_SPEND_KEYS and period else "today"
            period, sources = own, ("spend",)
            wanted: tuple[str, str | None] = ("spend", None)
        elif spec.source is Source.INSIGHTS and period:
            found = _sources(spec)
            if found is None:
                unsupported[spec.name] = (
                    f"'{spec.field}' is a ranking Meta gives over the ad's recent delivery,"
                    " not a number of each day: not in the replay's history, read as no data"
                    if spec.ranking
                    else f"'{spec.field}' does not add up over days (Meta de-duplicates people"
                    " across them): not in the replay's history, read as no data"
                )
                continue
            sources, wanted = found, (spec.field or "", spec.action_type)
        else:
            continue
        if preset_range(period, today) is None:
            unsupported[f"{spec.name} {period}"] = (
                f"period '{period}' has no fixed dates (it starts at the account's first"
                " delivery): not replayable, read as no data"
            )
            continue
        daily.update(sources)
        if includes_today(period, today):
            hourly.update(sources)
        needs.setdefault(period, set()).add(wanted)
    return HistoryPlan(
        fields=tuple(sorted(daily)),
        hourly_fields=tuple(sorted(hourly)),
        needs={p: frozenset(n) for p, n in sorted(needs.items())},
        unsupported=unsupported,
    )


# ---------------------------------------------------------------- one entity's history


def _number(raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return 0.0
    return value if value == value and abs(value) != float("inf") else 0.0


def flatten(values: Mapping[str, Any]) -> dict[str, float]:
    """Graph's values of one day (or hour) as ``key → number``: ``spend``,
    ``actions:omni_purchase`` …; anything malformed counts as nothing."""
    flat: dict[str, float] = {}
    for name in PLAIN_ADDITIVE:
        if name in values:
            flat[name] = _number(values[name])
    for name in LIST_ADDITIVE:
        items = values.get(name)
        for item in items if isinstance(items, list) else []:
            if isinstance(item, Mapping) and isinstance(item.get("action_type"), str):
                key = f"{name}:{item['action_type']}"
                flat[key] = flat.get(key, 0.0) + _number(item.get("value"))
    for indicator, count in result_counts(values.get(RESULTS)).items():
        key = f"{RESULTS}:{indicator}"
        flat[key] = flat.get(key, 0.0) + count
    return flat


def result_counts(items: Any) -> dict[str, float]:
    """indicator → count of a ``results`` list (an entry without ``values`` counts 0: its
    indicator is known, its results are none yet); people-counting indicators
    (:data:`UNIQUE_RESULTS`) and anything malformed are left out."""
    counts: dict[str, float] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("indicator"), str):
            continue
        indicator = item["indicator"]
        if indicator in UNIQUE_RESULTS:
            continue
        values = item.get("values")
        count = (
            sum(_number(v.get("value")) for v in values if isinstance(v, Mapping))
            if isinstance(values, list)
            else 0.0
        )
        counts[indicator] = counts.get(indicator, 0.0) + count
    return counts


def is_conversion(key: str) -> bool:
    """True for a flattened key whose value matures with the lag curve."""
    name, _, rest = key.partition(":")
    if name == RESULTS:
        return rest not in IMMEDIATE_RESULTS
    return name in CONVERSION_LISTS


@dataclass
class EntityHistory:
    """One entity's flattened history: per day, and per hour of the days that have hours.

    Attributes:
        days: date → key → number (the whole day).
        hours: date → 24 entries (hour → key → number; hours without delivery empty).
        fetched_at: date → when the day's numbers were fetched (the least mature field).
    """

    days: dict[date, dict[str, float]] = field(default_factory=dict)
    hours: dict[date, list[dict[str, float]]] = field(default_factory=dict)
    fetched_at: dict[date, datetime] = field(default_factory=dict)
    _cumulative: dict[date, list[dict[str, float]]] = field(default_factory=dict, repr=False)

    def before_hour(self, day: date, hour: int) -> dict[str, float] | None:
        """The sums of ``day``'s hours before ``hour`` (None: no hours of that day)."""
        hours = self.hours.get(day)
        if hours is None:
            return None
        sums = self._cumulative.get(day)
        if sums is None:
            running: dict[str, float] = {}
            sums = [dict(running)]
            for values in hours:
                for key, value in values.items():
                    running[key] = running.get(key, 0.0) + value
                sums.append(dict(running))
            self._cumulative[day] = sums
        return sums[hour]


def extract(values: Mapping[str, Any], key: str) -> float | None:
    """One flattened key (``spend``, ``actions:omni_purchase``) of Graph's values of a day
    or an hour; None when absent."""
    name, _, action_type = key.partition(":")
    raw = values.get(name)
    if raw is None:
        return None
    if name == RESULTS:
        counts = result_counts(raw)
        return counts.get(action_type) if action_type else None
    if not action_type:
        return _number(raw)
    total, found = 0.0, False
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, Mapping) and item.get("action_type") == action_type:
            total, found = total + _number(item.get("value")), True
    return total if found else None


class RawHistory:
    """One ad account's history as the cache answered it: Graph's values, unflattened.

    Args:
        daily: entity → day → (field → value, when the day's least fresh field was fetched).
        hourly: entity → day → field → hour (int or ``"07"``) → value.

    :meth:`entity` flattens one entity on demand (the replay needs few of them whole);
    the masks read keys straight from here (:meth:`day_value`, :meth:`hour_values`).
    """

    def __init__(
        self,
        daily: Mapping[str, Mapping[date, tuple[Mapping[str, Any], datetime | None]]],
        hourly: Mapping[str, Mapping[date, Mapping[str, Mapping[Any, Any]]]],
    ) -> None:
        self.daily = daily
        self.hourly = hourly
        self._flat: dict[str, EntityHistory] = {}

    def days(self) -> set[date]:
        """Every day some entity has numbers for."""
        found = {d for days in self.daily.values() for d in days}
        return found | {d for days in self.hourly.values() for d in days}

    def entity(self, entity_id: str) -> EntityHistory:
        """One entity's flattened history."""
        if entity_id not in self._flat:
            history = EntityHistory()
            for day, (values, fetched) in self.daily.get(entity_id, {}).items():
                history.days[day] = flatten(values)
                if fetched is not None:
                    history.fetched_at[day] = fetched
            for day, fields in self.hourly.get(entity_id, {}).items():
                hours: list[dict[str, Any]] = [{} for _ in range(24)]
                for name, by_hour in fields.items():
                    for hour, value in by_hour.items():
                        hours[int(hour)][name] = value
                history.hours[day] = [flatten(h) for h in hours]
            self._flat[entity_id] = history
        return self._flat[entity_id]

    def fetched_at(self, entity_id: str) -> Mapping[date, datetime | None]:
        """Day → when its numbers were fetched."""
        return {day: fetched for day, (_, fetched) in self.daily.get(entity_id, {}).items()}

    def result_indicators(self) -> dict[str, set[str]]:
        """entity → the result indicators of its days (more than one: its ad set's goal
        changed within the history)."""
        found: dict[str, set[str]] = {}
        for entity_id, days in self.daily.items():
            for values, _ in days.values():
                for item in values.get(RESULTS) or []:
                    if isinstance(item, Mapping) and isinstance(item.get("indicator"), str):
                        found.setdefault(entity_id, set()).add(item["indicator"])
        return found

    def day_values(self, entity_id: str, key: str) -> dict[date, float]:
        """Day → one flattened key's value (days without it absent)."""
        found = {}
        for day, (values, _) in self.daily.get(entity_id, {}).items():
            value = extract(values, key)
            if value is not None:
                found[day] = value
        return found

    def hour_values(self, entity_id: str, key: str) -> dict[date, dict[int, float]]:
        """Day → hour → one flattened key's value."""
        name, _, action_type = key.partition(":")
        found: dict[date, dict[int, float]] = {}
        for day, fields in self.hourly.get(entity_id, {}).items():
            by_hour = fields.get(name)
            if not by_hour:
                continue
            hours = found.setdefault(day, {})
            for hour, raw in by_hour.items():
                value = extract({name: raw}, key) if action_type else _number(raw)
                if value is not None:
                    hours[int(hour)] = value
        return found


def day_end(day: date, tz: ZoneInfo) -> datetime:
    """The instant ``day`` ends in ``tz`` (its next midnight)."""
    return datetime.combine(day + timedelta(days=1), time(), tz)


def maturity_factor(
    day: date, tz: ZoneInfo, *, at: datetime, fetched_at: datetime | None, share: Share
) -> float:
    """How much of a day's cached conversions were visible at ``at``."""
    end = day_end(day, tz)
    seen = share((at - end).total_seconds() / 3600)
    cached = share((fetched_at - end).total_seconds() / 3600) if fetched_at else 1.0
    return seen / cached if cached > 0 else seen


class RowBuilder:
    """Insights rows of one entity at instants of the past.

    Args:
        history: the entity's history.
        needs: period → the (field, action type) pairs a row must hold.
        tz: the ad account's timezone.
        share: the lag curve, or None for matured numbers.
    """

    def __init__(
        self,
        history: EntityHistory,
        needs: Mapping[str, frozenset[tuple[str, str | None]]],
        tz: ZoneInfo,
        share: Share | None = None,
    ) -> None:
        self.history = history
        self.needs = needs
        self.tz = tz
        self.share = share
        self._base: dict[tuple[str, date, datetime | None], dict[str, float] | None] = {}

    def rows(self, at: datetime) -> dict[str, dict[str, Any]]:
        """period → the row a live evaluation would have read at ``at`` (absent: no data)."""
        local = at.astimezone(self.tz)
        today = local.date()
        hour_start = local.replace(minute=0, second=0, microsecond=0)
        rows: dict[str, dict[str, Any]] = {}
        for period, wanted in self.needs.items():
            span = preset_range(period, today)
            if span is None:
                continue
            totals = self._totals(period, span, today, local, hour_start)
            if totals is not None:
                rows[period] = derive(totals, wanted)
        return rows

    def _totals(
        self,
        period: str,
        span: tuple[date, date],
        today: date,
        local: datetime,
        hour_start: datetime,
    ) -> dict[str, float] | None:
        scaled_at = hour_start if self.share is not None else None
        key = (period, today, scaled_at)
        if key not in self._base:
            last = min(span[1], today - timedelta(days=1))
            self._base[key] = self._whole_days(span[0], last, scaled_at)
        base = self._base[key]
        if span[1] < today:
            return base
        part = self._today(today, local)
        if part is None:
            return base
        if base is None:
            return part
        totals = dict(base)
        for name, value in part.items():
            totals[name] = totals.get(name, 0.0) + value
        return totals

    def _whole_days(
        self, first: date, last: date, scaled_at: datetime | None
    ) -> dict[str, float] | None:
        """The sums of whole days ``first``..``last`` (None when history holds none of
        them), conversions as seen at ``scaled_at`` (None: as cached)."""
        totals: dict[str, float] = {}
        found = False
        day = first
        while day <= last:
            values = self.history.days.get(day)
            if values is not None:
                found = True
                factor = 1.0 if scaled_at is None else self._factor_at(day, scaled_at)
                for name, value in values.items():
                    if factor != 1.0 and is_conversion(name):
                        value *= factor
                    totals[name] = totals.get(name, 0.0) + value
            day += timedelta(days=1)
        return totals if found else None

    def _factor_at(self, day: date, at: datetime) -> float:
        assert self.share is not None
        return maturity_factor(
            day, self.tz, at=at, fetched_at=self.history.fetched_at.get(day), share=self.share
        )

    def _today(self, today: date, local: datetime) -> dict[str, float] | None:
        """Today's hours before ``local``'s hour, plus the running hour pro rata."""
        done = self.history.before_hour(today, local.hour)
        if done is None:
            return None
        hours = self.history.hours[today]
        fraction = (local.minute * 60 + local.second) / 3600
        part = dict(done)
        if fraction:
            for name, value in hours[local.hour].items():
                part[name] = part.get(name, 0.0) + value * fraction
        if self.share is not None:  # the day is not over: its conversions are at age 0
            factor = self._factor_at(today, local)
            for name in part:
                if is_conversion(name):
                    part[name] *= factor
        return part


def _ratio(numerator: float, denominator: float, factor: float = 1.0) -> float | None:
    return numerator / denominator * factor if denominator else None


def derive(totals: Mapping[str, float], wanted: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """An Insights row holding the wanted fields, computed from additive ``totals``.

    A ratio without a denominator (no spend, no clicks) is left out: Meta sends no value.
    """
    row: dict[str, Any] = {}
    spend = totals.get("spend", 0.0)
    for name, action_type in wanted:
        if name in (RESULTS, COST_PER_RESULT):
            row |= _result_row(totals, spend, name)
            continue
        if action_type is None:
            if name in PLAIN_RATIOS:
                numerator, denominator, factor = PLAIN_RATIOS[name]
                value = _ratio(totals.get(numerator, 0.0), totals.get(denominator, 0.0), factor)
            else:
                value = totals.get(name, 0.0)
            if value is not None:
                row[name] = value
            continue
        if name in LIST_RATIOS:
            source, spend_first = LIST_RATIOS[name]
            amount = totals.get(f"{source}:{action_type}", 0.0)
            value = _ratio(spend, amount) if spend_first else _ratio(amount, spend)
        else:
            value = totals.get(f"{name}:{action_type}")
        if value is not None:
            row.setdefault(name, []).append({"action_type": action_type, "value": value})
    return row


def _result_row(totals: Mapping[str, float], spend: float, name: str) -> dict[str, Any]:
    """``results`` or ``cost_per_result`` as Meta lists them: one entry per indicator (two
    or more: no one result, as Meta's row over ad sets with different goals), an entry
    without ``values`` where nothing resulted (no cost either); no indicator, no field."""
    prefix = f"{RESULTS}:"
    entries = []
    for key in sorted(k for k in totals if k.startswith(prefix)):
        count = totals[key]
        value = count if name == RESULTS else _ratio(spend, count)
        entry: dict[str, Any] = {"indicator": key[len(prefix) :]}
        if count and value is not None:
            entry["values"] = [{"value": value}]
        entries.append(entry)
    return {name: entries} if entries else {}
