"""Budget schedule routes: ``POST``/``GET /{campaign or ad set}/budget_schedules``, ``GET`` and
``DELETE /{high_demand_period_id}``.

Meta's reference documents the edge's POST (``budget_value``, ``budget_value_type``,
``time_start``, ``time_end``; answers ``{"id"}``, error 100 for an invalid parameter) and GET
(``time_start``: "Filters out any HDPs with stop time <= time_start"; ``time_stop``: "Filters out
any HDPs with start time >= time_stop"); the SDK's ``HighDemandPeriod`` reads and deletes one
node. Where Meta is silent the sandbox is strict, and says so in its error messages (wording
the sandbox's own): a window off a quarter hour, one already over or starting in the past, one
overlapping another schedule of the object, or an object without a daily budget is refused
with error 100 before anything is stored. A deleted schedule is gone from every read; the
spend its window made before the deletion stays (:mod:`graph_sandbox.schedules`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from graph_sandbox.errors import invalid_param
from graph_sandbox.objects import meta_time
from graph_sandbox.protocol import GraphRequest, page_body
from graph_sandbox.query import paginate, parse_fields, parse_limit
from graph_sandbox.schedules import (
    QUARTER_HOUR_S,
    RECURRENCES,
    VALUE_TYPES,
    HighDemandPeriod,
    ValueType,
)
from graph_sandbox.state import SandboxState
from graph_sandbox.world import AdObject
from graph_sandbox.writes import check_not_legacy_advantage

#: The fields of a ``HighDemandPeriod`` (SDK 26.0.3); ``weekly_schedule`` is never set here.
FIELDS: Final = (
    "id",
    "ad_object_id",
    "budget_value",
    "budget_value_type",
    "recurrence_type",
    "time_start",
    "time_end",
    "weekly_schedule",
)
#: What an edge read without ``fields`` answers (the sandbox's choice).
DEFAULT_FIELDS: Final = ("id", "budget_value", "budget_value_type", "time_start", "time_end")
#: Meta's int64, and the last second of the year 9999 (what a datetime holds).
_INT64: Final = 2**63
_LAST_SECOND: Final = 253_402_300_799
_CREATE_PARAMS: Final = frozenset(
    {"budget_value", "budget_value_type", "time_start", "time_end", "recurrence_type"}
)


def create(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``POST /{id}/budget_schedules``: a new high-demand period; ``{"id": …}``."""
    obj = _scheduled_object(state, req.segments[0])
    check_not_legacy_advantage(state, obj, "updated")
    period = _validated(state, obj, req.params)
    for other in state.world.schedules.of(obj.id):
        if period.overlaps(other):
            raise invalid_param(
                f"The high demand period overlaps the budget schedule {other.id} of {obj.id}"
                f" ({meta_time(other.time_start)} to {meta_time(other.time_end)}); delete it"
                " or choose another window"
            )
    state.world.schedules.add(period)
    return {"id": period.id}


