"""Fleet soak: a simulated agency on the embedded stack, and the largest fleet it keeps up with.

Set-up, all on free loopback ports: the Graph sandbox (``bench`` world of
``--accounts`` ad accounts × ``--entities`` campaigns, one ad set each; every call
answered after ``--latency-ms``, 150 by default; its clock frozen at ``FROZEN_AT``
so Insights — hence verdicts and writes — do not depend on the time of day), the
embedded MongoDB-compatible server (in memory), Redis (no persistence), a webhook
sink for notifications (in this process), **one real dispatcher process** ticking
every ``--tick-s`` (10) seconds and ``--workers`` real arq worker processes, all
with the production settings. The token is the sandbox's operator token.

Each ad account gets ``--rules-per-account`` rules, cycling through a mix
(:data:`MIX`): pausing losers (re-activated by a follow-up three minutes later, so
they are paused again on a later run), raising winners' budgets (6-minute
cooldown), trimming middling ones (8-minute cooldown), notifying on spend without
purchases, an ad-set-level notify-only watch, and a guard that evaluates
everything and never fires. Intervals of 2 to 5 minutes (``--every-minutes N``: every
rule every N minutes), first runs spread evenly over each interval, so jobs recur all
through the soak.

**Dispatch lag** of a job = its batch row's ``started_at`` (a worker took the
job) − ``scheduled_at`` (the rule's ``next_execute_at`` the dispatcher read). It
includes the wait for the next tick (0 to one tick by design), the sweep and the
time in the queue. ``lag_p99_s_by_minute[m]`` is the p99 over the jobs that
started in minute ``m`` and the jobs still waiting at its end — queued, or due
and not yet dispatched — counted at their age so far. ``after_tick_p99_s_by_minute``
is the same without the wait for the tick: ``started_at`` − the time of the tick
that dispatched the job (the value of its ``ruleengine:dispatched:<batch_id>``
marker). A fleet is **sustained** when in every minute ``after_tick`` p99 ≤ one
tick (each tick's work has started before the next tick), the lag does not grow
minute over minute (:func:`lag_grows`) and no dispatched job was dropped
(expired before a worker took it).

``--find-capacity`` runs short steps (``--step-minutes``) on fresh stacks, doubling
the number of accounts from ``--accounts`` until a step is not sustained, then
bisecting, within ``--budget-minutes``; it reports ``capacity_accounts`` (the
largest sustained) and every step. ``--soak-at F`` then (or with ``--capacity N``
instead of a search) soaks ``--minutes`` at F × capacity accounts.
``--profile DIR`` records worker 1 (and the MongoDB-compatible server) with
py-spy during the soak and summarises where the CPU time went.

Progress on stderr each minute; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from arq.constants import in_progress_key_prefix

from _common import (
    Stack,
    engine_env,
    figures,
    open_database,
    percentile,
    register_accounts,
    say,
    stack_settings,
    start_dispatcher,
    start_servers,
    start_worker,
)
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.devstack.embedded import Child, ProcessGroup, free_port
from ruleengine.queue import connect_queue
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

#: The sandbox's frozen clock: noon in New York on a Tuesday, a day of full delivery.
FROZEN_AT = datetime(2026, 11, 24, 17, 0, tzinfo=UTC)
WEBHOOK = "fleet"
KINDS = ("dispatcher", "worker", "sandbox", "mongodb", "redis")
#: Lag that grows by more than this per minute (least squares) is growing.
GROWTH_S_PER_MIN = 1.0
GOLDEN = (math.sqrt(5) - 1) / 2

ALWAYS_ON = [{"field": "effective_status", "operator": "IN", "value": ["ACTIVE"]}]
AUTO = [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}]


def _task(
    task_id: str, conditions: list[dict[str, Any]], action: dict[str, Any], cooldown: int = 0
) -> dict[str, Any]:
    return {
        "id": task_id,
        "conditions": conditions,
        "action": action,
        "cooldown_minutes": cooldown,
    }


def _roas(op: str, value: float) -> dict[str, Any]:
    return {
        "metric": "purchase_roas.omni_purchase",
        "period": "last_7d",
        "operator": op,
        "value": value,
    }


#: (name, level, filters, every_minutes, tasks): the rule mix, cycled per account.
MIX: list[tuple[str, str, list[dict[str, Any]], int, list[dict[str, Any]]]] = [
    (
        "pause losers",
        "campaign",
        AUTO + ALWAYS_ON,
        5,
        [
            _task(
                "pause",
                [
                    _roas("<", 1.2),
                    {"metric": "spend", "period": "today", "operator": ">", "value": 20},
                ],
                {"type": "pause", "then": {"after_minutes": 3, "do": "activate"}},
            )
        ],
    ),
    (
        "scale winners",
        "campaign",
        AUTO + ALWAYS_ON,
        3,
        [
            _task(
                "scale",
                [
                    _roas(">", 3),
                    {
                        "metric": "spend",
                        "period": "today",
                        "operator": ">",
                        "compare_to": {"metric": "daily_budget", "multiplier": 0.25},
                    },
                ],
                {"type": "increase_budget", "percent": 10, "max_budget": 1000},
                cooldown=6,
            )
        ],
    ),
    (
        "trim middling",
        "campaign",
        ALWAYS_ON,
        4,
        [
            _task(
                "trim",
                [_roas(">=", 1.2), _roas("<=", 3)],
                {"type": "decrease_budget", "percent": 5, "min_budget": 30},
                cooldown=8,
            )
        ],
    ),
    (
        "no purchases",
        "campaign",
        AUTO,
        5,
        [
            _task(
                "tell",
                [
                    {"metric": "spend", "period": "last_3d", "operator": ">", "value": 10},
                    {
                        "metric": "actions.omni_purchase",
                        "period": "last_3d",
                        "operator": "==",
                        "value": 0,
                    },
                ],
                {"type": "notify", "webhook": WEBHOOK},
            )
        ],
    ),
    (
        "ad set watch",
        "adset",
        ALWAYS_ON,
        2,
        [
            _task(
                "ctr",
                [{"metric": "ctr", "period": "today", "operator": "<", "value": 0.8}],
                {"type": "notify", "webhook": WEBHOOK},
            )
        ],
    ),
    (
        "guard",
        "campaign",
        [],
        3,
        [
            _task(
                "runaway",
                [{"metric": "spend", "period": "today", "operator": ">", "value": 1_000_000}],
                {"type": "pause"},
            )
        ],
    ),
]


def fleet_rules(
    accounts: list[str], per_account: int, *, every_minutes: int | None = None
) -> list[dict[str, Any]]:
    """``per_account`` rules on each account, one account per rule, cycling through MIX; each
    on its interval in the mix, or every ``every_minutes``."""
    rules = []
    for account in accounts:
        for index in range(per_account):
            name, level, filters, every, tasks = MIX[index % len(MIX)]
            every = every_minutes or every
            rules.append(
                {
                    "name": f"{name} {account} {index:03d}",
                    "format": 2,
                    "level": level,
                    "ad_accounts": [account],
                    "filters": filters,
                    "schedule": {"mode": "interval", "every_minutes": every},
                    "timezone": "UTC",
                    "tasks": tasks,
                }
            )
    return rules


# -------------------------------------------------------------------- pure helpers


def lag_grows(series: list[float], *, per_minute_s: float = GROWTH_S_PER_MIN) -> bool:
    """True when ``series`` (a p99 per minute) rises by more than ``per_minute_s`` a minute.

    The first minute is a warm-up and is left out; the rest must have a least-squares
    slope above ``per_minute_s`` and end higher than they began by as much.
    """
    points = series[1:] if len(series) > 2 else series
    if len(points) < 2:
        return False
    n = len(points)
    mean_x, mean_y = (n - 1) / 2, sum(points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(points)) / sum(
        (x - mean_x) ** 2 for x in range(n)
    )
    return slope > per_minute_s and points[-1] - points[0] > per_minute_s


def next_step(good: int | None, bad: int | None, *, tried: int) -> int | None:
    """The next fleet size of a capacity search, or None when it has converged.

    Doubles from ``tried`` while nothing failed, then bisects between the largest
    sustained size and the smallest that was not, down to 10 % (at least 1 account).
    """
    if bad is None:
        return tried * 2
    if good is None:
        return None if bad <= 1 else max(1, bad // 2)
    if bad - good <= max(1, math.ceil(good * 0.1)):
        return None
    return (good + bad) // 2


def scheduled_of(batch_id: str) -> datetime | None:
    """The scheduled time at the end of a batch id (``<rule>-<account>-<YYYYmmddTHHMMSSZ>``)."""
    match = re.search(r"-(\d{8}T\d{6}Z)$", batch_id)
    if match is None:
        return None
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


@dataclass
class Minute:
    """What one minute of the soak showed."""

    started: int = 0
    waiting: int = 0
    lag_p99_s: float = 0.0
    after_tick_p99_s: float = 0.0
    lags: list[float] = dataclasses.field(default_factory=list)


async def collection_sizes(db: Database) -> dict[str, tuple[int, int]]:
    """Documents and bytes of data of each collection (``collStats``)."""
    sizes = {}
    for name in await db.list_collection_names():
        stats = await db.command({"collStats": name})
        sizes[name] = (int(stats.get("count", 0)), int(stats.get("size", 0)))
    return sizes


#: What grows with each run (a batch row and its evaluation chunks) and with each change (an
#: action intent, recorded before every write and notification, and its execution record).
RUN_COLLECTIONS = ("batches", "evaluations")
CHANGE_COLLECTIONS = ("action_intents", "executions")


def sizing(by_collection: dict[str, dict[str, int]], accounts: int) -> dict[str, float]:
    """How the store grows, split by what makes it grow: bytes per run and per change, and
    how many of each an account has an hour (``by_collection``: each collection's documents
    and bytes per hour). An operator sizes for their own cadence and write rate from these."""

    def total(names: tuple[str, ...], what: str) -> int:
        return sum(by_collection.get(name, {}).get(what, 0) for name in names)

    runs = by_collection.get("batches", {}).get("docs", 0)
    changes = by_collection.get("action_intents", {}).get("docs", 0)
    return {
        "runs_per_account_hour": round(runs / accounts, 1),
        "bytes_per_run": round(total(RUN_COLLECTIONS, "bytes") / runs) if runs else 0,
        "changes_per_account_hour": round(changes / accounts, 1),
        "bytes_per_change": round(total(CHANGE_COLLECTIONS, "bytes") / changes) if changes else 0,
    }


def verdict(minutes: list[Minute], *, tick_s: float, dropped: int) -> tuple[bool, str]:
    """Sustained or not, and why."""
    worst = max((m.after_tick_p99_s for m in minutes), default=0.0)
    if worst > tick_s:
        return False, f"after-tick lag p99 {worst:.1f}s > one tick ({tick_s:g}s)"
    series = [m.lag_p99_s for m in minutes]
    if lag_grows(series):
        return False, f"lag grows minute over minute: {series}"
    if dropped:
        return False, f"{dropped} dispatched job(s) expired before a worker took them"
    return True, "kept up"


# -------------------------------------------------------------------- processes


def vm_hwm_mb(pid: int) -> float:
    """The peak resident set of a process (``VmHWM``), in MB; 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (100 Hz)


