"""Does the impact report's 95 % interval cover the truth? Simulated experiments on the sandbox,
each judged against its counterfactual (``/_sandbox/counterfactual/…``).

Each experiment resets the sandbox's demo world with its own seed (and time zones), stores a
rule with a holdout under its own id (the draw depends on it), runs it on its accounts
through the worker's own ``evaluate_account`` at simulated instants, and asks
``rule_impact`` — the report the API and the CLI give — once every window is over. The truth
of a currency is the mean, over the acted entities its profit effect rests on, of actual
minus counterfactual profit (no write since the entity's decision) over the report's window.

The experiments: true effects positive (pausing losers), negative (pausing winners) and zero
(a rename: no delivery changes); accounts in Asia/Kolkata, Australia/Adelaide,
Asia/Kathmandu, America/New_York, Europe/Berlin and Asia/Tokyo; a rule over a USD and a JPY
account; budget raises every hour with no cooldown inside a 24 h window; approvals some of
which are rejected or expire; a holdout percent raised mid-way; groups from a handful of
entities to a hundred.

Figures (last line, one JSON object):

- ``experiments``; ``estimates`` (one per experiment and currency), of which ``claimed``
  (an effect stated) and ``not_enough`` ("not enough data yet" / "nothing to measure");
- ``coverage_95``: the share of claimed estimates whose interval holds the truth;
  ``sign_errors``: claimed intervals that exclude 0 on the wrong side of a non-zero truth;
  ``false_claims_at_zero``: intervals excluding 0 where the truth is exactly 0;
  ``zero_claims``: effects stated although neither group delivered in its windows;
- ``median_abs_error``: per currency, the median |estimate − truth| (currency units);
- ``coverage_by_group_size``: the interval's coverage with k acted and k held-out entities
  drawn at random from the experiments' own (``SUBSAMPLES`` draws each), for k of 3 to 30:
  where the report's :data:`~ruleengine.rules.impact.measure.MIN_ENTITIES` comes from;
- ``min_entities``, ``timezones``, ``currencies``, ``seconds``.

``--quick`` runs 8 experiments (a smoke run); the default runs them all (~48).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import TOKEN, figures, open_database, register_accounts, say, stack, stack_settings
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.analysis.impact import ImpactInputs, impact_inputs, rule_impact
from ruleengine.approvals.applying import apply_approval
from ruleengine.backtest.service import BacktestDeps
from ruleengine.dispatching.payload import EvaluateJob
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.entity import currency_offset
from ruleengine.rules.impact.intervals import Stratum, welch_interval
from ruleengine.rules.impact.measure import (
    MIN_ENTITIES,
    Change,
    comparable,
    first_decisions,
    measured_changes,
    windows,
)
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.approvals import ApprovalStore
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore
from ruleengine.worker.deps import build_engine, close_engine
from ruleengine.worker.job import evaluate_account

START = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
SIZES = (2, 3, 4, 5, 6, 8, 10, 15, 20, 30)
SUBSAMPLES = 60
ACTIVE = [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]
SPENDING = {"metric": "spend", "period": "last_7d", "operator": ">", "value": 20}
ROAS = "purchase_roas.omni_purchase"
#: What each kind of task does, and so the sign of its true effect.
TASKS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    # the sandbox's losers make less than they spend: pausing them raises profit
    "pause_losers": (
        [{"metric": ROAS, "period": "last_7d", "operator": "<", "value": 1.2}, SPENDING],
        {"type": "pause"},
    ),
    # its winners make more: pausing them lowers it
    "pause_winners": (
        [{"metric": ROAS, "period": "last_7d", "operator": ">", "value": 2.5}, SPENDING],
        {"type": "pause"},
    ),
    # a name changes nothing Meta delivers: a true effect of exactly 0
    "rename": ([SPENDING], {"type": "append_to_name", "text": " [seen]"}),
    # more budget, diminishing returns: either sign
    "raise_winners": (
        [{"metric": ROAS, "period": "last_7d", "operator": ">", "value": 2}, SPENDING],
        {"type": "increase_budget", "percent": 10},
    ),
}


@dataclass(frozen=True)
class Experiment:
    """One simulated experiment: a world, a rule with a holdout, and when it runs."""

    name: str
    seed: int
    kind: str
    accounts: tuple[str, ...] = ("act_1001",)
    zones: tuple[tuple[str, str], ...] = ()
    percent: float = 30
    campaigns: int = 96
    window: str = "72h"
    runs: int = 3
    every_hours: int = 24
    cooldown_minutes: int = 7 * 24 * 60
    approvals: bool = False
    raise_to: float | None = None  # the holdout percent from the middle run on

    @property
    def last_run(self) -> datetime:
        return START + timedelta(hours=self.every_hours * (self.runs - 1))

    @property
    def measured_at(self) -> datetime:
        """Two days after the last run's window is over."""
        hours = {"24h": 24, "72h": 72, "7d": 168}[self.window]
        return self.last_run + timedelta(hours=hours + 48)


