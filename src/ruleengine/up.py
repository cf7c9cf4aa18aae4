"""``ruleengine up``: every process of the product on embedded defaults, one terminal.

Children start in dependency order and each is waited for until it answers:
the MongoDB-compatible server, Redis, the Graph sandbox (when the Graph URL
points at it), the dispatcher, N workers and the web app. One line per
component is printed with its address, then ``ready``. The sandbox's ad
accounts are registered with a sandbox token and the demo rules are loaded
(unless ``--no-demo``). Ctrl-C (or SIGTERM, or any child dying) stops them all
in reverse order.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import aiohttp
import orjson

from ruleengine.embedded import (
    Child,
    EmbeddedError,
    ProcessGroup,
    port_answers,
    start_mongodb,
    start_redis,
)
from ruleengine.errors import RuleEngineError
from ruleengine.rules.model import parse_rule
from ruleengine.sandbox.extras import write_sheets_credentials
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database, create_client, database, ensure_indexes
from ruleengine.store.rules import RuleStore

SANDBOX_TOKEN = "EAAGsandboxDEMOtokenNotARealMetaToken000"
API_TOKEN_FILE = "api-token"


class _Stop(Exception):
    """Raised by the SIGTERM handler to leave the wait loop."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _say(name: str, address: str) -> None:
    print(f"{name:<12} {address}", flush=True)


def _api_token(settings: Settings, data_dir: Path) -> str:
    """The API token: the configured one, else one kept in ``<data_dir>/api-token``."""
    if settings.api_token is not None:
        return settings.api_token.get_secret_value()
    path = data_dir / API_TOKEN_FILE
    if not path.exists():
        path.write_text(secrets.token_urlsafe(24))
        path.chmod(0o600)
    return path.read_text().strip()


def _examples_dir() -> Path | None:
    for candidate in (Path("examples/rules"), Path(__file__).parents[2] / "examples" / "rules"):
        if candidate.is_dir():
            return candidate
    return None


async def _register_sandbox_accounts(settings: Settings, store: CredentialStore) -> list[str]:
    url = f"{settings.graph_base}/me/adaccounts"
    params = {"fields": "id,name,currency,timezone_name", "access_token": SANDBOX_TOKEN}
    async with aiohttp.ClientSession() as http, http.get(url, params=params) as response:
        body = await response.json()
    now = datetime.now(UTC)
    for account in body["data"]:
        await store.add(
            account["id"],
            SANDBOX_TOKEN,
            now=now,
            name=account.get("name"),
            timezone=account.get("timezone_name", "UTC"),
            currency=account.get("currency", "USD"),
        )
    return [a["id"] for a in body["data"]]


def _demo_rules(demo: bool) -> list[tuple[Path, bytes]]:
    folder = _examples_dir() if demo else None
    return [] if folder is None else [(p, p.read_bytes()) for p in sorted(folder.glob("*.json"))]


async def _bootstrap(settings: Settings, *, sandbox: bool, rules: list[tuple[Path, bytes]]) -> None:
    client = create_client(settings)
    try:
        db = database(client, settings)
        await ensure_indexes(db)
        credentials = CredentialStore(db, load_key(settings))
        if sandbox:
            accounts = await _register_sandbox_accounts(settings, credentials)
            print(f"{'accounts':<12} {', '.join(accounts)} (sandbox token)", flush=True)
        if rules:
            await _load_rules(settings, db, credentials, rules)
    finally:
        await client.close()


async def _load_rules(
    settings: Settings, db: Database, credentials: CredentialStore, files: list[tuple[Path, bytes]]
) -> None:
    store = RuleStore(db)
    registered = await credentials.ids()
    loaded = 0
    for path, content in files:
        try:
            rule = parse_rule(content, accounts=registered, webhooks=set(settings.webhooks))
        except RuleEngineError as exc:
            print(f"{'rules':<12} skipped {path.name}: {exc}", flush=True)
            continue
        await store.save(rule, now=datetime.now(UTC), author="ruleengine up", source=str(path))
        loaded += 1
    print(f"{'rules':<12} {loaded} demo rule(s) from {path.parent}", flush=True)