def kind_of(name: str) -> str:
    """``worker-3`` → ``worker``."""
    return name.split("-")[0]


def by_kind(children: Iterable[Child], measure: Any, *, combine: Any = max) -> dict[str, float]:
    """``measure(pid)`` per process kind, the workers combined with ``combine``."""
    values: dict[str, list[float]] = {}
    for child in children:
        values.setdefault(kind_of(child.name), []).append(measure(child.pid))
    return {kind: round(combine(v), 1) for kind, v in sorted(values.items())}


# -------------------------------------------------------------------- profiles


def summarise_profile(collapsed: str, *, top: int = 12) -> dict[str, Any]:
    """py-spy's raw (collapsed) stacks → where the busy samples were.

    Each line is ``frame;frame;…;leaf count``; a frame is ``function (path:line)``,
    the path relative to its ``sys.path`` entry (``ruleengine/engine.py``,
    ``pymongo/…``, ``asyncio/…``). Samples whose leaf waits in the event loop's
    ``select`` are idle (``idle_pct``); the others are shared out by the package of
    the leaf (where the CPU was), by the engine's step on the stack (the innermost
    ``ruleengine`` module) and by leaf function.
    """
    packages: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    total = idle = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        if _IDLE.search(frames[-1]):
            idle += count
            continue
        packages[_package(frames[-1])] += count
        functions[re.sub(r":\d+\)$", ")", frames[-1])] += count
        steps[_step(frames)] += count
    busy = total - idle

    def pct(counter: Counter[str], n: int | None = None) -> dict[str, float]:
        return {k: round(100 * v / busy, 1) for k, v in counter.most_common(n)} if busy else {}

    return {
        "samples": total,
        "idle_pct": round(100 * idle / total, 1) if total else 0.0,
        "busy_by_package_pct": pct(packages, top),
        "busy_by_engine_step_pct": pct(steps),
        "busy_top_functions_pct": pct(functions, top),
    }