def experiments(quick: bool) -> list[Experiment]:
    """The experiments (see the module): seeds, zones, kinds and sizes varied."""
    zones = [
        "Asia/Kolkata",
        "Australia/Adelaide",
        "Asia/Kathmandu",
        "America/New_York",
        "Europe/Berlin",
        "America/Los_Angeles",
    ]
    out: list[Experiment] = []
    sizes = [(24, 50), (48, 30), (96, 30), (192, 20), (48, 50), (96, 40)]
    for i, kind in enumerate(["pause_losers"] * 12 + ["pause_winners"] * 10 + ["rename"] * 8):
        campaigns, percent = sizes[i % len(sizes)]
        zone = zones[i % len(zones)]
        out.append(
            Experiment(
                f"{kind}-{zone}-{campaigns}",
                seed=100 + i,
                kind=kind,
                zones=(("act_1001", zone),),
                percent=percent,
                campaigns=campaigns,
            )
        )
    for i in range(6):  # dollars and yen in one rule; the yen account in a 45-minute zone
        out.append(
            Experiment(
                f"usd+jpy-{i}",
                seed=200 + i,
                kind=["pause_losers", "pause_winners", "rename"][i % 3],
                accounts=("act_1001", "act_1004"),
                zones=(("act_1001", zones[i % 3]), ("act_1004", "Asia/Kathmandu")),
                percent=40,
                campaigns=96 if i % 2 else 192,
            )
        )
    for i in range(4):  # a raise every hour, no cooldown: 24 decisions an entity in the window
        out.append(
            Experiment(
                f"hourly-raise-{i}",
                seed=300 + i,
                kind="raise_winners",
                zones=(("act_1001", zones[i % len(zones)]),),
                percent=40,
                campaigns=96,
                window="24h",
                runs=24,
                every_hours=1,
                cooldown_minutes=0,
            )
        )
    for i in range(2):
        out.append(
            Experiment(
                f"approvals-{i}",
                seed=400 + i,
                kind="pause_losers",
                zones=(("act_1001", zones[i]),),
                campaigns=192,
                runs=1,
                approvals=True,
            )
        )
        out.append(
            Experiment(
                f"percent-raised-{i}",
                seed=500 + i,
                kind="pause_losers",
                zones=(("act_1001", zones[i + 2]),),
                percent=15,
                campaigns=192,
                raise_to=40,
            )
        )
    rng = random.Random(44)
    return rng.sample(out, 8) if quick else out


def rule_of(spec: Experiment, percent: float) -> dict[str, Any]:
    conditions, action = TASKS[spec.kind]
    task: dict[str, Any] = {
        "id": "t",
        "conditions": conditions,
        "action": action,
        "cooldown_minutes": spec.cooldown_minutes,
        "holdout": {"percent": percent},
    }
    if spec.approvals:
        task["approval"] = {"when": "always", "expires_after_minutes": 600}
    return {
        "name": f"Calibration {spec.name}",
        "format": 2,
        "level": "adset",
        "ad_accounts": list(spec.accounts),
        "filters": ACTIVE,
        "schedule": {"mode": "interval", "every_minutes": 60},
        "timezone": "UTC",
        "tasks": [task],
    }


async def store_rule(db: Database, spec: Experiment, rule_id: str) -> None:
    """The rule under a fixed id (who is held out depends on it: the same run every time)."""
    saved = await RuleStore(db).save(
        parse_rule(rule_of(spec, spec.percent)), now=START, author="bench", source="bench"
    )
    doc = await db[c.RULES].find_one_and_delete({"_id": saved.rule.id})
    assert doc is not None
    await db[c.RULES].insert_one(doc | {"_id": rule_id})
    await db[c.RULE_VERSIONS].update_many(
        {"rule_id": saved.rule.id}, {"$set": {"rule_id": rule_id}}
    )