def list_periods(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /{id}/budget_schedules``: the object's standing periods by start time."""
    obj = _scheduled_object(state, req.segments[0])
    fields = parse_fields(
        req.param("fields"), default=DEFAULT_FIELDS, allowed=FIELDS, node="HighDemandPeriod"
    )
    after, before = _instant(req.param("time_start")), _instant(req.param("time_stop"))
    periods = [
        p
        for p in state.world.schedules.of(obj.id)
        if (after is None or p.time_end > after) and (before is None or p.time_start < before)
    ]
    page = paginate(
        periods,
        lambda p: p.id,
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [render(p, fields) for p in page.items], page)


def read_period(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``GET /{high_demand_period_id}``."""
    period = state.world.schedules.live(req.segments[0])
    assert period is not None, "the router checks ids before reads"
    fields = parse_fields(
        req.param("fields"), default=("id",), allowed=FIELDS, node="HighDemandPeriod"
    )
    return render(period, fields)


def delete(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``DELETE /{id}``: a high-demand period (the SDK's ``HighDemandPeriod.api_delete``);
    the sandbox deletes nothing else."""
    period = state.world.schedules.live(req.segments[0])
    if period is None:
        raise invalid_param(f"Unsupported delete request on {req.segments[0]}")
    period.deleted_at = state.now()
    return {"success": True}


def render(period: HighDemandPeriod, fields: list[str]) -> dict[str, Any]:
    """The requested fields of a period (times as Meta writes datetimes), and its ``id``."""
    values: dict[str, Any] = {
        "id": period.id,
        "ad_object_id": period.object_id,
        "budget_value": period.budget_value,
        "budget_value_type": period.budget_value_type,
        "recurrence_type": period.recurrence_type,
        "time_start": meta_time(period.time_start),
        "time_end": meta_time(period.time_end),
    }
    return {name: values[name] for name in (*fields, "id") if values.get(name) is not None}


def _scheduled_object(state: SandboxState, object_id: str) -> AdObject:
    obj = state.world.get(object_id)
    if obj is None or obj.kind == "ad":
        raise invalid_param(f"Unknown path components: /{object_id}/budget_schedules")
    return obj


def _validated(state: SandboxState, obj: AdObject, params: Mapping[str, str]) -> HighDemandPeriod:
    unknown = sorted(set(params) - _CREATE_PARAMS - {"fields"})
    if unknown:
        raise invalid_param(f"Param {unknown[0]} is not a budget schedule parameter")
    if obj.daily_budget is None:
        raise invalid_param(
            f"{obj.id} has no daily budget: a budget schedule raises a daily budget of the"
            " campaign or ad set that holds it"
        )
    value = _integer(params, "budget_value")
    if value <= 0:
        raise invalid_param("Param budget_value must be a positive integer: the increase")
    kind: ValueType = "ABSOLUTE" if params.get("budget_value_type") == "ABSOLUTE" else "MULTIPLIER"
    if params.get("budget_value_type") not in VALUE_TYPES:
        raise invalid_param(f"Param budget_value_type must be one of {{{', '.join(VALUE_TYPES)}}}")
    start, end = _integer(params, "time_start"), _integer(params, "time_end")
    if not (0 <= start <= _LAST_SECOND and 0 <= end <= _LAST_SECOND):
        raise invalid_param("Params time_start and time_end must be Unix seconds")
    now = int(state.now().timestamp())
    if start % QUARTER_HOUR_S or end % QUARTER_HOUR_S:
        raise invalid_param(
            "Params time_start and time_end must fall on a quarter hour (Unix seconds divisible"
            " by 900)"
        )
    if end <= start:
        raise invalid_param("Param time_end must be after time_start")
    if start < now - now % QUARTER_HOUR_S:
        raise invalid_param("Param time_start must not be in the past")
    recurrence = params.get("recurrence_type")
    if recurrence is not None and recurrence not in RECURRENCES:
        raise invalid_param(f"Param recurrence_type must be one of {{{', '.join(RECURRENCES)}}}")
    return HighDemandPeriod(
        id=state.world.schedules.next_id(),
        object_id=obj.id,
        account_id=obj.account_id,
        budget_value=value,
        budget_value_type=kind,
        time_start=datetime.fromtimestamp(start, UTC),
        time_end=datetime.fromtimestamp(end, UTC),
        recurrence_type=recurrence,
        created_at=state.now(),
    )


def _integer(params: Mapping[str, str], name: str) -> int:
    raw = params.get(name)
    if raw is None:
        raise invalid_param(f"The parameter {name} is required")
    try:
        value = int(raw)
    except ValueError as exc:
        raise invalid_param(f"Param {name} must be an integer") from exc
    if not -_INT64 <= value < _INT64:
        raise invalid_param(f"Param {name} must be an int64")
    return value


def _instant(raw: str | None) -> datetime | None:
    """A ``datetime/timestamp`` filter: Unix seconds or an ISO 8601 time."""
    if raw is None or raw == "":
        return None
    try:
        seconds = int(raw)
    except ValueError:
        pass
    else:
        if not 0 <= seconds <= _LAST_SECOND:
            raise invalid_param(f"Param {raw} is not a timestamp")
        return datetime.fromtimestamp(seconds, UTC)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise invalid_param(f"Param {raw} is not a timestamp") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