_IDLE = re.compile(r"^(EpollSelector|_PollLikeSelector|PollSelector|SelectSelector)\.select ")


def _path(frame: str) -> str:
    return frame[frame.rfind("(") + 1 :].rsplit(":", 1)[0]


def _package(frame: str) -> str:
    path = _path(frame)
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    return path.split("/", 1)[0].removesuffix(".py")


#: The engine's steps, told by the innermost ruleengine module on the stack.
_STEPS = (
    ("act (write path, notify)", ("actions", "copies", "notify", "locks", "meta/writer")),
    ("records and intents", ("store/records", "store/intents", "followups/")),
    ("fetch (Insights)", ("meta/insights", "meta/batch", "meta/reports", "meta/pacing")),
    ("Graph transport", ("meta/http", "meta/reader")),
    ("evaluate", ("rules/",)),
    ("payload", ("payload",)),
)


def _step(frames: list[str]) -> str:
    for frame in reversed(frames):
        path = _path(frame)
        if not path.startswith("ruleengine/") and "/ruleengine/" not in path:
            continue
        module = path.split("ruleengine/", 1)[1]
        for step, prefixes in _STEPS:
            if module.startswith(prefixes):
                return step
        return f"engine, other ({module.removesuffix('.py')})"
    return "outside the engine (arq, event loop)"


