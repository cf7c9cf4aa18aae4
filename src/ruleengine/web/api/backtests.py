"""``POST /api/backtests`` and ``GET /api/backtests/{id}``: backtests run in the web process.

A backtest is read-only and interactive, so it does not wait behind account jobs on the
arq queue: the web app runs it as a background asyncio task (at most
``RULEENGINE_BACKTEST_CONCURRENCY`` at once, the others ``queued``), each with its own
:class:`~ruleengine.backtest.service.BacktestDeps`, and keeps its state in the ``backtests``
collection (:mod:`ruleengine.store.backtests`) for a client to poll. A process holds at
most ``RULEENGINE_BACKTEST_QUEUE_MAX`` backtests, queued or running (429 past that), and a
backtest replays at most ``RULEENGINE_BACKTEST_MAX_ENTITIES`` entities: the ``POST`` lists
them first (the run reuses the listing) and answers 422 past that. Every failure ends
the backtest ``failed`` with a message; one the service did not expect also goes to the
error log. Backtests an earlier process left unfinished are failed at startup; those of
this process are failed when it stops. See ``docs/api.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from aiohttp import web
from pymongo.errors import PyMongoError

from ruleengine.backtest.result import BacktestRequest
from ruleengine.backtest.service import (
    BacktestDeps,
    BacktestRefused,
    BacktestTooBig,
    Progress,
    ProgressFn,
    check_entities,
    count_entities,
    run_backtest,
)
from ruleengine.errors import ErrorReport, ErrorSink, FieldError, RuleValidationError
from ruleengine.rules.basics import is_account_id
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.language.money import CURRENT_FORMAT, MIGRATE_HINT
from ruleengine.settings import Settings
from ruleengine.store.backtests import BacktestStore, ResultTooLarge, decode_result
from ruleengine.store.db import Database, Document
from ruleengine.store.ruledocs import parse_stored
from ruleengine.web.jsonio import ApiError, invalid, json_response, read_object
from ruleengine.web.state import SERVICES, SETTINGS, services, settings_of

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

MAX_DAYS: Final = 90
DEFAULT_DAYS: Final = 30
MAX_VERSION: Final = 2**63 - 1
PROGRESS_EVERY_S: Final = 0.5
RETRY_AFTER_S: Final = 30  # what a 429 asks a client to wait: about a short backtest's run
STOPPED: Final = "interrupted: the web process stopped"
_FIELDS: Final = ("rule", "rule_id", "version", "days", "accounts", "as_seen")
_REQUEST_KEYS: Final = ("rule_id", "version", "days", "accounts", "as_seen", "rule_name")
_INVALID: Final = "invalid backtest"


def _utcnow() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------- the request body


@dataclass(frozen=True)
class _Body:
    """The body's fields once their shapes are right (the rule not yet parsed)."""

    rule: Any
    rule_id: str | None
    version: int | None
    days: int
    accounts: tuple[str, ...]
    as_seen: bool | None


def _whole_number(value: Any, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _shape(body: dict[str, Any]) -> tuple[_Body, list[FieldError]]:
    """Check every field but the rule itself; every problem with its path."""
    errors = [
        FieldError(str(name), f"unknown field (known: {', '.join(_FIELDS)})")
        for name in body
        if name not in _FIELDS
    ]
    rule, rule_id, version = body.get("rule"), body.get("rule_id"), body.get("version")
    if (rule is None) == (rule_id is None):
        both = rule is not None
        errors.append(
            FieldError(
                "rule" if both else "",
                'give "rule" (a rule document) or "rule_id" (a stored rule)'
                + (", not both" if both else ""),
            )
        )
    if rule is not None and not isinstance(rule, dict):
        errors.append(FieldError("rule", "expected a rule document {…}"))
    if rule_id is not None and (
        not isinstance(rule_id, str) or not 0 < len(rule_id) <= 200 or not rule_id.isprintable()
    ):
        errors.append(FieldError("rule_id", "expected the id of a stored rule (a string)"))
    if version is not None and not _whole_number(version, 1, MAX_VERSION):
        errors.append(FieldError("version", f"needs a version number from 1 to {MAX_VERSION}"))
    elif version is not None and rule_id is None:
        errors.append(FieldError("version", 'goes with "rule_id" (a stored rule\'s version)'))
    days = body.get("days")
    days = DEFAULT_DAYS if days is None else days
    if not _whole_number(days, 1, MAX_DAYS):
        errors.append(FieldError("days", f"needs a whole number of days from 1 to {MAX_DAYS}"))
    as_seen = body.get("as_seen")
    if as_seen is not None and not isinstance(as_seen, bool):
        errors.append(FieldError("as_seen", "must be true, false or null (decide per account)"))
    accounts, account_errors = _accounts(body.get("accounts"))
    shaped = _Body(
        rule=rule,
        rule_id=rule_id if isinstance(rule_id, str) else None,
        version=version if isinstance(version, int) else None,
        days=days if isinstance(days, int) else DEFAULT_DAYS,
        accounts=accounts,
        as_seen=as_seen if isinstance(as_seen, bool) else None,
    )
    return shaped, errors + account_errors


def _accounts(value: Any) -> tuple[tuple[str, ...], list[FieldError]]:
    if value is None:
        return (), []
    if not isinstance(value, list):
        return (), [FieldError("accounts", 'expected a list of ad account ids, e.g. ["act_123"]')]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, str) or not is_account_id(item):
            errors.append(FieldError(f"accounts[{index}]", "an ad account id like act_123"))
        elif item in seen:
            errors.append(FieldError(f"accounts[{index}]", f"{item} is listed twice"))
        else:
            seen.add(item)
    good = tuple(dict.fromkeys(a for a in value if isinstance(a, str) and is_account_id(a)))
    return good, errors


