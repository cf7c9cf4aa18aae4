"""A task's ``approval``: parsed strictly with JSON paths (hypothesis over what people and
tools may write), left out of the versioned definition while unset (stored checksums stay),
and the pure decision of which planned change waits."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruleengine.errors import RuleValidationError
from ruleengine.rules.language.approval import Approval, needs_approval
from ruleengine.rules.language.model import parse_rule


def rule_with(approval: Any = None, action: dict[str, Any] | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {
        "id": "t",
        "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
        "action": action or {"type": "increase_budget", "percent": 50},
    }
    if approval is not None:
        task["approval"] = approval
    return {
        "name": "Gated",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [task],
    }


def errors_of(data: Any, **kwargs: Any) -> dict[str, str]:
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(data, **kwargs)
    return {e.path: e.message for e in caught.value.errors}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
WHEN = (
    st.just("always")
    | JSON
    | st.fixed_dictionaries(
        {}, optional={"budget_change_pct_above": JSON, "budget_above": JSON, "other": JSON}
    )
    | st.builds(lambda n: {"budget_change_pct_above": n}, st.floats() | st.integers())
    | st.builds(lambda n: {"budget_above": n}, st.floats() | st.integers())
)
APPROVAL = (
    st.fixed_dictionaries(
        {},
        optional={
            "when": WHEN,
            "expires_after_minutes": st.integers(-5, 100_000) | JSON,
            "webhook": st.sampled_from(["ops", "nope"]) | JSON,
            "extra": JSON,
        },
    )
    | JSON
)


@given(APPROVAL)
def test_any_approval_parses_or_is_refused_at_its_path(approval: Any) -> None:
    data = rule_with(approval)
    errors: list[Any] = []
    try:
        rule = parse_rule(copy.deepcopy(data), webhooks={"ops"})
    except RuleValidationError as exc:
        errors = exc.errors
    if errors:
        assert all(e.path.startswith("tasks[0].approval") for e in errors), errors
        return
    parsed = rule.tasks[0].approval
    if approval is None:
        assert parsed is None
        return
    assert parsed is not None and parsed.webhook in (None, "ops")
    assert 1 <= parsed.expires_after_minutes <= 60 * 24 * 30
    # the definition parses back to the same checksum
    assert parse_rule(rule.definition() | {"status": "ACTIVE"}).checksum() == rule.checksum()


def test_the_three_shapes_and_their_mistakes() -> None:
    for when in ("always", {"budget_change_pct_above": 30}, {"budget_above": 1000}):
        parse_rule(rule_with({"when": when, "expires_after_minutes": 120}))
    assert errors_of(rule_with({"when": "sometimes"})) == {
        "tasks[0].approval.when": 'give one of "always", {"budget_change_pct_above": 30} or'
        " {\"budget_above\": 1000}, not 'sometimes'"
    }
    assert "tasks[0].approval.when.budget_above" in errors_of(
        rule_with({"when": {"budget_above": "1000"}})
    )
    assert "tasks[0].approval.when.budget_change_pct_above" in errors_of(
        rule_with({"when": {"budget_change_pct_above": 0}})
    )
    assert "tasks[0].approval.expires_after_minutes" in errors_of(
        rule_with({"when": "always", "expires_after_minutes": 0})
    )
    assert "tasks[0].approval.webhook" in errors_of(
        rule_with({"when": "always", "webhook": "nope"}), webhooks={"ops"}
    )
    paused = rule_with({"when": {"budget_above": 5}}, action={"type": "pause"})
    assert "tasks[0].approval.when" in errors_of(paused)
    parse_rule(rule_with({"when": "always"}, action={"type": "pause"}))
    notify = {"type": "notify", "webhook": "ops", "template": "x"}
    assert "tasks[0].approval" in errors_of(rule_with({"when": "always"}, action=notify))


def test_an_unset_approval_keeps_stored_checksums() -> None:
    rule = parse_rule(rule_with())
    assert "approval" not in rule.definition()["tasks"][0]
    gated = parse_rule(rule_with({"when": "always"}))
    assert gated.definition()["tasks"][0]["approval"]["when"] == "always"
    assert gated.checksum() != rule.checksum()


@given(
    pct=st.floats(0.01, 1000),
    before=st.integers(1, 10**9),
    after=st.integers(0, 10**9),
)
def test_a_budget_change_waits_when_it_moves_more_than_the_percentage(
    pct: float, before: int, after: int
) -> None:
    approval = Approval.model_validate({"when": {"budget_change_pct_above": pct}})
    moved_pct = abs(after - before) * 100 / before
    kwargs = {"field": "daily_budget", "before": before, "after": after, "scale": 100}
    assert needs_approval(approval, **kwargs) is (moved_pct > pct)
    assert needs_approval(None, **kwargs) is False


@given(limit=st.floats(0, 10**6), after=st.integers(0, 10**9), scale=st.sampled_from([1, 100]))
def test_a_new_budget_waits_above_the_amount_in_currency_units(
    limit: float, after: int, scale: int
) -> None:
    approval = Approval.model_validate({"when": {"budget_above": limit}})
    waits = needs_approval(approval, field="daily_budget", before=1, after=after, scale=scale)
    assert waits is (after > limit * scale)
    assert not needs_approval(approval, field="status", before="ACTIVE", after="PAUSED", scale=1)
    always = Approval.model_validate({"when": "always"})
    assert needs_approval(always, field="status", before="ACTIVE", after="PAUSED", scale=1)
