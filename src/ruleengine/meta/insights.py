"""Insights for a job's entities, by one of two strategies with the same answers.

* ``per_campaign`` — the original design: one Batch API call per entity with one
  sub-request per period group, fanned out concurrently. Cost grows with the
  number of entities.
* ``account_level`` (default) — per period group, one account-level Insights
  request with ``level=campaign|adset|ad`` filtered to the entity ids (chunked),
  all sent together in Batch API calls of ≤ 50. Cost grows with periods.

Both ask for ``use_unified_attribution_setting=true`` (ROAS as Ads Manager shows
it) and ``action_breakdowns=action_type``, and both return period → row per
entity, leaving entities without delivery without a row, as Meta does. A period is
asked for by its ``date_preset``, or — for the Ad Rules presets Insights does not know
(``last_7_days``, ``last_nd_14_8`` …) — by a ``time_range`` of the ad account's dates
(:func:`~ruleengine.rules.language.periods.insights_period`), in the same batches as the others.

Big accounts (:class:`LargeAccounts`): a synchronous request Meta cannot answer in
time (:class:`DataTooLargeError`) is split — fewer ids, down to ``min_ids``; then,
where the period allows (every field additive, several days, the account's date
known), shorter ranges whose rows are summed. What still times out, and every
account-level fetch of ``async_threshold`` entities or more, runs as asynchronous
report runs (:mod:`ruleengine.meta.reports`), one per period, whose progress is
reported through ``on_progress``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, Final, Literal

from ruleengine.meta.batch import BatchReader, SubRequest, SubResult
from ruleengine.meta.errors import DataTooLargeError, GraphError, MalformedResponseError
from ruleengine.meta.reader import next_cursor
from ruleengine.meta.reports import ReportRunner
from ruleengine.meta.rows import ADDITIVE_FIELDS, IDENTITY_FIELDS, sum_rows
from ruleengine.rules.language.periods import (
    DateRange,
    halves,
    insights_period,
    preset_range,
    time_range,
)

log = logging.getLogger(__name__)

Strategy = Literal["account_level", "per_campaign"]
Progress = Callable[[float], Awaitable[None]]
IDS_PER_REQUEST: Final = 500
BASE_PARAMS: Final = {"use_unified_attribution_setting": True, "action_breakdowns": "action_type"}


@dataclass
class InsightsResult:
    """entity id → period → Insights row, plus what could not be fetched.

    A period fetched in parts (date ranges) keeps each part's row apart and shows their sum,
    so a part fetched again after a timeout replaces its earlier rows instead of adding to
    them.
    """

    rows: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    errors: dict[str, GraphError] = field(default_factory=dict)  # entity id → error
    _parts: dict[tuple[str, str], dict[DateRange, dict[str, Any]]] = field(
        default_factory=dict, repr=False
    )

    def add_row(self, entity_id: str, period: str, row: dict[str, Any]) -> None:
        """Store the row of a whole period."""
        self._parts.pop((entity_id, period), None)
        self.rows.setdefault(entity_id, {})[period] = row

    def merge_row(self, entity_id: str, period: str, row: dict[str, Any], span: DateRange) -> None:
        """Store the row of the part ``span`` of a period; the period's row is the parts' sum."""
        parts = self._parts.setdefault((entity_id, period), {})
        parts[span] = row if span not in parts else sum_rows(parts[span], row)
        self._sum(entity_id, period)

    def forget(self, entity_ids: Sequence[str], period: str, span: DateRange | None = None) -> None:
        """Drop rows of ``period`` — or of its part ``span`` — about to be fetched again."""
        for entity_id in entity_ids:
            if span is None:
                self._parts.pop((entity_id, period), None)
                self.rows.get(entity_id, {}).pop(period, None)
            elif self._parts.get((entity_id, period), {}).pop(span, None) is not None:
                self._sum(entity_id, period)

    def _sum(self, entity_id: str, period: str) -> None:
        parts = sorted(self._parts.get((entity_id, period), {}).items())
        if not parts:
            self.rows.get(entity_id, {}).pop(period, None)
            return
        total = parts[0][1]
        for _, row in parts[1:]:
            total = sum_rows(total, row)
        self.rows.setdefault(entity_id, {})[period] = total

    def fail(self, entity_ids: Sequence[str], error: GraphError) -> None:
        """Mark entities whose metrics could not be fetched."""
        for entity_id in entity_ids:
            self.errors.setdefault(entity_id, error)

    def for_entity(self, entity_id: str) -> dict[str, dict[str, Any]]:
        """period → row for one entity (empty when Meta returned nothing)."""
        return self.rows.get(entity_id, {})


@dataclass(frozen=True)
class LargeAccounts:
    """What to do when an account is too big for synchronous Insights.

    Attributes:
        reports: runs async reports; None leaves what still times out failed.
        async_threshold: entities from which account-level Insights go async at once
            (None: only after splitting failed).
        min_ids: a timed-out request is split by ids while it has more than this.
        today: the ad account's date: the dates of a period Insights' ``date_preset`` does
            not know (sent as a ``time_range``), and a multi-day period split by range.
        on_progress: told the mean percent of the running report runs.
    """

    reports: ReportRunner | None = None
    async_threshold: int | None = None
    min_ids: int = 50
    today: date | None = None
    on_progress: Progress | None = None


def id_field(level: str) -> str:
    """The row field naming the entity of an Insights row at ``level``."""
    return f"{level}_id"


@dataclass(frozen=True)
class _Fetch:
    """One fetch's fixed context."""

    batch: BatchReader
    account_id: str
    level: str
    token: str
    large: LargeAccounts