def _under(prefix: str, error: FieldError) -> FieldError:
    """``error`` of a nested document, its path under ``prefix``."""
    if not error.path:
        return FieldError(prefix, error.message)
    joiner = "" if error.path.startswith("[") else "."
    return FieldError(f"{prefix}{joiner}{error.path}", error.message)


def _account_errors(
    shaped: _Body, rule: Rule, registered: Mapping[str, str], *, where: str
) -> list[FieldError]:
    """The asked accounts must be the rule's and registered; a stored rule's accounts too."""
    errors = []
    for index, account in enumerate(shaped.accounts):
        if account not in rule.ad_accounts:
            errors.append(
                FieldError(
                    f"accounts[{index}]",
                    f"{account} is not one of the rule's ad accounts"
                    f" ({', '.join(rule.ad_accounts)})",
                )
            )
        elif account not in registered:
            errors.append(
                FieldError(f"accounts[{index}]", f"ad account '{account}' is not registered")
            )
    if not shaped.accounts:
        missing = [a for a in rule.ad_accounts if a not in registered]
        if missing:
            errors.append(
                FieldError(
                    where,
                    f"the rule's ad account(s) {', '.join(missing)} are not registered; register"
                    ' them (POST /api/accounts) or name the others in "accounts"',
                )
            )
    return errors


async def _stored_rule(request: web.Request, shaped: _Body) -> tuple[Rule, int, dict[str, Any]]:
    """The stored rule (its active version, or ``version``): rule, version, definition.

    Raises NotFoundError (404) for an unknown rule or version, StoredRuleError (409) for
    a stored definition that no longer validates.
    """
    assert shaped.rule_id is not None
    store = services(request).rules
    doc = await store.get(shaped.rule_id)
    version, definition = doc.version, doc.definition
    if shaped.version is not None:
        stored = await store.version(doc.id, shaped.version)
        version, definition = stored.version, stored.definition
    rule = parse_stored(doc, definition, doc.edit_status)
    if rule.format != CURRENT_FORMAT:
        where = "version" if shaped.version is not None else "rule_id"
        raise invalid(
            _INVALID,
            [
                FieldError(
                    where,
                    f"version {version} of rule '{doc.id}' is of format {rule.format} (budgets in"
                    f" minor units); a backtest replays format {CURRENT_FORMAT}: {MIGRATE_HINT}",
                )
            ],
        )
    return rule, version, definition


