"""One home for each rule of money: the live write path and the backtest's replay plan alike.

For random live objects (budgets present or not, a campaign with a lifetime budget, every bid
strategy, bids present or not) and random actions of every kind that changes a field, the
change the worker's write path would plan from the live object
(:func:`ruleengine.acting.results.target_of`) is the change the replay plans from the same
object in its simulated state (:meth:`ruleengine.rules.replay.run.Replay.plan`) — or both refuse
it for the same reason. Both call :func:`ruleengine.rules.plan.targets.plan_change`; this test
fails when either side grows a guard or a clamp of its own.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from ruleengine.accounts.facts import AccountFacts
from ruleengine.acting.results import ActResult, JobRun, target_of
from ruleengine.meta.adaccount import AdAccount
from ruleengine.rules.evaluate import ActionMetric, TaskVerdict
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.plan.plan import Plan
from ruleengine.rules.plan.targets import (
    NO_BID_STRATEGIES,
    PlanContext,
    Refused,
    plan_change,
    plan_follow_up,
)
from ruleengine.rules.replay.rows import RawHistory
from ruleengine.rules.replay.run import AccountHistory, Replay, ReplayOptions
from ruleengine.store.credentials import Account

NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
STRATEGIES = [*sorted(NO_BID_STRATEGIES), "LOWEST_COST_WITH_BID_CAP", "COST_CAP", None]
EMPTY = [None, "", "0", 0]

budgets = st.one_of(st.sampled_from(EMPTY), st.integers(1, 10**8), st.integers(1, 10**8).map(str))
amounts = st.integers(1, 5000)
actions = st.one_of(
    st.sampled_from([{"type": "pause"}, {"type": "activate"}]),
    st.builds(lambda t: {"type": "rename", "template": t}, st.sampled_from(["{name} x", "{rule}"])),
    st.builds(
        lambda kind, text: {"type": kind, "text": text},
        st.sampled_from(["append_to_name", "prepend_to_name"]),
        st.sampled_from([" [x]", "Z "]),
    ),
    st.builds(
        lambda kind, pct, low, high: (
            {"type": kind, "percent": pct}
            | ({"min_budget": low} if low else {})
            | ({"max_budget": (low or 0) + high} if high else {})
        ),
        st.sampled_from(["increase_budget", "decrease_budget"]),
        st.integers(1, 99),
        st.one_of(st.none(), amounts),
        st.one_of(st.none(), amounts),
    ),
    st.builds(lambda amount: {"type": "set_budget", "amount": amount}, amounts),
    st.builds(
        lambda kind, pct: {"type": "change_bid", "direction": kind, "percent": pct},
        st.sampled_from(["increase", "decrease"]),
        st.integers(1, 90),
    ),
    st.builds(
        lambda target, low, high: {
            "type": "scale_to_target",
            "metric": "cost_per_action_type.purchase",
            "period": "last_7d",
            "target": target,
            "min_budget": low,
            "max_budget": low + high,
        },
        st.integers(1, 200),
        amounts,
        amounts,
    ),
)


def rule_with(action: dict[str, Any], level: str) -> Rule:
    return parse_rule(
        {
            "name": "planned",
            "format": 2,
            "level": level,
            "ad_accounts": ["act_1001"],
            "schedule": {"mode": "interval", "every_minutes": 60},
            "tasks": [
                {
                    "id": "t",
                    "conditions": [{"metric": "current_hour", "operator": ">=", "value": 0}],
                    "action": action,
                }
            ],
        }
    )


def facts(*, minimum: int | None, currency: str) -> AccountFacts:
    """The account's facts as a job that already read the ad account holds them."""
    account = Account(
        id="act_1001",
        name="Shop",
        timezone="UTC",
        currency=currency,
        token_fingerprint="-",
        created_at=NOW,
        updated_at=NOW,
    )
    known = AccountFacts(None, account=account, token="-", now=NOW)  # type: ignore[arg-type]
    known._ad_account = (AdAccount(min_daily_budget=minimum, currency=currency, timezone="UTC"),)
    return known


def live_plan(rule: Rule, live: dict[str, Any], verdict: TaskVerdict, known: AccountFacts) -> Any:
    run = JobRun(
        batch_id="b",
        rule_id="r",
        rule_version=1,
        rule=rule,
        account="act_1001",
        token="-",
        now=NOW,
        reader=None,  # type: ignore[arg-type]  # the account was read already: no call
        facts=known,
    )
    action = rule.tasks[0].action
    target = asyncio.run(target_of(action, run, max_change_pct=50, verdict=verdict))
    planned = target.planner(live)
    return planned.reason if isinstance(planned, ActResult) else planned


