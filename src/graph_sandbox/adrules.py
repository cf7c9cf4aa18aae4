"""Ad rules routes: ``act_{id}/adrules_library`` (list, create), ``/{rule_id}`` (read, update),
``/{rule_id}/history`` and ``act_{id}/adrules_history``.

Rules are stored and read back in Meta's shapes; they never run. The router has
already checked the token, its permissions and the ids (``scope``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from graph_sandbox.adrule_library import CREATED_BY, AdRule, HistoryEntry
from graph_sandbox.adrule_specs import (
    EVALUATION_TYPES,
    HISTORY_ACTIONS,
    WRITABLE_STATUSES,
    validate_rule,
)
from graph_sandbox.errors import invalid_param
from graph_sandbox.objects import meta_time
from graph_sandbox.protocol import GraphRequest, page_body
from graph_sandbox.query import paginate, parse_fields, parse_limit
from graph_sandbox.state import SandboxState

RULE_FIELDS = (
    "id",
    "account_id",
    "name",
    "status",
    "evaluation_spec",
    "execution_spec",
    "schedule_spec",
    "created_time",
    "updated_time",
    "created_by",
    "disable_error_code",
    "recommended_rule_key",
    "ui_creation_source",
)
HISTORY_FIELDS = (
    "evaluation_spec",
    "exception_code",
    "exception_message",
    "execution_spec",
    "is_manual",
    "results",
    "schedule_spec",
    "timestamp",
)
_SPECS = ("evaluation_spec", "execution_spec", "schedule_spec")
_UPDATABLE = frozenset({"name", "status", *_SPECS})
_CREATE_PARAMS = _UPDATABLE | {"account_id", "recommended_rule_key", "ui_creation_source"}
_TRUE = ("true", "1")


def _check_path(state: SandboxState, req: GraphRequest) -> None:
    """Library and account history are edges of ad accounts, ``history`` of rules only."""
    node, edge = req.segments[0], req.segments[1:]
    account_edge = edge in (("adrules_library",), ("adrules_history",))
    if (account_edge and not node.startswith("act_")) or (
        edge == ("history",) and state.world.adrules.get(node) is None
    ):
        raise invalid_param(f"Unknown path components: {req.path}")


def read_call(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """Every GET of an ad rules route."""
    _check_path(state, req)
    segments = req.segments
    if segments[-1] == "adrules_library":
        return _list(state, req)
    if segments[-1] == "adrules_history":
        return _history(state, req, act_id=segments[0])
    if segments[1:] == ("history",):
        return _history(state, req, rule_id=segments[0])
    return render_rule(_rule(state, segments[0]), _rule_fields(req))


def write_call(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """Every POST of an ad rules route: create a rule, or update one."""
    _check_path(state, req)
    if req.segments[-1] == "adrules_library":
        return _create(state, req)
    return _update(state, req)


def _rule(state: SandboxState, rule_id: str) -> AdRule:
    rule = state.world.adrules.get(rule_id)
    assert rule is not None, "the router resolves rule ids before ad rules calls"
    return rule


def _rule_fields(req: GraphRequest) -> list[str]:
    return parse_fields(req.param("fields"), default=("id",), allowed=RULE_FIELDS, node="AdRule")


def render_rule(rule: AdRule, fields: list[str]) -> dict[str, Any]:
    """A rule with the fields asked for (always its ``id``), specs in the read-back form."""
    getters: dict[str, Callable[[], Any]] = {
        "id": lambda: rule.id,
        "account_id": lambda: rule.account_id,
        "name": lambda: rule.name,
        "status": lambda: rule.status,
        "evaluation_spec": rule.evaluation_read_back,
        "execution_spec": rule.execution_read_back,
        "schedule_spec": lambda: rule.schedule_spec,
        "created_time": lambda: meta_time(rule.created_time),
        "updated_time": lambda: meta_time(rule.updated_time),
        "created_by": lambda: dict(CREATED_BY),
        "disable_error_code": lambda: None,
        "recommended_rule_key": lambda: rule.recommended_rule_key,
        "ui_creation_source": lambda: rule.ui_creation_source,
    }
    rendered = {name: getters[name]() for name in ("id", *fields)}
    return {name: value for name, value in rendered.items() if value is not None}


def _list(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    fields = _rule_fields(req)
    page = paginate(
        state.world.adrules.of_account(req.segments[0]),
        lambda rule: rule.id,
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [render_rule(rule, fields) for rule in page.items], page)


def _spec_param(params: Mapping[str, str], name: str) -> Any:
    """A spec parameter: a JSON object (form fields carry it as JSON text)."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid_param(f"Param {name} must be a JSON object") from None
    if not isinstance(value, dict):
        raise invalid_param(f"Param {name} must be a JSON object")
    return value


def _status(raw: str | None, default: str) -> str:
    status = raw or default
    if status not in WRITABLE_STATUSES:
        raise invalid_param(f"Param status must be one of {{{', '.join(WRITABLE_STATUSES)}}}")
    return status