async def parse_backtest(
    request: web.Request, body: dict[str, Any]
) -> tuple[BacktestRequest, dict[str, Any]]:
    """The service's request and the request as stored (with the rule document).

    Raises:
        ApiError: 422 naming every problem by its JSON path (a draft rule's under
            ``rule.``); 404 for an unknown stored rule or version.
    """
    shaped, errors = _shape(body)
    svc = services(request)
    registered = await svc.credentials.currencies()
    rule: Rule | None = None
    rule_id, version = shaped.rule_id, shaped.version
    definition: dict[str, Any] = {}
    if isinstance(shaped.rule, dict) and shaped.rule_id is None:
        try:
            rule = parse_rule(
                shaped.rule,
                accounts=registered,
                webhooks=set(settings_of(request).webhooks),
                new=True,
            )
            definition = rule.definition()
        except RuleValidationError as exc:
            errors += [_under("rule", e) for e in exc.errors]
    if errors:
        raise invalid(_INVALID, errors)
    if rule is None:
        rule, version, definition = await _stored_rule(request, shaped)
    errors = _account_errors(shaped, rule, registered, where="rule_id" if rule_id else "rule")
    if errors:
        raise invalid(_INVALID, errors)
    service_request = BacktestRequest(
        rule=rule,
        days=shaped.days,
        accounts=shaped.accounts,
        as_seen=shaped.as_seen,
        rule_id=rule_id,
        version=version,
    )
    stored = {
        "rule_id": rule_id,
        "version": version,
        "days": shaped.days,
        "accounts": list(shaped.accounts),
        "as_seen": shaped.as_seen,
        "rule_name": rule.name,
        "rule": definition,
    }
    return service_request, stored


# ---------------------------------------------------------------- running them