class Up:
    """The running stack of ``ruleengine up``."""

    def __init__(self, settings: Settings, group: ProcessGroup, *, workers: int) -> None:
        self.settings = settings
        self.group = group
        self.workers = workers
        self.data_dir = Path(settings.data_dir).resolve()
        self.env: dict[str, str] = {
            "PYTHONUNBUFFERED": "1",
            "RULEENGINE_DATA_DIR": str(self.data_dir),
        }

    def start_storage(self) -> None:
        """MongoDB-compatible server and Redis, persistent under the data dir."""
        s = self.settings
        mongo = start_mongodb(
            self.group, port=s.mongodb_port, storage_path=str(self.data_dir / "mongodb")
        )
        _say("mongodb", mongo.address)
        redis = start_redis(self.group, port=s.redis_port, data_dir=self.data_dir / "redis")
        _say("redis", redis.address)
        self._use(mongodb_url=mongo.address, redis_url=redis.address)

    def _use(self, **values: str) -> None:
        self.settings = self.settings.model_copy(update=values)
        self.env |= {f"RULEENGINE_{k.upper()}": v for k, v in values.items()}

    @property
    def sandbox_wanted(self) -> bool:
        """True when the Graph URL is the embedded sandbox's address."""
        return self.settings.graph_url == f"http://127.0.0.1:{self.settings.sandbox_port}"

    def start_sandbox(self) -> None:
        """The Graph sandbox, plus its Sheets simulator and webhook sink for the demo rules."""
        port = self.settings.sandbox_port
        argv = [
            sys.executable,
            "-m",
            "ruleengine.sandbox",
            "--port",
            str(port),
            "--seed",
            str(self.settings.sandbox_seed),
        ]
        child = self._start("sandbox", argv, port, address=f"http://127.0.0.1:{port}")
        _say("sandbox", f"{child.address} (Graph API {self.settings.graph_version})")
        credentials = write_sheets_credentials(
            self.data_dir / "sandbox-sheets-key.json", child.address
        )
        self._use(
            sheets_credentials_file=str(credentials), sheets_api_url=f"{child.address}/sheets"
        )
        if not self.settings.webhooks:
            hooks = {"ops": f"{child.address}/_sandbox/webhooks/ops"}
            self.env["RULEENGINE_WEBHOOKS"] = orjson.dumps(hooks).decode()
            self.settings = Settings.model_validate(
                {
                    **self.settings.model_dump(),
                    "webhooks": hooks,
                    "api_token": self.settings.api_token,
                }
            )

    def _start(
        self,
        name: str,
        argv: list[str],
        port: int,
        *,
        address: str,
        env: dict[str, str] | None = None,
    ) -> Child:
        return self.group.start(
            name,
            argv,
            address=address,
            ready=lambda: port_answers(port),
            env=self.env | (env or {}),
            timeout_s=60,
        )

    def start_engine(self, api_token: str) -> None:
        """Dispatcher, workers and web app."""
        s = self.settings
        self.env["RULEENGINE_API_TOKEN"] = api_token
        dispatcher = self._start(
            "dispatcher",
            [sys.executable, "-m", "ruleengine.dispatch"],
            s.dispatcher_metrics_port,
            address=f"http://127.0.0.1:{s.dispatcher_metrics_port}/metrics",
        )
        _say("dispatcher", f"ticking every {s.tick_seconds:g}s, metrics {dispatcher.address}")
        arq = str(Path(sys.executable).with_name("arq"))
        for index in range(1, self.workers + 1):
            port = s.worker_metrics_port + index - 1
            worker = self._start(
                f"worker-{index}",
                [arq, "ruleengine.jobs.WorkerSettings"],
                port,
                address=f"http://127.0.0.1:{port}/metrics",
                env={"RULEENGINE_WORKER_METRICS_PORT": str(port)},
            )
            _say(worker.name, f"metrics {worker.address}")
        web = self._start(
            "web",
            [sys.executable, "-m", "ruleengine.web"],
            s.web_port,
            address=f"http://{s.web_host}:{s.web_port}",
        )
        _say("web", f"{web.address}/#token={api_token}")


def _wait(group: ProcessGroup) -> int:
    while True:
        for child in group.children:
            if not child.running:
                print(
                    f"{child.name} exited with code {child.popen.returncode}; stopping everything"
                    f" (its log: {group.log_dir}/{child.name}.log)",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
        time.sleep(0.5)


def run_up(settings: Settings, *, demo: bool, workers: int) -> int:
    """Start everything and block until Ctrl-C; returns the exit code."""
    data_dir = Path(settings.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    load_key(settings, create=True)
    api_token = _api_token(settings, data_dir)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    # Started in the background by a shell without job control, a process inherits SIGINT
    # as ignored; Ctrl-C (or kill -INT) must still stop the stack.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.perf_counter()
    try:
        with ProcessGroup(log_dir=data_dir / "logs") as group:
            stack = Up(settings, group, workers=workers)
            stack.start_storage()
            if stack.sandbox_wanted:
                stack.start_sandbox()
            rules = _demo_rules(demo)
            asyncio.run(_bootstrap(stack.settings, sandbox=stack.sandbox_wanted, rules=rules))
            stack.start_engine(api_token)
            elapsed = time.perf_counter() - started
            print(f"{'logs':<12} {data_dir / 'logs'} (started in {elapsed:.1f}s; Ctrl-C stops)")
            print("ready", flush=True)
            return _wait(group)
    except (KeyboardInterrupt, _Stop):
        print("stopped", flush=True)
        return 0
    except (EmbeddedError, RuleEngineError, aiohttp.ClientError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