async def fetch_insights(
    batch: BatchReader,
    *,
    strategy: Strategy,
    account_id: str,
    level: str,
    entity_ids: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    token: str,
    ids_per_request: int = IDS_PER_REQUEST,
    large: LargeAccounts | None = None,
) -> InsightsResult:
    """Fetch every period group for ``entity_ids`` with the chosen strategy."""
    result = InsightsResult()
    if not entity_ids or not groups:
        return result
    ctx = _Fetch(batch, account_id, level, token, large or LargeAccounts())
    if strategy == "account_level" and _goes_async(ctx.large, len(entity_ids)):
        await _run_reports(ctx, {p: list(entity_ids) for p in groups}, groups, result)
        return result
    if strategy == "per_campaign":
        # The original design: one Batch API call per entity, fanned out (BatchReader bounds it).
        today = ctx.large.today
        per_entity = [_per_entity_requests([e], groups, today) for e in entity_ids]
        parts = await asyncio.gather(*(_collect(ctx, r, result) for r in per_entity))
        exhausted = [plan for part in parts for plan in part]
    else:
        requests = _account_requests(ctx, entity_ids, groups, ids_per_request)
        exhausted = await _collect(ctx, requests, result)
    if exhausted:
        await _escalate(ctx, exhausted, groups, result)
    return result


def _goes_async(large: LargeAccounts, entities: int) -> bool:
    threshold = large.async_threshold
    return large.reports is not None and threshold is not None and entities >= threshold


@dataclass(frozen=True)
class _Planned:
    request: SubRequest
    period: str
    entity_ids: tuple[str, ...]  # the entities this request covers
    direct: bool  # True: per-entity request, rows carry no id field
    span: DateRange | None = None  # a part of the period (its rows are summed), or None
    error: GraphError | None = None  # why it could not be answered (when exhausted)

    def with_ids(self, entity_ids: tuple[str, ...], level: str) -> _Planned:
        params = {k: v for k, v in self.request.params.items() if k != "after"}
        params |= {"filtering": ids_filter(level, entity_ids), "limit": len(entity_ids)}
        return replace(self, request=SubRequest(self.request.path, params), entity_ids=entity_ids)

    def with_span(self, span: DateRange) -> _Planned:
        params = {k: v for k, v in self.request.params.items() if k not in ("after", "date_preset")}
        params["time_range"] = time_range(span)
        return replace(self, request=SubRequest(self.request.path, params), span=span)

    def next_page(self, cursor: str) -> _Planned:
        params = {**self.request.params, "after": cursor}
        return replace(self, request=SubRequest(self.request.path, params))