async def run_at(
    settings: Settings, db: Database, sandbox: SandboxAdmin, rule_id: str, at: datetime
) -> None:
    """One run of the rule on each account at ``at``, the sandbox's clock there."""
    doc = await db[c.RULES].find_one({"_id": rule_id})
    assert doc is not None
    rule = parse_rule(doc["definition"] | {"status": "ACTIVE"})
    await sandbox.set_clock(at)
    queue = connect_queue(settings)
    engine = build_engine(settings, db=db, redis=queue)
    try:
        reader = GraphReader.from_settings(engine.session)
        for account in rule.ad_accounts:
            entities = await reader.list_for_rule(rule, account, token=TOKEN)
            job = EvaluateJob.of(
                rule,
                batch_id=f"{rule_id}-{account}-{at:%Y%m%d%H%M}",
                rule_id=rule_id,
                version=int(doc["version"]),
                account=account,
                entities=entities,
                scheduled_at=at,
                dispatched_at=at,
            )
            summary = await evaluate_account(engine, job, now=at)
            assert summary.status == "DONE", summary.error
    finally:
        await close_engine(engine)
        await queue.aclose()


async def decide_proposals(settings: Settings, db: Database, sandbox: SandboxAdmin) -> None:
    """A person's answer two hours on: a third approved, a third rejected, the rest expire."""
    at = START + timedelta(hours=2)
    await sandbox.set_clock(at)
    store = ApprovalStore(db)
    pending = [d async for d in db[c.APPROVALS].find({"status": "pending"}).sort("_id", 1)]
    queue = connect_queue(settings)
    engine = build_engine(settings, db=db, redis=queue)
    try:
        for i, doc in enumerate(pending):
            if i % 3 == 0:
                await store.decide(doc["_id"], status="approved", by="bench", now=at)
                await apply_approval(engine, doc["_id"], now=at)
            elif i % 3 == 1:
                await store.decide(doc["_id"], status="rejected", by="bench", now=at)
    finally:
        await close_engine(engine)
        await queue.aclose()
    await store.expire_due(now=START + timedelta(hours=11))


async def simulate(
    settings: Settings, db: Database, sandbox: SandboxAdmin, spec: Experiment
) -> str:
    """The experiment's world and runs; the rule's id."""
    await sandbox.reset(
        seed=spec.seed,
        scenario="demo",
        campaigns_per_account=spec.campaigns,
        timezones=dict(spec.zones),
    )
    await register_accounts(settings, db, list(spec.accounts), now=START)
    rule_id = f"cal-{spec.seed}"
    await store_rule(db, spec, rule_id)
    for n in range(spec.runs):
        if spec.raise_to is not None and n == spec.runs // 2:
            raised = parse_rule(rule_of(spec, spec.raise_to))
            await RuleStore(db).save(raised, rule_id=rule_id, now=START, author="b", source="b")
        await run_at(settings, db, sandbox, rule_id, START + timedelta(hours=spec.every_hours * n))
        if spec.approvals and n == 0:
            await decide_proposals(settings, db, sandbox)
    await sandbox.set_clock(spec.measured_at)
    return rule_id


@dataclass
class Estimate:
    """One experiment's answer in one currency, and the truth it is judged by."""

    experiment: str
    kind: str
    currency: str
    zones: tuple[str, ...]
    claimed: bool
    effect: float | None = None
    low: float | None = None
    high: float | None = None
    truth: float | None = None
    delivered: bool = True
    acted: int = 0
    held_out: int = 0
    # (profit delta, true effect) of each acted entity, and the held-out deltas: subsamples
    acted_cells: list[tuple[float, float]] = field(default_factory=list)
    held_deltas: list[float] = field(default_factory=list)


async def truths(
    sandbox: SandboxAdmin, inputs: ImpactInputs, acted: Sequence[Change], window: str
) -> list[float]:
    """Each acted entity's true profit effect over its window (currency units)."""
    out = []
    for change in acted:
        mine = inputs.series[change.decision.entity_id]
        _, start, end = windows(change.decision, mine.timezone, window)
        effect = await sandbox.true_effect(
            change.decision.entity_id, since=change.decision.at, start=start, end=end
        )
        profit = effect["purchase_value_cents"] - effect["spend_cents"]
        out.append(profit / currency_offset(mine.currency))
    return out


