"""Chaos: workers SIGKILLed while they change budgets, Redis and MongoDB restarted mid-run.

The engine promises that nothing is applied twice and that every decision is
recorded. This script attacks that promise from outside and then checks it
against what Meta (the Graph sandbox) received and what MongoDB holds.

Set-up, all on free loopback ports: the Graph sandbox (bench world of
``--accounts`` × ``--campaigns``, ``--latency-ms`` added to every call), the
embedded MongoDB-compatible server **on disk** (its restart keeps the data) and
Redis **without persistence** (its restart loses the queue, the account locks,
the dispatcher lease and the ``dispatched`` markers, as the crash of an
unpersisted Redis would). Four budget rules run every minute on every account:

* ``chaos up`` (+1 %) and ``chaos down`` (−1 %), each with a cooldown longer than
  the run, on the same campaigns (all but the first nine of each account): they
  fight over one budget, and each may change a campaign once;
* ``churn up`` / ``churn down`` (±1 %, no cooldown) on the first nine campaigns of
  each account: they change them on every run, so writes go on all run long.

The dispatcher runs in this process on a fake clock that moves one interval per
tick; the next tick comes as soon as every job of the last one was taken by a
worker, so runs of a rule overlap (as they do when a job outlasts the interval).
``--workers`` real worker processes (``arq ruleengine.jobs.WorkerSettings``,
write-lock lifetime 2 s, job timeout 30 s) take the jobs; one that exits by
itself (a worker exits when Redis goes away) is restarted, as systemd would. A
chaos schedule drawn from ``--seed`` fires at given counts of writes received by
the sandbox: ``--kills`` SIGKILLs of a random worker (a replacement starts at
once; half of them while the cooldown rules are still writing), one SIGKILL and
restart of Redis, one clean restart of MongoDB. While each server is down the
dispatcher ticks once more: it must report itself degraded and go on.

Afterwards the workers stop (SIGTERM: the jobs in flight finish), reaper passes
run at a time far enough ahead that every owner is provably gone, until no batch
is RUNNING and no intent is pending, and the invariants are checked
(:func:`check_invariants`): every write Meta received has exactly one ``done``
intent and one ``applied`` execution record (and no ``done`` intent lacks a
write); one record per (batch, task, entity); no (rule, task, entity) changed
twice within its cooldown; every write was computed from the value the previous
one left (no lost update); the batch rows' counts match their records; nothing
left RUNNING or pending; the dispatcher's ticks never raised.

Progress goes to stderr; the last line of stdout is one JSON object with the
figures. The exit status is 1 when an invariant broke (each one is printed).
``tests/test_chaos.py`` runs the same harness at a smaller scale.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from arq.constants import in_progress_key_prefix
from pymongo.errors import PyMongoError
from redis.exceptions import RedisError

from _common import (
    TOKEN,
    Stack,
    engine_env,
    figures,
    open_database,
    register_accounts,
    say,
    stack_settings,
    start_sandbox,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.devstack.embedded import Child, ProcessGroup, free_port, start_mongodb, start_redis
from ruleengine.dispatching.sweep import Dispatcher
from ruleengine.maintenance.reaper import GRACE_S, Reaper
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.records import ExecutionStore
from ruleengine.store.rules import RuleStore
from ruleengine.worker.deps import build_engine, close_engine

# The sandbox's clock is frozen here, so Insights (and the rules' verdicts) never depend
# on when the script runs.
SANDBOX_NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
EVERY_MINUTES = 1
CHURN_NAMES = "Campaign 000"  # "[AUTO] Bench 1 Campaign 0001" … "0009": the churn set
LOCK_TTL_S = 2.0
JOB_TIMEOUT_S = 30
HOST = socket.gethostname()


@dataclass(frozen=True)
class ChaosConfig:
    """What to run: the world, the workers, the chaos and how long to go on."""

    accounts: int = 4
    campaigns: int = 40
    workers: int = 3
    kills: int = 8
    seed: int = 1
    latency_ms: float = 20.0
    min_runs: int = 6
    max_runs: int = 40
    cooldown_minutes: int = 24 * 60

    @property
    def churn_per_account(self) -> int:
        """Campaigns per account changed on every run (names ending 0001 … 0009)."""
        return min(9, self.campaigns)

    @property
    def fight_per_account(self) -> int:
        """Campaigns per account the two cooldown rules fight over."""
        return self.campaigns - self.churn_per_account

    def expected_writes(self) -> int:
        """Roughly how many writes ``min_runs`` runs make (places the chaos schedule)."""
        fight = 2 * self.fight_per_account * self.accounts
        churn = 2 * self.churn_per_account * self.accounts * self.min_runs
        return fight + churn


# -------------------------------------------------------------------- rules


def chaos_rules(config: ChaosConfig, accounts: list[str]) -> list[dict[str, Any]]:
    """The four budget rules: two with a long cooldown fighting over one set, two churning."""
    always = {"metric": "impressions", "period": "last_7d", "operator": ">", "value": 0}
    fight = {"field": "name", "operator": "NOT_CONTAIN", "value": CHURN_NAMES}
    churn = {"field": "name", "operator": "CONTAIN", "value": CHURN_NAMES}
    specs = [
        ("chaos up", "increase_budget", fight, config.cooldown_minutes),
        ("chaos down", "decrease_budget", fight, config.cooldown_minutes),
        ("churn up", "increase_budget", churn, 0),
        ("churn down", "decrease_budget", churn, 0),
    ]
    return [
        {
            "name": name,
            "format": 2,
            "level": "campaign",
            "ad_accounts": accounts,
            "filters": [where],
            "schedule": {"mode": "interval", "every_minutes": EVERY_MINUTES},
            "tasks": [
                {
                    "id": action.split("_")[0],
                    "conditions": [always],
                    "action": {"type": action, "percent": 1},
                    "cooldown_minutes": cooldown,
                }
            ],
        }
        for name, action, where, cooldown in specs
    ]


# -------------------------------------------------------------------- the invariants


@dataclass
class Observed:
    """What the run left behind: Meta's side (the sandbox) and the engine's (MongoDB)."""

    writes: list[dict[str, Any]]  # successful writes the sandbox received, in order
    intents: list[dict[str, Any]]
    records: list[dict[str, Any]]
    batches: list[dict[str, Any]]
    initial: dict[str, int]  # campaign → daily budget before the run
    once_per_run: dict[str, int]  # campaign → how many cooldown tasks may change it in the run


def check_invariants(seen: Observed) -> list[str]:
    """Every promise the run broke, one sentence each (empty when all held)."""
    return [
        *_writes_have_one_done_intent(seen),
        *_done_intents_have_one_applied_record(seen),
        *_one_record_per_key(seen),
        *_cooldowns_hold(seen),
        *_writes_compose(seen),
        *_batch_counts_match(seen),
        *_nothing_left_open(seen),
    ]


def _written(write: dict[str, Any]) -> tuple[str, int]:
    return str(write["id"]), int(write["params"]["daily_budget"])


def _done(seen: Observed) -> list[dict[str, Any]]:
    return [i for i in seen.intents if i["status"] == "done"]


def _triple(doc: dict[str, Any]) -> tuple[str, str, str]:
    return str(doc["batch_id"]), str(doc["task_id"]), str(doc["entity_id"])


def _writes_have_one_done_intent(seen: Observed) -> Iterator[str]:
    written = Counter(_written(w) for w in seen.writes)
    done = Counter((str(i["entity_id"]), i["target"]) for i in _done(seen))
    for entity, value in sorted(written.keys() | done.keys()):
        if written[entity, value] != done[entity, value]:
            yield (
                f"write {entity} daily_budget={value}: {written[entity, value]} at Meta,"
                f" {done[entity, value]} done intent(s)"
            )


def _done_intents_have_one_applied_record(seen: Observed) -> Iterator[str]:
    records: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in seen.records:
        records[_triple(record)].append(record)
    done = {_triple(i): i for i in _done(seen)}
    for key, intent in sorted(done.items()):
        found = records.get(key, [])
        if len(found) != 1:
            yield f"done intent {'|'.join(key)}: {len(found)} execution record(s), not 1"
        elif found[0]["outcome"] != "applied" or found[0].get("after") != intent["target"]:
            yield (
                f"done intent {'|'.join(key)} → {intent['target']}: its record says"
                f" {found[0]['outcome']} ({found[0].get('reason')}) → {found[0].get('after')}"
            )
    for key, found in sorted(records.items()):
        if key not in done and any(r["outcome"] == "applied" for r in found):
            yield f"record {'|'.join(key)} says applied but no intent of it is done"


def _one_record_per_key(seen: Observed) -> Iterator[str]:
    counted = Counter(_triple(r) for r in seen.records)
    for key, count in sorted(counted.items()):
        if count > 1:
            yield f"(batch, task, entity) {'|'.join(key)} has {count} execution records"


def _cooldowns_hold(seen: Observed) -> Iterator[str]:
    fired: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for intent in _done(seen):
        if intent.get("cooldown_minutes"):
            fired[intent["rule_id"], intent["task_id"], intent["entity_id"]].append(intent)
    for (rule, task, entity), intents in sorted(fired.items()):
        ordered = sorted(intents, key=lambda i: i["created_at"])
        for first, second in pairwise(ordered):
            gap = second["created_at"] - first["created_at"]
            if gap < timedelta(minutes=first["cooldown_minutes"]):
                yield (
                    f"rule {rule} task {task} changed {entity} twice {gap.total_seconds():.0f}s"
                    f" apart (cooldown {first['cooldown_minutes']} min): batches"
                    f" {first['batch_id']}, {second['batch_id']}"
                )
    # Meta's side alone: a campaign only cooldown tasks touch changes once per task in the run.
    per_entity = Counter(str(w["id"]) for w in seen.writes)
    for entity, allowed in sorted(seen.once_per_run.items()):
        if per_entity[entity] > allowed:
            yield f"{entity} received {per_entity[entity]} writes; its cooldowns allow {allowed}"


def _writes_compose(seen: Observed) -> Iterator[str]:
    """Each write was computed from the value the one before it left (no lost update)."""
    unused: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for intent in _done(seen):
        unused[str(intent["entity_id"])].append(intent)
    live = dict(seen.initial)
    for write in seen.writes:
        entity, value = _written(write)
        candidates = [i for i in unused[entity] if i["target"] == value]
        if not candidates:
            live[entity] = value
            continue  # reported as a write without an intent
        composed = [i for i in candidates if i["before"] == live.get(entity)]
        chosen = (composed or candidates)[0]
        if not composed:
            yield (
                f"lost update on {entity}: Meta held {live.get(entity)}, the write of"
                f" {value} was computed from {chosen['before']} (batch {chosen['batch_id']})"
            )
        unused[entity].remove(chosen)
        live[entity] = value


def _batch_counts_match(seen: Observed) -> Iterator[str]:
    applied = Counter(str(r["batch_id"]) for r in seen.records if r["outcome"] == "applied")
    for batch in seen.batches:
        if batch["status"] == "RUNNING":
            continue
        counted = batch.get("applied_count")
        if counted is not None and counted != applied[str(batch["_id"])]:
            yield (
                f"batch {batch['_id']} ({batch['status']}) says applied_count={counted},"
                f" its records {applied[str(batch['_id'])]}"
            )


def _nothing_left_open(seen: Observed) -> Iterator[str]:
    for batch in seen.batches:
        if batch["status"] == "RUNNING":
            yield f"batch {batch['_id']} left RUNNING"
    for intent in seen.intents:
        if intent["status"] == "pending":
            yield f"intent {'|'.join(_triple(intent))} left pending"


# -------------------------------------------------------------------- processes


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of a worker process on the run's servers (short lock, short timeout)."""
    return engine_env(
        settings,
        RULEENGINE_WORKER_METRICS_PORT="0",
        # a killed worker's write lock is free again in 2 s; its batch is reapable soon
        RULEENGINE_ACCOUNT_LOCK_TTL_S=str(LOCK_TTL_S),
        RULEENGINE_JOB_TIMEOUT_S=str(JOB_TIMEOUT_S),
        RULEENGINE_READ_RETRY_WAITS_S="[0.05, 0.1]",
    )


