"""Meta's Ad Rules' filters → our filters and conditions (a part of :mod:`meta_import`).

Object-field filters (``entity_type``, ``id``, ``name``, ``effective_status``, …) become
our ``filters``; Insights and special-key filters become ``conditions``, each with the
rule's ``time_preset`` as its period; money from minor units to the account currency's
units. Whatever does not map is a problem on the importing :class:`Report`. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ruleengine.rules.language.catalog import gone_window, resolve_metric
from ruleengine.rules.language.model import EFFECTIVE_STATUSES
from ruleengine.rules.language.model import FILTER_FIELDS as LEVEL_FILTER_FIELDS
from ruleengine.rules.meta.vocab import (
    FILTER_FIELDS,
    FILTER_OPERATORS,
    ID_FIELDS,
    IMPLICIT_STATUS,
    METRIC_OPERATORS,
    PRESETS,
    UNMAPPED_METRICS,
    MetaAccount,
    Problem,
    Report,
    fail,
    from_minor,
    is_money,
    metric_of,
    number,
    tidy,
)


@dataclass
class Parts:
    filters: list[dict[str, Any]] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    #: the rule's time_preset as our period (None without one)
    preset: str | None = None


class MetaFilters:
    """Meta's filters split into our filters and conditions."""

    def __init__(self, converter: Report, level: str | None, *, account: MetaAccount) -> None:
        self.c = converter
        self.account = account
        self.level = level
        self.preset: str | None = None
        self.parts = Parts()
        self.needs_preset: list[str] = []

    def read(self, filters: list[Any], execution_type: str | None) -> Parts:
        entries = []
        for index, raw in enumerate(filters):
            path = f"evaluation_spec.filters[{index}]"
            entry = self.c._try(_filter_entry, raw, path)
            if entry is not None:
                entries.append((path, entry))
        for path, entry in entries:
            if entry[0] == "time_preset":
                self.c._try(self._time_preset, entry, path)
        for path, entry in entries:
            self.c._try(self._one, entry, path)
        if self.needs_preset and self.preset is None:
            self.c.problems.append(
                Problem(
                    self.needs_preset[0],
                    "Insights filter",
                    "no time_preset: Meta needs one for Insights filters",
                )
            )
        if not any(f["field"] == "effective_status" for f in self.parts.filters):
            self._implicit_status(execution_type)
        self.parts.preset = self.preset
        return self.parts

    def _time_preset(self, entry: tuple[str, str, Any], path: str) -> None:
        _, operator, value = entry
        if operator != "EQUAL" or not isinstance(value, str) or value not in PRESETS:
            raise fail(f"{path}.value", value, "not one of Meta's time presets")
        self.preset = PRESETS[value]

    def _implicit_status(self, execution_type: str | None) -> None:
        operator, values = IMPLICIT_STATUS.get(execution_type or "", IMPLICIT_STATUS["*"])
        self.parts.filters.append(
            {"field": "effective_status", "operator": operator, "value": list(values)}
        )

    def _one(self, entry: tuple[str, str, Any], path: str) -> None:
        name, operator, value = entry
        if name in ("entity_type", "time_preset"):
            return
        if name == "attribution_window":
            if isinstance(value, str) and (gone := gone_window(value)) is not None:
                raise fail(path, value, gone)
            if value != "ACCOUNT_DEFAULT":
                self.c.warn(
                    path,
                    value,
                    "ruleengine reads Insights with the ad account's attribution setting"
                    " (use_unified_attribution_setting): conversions and ROAS may differ",
                )
            return
        if name == "budget_reset_period":
            self.parts.conditions.append(_budget_kind(operator, value, path))
            return
        if name in FILTER_FIELDS:
            self.parts.filters.append(self._filter(name, operator, value, path))
            return
        self.parts.conditions.append(self._condition(name, operator, value, path))

    def _filter(self, name: str, operator: str, value: Any, path: str) -> dict[str, Any]:
        if self.level is not None and name not in LEVEL_FILTER_FIELDS[self.level]:
            raise fail(f"{path}.field", name, f"{self.level}s cannot be filtered on {name}")
        if operator not in FILTER_OPERATORS:
            raise fail(f"{path}.operator", operator, f"{name} cannot be filtered with {operator}")
        wants_list = operator in ("IN", "NOT_IN")
        if wants_list != isinstance(value, list) or (wants_list and not value):
            kind = "a non-empty list" if wants_list else "one value"
            raise fail(f"{path}.value", value, f"{operator} takes {kind}")
        values = value if isinstance(value, list) else [value]
        cleaned = [_filter_value(name, item, f"{path}.value") for item in values]
        return {"field": name, "operator": operator, "value": cleaned if wants_list else cleaned[0]}

    def _condition(self, name: str, operator: str, value: Any, path: str) -> dict[str, Any]:
        if name in UNMAPPED_METRICS:
            raise fail(f"{path}.field", name, UNMAPPED_METRICS[name])
        try:
            metric, period = metric_of(name)
        except KeyError:
            raise fail(
                f"{path}.field", name, "no metric of ruleengine's catalogue means this"
            ) from None
        if operator not in METRIC_OPERATORS:
            raise fail(f"{path}.operator", operator, f"a metric cannot be compared with {operator}")
        if name == "estimated_budget_spending_percentage":
            self.c.warn(
                path,
                name,
                "ours extrapolates today's spend of a daily budget in a straight line; Meta's"
                " comes from its own model (docs/rules.md)",
            )
        offset = self.account.offset if is_money(metric) else 1
        condition: dict[str, Any] = {"metric": metric}
        if resolve_period := period or (self.preset if _needs_period(metric) else None):
            condition["period"] = resolve_period
        elif _needs_period(metric):
            self.needs_preset.append(path)
        condition["operator"] = METRIC_OPERATORS[operator]
        condition["value"] = _metric_value(operator, value, offset, f"{path}.value")
        return condition