def _name(raw: str | None) -> str:
    if raw is None or not raw.strip():
        raise invalid_param("Param name must be a non-empty string")
    return raw


def _create(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    act_id, params = req.segments[0], req.params
    unknown = sorted(params.keys() - _CREATE_PARAMS)
    if unknown:
        raise invalid_param(f"Param {unknown[0]} is not a parameter of adrules_library")
    for required in ("name", "evaluation_spec", "execution_spec"):
        if not params.get(required):
            raise invalid_param(f"The parameter {required} is required")
    account = params.get("account_id")
    if account and account.removeprefix("act_") != act_id.removeprefix("act_"):
        raise invalid_param(f"Param account_id must be the ad account of the path ({act_id})")
    name, status = _name(params["name"]), _status(params.get("status"), "ENABLED")
    specs = tuple(_spec_param(params, spec) for spec in _SPECS)
    validate_rule(*specs)
    rule = state.world.adrules.create(
        act_id.removeprefix("act_"),
        name=name,
        status=status,
        specs=(specs[0], specs[1], specs[2]),
        at=state.now(),
        extras={key: params.get(key) for key in ("recommended_rule_key", "ui_creation_source")},
    )
    return {"id": rule.id}


def _update(state: SandboxState, req: GraphRequest) -> dict[str, Any]:
    """``POST /{rule_id}``: like Meta, a spec sent replaces the whole spec."""
    rule, params = _rule(state, req.segments[0]), req.params
    unknown = sorted(params.keys() - _UPDATABLE)
    if unknown:
        raise invalid_param(f"Param {unknown[0]} cannot be updated on an ad rule")
    if not params:
        raise invalid_param("Nothing to update: send name, status or a spec")
    current = (rule.evaluation_spec, rule.execution_spec, rule.schedule_spec)
    specs: list[Any] = [
        _spec_param(params, name) if name in params else old
        for name, old in zip(_SPECS, current, strict=True)
    ]
    validate_rule(*specs)
    if "name" in params:
        rule.name = _name(params["name"])
    rule.status = _status(params.get("status"), rule.status)
    rule.evaluation_spec, rule.execution_spec = specs[0], specs[1]
    rule.schedule_spec = specs[2]
    rule.updated_time = state.now()
    return {"success": True}


def _history(
    state: SandboxState, req: GraphRequest, *, act_id: str | None = None, rule_id: str | None = None
) -> dict[str, Any]:
    """A rule's runs (or every rule's of an account, with ``rule_id``), newest first."""
    allowed = (*HISTORY_FIELDS, "rule_id") if act_id else HISTORY_FIELDS
    node = "AdAccountAdRulesHistory" if act_id else "AdRuleHistory"
    fields = parse_fields(req.param("fields"), default=allowed, allowed=allowed, node=node)
    keep = _history_filter(req, account=act_id is not None)
    entries = [e for e in state.world.adrules.history_of(rule_id=rule_id, act_id=act_id) if keep(e)]
    page = paginate(
        entries,
        lambda entry: entry.key,
        limit=parse_limit(req.param("limit")),
        after=req.param("after"),
        before=req.param("before"),
    )
    return page_body(req, [render_run(entry, fields) for entry in page.items], page)


def _history_filter(req: GraphRequest, *, account: bool) -> Callable[[HistoryEntry], bool]:
    """``object_id``, ``action``, ``hide_no_changes`` (and on the account, ``evaluation_type``)."""
    object_id, action = req.param("object_id"), req.param("action")
    if action and action not in HISTORY_ACTIONS:
        raise invalid_param(f"Param action must be one of {{{', '.join(HISTORY_ACTIONS)}}}")
    evaluation_type = req.param("evaluation_type") if account else None
    if evaluation_type and evaluation_type not in EVALUATION_TYPES:
        raise invalid_param(
            f"Param evaluation_type must be one of {{{', '.join(EVALUATION_TYPES)}}}"
        )
    hide = (req.param("hide_no_changes") or "").lower() in _TRUE

    def keep(entry: HistoryEntry) -> bool:
        results = entry.results
        if object_id:
            results = [r for r in results if str(r.get("object_id")) == object_id]
        if action:
            results = [r for r in results if any(a.get("action") == action for a in r["actions"])]
        if (object_id or action) and not results:
            return False
        if hide and not entry.changed():
            return False
        return not evaluation_type or entry.evaluation_spec["evaluation_type"] == evaluation_type

    return keep


def render_run(entry: HistoryEntry, fields: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """One history entry with the fields asked for; absent values left out, as Meta does."""
    values: dict[str, Any] = {
        "evaluation_spec": entry.evaluation_spec,
        "exception_code": entry.exception_code,
        "exception_message": entry.exception_message,
        "execution_spec": entry.execution_spec,
        "is_manual": entry.is_manual,
        "results": entry.results,
        "rule_id": entry.rule_id,
        "schedule_spec": entry.schedule_spec,
        "timestamp": meta_time(entry.timestamp),
    }
    return {name: values[name] for name in fields if values[name] is not None}