class Workers:
    """The worker processes: started, SIGKILLed and replaced, restarted when they exit."""

    def __init__(self, group: ProcessGroup, settings: Settings, *, count: int) -> None:
        self.group = group
        self.env = worker_env(settings)
        self.argv = [str(Path(sys.executable).with_name("arq")), "ruleengine.jobs.WorkerSettings"]
        self.children = [self._start(f"worker-{n + 1}") for n in range(count)]
        self.kills = 0
        self.exits = 0  # exits nobody asked for (each one restarted)
        self.killed: list[str] = []

    def _start(self, name: str) -> Child:
        return self.group.start(name, self.argv, address=name, ready=lambda: True, env=self.env)

    def names(self) -> set[str]:
        """The heartbeat/batch names (``worker:<host>:<pid>``) of the running workers."""
        return {f"worker:{HOST}:{child.pid}" for child in self.children if child.running}

    def kill(self, rng: random.Random) -> str:
        """SIGKILL a random worker and start its replacement; the victim's name."""
        index = rng.randrange(len(self.children))
        victim = self.children[index]
        victim.popen.send_signal(signal.SIGKILL)
        victim.popen.wait()
        self.kills += 1
        self.killed.append(f"worker:{HOST}:{victim.pid}")
        self.children[index] = self.group.restart(victim)
        return victim.name

    def supervise(self) -> None:
        """Restart a worker that exited by itself (as systemd would, at most once a second)."""
        for index, child in enumerate(self.children):
            if not child.running and time.monotonic() - child.started_at >= 1.0:
                self.exits += 1
                say(f"{child.name} exited by itself (code {child.popen.returncode}); restarting")
                self.children[index] = self.group.restart(child)

    async def stop(self, *, timeout_s: float) -> None:
        """SIGTERM every worker at once; they finish their jobs in flight, then exit."""
        for child in self.children:
            if child.running:
                child.popen.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                await asyncio.to_thread(child.popen.wait, timeout_s)
            except subprocess.TimeoutExpired:  # the reaper settles what it left
                child.popen.kill()
                child.popen.wait()
            child.stop()  # closes its log


