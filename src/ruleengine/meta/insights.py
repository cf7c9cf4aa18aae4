"""Insights for a job's entities, by one of two strategies with the same answers.

* ``per_campaign`` — the original design: one Batch API call per entity with one
  sub-request per period group, fanned out concurrently. Cost grows with the
  number of entities.
* ``account_level`` (default) — per period group, one account-level Insights
  request with ``level=campaign|adset`` filtered to the entity ids (chunked),
  all sent together in Batch API calls of ≤ 50. Cost grows with periods.

Both ask for ``use_unified_attribution_setting=true`` (ROAS as Ads Manager shows
it) and ``action_breakdowns=action_type``, and both return period → row per
entity, leaving entities without delivery without a row, as Meta does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ruleengine.meta.batch import BatchReader, SubRequest, SubResult
from ruleengine.meta.errors import GraphError, MalformedResponseError
from ruleengine.meta.reader import next_cursor

log = logging.getLogger(__name__)

Strategy = Literal["account_level", "per_campaign"]
IDS_PER_REQUEST: Final = 500
BASE_PARAMS: Final = {"use_unified_attribution_setting": True, "action_breakdowns": "action_type"}


@dataclass
class InsightsResult:
    """entity id → period → Insights row, plus what could not be fetched."""

    rows: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    errors: dict[str, GraphError] = field(default_factory=dict)  # entity id → error

    def add_row(self, entity_id: str, period: str, row: dict[str, Any]) -> None:
        """Store one row."""
        self.rows.setdefault(entity_id, {})[period] = row

    def fail(self, entity_ids: Sequence[str], error: GraphError) -> None:
        """Mark entities whose metrics could not be fetched."""
        for entity_id in entity_ids:
            self.errors.setdefault(entity_id, error)

    def for_entity(self, entity_id: str) -> dict[str, dict[str, Any]]:
        """period → row for one entity (empty when Meta returned nothing)."""
        return self.rows.get(entity_id, {})


def _id_field(level: str) -> str:
    return "campaign_id" if level == "campaign" else "adset_id"


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
) -> InsightsResult:
    """Fetch every period group for ``entity_ids`` with the chosen strategy."""
    result = InsightsResult()
    if not entity_ids or not groups:
        return result
    if strategy == "per_campaign":
        # The original design: one Batch API call per entity, fanned out (BatchReader bounds it).
        per_entity = [_per_entity_requests([e], groups) for e in entity_ids]
        await asyncio.gather(
            *(
                _collect(batch, r, result, level=level, token=token, account_id=account_id)
                for r in per_entity
            )
        )
    else:
        requests = _account_requests(account_id, level, entity_ids, groups, ids_per_request)
        await _collect(batch, requests, result, level=level, token=token, account_id=account_id)
    return result


@dataclass(frozen=True)
class _Planned:
    request: SubRequest
    period: str
    entity_ids: tuple[str, ...]  # the entities this request covers
    direct: bool  # True: per-entity request, rows carry no id field


def _per_entity_requests(
    entity_ids: Sequence[str], groups: Mapping[str, Sequence[str]]
) -> list[_Planned]:
    planned: list[_Planned] = []
    for entity_id in entity_ids:
        for period, fields in groups.items():
            params = {**BASE_PARAMS, "date_preset": period, "fields": ",".join(fields)}
            planned.append(
                _Planned(SubRequest(f"{entity_id}/insights", params), period, (entity_id,), True)
            )
    return planned


def _account_requests(
    account_id: str,
    level: str,
    entity_ids: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    ids_per_request: int,
) -> list[_Planned]:
    planned: list[_Planned] = []
    id_field = _id_field(level)
    for period, fields in groups.items():
        for start in range(0, len(entity_ids), ids_per_request):
            chunk = tuple(entity_ids[start : start + ids_per_request])
            params = {
                **BASE_PARAMS,
                "level": level,
                "date_preset": period,
                "fields": ",".join(sorted({*fields, id_field})),
                "filtering": [{"field": f"{level}.id", "operator": "IN", "value": list(chunk)}],
                "limit": len(chunk),
            }
            planned.append(
                _Planned(SubRequest(f"{account_id}/insights", params), period, chunk, False)
            )
    return planned


async def _collect(
    batch: BatchReader,
    planned: list[_Planned],
    result: InsightsResult,
    *,
    level: str,
    token: str,
    account_id: str,
) -> None:
    """Send every planned request; follow pagination in further batch rounds."""
    while planned:
        answers = await batch.get_many(
            [p.request for p in planned], token=token, account_id=account_id
        )
        follow_up: list[_Planned] = []
        for plan, answer in zip(planned, answers, strict=True):
            cursor = _absorb(plan, answer, result, level)
            if cursor:
                params = {**plan.request.params, "after": cursor}
                follow_up.append(
                    _Planned(
                        SubRequest(plan.request.path, params),
                        plan.period,
                        plan.entity_ids,
                        plan.direct,
                    )
                )
        planned = follow_up


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
        entity_id = plan.entity_ids[0] if plan.direct else str(row.get(_id_field(level), ""))
        if isinstance(row, dict) and entity_id in wanted:
            result.add_row(entity_id, plan.period, row)
    return next_cursor(answer.body)