async def judge(
    deps: BacktestDeps, sandbox: SandboxAdmin, spec: Experiment, rule_id: str
) -> list[Estimate]:
    """The report's answer per currency, with the truth of the entities it rests on."""
    now, days = spec.measured_at, 10
    report = await rule_impact(deps, rule_id, days=days, window=spec.window, now=now)
    inputs = await impact_inputs(deps, rule_id, days=days, window=spec.window, now=now)
    firsts, _ = first_decisions(inputs.decisions["t"])
    changes, _ = measured_changes(firsts, inputs.series, window=spec.window, now=now)
    zones = tuple(sorted({s.timezone for s in inputs.series.values()}))
    out = []
    for part in report["tasks"][0]["currencies"]:
        mine = [
            c for c in changes if inputs.series[c.decision.entity_id].currency == part["currency"]
        ]
        strata = comparable(
            "profit",
            [c for c in mine if not c.decision.held_out],
            [c for c in mine if c.decision.held_out],
        )
        acted = [change for a, _ in strata for change in a]
        truth = await truths(sandbox, inputs, acted, spec.window)
        profit = part["effects"].get("profit")
        estimate = Estimate(
            spec.name,
            spec.kind,
            part["currency"],
            zones,
            claimed=profit is not None,
            truth=sum(truth) / len(truth) if truth else None,
            delivered=any(c.delivered for c in mine),
            acted=len(acted),
            held_out=sum(len(h) for _, h in strata),
        )
        if profit is not None:
            estimate.effect, estimate.low, estimate.high = (
                profit["effect"],
                profit["low"],
                profit["high"],
            )
        if len(strata) == 1:  # one holdout setting: subsamples are experiments of their own
            a, h = strata[0]
            estimate.acted_cells = [
                (c.delta("profit") or 0.0, t) for c, t in zip(a, truth, strict=True)
            ]
            estimate.held_deltas = [c.delta("profit") or 0.0 for c in h]
        out.append(estimate)
    return out


def percentile_bootstrap(
    acted: Sequence[float], held: Sequence[float], rng: random.Random, resamples: int
) -> tuple[float, float]:
    """The interval the report gave before Welch's: the 2.5th and 97.5th percentiles of the
    difference of means over resamples of each group (for comparison only)."""
    draws = sorted(
        statistics.fmean(rng.choices(acted, k=len(acted)))
        - statistics.fmean(rng.choices(held, k=len(held)))
        for _ in range(resamples)
    )
    return draws[int(0.025 * (resamples - 1))], draws[int(0.975 * (resamples - 1)) + 1]