class BacktestRunner:
    """The web process's backtests: background tasks, a few at a time, state in MongoDB.

    Args:
        settings: the process's settings (``backtest_concurrency``; what deps open).
        db: the engine's database.
        errors: where unexpected failures are reported (the error log).
        clock: the time a backtest runs at (tests freeze it at the sandbox's time).
    """

    def __init__(
        self, settings: Settings, db: Database, *, errors: ErrorSink, clock: Clock = _utcnow
    ) -> None:
        self.store = BacktestStore(db)
        self.clock = clock
        self._settings = settings
        self._db = db
        self._errors = errors
        self._slots = asyncio.Semaphore(settings.backtest_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reserved = 0  # places taken by POSTs still checking their request

    @contextlib.contextmanager
    def reserve(self) -> Iterator[None]:
        """A place in this process's queue for a backtest being asked for.

        Raises:
            ApiError: 429 with ``Retry-After`` when ``RULEENGINE_BACKTEST_QUEUE_MAX``
                backtests are queued or running here already.
        """
        limit = self._settings.backtest_queue_max
        if len(self._tasks) + self._reserved >= limit:
            raise ApiError(
                429,
                f"{limit} backtest(s) are queued or running in this web process already"
                " (RULEENGINE_BACKTEST_QUEUE_MAX): wait for one to finish"
                f" (GET /api/backtests/{{id}}) and ask again in about {RETRY_AFTER_S} s",
                headers={"Retry-After": str(RETRY_AFTER_S)},
                queue_max=limit,
            )
        self._reserved += 1
        try:
            yield
        finally:
            self._reserved -= 1

    async def check_size(self, request: BacktestRequest) -> None:
        """List the request's entities (kept for its run); 422 past the entity limit."""
        async with BacktestDeps.open(self._settings, self._db) as deps:
            counts = await count_entities(deps, request, now=self.clock())
        try:
            check_entities(counts, limit=self._settings.backtest_max_entities)
        except BacktestTooBig as exc:
            where = "accounts" if request.accounts else ("rule_id" if request.rule_id else "rule")
            raise invalid(
                _INVALID, [FieldError(where, str(exc))], entities=exc.counts, max_entities=exc.limit
            ) from None

    def submit(self, backtest_id: str, request: BacktestRequest) -> None:
        """Run the stored, ``queued`` backtest ``backtest_id`` in the background."""
        task = asyncio.create_task(self._run(backtest_id, request), name=f"backtest:{backtest_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop every backtest of this process; each ends ``failed`` ("interrupted: …")."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, backtest_id: str, request: BacktestRequest) -> None:
        try:
            async with self._slots:
                if not await self.store.start(backtest_id, now=self.clock()):
                    return  # failed meanwhile (another process's startup)
                async with BacktestDeps.open(self._settings, self._db) as deps:
                    result = await run_backtest(
                        deps, request, now=self.clock(), progress=self._reporter(backtest_id)
                    )
                await self.store.finish(backtest_id, result, now=self.clock())
        except asyncio.CancelledError:
            await self._fail(backtest_id, STOPPED)
            raise
        except (BacktestRefused, ResultTooLarge) as exc:
            await self._fail(backtest_id, f"refused: {exc}")
        except Exception as exc:
            log.exception("backtest %s of rule %r failed", backtest_id, request.rule.name)
            context: dict[str, object] = {
                "backtest_id": backtest_id,
                "rule_id": request.rule_id,
                "rule_name": request.rule.name,
                "accounts": list(request.accounts or request.rule.ad_accounts),
            }
            await self._errors.report(ErrorReport.of(exc, function="backtest.run", context=context))
            await self._fail(
                backtest_id,
                f"the backtest failed: {type(exc).__name__}: {exc} (the error log has the"
                " details, function backtest.run)",
            )

    async def _fail(self, backtest_id: str, message: str) -> None:
        try:
            await self.store.fail(backtest_id, message, now=self.clock())
        except PyMongoError as exc:  # the next startup fails it ("restarted")
            log.warning("could not mark backtest %s failed: %s", backtest_id, exc)

    def _reporter(self, backtest_id: str) -> ProgressFn:
        """Progress written at most every :data:`PROGRESS_EVERY_S`, and at each new stage."""
        last: dict[str, Any] = {"at": float("-inf"), "stage": None}

        async def report(progress: Progress) -> None:
            at = time.monotonic()
            if at - last["at"] < PROGRESS_EVERY_S and progress.stage == last["stage"]:
                return
            last.update(at=at, stage=progress.stage)
            try:
                await self.store.progress(backtest_id, progress, now=self.clock())
            except PyMongoError as exc:  # progress is a courtesy: the run goes on
                log.warning("backtest %s: progress not recorded: %s", backtest_id, exc)

        return report


RUNNER: Final = web.AppKey("backtests", BacktestRunner)
CLOCK: Final = web.AppKey[Clock]("backtest_clock")


async def backtests_context(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: fail what an earlier process left unfinished; stop ours at shutdown."""
    svc = app[SERVICES]
    runner = BacktestRunner(app[SETTINGS], svc.db, errors=svc.errors, clock=app.get(CLOCK, _utcnow))
    try:
        interrupted = await runner.store.interrupt_unfinished(now=runner.clock())
        if interrupted:
            log.warning("%d backtest(s) of an earlier web process marked failed", interrupted)
    except PyMongoError as exc:
        log.warning("could not fail the backtests an earlier process left: %s", exc)
    app[RUNNER] = runner
    try:
        yield
    finally:
        await runner.close()


# ---------------------------------------------------------------- handlers


def backtest_item(doc: Document) -> dict[str, Any]:
    """A backtest as the API answers it."""
    stored = doc.get("request") or {}
    return {
        "id": doc["_id"],
        "status": doc["status"],
        "progress": doc["progress"],
        "request": {key: stored.get(key) for key in _REQUEST_KEYS},
        "result": decode_result(doc),
        "error": doc.get("error"),
        "created_at": doc["created_at"],
        "updated_at": doc["updated_at"],
        "expires_at": doc["expires_at"],
    }


def _link(backtest_id: str) -> str:
    return f"/api/backtests/{backtest_id}"


async def create_backtest(request: web.Request) -> web.Response:
    """``POST /api/backtests``: 202 with the id of a ``queued`` backtest."""
    body = await read_object(request, what="backtest")
    service_request, stored = await parse_backtest(request, body)
    runner = request.app[RUNNER]
    with runner.reserve():
        await runner.check_size(service_request)
        doc = await runner.store.create(
            request=stored, days_total=stored["days"], now=runner.clock()
        )
        runner.submit(doc["_id"], service_request)
    return json_response(
        {
            "id": doc["_id"],
            "status": doc["status"],
            "progress": doc["progress"],
            "links": {"self": _link(doc["_id"])},
        },
        status=202,
        headers={"Location": _link(doc["_id"])},
    )


async def get_backtest(request: web.Request) -> web.Response:
    """``GET /api/backtests/{id}``: status, progress, the result; 404 unknown or expired."""
    runner = request.app[RUNNER]
    backtest_id = request.match_info["id"]
    doc = await runner.store.get(backtest_id, now=runner.clock())
    if doc is None:
        raise ApiError(
            404,
            f"backtest '{backtest_id[:40]}' does not exist or has expired (results are kept"
            " 7 days); start another with POST /api/backtests",
        )
    return json_response(backtest_item(doc))


def setup(app: web.Application) -> None:
    """Register the routes and the runner's lifetime (after the app's services)."""
    app.cleanup_ctx.append(backtests_context)
    app.router.add_post("/api/backtests", create_backtest, name="api.backtests")
    app.router.add_get("/api/backtests/{id}", get_backtest, name="api.backtest")
