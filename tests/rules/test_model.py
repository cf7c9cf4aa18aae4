"""Rule validation: every problem reported with its JSON path and a human message."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from ruleengine.errors import RuleValidationError
from ruleengine.rules.language.model import Rule, parse_rule, rule_json_schema

EXAMPLES = sorted(Path(__file__).parents[2].joinpath("examples", "rules").glob("*.json"))


def base_rule() -> dict[str, Any]:
    return {
        "name": "Scale winners",
        "level": "campaign",
        "ad_accounts": ["act_1001", "act_1002"],
        "filters": [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "timezone": "Asia/Jakarta",
        "tasks": [
            {
                "id": "scale",
                "conditions": [
                    {
                        "metric": "purchase_roas.omni_purchase",
                        "period": "last_7d",
                        "operator": ">",
                        "value": 3,
                    },
                    {
                        "metric": "spend",
                        "period": "today",
                        "operator": ">",
                        "compare_to": {"metric": "daily_budget", "multiplier": 0.5},
                    },
                ],
                "action": {"type": "increase_budget", "percent": 20, "max_budget": 50000},
                "cooldown_minutes": 360,
            }
        ],
    }


def errors_of(data: Any, **kwargs: Any) -> dict[str, str]:
    with pytest.raises(RuleValidationError) as info:
        parse_rule(data, **kwargs)
    return {e.path: e.message for e in info.value.errors}


def test_the_spec_example_is_valid() -> None:
    rule = parse_rule(base_rule())
    assert rule.tasks[0].conditions[1].compare_to is not None
    assert rule.entity_fields()[-1] == "daily_budget"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    assert isinstance(parse_rule(path.read_bytes()), Rule)


def test_examples_cover_every_action_type_and_schedule() -> None:
    rules = [parse_rule(p.read_bytes()) for p in EXAMPLES]
    actions = {t.action.type for r in rules for t in r.tasks}
    assert actions == {
        "pause",
        "activate",
        "increase_budget",
        "decrease_budget",
        "set_budget",
        "rename",
        "append_to_name",
        "prepend_to_name",
        "duplicate",
        "notify",
        "increase_spend_limit",
        "rebalance_budget",
        "schedule_budget",
    }
    assert {r.schedule.mode for r in rules} == {"interval", "timetable"}
    assert {t.match for r in rules for t in r.tasks} == {"all", "any"}
    assert any(r.custom_metrics for r in rules)


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [
        (
            lambda r: r["tasks"][0]["conditions"][0].update(metric="roas"),
            "tasks[0].conditions[0].metric",
            "purchase_roas.omni_purchase",
        ),
        (
            lambda r: r["tasks"][0]["conditions"][0].update(operator="=>"),
            "tasks[0].conditions[0].operator",
            "input should be",
        ),
        (
            lambda r: r["tasks"][0]["conditions"][0].pop("value"),
            "tasks[0].conditions[0]",
            "exactly one of",
        ),
        (
            lambda r: r["tasks"][0]["action"].update(percent=0),
            "tasks[0].action.percent",
            "greater than 0",
        ),
        (
            lambda r: r["tasks"][0]["action"].update(min_budget=60000),
            "tasks[0].action.min_budget",
            "max_budget",
        ),
        (
            lambda r: r.update(schedule={"mode": "timetable", "slots": {}}),
            "schedule.slots",
            "at least one slot",
        ),
        (
            lambda r: r.update(schedule={"mode": "timetable", "slots": {"mon": ["8am"]}}),
            "schedule.slots.mon[0]",
            "HH:MM",
        ),
        (lambda r: r.update(timezone="Mars/Olympus"), "timezone", "unknown timezone"),
        (
            lambda r: r.update(
                level="adset", filters=[{"field": "objective", "operator": "EQUAL", "value": "X"}]
            ),
            "filters[0].field",
            "cannot filter adsets",
        ),
        (
            lambda r: r["tasks"][0]["conditions"][1].pop("period"),
            "tasks[0].conditions[1].period",
            "required",
        ),
        (
            lambda r: r["tasks"][0]["action"].update(type="explode"),
            "tasks[0].action",
            "unknown type 'explode'",
        ),
        (lambda r: r.update(ad_accounts=["1001"]), "ad_accounts[0]", "act_123"),
        (lambda r: r.update(colour="red"), "colour", "unknown field"),
        (
            lambda r: r["tasks"][0]["conditions"][0].update(metric="custom:margin"),
            "tasks[0].conditions[0].metric",
            "custom_metrics",
        ),
        (
            lambda r: r["tasks"][0]["action"].update(
                then={"after_minutes": 5, "do": "restore_name"}
            ),
            "tasks[0].action.then.do",
            "restore_name",
        ),
        (
            lambda r: r["tasks"][0].update(action={"type": "rename", "template": "{nme}"}),
            "tasks[0].action.template",
            "unknown placeholder {nme}",
        ),
        (lambda r: r["tasks"].append(copy.deepcopy(r["tasks"][0])), "tasks[1].id", "used twice"),
        (
            lambda r: r["filters"].append(
                {"field": "effective_status", "operator": "IN", "value": ["ACTIV"]}
            ),
            "filters[1].value[0]",
            "unknown effective_status",
        ),
    ],
)
def test_each_mistake_is_named_by_its_path(mutate: Any, path: str, fragment: str) -> None:
    data = base_rule()
    mutate(data)
    errors = errors_of(data)
    assert path in errors, errors
    assert fragment in errors[path]


def test_three_mistakes_give_three_paths() -> None:
    data = base_rule()
    data["timezone"] = "Nowhere/Town"
    data["tasks"][0]["conditions"][0]["metric"] = "spnd"
    data["tasks"][0]["action"]["percent"] = -5
    errors = errors_of(data)
    assert set(errors) == {
        "timezone",
        "tasks[0].conditions[0].metric",
        "tasks[0].action.percent",
    }
    assert "did you mean 'spend'" in errors["tasks[0].conditions[0].metric"]


def test_unregistered_account_and_unknown_webhook_are_rejected_with_context() -> None:
    data = base_rule()
    data["tasks"][0]["action"] = {"type": "notify", "webhook": "slack"}
    errors = errors_of(data, accounts={"act_1001"}, webhooks={"ops"})
    assert "not registered" in errors["ad_accounts[1]"]
    assert "ruleengine accounts add act_1002" in errors["ad_accounts[1]"]
    assert "'slack' is not configured" in errors["tasks[0].action.webhook"]


def test_checksum_ignores_status_and_key_order() -> None:
    data = base_rule()
    paused = {**base_rule(), "status": "PAUSED"}
    reordered = dict(reversed(list(data.items())))
    assert parse_rule(data).checksum() == parse_rule(paused).checksum()
    assert parse_rule(data).checksum() == parse_rule(reordered).checksum()
    data["tasks"][0]["action"]["percent"] = 21
    assert parse_rule(data).checksum() != parse_rule(paused).checksum()


def test_json_schema_is_exported() -> None:
    schema = rule_json_schema()
    assert schema["title"] == "Rule"
    assert "tasks" in schema["required"]
    assert orjson.dumps(schema)


def test_invalid_json_text_is_an_error_not_a_crash() -> None:
    errors = errors_of(b"{not json")
    assert errors