def _needs_period(metric: str) -> bool:
    return resolve_metric(metric).needs_period


def _metric_value(operator: str, raw: Any, offset: int, path: str) -> Any:
    if operator in ("IN_RANGE", "NOT_IN_RANGE"):
        if not isinstance(raw, list) or len(raw) != 2:
            raise fail(path, raw, f"{operator} takes [low, high]")
        low, high = (number(raw[i], f"{path}[{i}]") for i in (0, 1))
        if low > high:
            raise fail(path, raw, "low is above high")
        return [from_minor(low, offset), from_minor(high, offset)]
    return from_minor(number(raw, path), offset)


def _budget_kind(operator: str, value: Any, path: str) -> dict[str, Any]:
    """``budget_reset_period IN [LIFETIME]`` → ``lifetime_budget > 0`` (DAY: daily)."""
    values = value if isinstance(value, list) else [value]
    if operator not in ("EQUAL", "IN") or len(values) != 1 or values[0] not in ("DAY", "LIFETIME"):
        raise fail(
            path,
            {"operator": operator, "value": value},
            "only one budget kind (DAY or LIFETIME) maps: it becomes daily_budget > 0 or"
            " lifetime_budget > 0",
        )
    metric = "daily_budget" if values[0] == "DAY" else "lifetime_budget"
    return {"metric": metric, "operator": ">", "value": 0}


def _filter_value(name: str, raw: Any, path: str) -> str | float:
    if name in ID_FIELDS:
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise fail(path, raw, "an id is a number")
        text = (
            str(int(raw)) if isinstance(raw, int | float) and float(raw).is_integer() else str(raw)
        )
        if not text.isascii() or not text.isdigit():
            raise fail(path, raw, "an id is a number")
        return text
    if name == "effective_status":
        if not isinstance(raw, str) or raw not in EFFECTIVE_STATUSES:
            raise fail(path, raw, "not one of Meta's effective_status values")
        return str(raw)
    if isinstance(raw, str):
        return raw
    return tidy(number(raw, path))


def _filter_entry(raw: Any, path: str) -> tuple[str, str, Any]:
    entry = object_at(raw, path)
    name, operator = entry.get("field"), entry.get("operator")
    if not isinstance(name, str) or not name:
        raise fail(f"{path}.field", name, "a filter needs a field")
    if not isinstance(operator, str):
        raise fail(f"{path}.operator", operator, "a filter needs an operator")
    if "value" not in entry:
        raise fail(f"{path}.value", "absent", "a filter needs a value")
    return name, operator, entry["value"]


def object_at(raw: Any, path: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise fail(path, raw, "missing or not a JSON object")
    return raw


def list_at(raw: Any, path: str) -> list[Any]:
    if not isinstance(raw, list):
        raise fail(path, raw, "missing or not a list")
    return raw