async def wait_until(
    predicate: Callable[[], Awaitable[Any]], *, timeout_s: float, every_s: float = 0.05
) -> bool:
    """Poll ``predicate`` until it is truthy; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(every_s)
    return False


class FakeClock:
    """The dispatcher's clock: moved on by hand, one rule interval per tick."""

    def __init__(self, start: datetime) -> None:
        self.current = start

    def now(self) -> datetime:
        """The current fake time."""
        return self.current

    def advance(self, delta: timedelta) -> None:
        """Move the clock on."""
        self.current += delta


@dataclass(frozen=True)
class Event:
    """One act of chaos, fired once the sandbox has received ``at`` writes."""

    at: int
    kind: str  # "kill", "redis", "mongodb"


def chaos_schedule(config: ChaosConfig, rng: random.Random) -> list[Event]:
    """Kills spread over the run (half while the cooldown rules write); one restart per server."""
    expected = config.expected_writes()
    fight = 2 * config.fight_per_account * config.accounts
    early = (config.kills + 1) // 2
    kills = [rng.randint(5, max(6, int(fight * 0.9))) for _ in range(early)]
    kills += [
        rng.randint(max(6, fight), max(7, int(expected * 0.85)))
        for _ in range(config.kills - early)
    ]
    events = [Event(at, "kill") for at in kills]
    events.append(Event(int(expected * rng.uniform(0.3, 0.4)), "redis"))
    events.append(Event(int(expected * rng.uniform(0.55, 0.65)), "mongodb"))
    return sorted(events, key=lambda e: e.at)