def replay_plan(rule: Rule, live: dict[str, Any], verdict: TaskVerdict, known: AccountFacts) -> Any:
    account = AccountHistory(
        account="act_1001",
        tz=ZoneInfo("UTC"),
        currency=known.registered.currency,
        currency_offset=known.currency_offset,
        min_daily_budget=asyncio.run(known.min_daily_budget()),
        items={"1": live},
        history=RawHistory({}, {}),
        needs={},
    )
    replay = Replay(rule, account, ReplayOptions(max_budget_change_pct=50), instants=[], until=NOW)
    return replay.plan(replay.states["1"], rule.tasks[0].action, verdict, NOW)


@settings(max_examples=300, deadline=None)
@given(
    action=actions,
    level=st.sampled_from(["campaign", "adset"]),
    daily=budgets,
    lifetime=budgets,
    bid=budgets,
    strategy=st.sampled_from(STRATEGIES),
    status=st.sampled_from(["ACTIVE", "PAUSED"]),
    metric=st.one_of(st.none(), st.sampled_from([0.0, -1.0]), st.floats(0.01, 500)),
    minimum=st.one_of(st.none(), st.integers(1, 50000)),
    currency=st.sampled_from(["USD", "JPY", "EUR"]),
)
def test_the_replay_plans_every_change_as_the_live_write_path_does(
    action: dict[str, Any],
    level: str,
    daily: Any,
    lifetime: Any,
    bid: Any,
    strategy: str | None,
    status: str,
    metric: float | None,
    minimum: int | None,
    currency: str,
) -> None:
    if action["type"] == "change_bid":
        level = "adset"  # the model allows bids on ad sets only
    rule = rule_with(action, level)
    live: dict[str, Any] = {"id": "1", "name": "Prospecting", "status": status}
    live |= {"effective_status": status, "daily_budget": daily, "lifetime_budget": lifetime}
    live |= {"bid_amount": bid, "bid_strategy": strategy}
    reading = ActionMetric("cost_per_action_type.purchase", "last_7d", metric)
    verdict = TaskVerdict("t", "all", True, [], reading)
    known = facts(minimum=minimum, currency=currency)
    live_side = live_plan(rule, live, verdict, known)
    replay_side = replay_plan(rule, live, verdict, known)
    if replay_side == "beyond_any_budget":  # the replay stops where no budget goes
        assert isinstance(live_side, Plan)
        return
    assert replay_side == live_side


def test_an_ad_set_meta_bids_for_has_no_bid_to_change_in_both() -> None:
    rule = rule_with({"type": "change_bid", "direction": "increase", "percent": 10}, "adset")
    live = {"id": "1", "name": "n", "status": "ACTIVE", "daily_budget": "5000"}
    live |= {"bid_amount": "150", "bid_strategy": "LOWEST_COST_WITHOUT_CAP"}
    verdict = TaskVerdict("t", "all", True, [], None)
    known = facts(minimum=100, currency="USD")
    assert live_plan(rule, live, verdict, known) == "no_bid"
    assert replay_plan(rule, live, verdict, known) == "no_bid"


def test_a_restore_leaves_a_budget_someone_changed_and_clamps_the_rest() -> None:
    changed = plan_follow_up(
        "restore_budget",
        {"daily_budget": "7000"},
        action_field="daily_budget",
        action_left=6000,
        previous=5000,
        max_change_pct=50,
    )
    assert changed == Refused("changed_by_someone_else", "daily_budget")
    restored = plan_follow_up(
        "restore_budget",
        {"daily_budget": "20000"},
        action_field="daily_budget",
        action_left=20000,
        previous=5000,
        max_change_pct=50,
    )
    assert isinstance(restored, Plan) and (restored.before, restored.after) == (20000, 10000)


def test_a_campaign_with_a_lifetime_budget_has_no_daily_budget_to_move() -> None:
    rule = rule_with({"type": "increase_budget", "percent": 10}, "campaign")
    refused = plan_change(
        rule.tasks[0].action,  # type: ignore[arg-type]
        {"daily_budget": None, "lifetime_budget": "100000"},
        PlanContext(level="campaign"),
    )
    assert refused == Refused("no_daily_budget", "daily_budget")
