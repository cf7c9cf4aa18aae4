"""``respect_learning_phase``: budget changes skip (or stay small on) ad sets Meta says are
LEARNING, on both write paths, against the sandbox's ``learning_stage_info``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flow import campaign_rule, records, run_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.backtest.result import BacktestRequest
from ruleengine.backtest.service import BacktestDeps, run_backtest
from ruleengine.errors import RuleValidationError
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_NOW
from test_meta_budget_limits import adset_id

LEARNING = "Prospecting US 3 - Lookalike 1%"  # 70.00 a day, edited yesterday: LEARNING
SETTLED = "Prospecting US 3 - Broad 18-65"  # 70.00 a day, learning limited (FAIL)
HAS_BUDGET = {"metric": "daily_budget", "operator": ">", "value": 0}


def learning_rule(action: dict[str, Any] | None = None, **task: Any) -> dict[str, Any]:
    """+50 % on the active ad sets of Prospecting US 3, respecting the learning phase."""
    data = campaign_rule(action or {"type": "increase_budget", "percent": 50}, [HAS_BUDGET])
    data["level"] = "adset"
    data["filters"] = [
        {"field": "adset.name", "operator": "CONTAIN", "value": "Prospecting US 3"},
        {"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]},
    ]
    data["tasks"][0] |= {"respect_learning_phase": True, **task}
    return data


@pytest.fixture(params=[1, 50], ids=["per-entity", "batched"])
def write_path(request: Any, settings: Settings, accounts: list[str]) -> Settings:
    """The same settings on each write path: one write at a time, or Batch API calls."""
    return settings.model_copy(update={"write_batch_size": request.param})


async def _by_name(sandbox: SandboxAdmin, db: Database, rule_id: str) -> dict[str, Any]:
    ids = {await adset_id(sandbox, "act_1001", n): n for n in (LEARNING, SETTLED)}
    return {ids[r["entity_id"]]: r for r in await records(db, rule_id=rule_id)}


async def test_a_learning_ad_set_is_skipped_and_a_settled_one_changes(
    write_path: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    rule = await run_rule(write_path, db, learning_rule())
    by_name = await _by_name(sandbox, db, rule.id)
    skipped, changed = by_name[LEARNING], by_name[SETTLED]
    assert (skipped["outcome"], skipped["reason"]) == ("skipped", "in_learning_phase")
    assert (skipped["before"], skipped["after"], skipped["requested"]) == (7000, 7000, 10500)
    assert (changed["outcome"], changed["before"], changed["after"]) == ("applied", 7000, 10500)
    written = {w["id"]: w["params"] for w in await sandbox.writes()}
    assert written == {changed["entity_id"]: {"daily_budget": "10500"}}


async def test_while_learning_a_50_percent_rise_is_clamped_to_20(
    write_path: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    rule = await run_rule(write_path, db, learning_rule(max_change_pct_while_learning=20))
    by_name = await _by_name(sandbox, db, rule.id)
    clamped, changed = by_name[LEARNING], by_name[SETTLED]
    assert (clamped["outcome"], clamped["before"], clamped["after"]) == ("applied", 7000, 8400)
    assert (clamped["requested"], clamped["clamped_by"]) == (10500, ["learning_phase"])
    assert (changed["after"], changed["clamped_by"]) == (10500, [])
    written = {w["id"]: w["params"]["daily_budget"] for w in await sandbox.writes()}
    assert written == {clamped["entity_id"]: "8400", changed["entity_id"]: "10500"}
    # an intent keeps what clamped it only where a limit did (and what was asked for where
    # the action asks for a value: a pause's does not)
    intents = {d["entity_id"]: d async for d in db[c.ACTION_INTENTS].find({"rule_id": rule.id})}
    assert intents[clamped["entity_id"]]["requested"] == 10500
    assert intents[clamped["entity_id"]]["clamped_by"] == ["learning_phase"]
    assert intents[changed["entity_id"]]["requested"] == 10500
    assert "clamped_by" not in intents[changed["entity_id"]]


async def test_without_the_option_a_learning_ad_set_changes_as_before(
    settings: Settings, accounts: list[str], db: Database, sandbox: SandboxAdmin
) -> None:
    data = learning_rule()
    data["tasks"][0]["respect_learning_phase"] = False
    rule = await run_rule(settings, db, data)
    by_name = await _by_name(sandbox, db, rule.id)
    assert by_name[LEARNING]["after"] == 10500


# ---------------------------------------------------------------- validation


def _errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(RuleValidationError) as caught:
        parse_rule(data)
    return {e.path: e.message for e in caught.value.errors}


def test_a_campaign_rule_cannot_respect_the_learning_phase() -> None:
    data = learning_rule()
    data["level"] = "campaign"
    data["filters"] = []
    errors = _errors(data)
    assert "ad sets only" in errors["tasks[0].respect_learning_phase"]


def test_only_budget_actions_respect_the_learning_phase() -> None:
    errors = _errors(learning_rule({"type": "pause"}))
    assert "only budget actions" in errors["tasks[0].respect_learning_phase"]
    assert "'pause'" in errors["tasks[0].respect_learning_phase"]


def test_a_limit_while_learning_needs_the_option_and_a_sensible_percentage() -> None:
    data = learning_rule(max_change_pct_while_learning=20)
    data["tasks"][0]["respect_learning_phase"] = False
    assert "respect_learning_phase" in _errors(data)["tasks[0].max_change_pct_while_learning"]
    for bad in (0, -5, 101, "twenty"):
        assert "tasks[0].max_change_pct_while_learning" in _errors(
            learning_rule(max_change_pct_while_learning=bad)
        )


ACTIONS = [
    {"type": "increase_budget", "percent": 10},
    {"type": "decrease_budget", "percent": 10},
    {"type": "set_budget", "amount": 100},
    {"type": "pause"},
    {"type": "append_to_name", "text": " [x]"},
]


#: Values of ``respect_learning_phase`` and whether they mean on (None: invalid).
RESPECT = [(True, True), (False, False), (1, True), (0, False), ("true", True), ("no", False)]
RESPECT += [(2, None), ("maybe", None)]


@given(
    respect=st.sampled_from([*RESPECT, ("absent", False)]),
    limit=st.one_of(
        st.none(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-200, 200),
        st.sampled_from(["20", "abc", "", [20]]),
    ),
    action=st.sampled_from(ACTIONS),
    level=st.sampled_from(["adset", "campaign"]),
)
def test_the_options_are_accepted_exactly_when_they_make_sense(
    respect: tuple[Any, bool | None], limit: Any, action: dict[str, Any], level: str
) -> None:
    (value, on) = respect
    data = learning_rule(action)
    data["level"] = level
    data["filters"] = []
    task = data["tasks"][0]
    task.pop("respect_learning_phase")
    if value != "absent":
        task["respect_learning_phase"] = value
    if limit is not None:
        task["max_change_pct_while_learning"] = limit
    number = float(limit) if isinstance(limit, int | float) or limit == "20" else None
    budget = action["type"] in ("increase_budget", "decrease_budget", "set_budget")
    expect_ok = (
        on is not None
        and (limit is None or (number is not None and 0 < number <= 100 and bool(on)))
        and (not on or (budget and level == "adset"))
    )
    if expect_ok:
        assert parse_rule(data).tasks[0].respect_learning_phase is on
    else:
        with pytest.raises(RuleValidationError) as caught:
            parse_rule(data)
        assert all(e.path.startswith("tasks[0].") for e in caught.value.errors)


async def test_a_backtest_says_it_cannot_know_past_learning_phases(
    settings: Settings, db: Database, accounts: list[str]
) -> None:
    async with BacktestDeps.open(settings, db) as deps:
        capped = {"type": "increase_budget", "percent": 50, "max_budget": 500}
        request = BacktestRequest(parse_rule(learning_rule(capped)), days=2)
        result = await run_backtest(deps, request, now=SANDBOX_NOW)
    assert any("learning phases are unknown" in caveat for caveat in result["caveats"])