def coverage_by_size(estimates: Sequence[Estimate], rng: random.Random) -> dict[str, Any]:
    """Coverage with k acted and k held-out entities drawn at random from each experiment's
    own (the truth: the drawn acted entities' mean true effect): Welch's interval, which the
    report gives, and the percentile bootstrap it gave before (on a third of the draws)."""
    out: dict[str, Any] = {}
    for k in SIZES:
        welch, boot, draws, used = 0, 0, 0, 0
        for estimate in estimates:
            cells, held = estimate.acted_cells, estimate.held_deltas
            if len(cells) < k or len(held) < k or not estimate.delivered:
                continue
            used += 1
            for n in range(SUBSAMPLES):
                picked, others = rng.sample(cells, k), rng.sample(held, k)
                deltas = [d for d, _ in picked]
                truth = sum(t for _, t in picked) / k
                interval = welch_interval([Stratum(deltas, others)])
                assert interval is not None
                welch += interval.low - 1e-6 <= truth <= interval.high + 1e-6
                if n % 3 == 0:
                    low, high = percentile_bootstrap(deltas, others, rng, 400)
                    boot += low - 1e-6 <= truth <= high + 1e-6
                draws += 1
        if draws:
            out[str(k)] = {
                "coverage": round(welch / draws, 3),
                "bootstrap_coverage": round(boot / -(-draws // 3), 3),
                "experiments": used,
            }
    return out


@dataclass(frozen=True)
class Claim:
    """A stated effect with its interval, and the truth it is judged by."""

    estimate: Estimate
    effect: float
    low: float
    high: float
    truth: float

    @property
    def covered(self) -> bool:
        return self.low - 1e-6 <= self.truth <= self.high + 1e-6

    @property
    def sign_error(self) -> bool:
        """The interval excludes 0 on the wrong side of a non-zero truth."""
        return (self.low > 0 and self.truth < 0) or (self.high < 0 and self.truth > 0)

    @property
    def false_at_zero(self) -> bool:
        return self.truth == 0 and (self.low > 0 or self.high < 0)


def claims(estimates: Sequence[Estimate]) -> list[Claim]:
    out = []
    for e in estimates:
        if (
            e.effect is not None
            and e.low is not None
            and e.high is not None
            and e.truth is not None
        ):
            out.append(Claim(e, e.effect, e.low, e.high, e.truth))
    return out


def by_kind(claimed: Sequence[Claim]) -> dict[str, Any]:
    """Per kind of task: the coverage, and the mean error in standard errors (a bias shows
    as a mean away from 0: pausing moves a campaign budget to the paused ad sets' siblings,
    held-out ones among them, which neither the truth nor the comparison shields)."""
    out: dict[str, Any] = {}
    for kind in sorted({claim.estimate.kind for claim in claimed}):
        mine = [claim for claim in claimed if claim.estimate.kind == kind]
        z = [
            (claim.effect - claim.truth) / ((claim.high - claim.low) / 3.92)
            for claim in mine
            if claim.high > claim.low
        ]
        out[kind] = {
            "estimates": len(mine),
            "coverage": round(sum(claim.covered for claim in mine) / len(mine), 3),
            "mean_error_in_se": round(statistics.fmean(z), 2) if z else None,
        }
    return out


def summary(
    estimates: list[Estimate], count: int, seconds: float, rng: random.Random
) -> dict[str, Any]:
    claimed = claims(estimates)
    errors: dict[str, list[float]] = {}
    for claim in claimed:
        errors.setdefault(claim.estimate.currency, []).append(abs(claim.effect - claim.truth))
        if not claim.covered:
            e = claim.estimate
            interval = f"[{claim.low}, {claim.high}]"
            say(f"  missed: {e.experiment} {e.currency} {claim.effect} {interval} {claim.truth}")
    return {
        "experiments": count,
        "estimates": len(estimates),
        "claimed": len(claimed),
        "not_enough": len(estimates) - len(claimed),
        "coverage_95": round(sum(claim.covered for claim in claimed) / len(claimed), 3)
        if claimed
        else None,
        "sign_errors": sum(claim.sign_error for claim in claimed),
        "false_claims_at_zero": sum(claim.false_at_zero for claim in claimed),
        "zero_claims": sum(e.claimed and not e.delivered for e in estimates),
        "median_abs_error": {
            key: round(statistics.median(v), 2) for key, v in sorted(errors.items())
        },
        "by_kind": by_kind(claimed),
        "coverage_by_group_size": coverage_by_size(estimates, rng),
        "min_entities": MIN_ENTITIES,
        "timezones": sorted({z for e in estimates for z in e.zones}),
        "currencies": sorted({e.currency for e in estimates}),
        "seconds": round(seconds, 1),
    }


async def main(quick: bool) -> None:
    specs = experiments(quick)
    started = time.perf_counter()
    estimates: list[Estimate] = []
    with stack(databases=True) as servers:
        async with SandboxAdmin(servers.sandbox_url) as sandbox:
            for n, spec in enumerate(specs, 1):
                settings = stack_settings(servers, mongodb_database=f"bench_impact_{n}")
                client, db = await open_database(settings)
                try:
                    rule_id = await simulate(settings, db, sandbox, spec)
                    async with BacktestDeps.open(settings, db) as deps:
                        found = await judge(deps, sandbox, spec, rule_id)
                finally:
                    await client.drop_database(settings.mongodb_database)
                    await client.close()
                estimates.extend(found)
                for e in found:
                    say(
                        f"{n:2}/{len(specs)} {spec.name} {e.currency}: {e.acted}+{e.held_out}"
                        f" entities, effect {e.effect} [{e.low}, {e.high}], truth {e.truth}"
                    )
    figures(summary(estimates, len(specs), time.perf_counter() - started, random.Random(44)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 experiments, a smoke run")
    asyncio.run(main(parser.parse_args().quick))
