"""Liveness (``/health``) and readiness (``/health/ready``) of the product.

Readiness asks each dependency with a short timeout, all at once, so a dead
Redis or MongoDB makes the endpoint answer 503 quickly instead of hanging the
load balancer's probe: MongoDB ping, Redis ping, the freshest worker heartbeat,
the dispatcher's last tick, the depth of the arq queue, and the follow-ups:
how many wait ``pending`` (stored while Redis was away, to be re-armed) and how
many are overdue (their timer did not fire: see
:mod:`ruleengine.store.followups`). Pending alone is healthy — that is the
graceful degradation working; overdue is not.

The ``approvals`` check shows how many planned changes wait for a person and how old the
oldest is; waiting is never a failure (the check is always ok), it is there to be seen.

The ``tokens`` check names every ad account whose token Meta refused (see
:mod:`ruleengine.accounts.token_state`). It does not make readiness fail: the processes are fine
and restarting them, or taking the web app out of a load balancer, fixes nothing —
the operator replaces the token. The answer says ``"status": "degraded"`` and lists
the check under ``degraded`` instead, with a 200. The ``currencies`` check does the same
for every ad account whose registered currency or timezone a job found not to be Meta's
(its ``currency_state``: budget and bid changes on it stop until it is re-read, see
:mod:`ruleengine.accounts.currency`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from aiohttp import web

from ruleengine import __version__
from ruleengine.constants import QUEUE_NAME
from ruleengine.settings import Settings
from ruleengine.store.approvals import ApprovalStore
from ruleengine.store.db import Document
from ruleengine.store.followups import OVERDUE_AFTER
from ruleengine.web.jsonio import json_response
from ruleengine.web.state import Services, services, settings_of, uptime_s

CHECK_TIMEOUT_S: Final = 1.5
#: Checks that report a problem without making readiness fail (see the module docstring).
NON_BLOCKING: Final = frozenset({"tokens", "currencies"})
WORKER_FRESH_S: Final = 30.0
WORKER_PREFIX: Final = "worker:"
DISPATCHER: Final = "dispatcher"

Detail = dict[str, Any]


def dispatcher_max_age_s(settings: Settings) -> float:
    """How old the dispatcher's last tick may be: 3 ticks, and never under 30 s."""
    return max(3 * settings.tick_seconds, 30.0)


@dataclass(frozen=True)
class Beats:
    """Heartbeat ages in seconds: every worker's, and the dispatcher's (None: never beat)."""

    workers: list[float]
    dispatcher: float | None

    @classmethod
    def from_docs(cls, docs: list[Document], *, now: datetime) -> Beats:
        """Ages from ``heartbeats`` documents (``_id`` = name, ``at`` = last beat)."""
        workers: list[float] = []
        dispatcher: float | None = None
        for doc in docs:
            at = doc.get("at")
            if not isinstance(at, datetime):
                continue
            age = max(0.0, (now - at).total_seconds())
            name = str(doc.get("_id"))
            if name.startswith(WORKER_PREFIX):
                workers.append(age)
            elif name == DISPATCHER:
                dispatcher = age
        return cls(workers=workers, dispatcher=dispatcher)

    def live_workers(self) -> int:
        """Workers that beat within the last 30 s."""
        return sum(age <= WORKER_FRESH_S for age in self.workers)


async def read_beats(svc: Services) -> Beats:
    """The current heartbeat ages."""
    return Beats.from_docs(await svc.heartbeats.all(), now=datetime.now(UTC))


async def queue_depth(svc: Services) -> int:
    """Jobs waiting in the arq queue (a sorted set)."""
    return int(await svc.queue.zcard(QUEUE_NAME))


