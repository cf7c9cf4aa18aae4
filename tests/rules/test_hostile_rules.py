"""Hostile values a fuzzer found: each is a validation error with its JSON path, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from ruleengine.errors import RuleValidationError
from ruleengine.rules.basics import MAX_BUDGET
from ruleengine.rules.language.model import parse_rule

TOO_BIG = 2**64  # beyond what BSON's int64 holds


def base_rule() -> dict[str, Any]:
    return {
        "name": "Scale winners",
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "Asia/Jakarta",
        "tasks": [
            {
                "id": "scale",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 3}],
                "action": {"type": "increase_budget", "percent": 20, "max_budget": 50000},
                "cooldown_minutes": 360,
            }
        ],
    }


def with_action(action: dict[str, Any]) -> dict[str, Any]:
    rule = base_rule()
    rule["tasks"][0]["action"] = action
    return rule


def timetable(slot: str) -> dict[str, Any]:
    return base_rule() | {"schedule": {"mode": "timetable", "slots": {"mon": [slot]}}}


def set_in(path: list[Any], value: Any) -> dict[str, Any]:
    rule = base_rule()
    target: Any = rule
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return rule


CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("255+ char timezone", base_rule() | {"timezone": "x" * 300}, "timezone", "unknown timezone"),
    ("a tz directory", base_rule() | {"timezone": "America"}, "timezone", "unknown timezone"),
    ("a tz data file", base_rule() | {"timezone": "zone.tab"}, "timezone", "unknown timezone"),
    ("NUL in timezone", base_rule() | {"timezone": "UTC\x00"}, "timezone", "unknown timezone"),
    ("absolute tz path", base_rule() | {"timezone": "/etc/UTC"}, "timezone", "unknown timezone"),
    (
        "year 1",
        base_rule() | {"date_range": {"start": "0001-01-01"}},
        "date_range.start",
        "between 2000-01-01 and 2999-12-31",
    ),
    (
        "year 9999",
        base_rule() | {"date_range": {"end": "9999-12-31"}},
        "date_range.end",
        "between 2000-01-01 and 2999-12-31",
    ),
    (
        "max_budget beyond int64",
        set_in(["tasks", 0, "action", "max_budget"], TOO_BIG),
        "tasks[0].action.max_budget",
        "less than or equal to",
    ),
    (
        "min_budget above the business maximum",
        set_in(["tasks", 0, "action", "min_budget"], MAX_BUDGET + 1),
        "tasks[0].action.min_budget",
        "less than or equal to",
    ),
    (
        "set_budget amount as a huge float",
        with_action({"type": "set_budget", "amount": 1.2345678901234568e29}),
        "tasks[0].action.amount",
        "",
    ),
    (
        "every_minutes beyond int64",
        set_in(["schedule", "every_minutes"], TOO_BIG),
        "schedule.every_minutes",
        "less than or equal to",
    ),
    (
        "cooldown beyond int64",
        set_in(["tasks", 0, "cooldown_minutes"], -TOO_BIG),
        "tasks[0].cooldown_minutes",
        "greater than or equal to",
    ),
    (
        "NaN as a string",
        set_in(["tasks", 0, "conditions", 0, "value"], "NaN"),
        "tasks[0].conditions[0].value",
        "finite number",
    ),
    (
        "Infinity as a string",
        set_in(["tasks", 0, "action", "percent"], "Infinity"),
        "tasks[0].action.percent",
        "finite number",
    ),
    ("account with a newline", base_rule() | {"ad_accounts": ["act_1\n"]}, "ad_accounts[0]", ""),
    ("account in Arabic digits", base_rule() | {"ad_accounts": ["act_١٠"]}, "ad_accounts[0]", ""),
    ("time with a newline", timetable("08:30\n"), "schedule.slots.mon[0]", "HH:MM"),
    ("time in Devanagari digits", timetable("0८:3०"), "schedule.slots.mon[0]", "HH:MM"),
    (
        "metric with a newline",
        set_in(["tasks", 0, "conditions", 0, "metric"], "actions.purchase\n"),
        "tasks[0].conditions[0].metric",
        "",
    ),
    (
        "custom metric with a newline",
        base_rule()
        | {
            "custom_metrics": {"spreadsheet_id": "s"},
            "tasks": [
                base_rule()["tasks"][0]
                | {"conditions": [{"metric": "custom:margin\n", "operator": ">", "value": 1}]}
            ],
        },
        "tasks[0].conditions[0].metric",
        "",
    ),
]

TEMPLATES = [
    ("{name:>99}", "format"),
    ("{name:>999999999}", "format"),
    ("{name:,}", "format"),
    ("{date:%Y}", "format"),
    ("{name!r}", "conversion"),
    ("{name[0]}", "index or attribute"),
    ("{name.upper}", "index or attribute"),
    ("{}", "empty"),
    ("{0}", "unknown placeholder"),
    ("{name", "literal brace"),
]


def errors_of(data: Any) -> dict[str, str]:
    with pytest.raises(RuleValidationError) as info:
        parse_rule(data)
    return {e.path: e.message for e in info.value.errors}


@pytest.mark.parametrize(
    ("data", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_hostile_value_is_an_error_at_its_path(data: Any, path: str, fragment: str) -> None:
    errors = errors_of(data)
    assert path in errors, errors
    assert fragment in errors[path]


@pytest.mark.parametrize(("template", "fragment"), TEMPLATES)
def test_a_template_takes_plain_placeholders_only(template: str, fragment: str) -> None:
    rename = errors_of(with_action({"type": "rename", "template": template}))
    assert fragment in rename["tasks[0].action.template"], rename
    template = template.replace("name", "entity_name")  # notify's own placeholders
    notify = errors_of(with_action({"type": "notify", "webhook": "ops", "template": template}))
    assert fragment in notify["tasks[0].action.template"]
    then = {"after_minutes": 5, "do": "notify", "webhook": "ops", "template": template}
    follow = errors_of(with_action({"type": "pause", "then": then}))
    assert fragment in follow["tasks[0].action.then.template"]


def test_the_largest_values_that_fit_are_accepted() -> None:
    rule = parse_rule(
        set_in(["tasks", 0, "action"], {"type": "set_budget", "amount": MAX_BUDGET})
        | {"date_range": {"start": "2000-01-01", "end": "2999-12-31"}, "timezone": "Etc/GMT-14"}
    )
    assert rule.tasks[0].action.amount == MAX_BUDGET  # type: ignore[union-attr]
    plain = with_action({"type": "rename", "template": "{{literal}} {name} – {date} ({rule})"})
    assert parse_rule(plain).tasks[0].action.template.startswith("{{")  # type: ignore[union-attr]