# -------------------------------------------------------------------- one run


@dataclass(frozen=True)
class Shape:
    """The fleet and how long to run it."""

    accounts: int
    rules_per_account: int = 6
    entities: int = 50
    workers: int = 2
    minutes: float = 2.0
    latency_ms: float = 150.0
    tick_s: float = 10.0
    every_minutes: int | None = None  # every rule's interval (None: the mix's own, 2 to 5)

    def describe(self) -> str:
        every = f", every rule every {self.every_minutes} min" if self.every_minutes else ""
        return (
            f"{self.accounts} accounts × {self.rules_per_account} rules × {self.entities}"
            f" campaigns, {self.workers} workers, {self.minutes:g} min{every}"
        )


class WebhookSink:
    """A local webhook that counts the notifications it receives."""

    def __init__(self) -> None:
        self.received = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _hook(self, request: web.Request) -> web.Response:
        await request.read()
        self.received += 1
        return web.json_response({"ok": True})

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/hook"
        try:
            yield self.url
        finally:
            await self.runner.cleanup()


class FleetRun:
    """One fleet on a fresh stack: set up, run ``shape.minutes``, measure."""

    def __init__(self, shape: Shape, *, log_dir: Path, profile_dir: Path | None = None) -> None:
        self.shape = shape
        self.log_dir = log_dir
        self.profile_dir = profile_dir
        self.minutes: list[Minute] = []

    async def run(self) -> dict[str, Any]:
        shape = self.shape
        world = {"--accounts": shape.accounts, "--campaigns": shape.entities, "--adsets": 1}
        args = ("--scenario", "bench", *(f"{k}={v}" for k, v in world.items()))
        sink = WebhookSink()
        shutil.rmtree(self.log_dir, ignore_errors=True)
        with ProcessGroup(log_dir=self.log_dir) as group:
            servers = start_servers(group, databases=True, sandbox_args=args)
            async with sink.serving() as hook_url:
                settings = stack_settings(servers, webhooks={WEBHOOK: hook_url})
                client, db = await open_database(settings)
                try:
                    return await self._run(group, servers, settings, db, sink)
                finally:
                    await client.close()

    async def _run(
        self, group: ProcessGroup, servers: Stack, settings: Settings, db: Database, sink: Any
    ) -> dict[str, Any]:
        shape = self.shape
        async with SandboxAdmin(servers.sandbox_url) as admin:
            await admin.set_clock(FROZEN_AT)
            accounts = await admin.accounts()
            rules = await self._prepare(db, settings, accounts)
            env = engine_env(
                settings,
                RULEENGINE_TICK_SECONDS=str(shape.tick_s),
                RULEENGINE_WEBHOOKS=orjson.dumps({WEBHOOK: sink.url}).decode(),
                RULEENGINE_LOG_LEVEL="WARNING",
            )
            for n in range(shape.workers):
                start_worker(group, env, f"worker-{n + 1}")
            await admin.set_faults(latency_ms=shape.latency_ms)
            await admin.clear_stats()
            redis = connect_queue(settings)
            try:
                before = await db.command({"dbStats": 1})
                sizes_before = await collection_sizes(db)
                started_at = datetime.now(UTC)
                await self._spread_schedules(db, rules, started_at)
                cpu_before = {ch.name: cpu_s(ch.pid) for ch in group.children}
                start_dispatcher(group, env)
                profiler = self._start_profiler(group)
                await self._watch(db, redis, started_at)
                ended_at = datetime.now(UTC)
                stats = await admin.stats()
                writes = [w for w in await admin.writes() if w["ok"]]
                after = await db.command({"dbStats": 1})
                sizes_after = await collection_sizes(db)
                rss = by_kind(group.children, vm_hwm_mb)
                cpu = {
                    kind: round(v, 1)
                    for kind, v in _cpu_by_kind(group.children, cpu_before).items()
                }
                dropped, dispatched = await self._dropped(db, redis, started_at, ended_at)
                jobs = await self._jobs(db, started_at, ended_at)
                profile = self._stop_profiler(profiler)
            finally:
                await redis.aclose()
        hours = (ended_at - started_at).total_seconds() / 3600
        seconds = hours * 3600
        ok, why = verdict(self.minutes, tick_s=shape.tick_s, dropped=dropped)
        all_lags = [lag for m in self.minutes for lag in m.lags]
        by_collection = {
            name: {
                "docs": round((count - sizes_before.get(name, (0, 0))[0]) / hours),
                "bytes": round((size - sizes_before.get(name, (0, 0))[1]) / hours),
            }
            for name, (count, size) in sizes_after.items()
            if (count, size) != sizes_before.get(name, (0, 0))
        }
        result: dict[str, Any] = {
            "accounts": shape.accounts,
            "rules_per_account": shape.rules_per_account,
            "rules": shape.accounts * shape.rules_per_account,
            "entities_per_account": shape.entities,
            "workers": shape.workers,
            "minutes": shape.minutes,
            "latency_ms": shape.latency_ms,
            "tick_s": shape.tick_s,
            "every_minutes": shape.every_minutes,
            "sandbox_clock": FROZEN_AT.isoformat(),
            "sustained": ok,
            "verdict": why,
            "lag_p50_s": round(percentile(all_lags, 50), 2),
            "lag_p99_s": round(percentile(all_lags, 99), 2),
            "lag_p99_s_by_minute": [m.lag_p99_s for m in self.minutes],
            "after_tick_p99_s_by_minute": [m.after_tick_p99_s for m in self.minutes],
            "waiting_by_minute": [m.waiting for m in self.minutes],
            "jobs_dispatched": dispatched,
            "jobs": jobs["started"],
            "jobs_dropped": dropped,
            "jobs_per_s": round(jobs["started"] / seconds, 2),
            "evaluations": jobs["evaluations"],
            "evals_per_s": round(jobs["evaluations"] / seconds, 1),
            "batch_statuses": jobs["statuses"],
            "writes": len(writes),
            "notifications": sink.received,
            "graph_calls": stats["counted_calls"],
            "graph_http_requests": stats["http_requests"],
            "graph_calls_per_account_hour": round(stats["counted_calls"] / shape.accounts / hours),
            "mongo_docs_per_hour": round((after["objects"] - before["objects"]) / hours),
            "mongo_bytes_per_hour": round((after["dataSize"] - before["dataSize"]) / hours),
            "mongo_mb_per_account_hour": round(
                (after["dataSize"] - before["dataSize"]) / hours / shape.accounts / 1e6, 3
            ),
            "mongo_by_collection_per_hour": by_collection,
            "mongo_sizing": sizing(by_collection, shape.accounts),
            "max_rss_mb": rss,
            "cpu_s": cpu,
        }
        if profile is not None:
            result["worker_profile"] = profile
        return result

    async def _prepare(
        self, db: Database, settings: Settings, accounts: list[str]
    ) -> list[tuple[str, int]]:
        """Register the accounts and save the rules: (rule id, interval in minutes) of each."""
        now = datetime.now(UTC)
        await register_accounts(settings, db, accounts, now=now)
        store = RuleStore(db)
        registered = await CredentialStore(db, load_key(settings)).currencies()
        started = time.perf_counter()
        saved = []
        for data in fleet_rules(
            accounts, self.shape.rules_per_account, every_minutes=self.shape.every_minutes
        ):
            rule = parse_rule(data, accounts=registered, webhooks={WEBHOOK})
            doc = (await store.save(rule, now=now, author="fleet", source="bench")).rule
            saved.append((doc.id, int(data["schedule"]["every_minutes"])))
        say(
            f"{self.shape.describe()}: {len(accounts)} accounts registered,"
            f" rules saved in {time.perf_counter() - started:.1f}s"
        )
        return saved

    @staticmethod
    async def _spread_schedules(
        db: Database, rules: list[tuple[str, int]], start: datetime
    ) -> None:
        """First runs spread evenly over each rule's interval, from ``start`` on (a golden-ratio
        sequence: whatever the number of rules, due times fill the interval evenly)."""
        for position, (rule_id, every) in enumerate(rules):
            offset = timedelta(seconds=every * 60 * ((position * GOLDEN) % 1.0))
            await db[c.RULES].update_one(
                {"_id": rule_id}, {"$set": {"next_execute_at": start + offset}}
            )

    async def _watch(self, db: Database, redis: Any, started_at: datetime) -> None:
        """Sample each minute until ``shape.minutes`` have passed; progress on stderr."""
        count = max(1, round(self.shape.minutes))
        since = started_at
        for index in range(count):
            until = started_at + timedelta(minutes=self.shape.minutes * (index + 1) / count)
            await asyncio.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()))
            now = datetime.now(UTC)
            minute = await self._sample(db, redis, since, now)
            self.minutes.append(minute)
            since = now
            say(
                f"  minute {index + 1}: {minute.started} jobs started, {minute.waiting} waiting;"
                f" lag p99 {minute.lag_p99_s:.1f}s, after the tick {minute.after_tick_p99_s:.1f}s"
            )

    async def _sample(self, db: Database, redis: Any, since: datetime, now: datetime) -> Minute:
        lags: list[float] = []
        after_tick: list[float] = []
        rows = db[c.BATCHES].find(
            {"started_at": {"$gt": since, "$lte": now}},
            {"_id": 1, "scheduled_at": 1, "started_at": 1},
        )
        started = [row async for row in rows]
        ticks = await _tick_times(redis, [str(row["_id"]) for row in started])
        for row in started:
            at = _utc(row["started_at"])
            lags.append((at - _utc(row["scheduled_at"])).total_seconds())
            if (tick := ticks.get(str(row["_id"]))) is not None:
                after_tick.append((at - tick).total_seconds())
        waiting = 0
        queued = await redis.zrangebyscore(c.QUEUE_NAME, 0, now.timestamp() * 1000)
        queued_ids = [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in queued]
        evaluate = [j.removeprefix("evaluate:") for j in queued_ids if j.startswith("evaluate:")]
        queued_ticks = await _tick_times(redis, evaluate)
        for batch_id in evaluate:
            if await redis.exists(in_progress_key_prefix + "evaluate:" + batch_id):
                continue
            scheduled = scheduled_of(batch_id)
            if scheduled is None:
                continue
            waiting += 1
            lags.append((now - scheduled).total_seconds())
            if (tick := queued_ticks.get(batch_id)) is not None:
                after_tick.append((now - tick).total_seconds())
        overdue = db[c.RULES].find(
            {"status": "ACTIVE", "next_execute_at": {"$lte": now}}, {"next_execute_at": 1}
        )
        async for rule in overdue:
            late = (now - _utc(rule["next_execute_at"])).total_seconds()
            lags.append(late)
            after_tick.append(max(0.0, late - self.shape.tick_s))  # its tick came and went
        return Minute(
            started=len(started),
            waiting=waiting,
            lag_p99_s=round(percentile(lags, 99), 2),
            after_tick_p99_s=round(percentile(after_tick, 99), 2),
            lags=lags,
        )

    async def _dropped(
        self, db: Database, redis: Any, since: datetime, until: datetime
    ) -> tuple[int, int]:
        """(jobs dispatched in the window that never started and are no longer queued, all
        jobs dispatched in the window)."""
        dispatched = []
        async for key in redis.scan_iter(match=c.DISPATCHED_KEY_PREFIX + "*", count=1000):
            name = key.decode() if isinstance(key, bytes) else str(key)
            dispatched.append(name.removeprefix(c.DISPATCHED_KEY_PREFIX))
        ticks = await _tick_times(redis, dispatched)
        inside = [b for b in dispatched if (t := ticks.get(b)) is not None and since <= t <= until]
        started = {
            str(d["_id"]) async for d in db[c.BATCHES].find({"_id": {"$in": inside}}, {"_id": 1})
        }
        queued = {
            (raw.decode() if isinstance(raw, bytes) else str(raw)).removeprefix("evaluate:")
            for raw in await redis.zrange(c.QUEUE_NAME, 0, -1)
        }
        return len([b for b in inside if b not in started and b not in queued]), len(inside)

    async def _jobs(self, db: Database, since: datetime, until: datetime) -> dict[str, Any]:
        rows = db[c.BATCHES].find(
            {"started_at": {"$gte": since, "$lte": until}},
            {"status": 1, "evaluated_count": 1, "finished_at": 1},
        )
        statuses: Counter[str] = Counter()
        evaluations = 0
        started = 0
        async for row in rows:
            started += 1
            statuses[str(row["status"])] += 1
            finished = row.get("finished_at")
            if finished is not None and _utc(finished) <= until:
                evaluations += int(row.get("evaluated_count") or 0)
        return {"started": started, "evaluations": evaluations, "statuses": dict(statuses)}

    def _start_profiler(self, group: ProcessGroup) -> list[tuple[str, subprocess.Popen[bytes]]]:
        if self.profile_dir is None:
            return []
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(py_spy).exists():
            raise SystemExit("--profile needs py-spy: pip install py-spy")
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        duration = str(max(10, int(self.shape.minutes * 60) - 5))
        recorders = []
        for child in group.children:
            if child.name not in ("worker-1", "mongodb"):
                continue
            out = self.profile_dir / f"{child.name}.txt"
            argv = [py_spy, "record", "--pid", str(child.pid), "--duration", duration]
            argv += ["--rate", "50", "--format", "raw", "--output", str(out), "--nonblocking"]
            recorders.append(
                (
                    child.name,
                    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                )
            )
        return recorders

    def _stop_profiler(
        self, recorders: list[tuple[str, subprocess.Popen[bytes]]]
    ) -> dict[str, Any] | None:
        if not recorders or self.profile_dir is None:
            return None
        summaries = {}
        for name, popen in recorders:
            try:
                popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                popen.terminate()
                popen.wait()
            path = self.profile_dir / f"{name}.txt"
            if path.exists():
                summaries[name] = summarise_profile(path.read_text())
                say(f"profile of {name}: {path} → {summaries[name]}")
        return summaries


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