# -------------------------------------------------------------------- the run


@dataclass
class ChaosResult:
    """The run's figures and the invariants it broke."""

    figures: dict[str, Any]
    violations: list[str]


@dataclass
class _Servers:
    sandbox: str
    mongodb: Child
    redis: Child


@dataclass
class _Tally:
    ticks: int = 0
    runs: int = 0  # ticks that enqueued jobs
    jobs: int = 0
    degraded: Counter[str] = field(default_factory=Counter)
    tick_errors: list[str] = field(default_factory=list)
    pace_timeouts: int = 0
    events_done: int = 0
    outages_s: dict[str, float] = field(default_factory=dict)
    outage_ticks: dict[str, str | None] = field(default_factory=dict)  # server → degraded


class ChaosRun:
    """One chaos run on servers of its own (see the module docstring)."""

    def __init__(self, config: ChaosConfig, *, work_dir: Path) -> None:
        self.config = config
        self.work_dir = work_dir
        self.rng = random.Random(config.seed)
        self.schedule = chaos_schedule(config, self.rng)
        self.tally = _Tally()
        self.finished = asyncio.Event()
        self.tick_lock = asyncio.Lock()

    async def run(self) -> ChaosResult:
        """Start everything, make chaos, stop, reap, check."""
        started = time.perf_counter()
        with ProcessGroup(log_dir=self.work_dir / "logs") as group:
            self.group = group
            self.servers = self._start_servers(group)
            servers = Stack(
                self.servers.sandbox, self.servers.mongodb.address, self.servers.redis.address
            )
            self.settings = stack_settings(
                servers,
                tick_seconds=1.0,
                job_timeout_s=JOB_TIMEOUT_S,
                account_lock_ttl_s=LOCK_TTL_S,
                listing_retry_waits_s=(0.05, 0.1),
                read_retry_waits_s=(0.05, 0.1),
            )
            self.client, self.db = await open_database(self.settings)
            self.redis = connect_queue(self.settings)
            self.admin = SandboxAdmin(self.servers.sandbox)
            try:
                observed = await self._run(group)
            finally:
                await self.admin.close()
                await self.redis.aclose()
                await self.client.close()
        violations = check_invariants(observed)
        violations += [f"the dispatcher's tick raised: {e}" for e in self.tally.tick_errors]
        expected = {"redis": "redis_unreachable", "mongodb": "mongodb_unreachable"}
        for server, degraded in self.tally.outage_ticks.items():
            if degraded != expected[server]:
                violations.append(f"a tick with {server} down reported {degraded!r}")
        if self.tally.events_done < len(self.schedule):
            violations.append(
                f"only {self.tally.events_done} of {len(self.schedule)} chaos events happened"
                f" in {self.tally.runs} runs (raise --max-runs)"
            )
        return ChaosResult(
            self._figures(observed, time.perf_counter() - started, len(violations)), violations
        )

    def _start_servers(self, group: ProcessGroup) -> _Servers:
        cfg = self.config
        sandbox = start_sandbox(
            group,
            "--seed",
            str(cfg.seed),
            "--scenario",
            "bench",
            "--accounts",
            str(cfg.accounts),
            "--campaigns",
            str(cfg.campaigns),
        )
        storage = self.work_dir / "mongodb"
        storage.mkdir(parents=True, exist_ok=True)
        mongodb = start_mongodb(group, port=free_port(), storage_path=str(storage))
        redis = start_redis(group, port=free_port(), data_dir=None)
        return _Servers(sandbox, mongodb, redis)

    async def _run(self, group: ProcessGroup) -> Observed:
        accounts, initial, fight = await self._prepare()
        self.workers = Workers(group, self.settings, count=self.config.workers)
        await self._wait_for_heartbeats()
        say(
            f"{self.config.workers} workers up; {len(initial)} campaigns on {len(accounts)}"
            f" accounts, {len(fight)} under cooldown rules; chaos schedule at writes"
            f" {[(e.at, e.kind) for e in self.schedule]}"
        )
        await self.admin.set_faults(latency_ms=self.config.latency_ms)
        session = GraphSession(self.settings)
        self.dispatcher = Dispatcher(
            self.settings,
            db=self.db,
            queue=self.redis,
            reader=GraphReader.from_settings(session),
            clock=self.clock.now,
            owner="chaos",
        )
        try:
            await asyncio.gather(self._dispatch_loop(), self._chaos_loop())
        finally:
            await session.close()
        await self.admin.clear_faults()
        say(f"chaos over after {self.tally.runs} runs; draining the queue")
        if not await wait_until(self._drained, timeout_s=90):
            say("the queue did not drain in 90 s; stopping the workers anyway")
        await self.workers.stop(timeout_s=JOB_TIMEOUT_S + 15)
        passes = await self._reap_until_settled()
        say(f"workers stopped; {passes} reaper pass(es) settled what they left")
        self.reaper_passes = passes
        return await self._observe(initial, fight)

    async def _prepare(self) -> tuple[list[str], dict[str, int], set[str]]:
        """Register the accounts, read every campaign's budget, save the rules."""
        now = datetime.now(UTC).replace(second=0, microsecond=0)
        await self.admin.set_clock(SANDBOX_NOW)
        accounts = await self.admin.accounts()
        await register_accounts(self.settings, self.db, accounts, now=now)
        session = GraphSession(self.settings)
        try:
            reader = GraphReader.from_settings(session)
            campaigns = [
                item
                for account in accounts
                for item in await reader.list_entities(
                    account, "campaign", token=TOKEN, fields=["id", "name", "daily_budget"]
                )
            ]
        finally:
            await session.close()
        initial = {str(item["id"]): int(item["daily_budget"]) for item in campaigns}
        fight = {str(item["id"]) for item in campaigns if CHURN_NAMES not in item["name"]}
        store = RuleStore(self.db)
        for data in chaos_rules(self.config, accounts):
            await store.save(parse_rule(data), now=now, author="chaos", source="bench")
        self.clock = FakeClock(now)
        return accounts, initial, fight

    async def _wait_for_heartbeats(self) -> None:
        async def all_beating() -> bool:
            beats = {d["_id"] async for d in self.db[c.HEARTBEATS].find({}, {"_id": 1})}
            return self.workers.names() <= beats

        if not await wait_until(all_beating, timeout_s=60, every_s=0.1):
            raise RuntimeError("the workers did not start within 60 s (see their logs)")

    # ------------------------------------------------------------ dispatcher

    async def _dispatch_loop(self) -> None:
        """Tick as soon as every job of the last tick was taken: runs of a rule overlap."""
        try:
            while not self._enough():
                await self._tick()
                if not await wait_until(self._taken, timeout_s=30):
                    self.tally.pace_timeouts += 1
        finally:
            self.finished.set()

    def _enough(self) -> bool:
        t = self.tally
        if t.runs >= self.config.max_runs or t.ticks >= 3 * self.config.max_runs:
            return True
        return t.runs >= self.config.min_runs and t.events_done == len(self.schedule)

    async def _tick(self) -> str | None:
        """One dispatcher tick, then the clock moves one interval on; what it was degraded by."""
        async with self.tick_lock:  # ticks never overlap, also when the chaos loop asks for one
            self.tally.ticks += 1
            try:
                report = await self.dispatcher.tick()
            except Exception as exc:  # a tick must never raise: the harness says so and goes on
                self.tally.tick_errors.append(f"{type(exc).__name__}: {exc}")
                return "raised"
            finally:
                self.clock.advance(timedelta(minutes=EVERY_MINUTES))
        if report is None:
            self.tally.degraded["standby"] += 1
            return "standby"
        if report.degraded:
            self.tally.degraded[report.degraded] += 1
        if report.jobs:
            self.tally.runs += 1
            self.tally.jobs += report.jobs
        return report.degraded

    async def _queued(self) -> list[tuple[str, bool]] | None:
        """(job id, taken by a worker) of every job in the queue; None while Redis is away."""
        try:
            jobs = []
            for raw in await self.redis.zrange(c.QUEUE_NAME, 0, -1):
                job_id = raw.decode() if isinstance(raw, bytes) else str(raw)
                jobs.append(
                    (job_id, bool(await self.redis.exists(in_progress_key_prefix + job_id)))
                )
        except (RedisError, OSError):
            return None
        return jobs

    async def _taken(self) -> bool:
        """No job waits in the queue to be taken by a worker."""
        jobs = await self._queued()
        return jobs is not None and all(taken for _, taken in jobs)

    async def _drained(self) -> bool:
        """Every job still in the queue was taken by a worker that is gone (killed or exited).

        arq drops a dead worker's job only once its in-progress key expires (job timeout
        + 10 s); there is no need to wait for that.
        """
        jobs = await self._queued()
        if jobs is None or not all(taken for _, taken in jobs):
            return False
        live = self.workers.names()
        try:
            for job_id, _ in jobs:
                batch_id = job_id.removeprefix("evaluate:")
                batch = await self.db[c.BATCHES].find_one({"_id": batch_id}, {"worker": 1})
                if batch is None or batch.get("worker") in live:
                    return False
        except PyMongoError:
            return False
        return True

    # ------------------------------------------------------------ chaos

    async def _chaos_loop(self) -> None:
        for event in self.schedule:
            while not self.finished.is_set() and await self._writes() < event.at:
                self.workers.supervise()
                await asyncio.sleep(0.05)
            if self.finished.is_set():
                return
            await self._fire(event)
            self.tally.events_done += 1
        while not self.finished.is_set():
            self.workers.supervise()
            await asyncio.sleep(0.05)

    async def _writes(self) -> int:
        stats = await self.admin.stats()
        return int(stats["calls_by_kind"]["write"])

    async def _fire(self, event: Event) -> None:
        if event.kind == "kill":
            name = self.workers.kill(self.rng)
            say(f"write {event.at}: SIGKILL {name} (kill {self.workers.kills})")
            return
        started = time.perf_counter()
        if event.kind == "redis":  # a crash: Redis has no persistence, its data is gone
            child = self.servers.redis
            child.popen.send_signal(signal.SIGKILL)
            child.popen.wait()
        else:  # a clean restart: the data on disk stays
            child = self.servers.mongodb
            await asyncio.to_thread(child.stop)
        # the dispatcher ticks while the server is down: degraded, and it goes on
        self.tally.outage_ticks[event.kind] = await self._tick()
        restarted = await asyncio.to_thread(self.group.restart, child)
        if event.kind == "redis":
            self.servers.redis = restarted
        else:
            self.servers.mongodb = restarted
        outage = time.perf_counter() - started
        self.tally.outages_s[event.kind] = round(outage, 2)
        say(
            f"write {event.at}: {event.kind} down {outage:.1f}s; a tick meanwhile:"
            f" {self.tally.outage_ticks[event.kind]}"
        )

    # ------------------------------------------------------------ the end

    async def _reap_until_settled(self) -> int:
        """Reaper passes at a time when every owner is provably gone, until all is settled."""
        s = self.settings
        later = datetime.now(UTC) + timedelta(
            seconds=s.job_timeout_s + GRACE_S + s.orphan_after_s + 60
        )
        engine = build_engine(s, db=self.db, redis=self.redis, worker="chaos-reaper")
        try:
            for passes in range(1, 11):
                await Reaper(engine).reap(now=later)
                if not await self._open():
                    return passes
        finally:
            await close_engine(engine)
        return 10

    async def _open(self) -> int:
        running = await self.db[c.BATCHES].count_documents({"status": "RUNNING"})
        unrecovered = await self.db[c.BATCHES].count_documents(
            {"status": "ABANDONED", "recovered_at": None}
        )
        pending = await self.db[c.ACTION_INTENTS].count_documents({"status": "pending"})
        return running + unrecovered + pending

    async def _observe(self, initial: dict[str, int], fight: set[str]) -> Observed:
        writes = await self.admin.writes()
        self.failed_writes = sum(not w["ok"] for w in writes)
        db: Database = self.db
        return Observed(
            writes=[w for w in writes if w["ok"]],
            intents=[d async for d in db[c.ACTION_INTENTS].find({})],
            # whole, as every reader sees them (a slim record leaves the rest to its row)
            records=await ExecutionStore(db).whole([d async for d in db[c.EXECUTIONS].find({})]),
            batches=[d async for d in db[c.BATCHES].find({})],
            initial=initial,
            once_per_run=dict.fromkeys(sorted(fight), 2),
        )

    def _figures(self, seen: Observed, duration_s: float, violations: int) -> dict[str, Any]:
        cfg, t = self.config, self.tally
        outcomes = Counter(str(r["outcome"]) for r in seen.records)
        reasons = Counter(
            str(r["reason"]) for r in seen.records if r["outcome"] in ("skipped", "failed")
        )
        recovered = Counter(
            str(r.get("recovered_by")) for r in seen.records if r.get("recovered_by")
        )
        statuses = Counter(str(b["status"]) for b in seen.batches)
        killed = set(self.workers.killed)
        return {
            "accounts": cfg.accounts,
            "campaigns": cfg.accounts * cfg.campaigns,
            "workers": cfg.workers,
            "seed": cfg.seed,
            "latency_ms": cfg.latency_ms,
            "runs": t.runs,
            "ticks": t.ticks,
            "degraded_ticks": dict(t.degraded),
            "jobs": t.jobs,
            # lost with Redis, expired, or their worker died (or MongoDB was away) at start
            "jobs_never_started": t.jobs - len(seen.batches),
            "kills": self.workers.kills,
            # kills that left at least one batch behind (the reaper closed it)
            "kills_mid_job": len(
                {b["worker"] for b in seen.batches if b["status"] == "ABANDONED"} & killed
            ),
            "worker_exits": self.workers.exits,
            "redis_restarts": int("redis" in t.outages_s),
            "mongodb_restarts": int("mongodb" in t.outages_s),
            "outages_s": t.outages_s,
            "ticks_during_outages": t.outage_ticks,
            "budget_actions": len(seen.intents),
            "intents": dict(Counter(str(i["status"]) for i in seen.intents)),
            "writes": len(seen.writes),
            "failed_writes": self.failed_writes,
            "records": len(seen.records),
            "outcomes": dict(outcomes),
            "skip_and_failure_reasons": dict(reasons.most_common()),
            "recovered_by_reaper": recovered["reaper"],
            "recovered_by_redelivery": recovered["redelivery"],
            "batches": len(seen.batches),
            "batch_statuses": dict(statuses),
            "batches_abandoned": statuses["ABANDONED"],
            "reaper_passes": self.reaper_passes,
            "pace_timeouts": t.pace_timeouts,
            "violations": violations,
            "duration_s": round(duration_s, 1),
        }