def ids_filter(level: str, entity_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The ``filtering`` that keeps ``entity_ids`` in an account-level Insights request."""
    return [{"field": f"{level}.id", "operator": "IN", "value": list(entity_ids)}]


def _per_entity_requests(
    entity_ids: Sequence[str], groups: Mapping[str, Sequence[str]], today: date | None
) -> list[_Planned]:
    planned: list[_Planned] = []
    for entity_id in entity_ids:
        for period, fields in groups.items():
            params = {**BASE_PARAMS, **insights_period(period, today), "fields": ",".join(fields)}
            planned.append(
                _Planned(SubRequest(f"{entity_id}/insights", params), period, (entity_id,), True)
            )
    return planned


def _account_params(ctx: _Fetch, period: str, fields: Sequence[str]) -> dict[str, Any]:
    return {
        **BASE_PARAMS,
        "level": ctx.level,
        **insights_period(period, ctx.large.today),
        "fields": ",".join(sorted({*fields, id_field(ctx.level)})),
    }


def _account_requests(
    ctx: _Fetch,
    entity_ids: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    ids_per_request: int,
) -> list[_Planned]:
    planned: list[_Planned] = []
    for period, fields in groups.items():
        for start in range(0, len(entity_ids), ids_per_request):
            chunk = tuple(entity_ids[start : start + ids_per_request])
            params = _account_params(ctx, period, fields) | {
                "filtering": ids_filter(ctx.level, chunk),
                "limit": len(chunk),
            }
            path = f"{ctx.account_id}/insights"
            planned.append(_Planned(SubRequest(path, params), period, chunk, False))
    return planned


async def _collect(ctx: _Fetch, planned: list[_Planned], result: InsightsResult) -> list[_Planned]:
    """Send every planned request; follow pagination and splits in further batch rounds.

    Returns the requests that still asked too much once they could be split no more.
    """
    exhausted: list[_Planned] = []
    while planned:
        answers = await ctx.batch.get_many(
            [p.request for p in planned], token=ctx.token, account_id=ctx.account_id
        )
        follow_up: list[_Planned] = []
        for plan, answer in zip(planned, answers, strict=True):
            if isinstance(answer.error, DataTooLargeError):
                pieces = _split(plan, ctx)
                if pieces is None:
                    exhausted.append(replace(plan, error=answer.error))
                else:  # the pieces fetch what this request covers again, whole
                    result.forget(plan.entity_ids, plan.period, plan.span)
                    follow_up.extend(pieces)
                continue
            cursor = _absorb(plan, answer, result, ctx.level)
            if cursor:
                follow_up.append(plan.next_page(cursor))
        planned = follow_up
    return exhausted


def _split(plan: _Planned, ctx: _Fetch) -> list[_Planned] | None:
    """Two smaller requests covering ``plan`` — fewer ids, else a shorter range — or None."""
    ids = plan.entity_ids
    if not plan.direct and len(ids) > max(1, ctx.large.min_ids):
        half = (len(ids) + 1) // 2
        log.info("insights %s for %d ids timed out: splitting the ids", plan.period, len(ids))
        return [plan.with_ids(ids[:half], ctx.level), plan.with_ids(ids[half:], ctx.level)]
    today = ctx.large.today
    span = plan.span or (preset_range(plan.period, today) if today is not None else None)
    if span is None or not _additive(plan) or (parts := halves(span)) is None:
        return None
    log.info("insights %s %s..%s timed out: splitting the range", plan.period, *span)
    return [plan.with_span(part) for part in parts]


def _additive(plan: _Planned) -> bool:
    fields = set(str(plan.request.params.get("fields", "")).split(",")) - IDENTITY_FIELDS
    return bool(fields) and fields <= ADDITIVE_FIELDS


async def _escalate(
    ctx: _Fetch,
    exhausted: list[_Planned],
    groups: Mapping[str, Sequence[str]],
    result: InsightsResult,
) -> None:
    """Run what could not be split small enough as async reports (or record it failed)."""
    if ctx.large.reports is None:
        for plan in exhausted:
            assert plan.error is not None
            result.fail(plan.entity_ids, plan.error)
        return
    by_period: dict[str, list[str]] = {}
    for plan in exhausted:
        ids = by_period.setdefault(plan.period, [])
        ids.extend(i for i in plan.entity_ids if i not in ids)
    log.info("insights still timing out after splits: %d async report run(s)", len(by_period))
    await _run_reports(ctx, by_period, groups, result)


async def _run_reports(
    ctx: _Fetch,
    by_period: Mapping[str, list[str]],
    groups: Mapping[str, Sequence[str]],
    result: InsightsResult,
) -> None:
    """One async report run per period, concurrently; progress is their mean percent."""
    reports = ctx.large.reports
    assert reports is not None
    percents = dict.fromkeys(by_period, 0.0)
    reported, turn = [-1.0], asyncio.Lock()

    async def track(period: str, percent: float) -> None:
        # One report at a time and only upwards: concurrent runs never show progress going back.
        percents[period] = percent
        async with turn:
            mean = sum(percents.values()) / len(percents)
            if ctx.large.on_progress is not None and mean > reported[0]:
                reported[0] = mean
                await ctx.large.on_progress(mean)

    async def run(period: str, ids: list[str]) -> None:
        params = _account_params(ctx, period, groups[period])
        params["filtering"] = ids_filter(ctx.level, ids)
        try:
            rows = await reports.rows(
                ctx.account_id,
                params,
                token=ctx.token,
                on_percent=lambda pct: track(period, pct),
            )
        except GraphError as exc:
            log.warning("insights report %s failed for %d entities: %s", period, len(ids), exc)
            result.fail(ids, exc)
            return
        result.forget(ids, period)
        wanted, key = set(ids), id_field(ctx.level)
        for row in rows:
            entity_id = str(row.get(key, ""))
            if entity_id in wanted:
                result.add_row(entity_id, period, row)

    await asyncio.gather(*(run(period, ids) for period, ids in by_period.items()))


def _absorb(plan: _Planned, answer: SubResult, result: InsightsResult, level: str) -> str | None:
    if answer.error is not None:
        log.warning(
            "insights %s failed for %d entities: %s",
            plan.period,
            len(plan.entity_ids),
            answer.error,
        )
        result.fail(plan.entity_ids, answer.error)
        return None
    data = answer.body.get("data") if isinstance(answer.body, dict) else None
    if not isinstance(data, list):
        result.fail(
            plan.entity_ids,
            MalformedResponseError("insights answer without data", response=answer.body),
        )
        return None
    wanted = set(plan.entity_ids)
    for row in data:
        entity_id = plan.entity_ids[0] if plan.direct else str(row.get(id_field(level), ""))
        if isinstance(row, dict) and entity_id in wanted:
            if plan.span is None:
                result.add_row(entity_id, plan.period, row)
            else:
                result.merge_row(entity_id, plan.period, row, plan.span)
    return next_cursor(answer.body)