async def bounded(probe: Callable[[], Awaitable[Detail]]) -> Detail:
    """Run one probe with the check timeout; failures become ``{"ok": false, "error": …}``."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            detail = await probe()
    except TimeoutError:
        return {"ok": False, "error": f"no answer within {CHECK_TIMEOUT_S:g} s"}
    except Exception as exc:  # any failure of a dependency is an unhealthy check, not a 500
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    detail.setdefault("latency_ms", round((time.perf_counter() - started) * 1000, 1))
    return detail


def _probes(svc: Services, settings: Settings) -> dict[str, Callable[[], Awaitable[Detail]]]:
    async def mongodb() -> Detail:
        await svc.db.command("ping")
        return {"ok": True}

    async def redis() -> Detail:
        await svc.queue.ping()
        return {"ok": True}

    async def workers() -> Detail:
        beats = await read_beats(svc)
        live = beats.live_workers()
        newest = min(beats.workers, default=None)
        return {"ok": live > 0, "live": live, "newest_age_s": _round(newest)} | (
            {} if live else {"error": f"no worker heartbeat within {WORKER_FRESH_S:g} s"}
        )

    async def dispatcher() -> Detail:
        age, limit = (await read_beats(svc)).dispatcher, dispatcher_max_age_s(settings)
        ok = age is not None and age <= limit
        detail: Detail = {"ok": ok, "age_s": _round(age), "max_age_s": limit}
        if not ok:
            detail["error"] = "no dispatcher tick recorded" if age is None else "last tick too old"
        return detail

    async def queue() -> Detail:
        return {"ok": True, "depth": await queue_depth(svc)}

    async def followups() -> Detail:
        return await followups_check(svc)

    async def tokens() -> Detail:
        return await tokens_check(svc)

    async def currencies() -> Detail:
        return await currencies_check(svc)

    async def approvals() -> Detail:
        return await approvals_check(svc)

    return {
        "mongodb": mongodb,
        "redis": redis,
        "workers": workers,
        "dispatcher": dispatcher,
        "queue": queue,
        "followups": followups,
        "tokens": tokens,
        "currencies": currencies,
        "approvals": approvals,
    }


async def tokens_check(svc: Services) -> Detail:
    """Ad accounts whose token Meta refused: the engine skips them until it is replaced."""
    refused = await svc.credentials.unusable()
    detail: Detail = {
        "ok": not refused,
        "refused": [
            {
                "account": a.id,
                **a.token_state.model_dump(mode="json", exclude={"token_fingerprint"}),
            }
            for a in refused
            if a.token_state is not None
        ],
    }
    if refused:
        names = ", ".join(a.id for a in refused)
        detail["error"] = (
            f"Meta refused the token of {names}: their rules skip them until the token is"
            " replaced (ruleengine accounts add ACCOUNT --token-env NAME, or POST /api/accounts)"
        )
    return detail


async def currencies_check(svc: Services) -> Detail:
    """Ad accounts registered with another currency or timezone than Meta's: no budget or bid
    change is made on them until they are re-read from Meta."""
    found = await svc.credentials.mismatched()
    detail: Detail = {
        "ok": not found,
        "mismatched": [
            {"account": a.id, **a.currency_state.model_dump(mode="json")}
            for a in found
            if a.currency_state is not None
        ],
    }
    if found:
        names = ", ".join(a.id for a in found)
        detail["error"] = (
            f"the registered currency or timezone of {names} is not Meta's: no budget or bid"
            " change is made on them until they are re-read (ruleengine accounts refresh"
            " ACCOUNT, or POST /api/accounts/ACCOUNT/refresh)"
        )
    return detail


async def followups_check(svc: Services) -> Detail:
    """Pending and overdue follow-ups: unhealthy while any is overdue."""
    pending, overdue = await asyncio.gather(
        svc.followups.count(status="pending"), svc.followups.overdue(now=datetime.now(UTC))
    )
    limit = OVERDUE_AFTER.total_seconds()
    detail: Detail = {"ok": overdue == 0, "pending": pending, "overdue": overdue}
    if overdue:
        detail["error"] = (
            f"{overdue} follow-up(s) more than {limit / 60:g} min past due: their timer did not"
            " fire (is a worker running? is Redis up?)"
        )
    return detail


async def approvals_check(svc: Services) -> Detail:
    """Planned changes waiting for a person: how many, and the oldest's age (always ok)."""
    summary = await ApprovalStore(svc.db).pending_summary()
    age = None if summary.oldest is None else (datetime.now(UTC) - summary.oldest).total_seconds()
    return {"ok": True, "pending": summary.count, "oldest_age_s": _round(age)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


async def readiness(svc: Services, settings: Settings) -> dict[str, Any]:
    """Every check, run concurrently: ``{"status", "failing", "degraded", "checks"}``."""
    probes = _probes(svc, settings)
    results = await asyncio.gather(*(bounded(p) for p in probes.values()))
    checks = dict(zip(probes, results, strict=True))
    bad = [name for name, detail in checks.items() if not detail["ok"]]
    failing = [name for name in bad if name not in NON_BLOCKING]
    degraded = [name for name in bad if name in NON_BLOCKING]
    status = "unhealthy" if failing else "degraded" if degraded else "ok"
    return {"status": status, "failing": failing, "degraded": degraded, "checks": checks}


async def health(request: web.Request) -> web.Response:
    """``GET /health``: the process is up (no dependency is asked)."""
    return json_response(
        {"status": "ok", "uptime_s": round(uptime_s(request.app), 3), "version": __version__}
    )


async def ready(request: web.Request) -> web.Response:
    """``GET /health/ready``: 200 when every dependency is healthy (or only ``degraded``),
    else 503 naming the failing ones."""
    report = await readiness(services(request), settings_of(request))
    return json_response(report, status=503 if report["failing"] else 200)


def add_routes(app: web.Application) -> None:
    """Register the health routes."""
    app.router.add_get("/health", health, name="health")
    app.router.add_get("/health/ready", ready, name="ready")