async def run_chaos(config: ChaosConfig, *, work_dir: Path | None = None) -> ChaosResult:
    """Run the harness; servers, data and logs under ``work_dir`` (temporary if None)."""
    if work_dir is not None:
        return await ChaosRun(config, work_dir=work_dir).run()
    with tempfile.TemporaryDirectory(prefix="ruleengine-chaos-") as tmp:
        return await ChaosRun(config, work_dir=Path(tmp)).run()


# -------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    """The command line; the defaults make well over 200 budget actions."""
    defaults = ChaosConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=defaults.accounts)
    parser.add_argument("--campaigns", type=int, default=defaults.campaigns, help="per account")
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--kills", type=int, default=defaults.kills, help="SIGKILLs of a worker")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--latency-ms", type=float, default=defaults.latency_ms)
    parser.add_argument("--min-runs", type=int, default=defaults.min_runs)
    parser.add_argument("--max-runs", type=int, default=defaults.max_runs)
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path("var") / "chaos",
        help="emptied, then holds the run's MongoDB data and every log (default var/chaos)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run, print the violations and the figures; 1 when an invariant broke."""
    args = build_parser().parse_args(argv)
    config = ChaosConfig(
        accounts=args.accounts,
        campaigns=args.campaigns,
        workers=args.workers,
        kills=args.kills,
        seed=args.seed,
        latency_ms=args.latency_ms,
        min_runs=args.min_runs,
        max_runs=args.max_runs,
    )
    shutil.rmtree(args.work_dir, ignore_errors=True)
    (args.work_dir / "logs").mkdir(parents=True)
    # this process's own log (dispatcher, reaper) goes to a file: stderr is for progress
    logging.basicConfig(
        filename=args.work_dir / "logs" / "harness.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    say(f"data and logs in {args.work_dir}")
    result = asyncio.run(run_chaos(config, work_dir=args.work_dir))
    for violation in result.violations:
        say(f"VIOLATED: {violation}")
    figures(result.figures)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