async def _tick_times(redis: Any, batch_ids: list[str]) -> dict[str, datetime]:
    """The dispatching tick of each batch, from its ``dispatched`` marker."""
    out: dict[str, datetime] = {}
    for start in range(0, len(batch_ids), 500):
        chunk = batch_ids[start : start + 500]
        if not chunk:
            continue
        values = await redis.mget([c.DISPATCHED_KEY_PREFIX + b for b in chunk])
        for batch_id, value in zip(chunk, values, strict=True):
            if value is not None:
                text = value.decode() if isinstance(value, bytes) else str(value)
                with contextlib.suppress(ValueError):
                    out[batch_id] = _utc(datetime.fromisoformat(text))
    return out


def _cpu_by_kind(children: list[Child], before: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for child in children:
        kind = kind_of(child.name)
        totals[kind] = totals.get(kind, 0.0) + cpu_s(child.pid) - before.get(child.name, 0.0)
    return dict(sorted(totals.items()))


# -------------------------------------------------------------------- capacity


async def find_capacity(
    base: Shape, *, budget_minutes: float, log_dir: Path
) -> tuple[int | None, list[dict[str, Any]]]:
    """Grow the fleet until a step is not sustained, then bisect; within the time budget."""
    deadline = time.monotonic() + budget_minutes * 60
    good: int | None = None
    bad: int | None = None
    steps: list[dict[str, Any]] = []
    accounts: int | None = base.accounts
    step_s = 0.0
    while accounts is not None and time.monotonic() + step_s < deadline:
        began = time.monotonic()
        shape = dataclasses.replace(base, accounts=accounts)
        say(f"capacity step {len(steps) + 1}: {shape.describe()}")
        result = await FleetRun(shape, log_dir=log_dir).run()
        step_s = time.monotonic() - began
        steps.append(_step_summary(result))
        say(f"  → {'sustained' if result['sustained'] else 'NOT sustained'}: {result['verdict']}")
        if result["sustained"]:
            good = accounts
        else:
            bad = accounts
        accounts = next_step(good, bad, tried=accounts)
    if accounts is not None:
        say(f"capacity search stopped by its {budget_minutes:g}-minute budget")
    return good, steps


def _step_summary(result: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "accounts",
        "sustained",
        "verdict",
        "lag_p99_s_by_minute",
        "after_tick_p99_s_by_minute",
        "jobs_per_s",
        "evals_per_s",
        "writes",
        "jobs_dropped",
        "graph_calls_per_account_hour",
        "mongo_docs_per_hour",
        "cpu_s",
    )
    return {k: result[k] for k in keys}


# -------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Defaults: a 2-minute run of 4 accounts × 6 rules × 50 campaigns with 2 workers"
        " (what `make bench` runs). See docs/performance.md for the figures and definitions.",
    )
    parser.add_argument(
        "--accounts", type=int, default=4, help="ad accounts (first step of a search)"
    )
    parser.add_argument(
        "--rules-per-account",
        type=int,
        default=6,
        help="rules per ad account (default 6: the whole mix once)",
    )
    parser.add_argument(
        "--entities",
        type=int,
        default=50,
        help="campaigns per ad account, one ad set each (default 50)",
    )
    parser.add_argument(
        "--minutes", type=float, default=2.0, help="length of the run or soak (default 2)"
    )
    parser.add_argument("--workers", type=int, default=2, help="arq worker processes (default 2)")
    parser.add_argument(
        "--latency-ms", type=float, default=150.0, help="Graph sandbox latency (default 150)"
    )
    parser.add_argument("--tick-s", type=float, default=10.0, help="dispatcher tick (default 10)")
    parser.add_argument(
        "--every-minutes",
        type=int,
        metavar="N",
        help="run every rule every N minutes (default: the mix's own intervals, 2 to 5 minutes;"
        " e.g. 15 for an agency's usual cadence; follow-ups and cooldowns stay as they are)",
    )
    parser.add_argument(
        "--find-capacity",
        action="store_true",
        help="grow --accounts (doubling, then bisecting) until a step is not sustained",
    )
    parser.add_argument(
        "--step-minutes",
        type=float,
        default=5.0,
        help="length of each capacity step (default 5: shorter steps end before the mix's"
        " follow-ups and cooldowns come round and before MongoDB fills, and overstate capacity)",
    )
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=24.0,
        help="time bound of the capacity search (default 24)",
    )
    parser.add_argument(
        "--capacity", type=int, help="a capacity found earlier, for --soak-at without a search"
    )
    parser.add_argument(
        "--soak-at",
        type=float,
        metavar="FRACTION",
        help="then soak --minutes at FRACTION × capacity accounts (e.g. 0.8)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="py-spy worker 1 and MongoDB during the (last) run; raw stacks in DIR",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=Path("var") / "bench-logs" / "fleet",
        help="logs of the run's processes (emptied first)",
    )
    return parser


async def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Shape(
        accounts=args.accounts,
        rules_per_account=args.rules_per_account,
        entities=args.entities,
        workers=args.workers,
        minutes=args.minutes,
        latency_ms=args.latency_ms,
        tick_s=args.tick_s,
        every_minutes=args.every_minutes,
    )
    out: dict[str, Any] = {}
    capacity = args.capacity
    if args.find_capacity:
        step = dataclasses.replace(base, minutes=args.step_minutes)
        capacity, steps = await find_capacity(
            step, budget_minutes=args.budget_minutes, log_dir=args.log_dir
        )
        out |= {
            "capacity_accounts": capacity,
            "capacity_shape": {
                "accounts": capacity,
                "rules_per_account": base.rules_per_account,
                "entities_per_account": base.entities,
                "workers": base.workers,
                "tick_s": base.tick_s,
                "latency_ms": base.latency_ms,
                "every_minutes": base.every_minutes,
            },
            "capacity_steps": steps,
        }
        if args.soak_at is None:
            return out
    if args.soak_at is not None:
        if not capacity:
            raise SystemExit("--soak-at needs a capacity: --find-capacity or --capacity N")
        base = dataclasses.replace(base, accounts=max(1, round(args.soak_at * capacity)))
        say(f"soak at {args.soak_at:g} × {capacity} accounts: {base.describe()}")
    result = await FleetRun(base, log_dir=args.log_dir, profile_dir=args.profile).run()
    return out | result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = asyncio.run(run(args))
    figures(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
