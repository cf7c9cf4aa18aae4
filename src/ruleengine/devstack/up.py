"""``ruleengine up``: every process of the product on embedded defaults, one terminal.

Before anything starts, every port it will listen on is checked (``ports.py``): a taken
one is refused by name. Children then start in dependency order and each is waited for
until it answers while alive: the MongoDB-compatible server and Redis (unless their URL
is set to external ones), the Graph sandbox (when the Graph URL points at it), the
dispatcher, N workers and the web app. One line per component is printed with its
address and pid, then ``ready``. The sandbox's ad accounts are registered with a sandbox
token and the demo rules are loaded (unless ``--no-demo``). A supervisor then restarts a
dispatcher, worker or web process that exits, and stops everything when a server does
(``supervise.py``). Ctrl-C or SIGTERM stops them all in reverse order.
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
from pydantic import SecretStr

from ruleengine.devstack.embedded import (
    Child,
    EmbeddedError,
    ProcessGroup,
    always_ready,
    port_answers,
    start_mongodb,
    start_redis,
)
from ruleengine.devstack.ports import EmbeddedServers, PortUse, check_ports
from ruleengine.devstack.supervise import Supervisor
from ruleengine.errors import RuleEngineError
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.meta.versions import version_warning
from ruleengine.secret_files import read_secret
from ruleengine.settings import PORT_LAYOUT, Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database, create_client, database, ensure_indexes
from ruleengine.store.rules import RuleStore

# Servers the engine stands on: when one exits, the stack stops (the engine is restarted).
ESSENTIAL = ("mongodb", "redis", "sandbox")

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
    return read_secret(path, create=lambda: secrets.token_urlsafe(32).encode()).decode()


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
    registered = await credentials.currencies()
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
    """The running stack of ``ruleengine up``: which children, on which ports, with which env."""

    def __init__(
        self, settings: Settings, group: ProcessGroup, *, workers: int, ports: list[PortUse]
    ) -> None:
        self.settings = settings
        self.group = group
        self.workers = workers
        self.ports = {use.component: use for use in ports}
        self.servers = EmbeddedServers.of(settings)
        self.data_dir = Path(settings.data_dir).resolve()
        self.descriptions: dict[str, str] = {}
        # Every port and URL goes to the children explicitly, whatever chose it (a flag, the
        # port base, a default), so each child agrees with this process on where things are.
        where = [*PORT_LAYOUT, "mongodb_url", "redis_url", "graph_url"]
        self.env: dict[str, str] = {
            "PYTHONUNBUFFERED": "1",
            "RULEENGINE_DATA_DIR": str(self.data_dir),
            **{f"RULEENGINE_{name.upper()}": str(getattr(settings, name)) for name in where},
        }

    def announce(self, child: Child) -> None:
        """Print the line of a (re)started child: its name, what it is, its pid."""
        _say(child.name, f"{self.descriptions[child.name]} (pid {child.pid})")

    def _started(self, child: Child, description: str) -> None:
        self.descriptions[child.name] = description
        self.announce(child)

    def start_storage(self) -> None:
        """MongoDB-compatible server and Redis, persistent under the data dir, unless external."""
        s = self.settings
        if self.servers.mongodb:
            storage = str(self.data_dir / "mongodb")
            mongo = start_mongodb(self.group, port=s.mongodb_port, storage_path=storage)
            self._started(mongo, mongo.address)
        else:
            _say("mongodb", "external, at RULEENGINE_MONGODB_URL (not started)")
        if self.servers.redis:
            redis = start_redis(self.group, port=s.redis_port, data_dir=self.data_dir / "redis")
            self._started(redis, redis.address)
        else:
            _say("redis", "external, at RULEENGINE_REDIS_URL (not started)")

    def start_sandbox(self) -> None:
        """The Graph sandbox, plus its Sheets simulator and webhook sink for the demo rules."""
        # The simulator is a sibling package, not part of the product: it is loaded here, only
        # when ``up`` runs the sandbox, and never by the dispatcher, the workers or the web app.
        from graph_sandbox.extras import write_sheets_credentials

        port = self.settings.sandbox_port
        argv = [sys.executable, "-m", "graph_sandbox", "--port", str(port)]
        argv += ["--seed", str(self.settings.sandbox_seed)]
        argv += ["--token", SANDBOX_TOKEN]  # a demo constant, not a secret: accepted everywhere
        child = self._start("sandbox", argv, address=self.settings.graph_url)
        self._started(child, f"{child.address} (Graph API {self.settings.graph_version})")
        credentials = write_sheets_credentials(
            self.data_dir / "sandbox-sheets-key.json", child.address
        )
        self._use(
            sheets_credentials_file=str(credentials), sheets_api_url=f"{child.address}/sheets"
        )
        if not self.settings.webhooks:
            hooks = {"ops": f"{child.address}/_sandbox/webhooks/ops"}
            self.env["RULEENGINE_WEBHOOKS"] = orjson.dumps(hooks).decode()
            self.settings = self.settings.model_copy(
                update={"webhooks": {k: SecretStr(v) for k, v in hooks.items()}}
            )

    def _use(self, **values: str) -> None:
        self.settings = self.settings.model_copy(update=values)
        self.env |= {f"RULEENGINE_{k.upper()}": v for k, v in values.items()}

    def _start(
        self, name: str, argv: list[str], *, address: str, env: dict[str, str] | None = None
    ) -> Child:
        """A child that is ready when its port answers, or at once when it has no port."""
        use = self.ports.get(name)
        ready, listens_on = always_ready, None
        if use is not None:
            host, port = use.host, use.port
            ready, listens_on = (lambda: port_answers(port, _client_host(host))), (host, port)
        return self.group.start(
            name,
            argv,
            address=address,
            ready=ready,
            env=self.env | (env or {}),
            listens_on=listens_on,
            timeout_s=60,
        )

    def _metrics(self, name: str) -> str:
        """Where ``name`` serves its metrics (``metrics off`` for port 0)."""
        use = self.ports.get(name)
        return f"metrics http://{use.host}:{use.port}/metrics" if use else "metrics off"

    def start_engine(self, api_token: str) -> None:
        """Dispatcher, workers and web app."""
        s = self.settings
        self.env["RULEENGINE_API_TOKEN"] = api_token
        dispatcher = self._start(
            "dispatcher",
            [sys.executable, "-m", "ruleengine.dispatch"],
            address=self._metrics("dispatcher"),
        )
        self._started(
            dispatcher, f"ticking every {s.tick_seconds:g}s, {self._metrics('dispatcher')}"
        )
        arq = str(Path(sys.executable).with_name("arq"))
        for index in range(1, self.workers + 1):
            name = f"worker-{index}"
            port = self.ports[name].port if name in self.ports else 0
            worker = self._start(
                name,
                [arq, "ruleengine.jobs.WorkerSettings"],
                address=self._metrics(name),
                env={"RULEENGINE_WORKER_METRICS_PORT": str(port)},
            )
            self._started(worker, self._metrics(name))
        web_url = f"http://{s.web_host}:{s.web_port}"
        web = self._start("web", [sys.executable, "-m", "ruleengine.web"], address=web_url)
        self._started(web, f"{web_url}/#token={api_token}")


def _client_host(host: str) -> str:
    """Where to connect to reach a server bound to ``host`` (a wildcard means loopback)."""
    return "127.0.0.1" if host in ("", "0.0.0.0") else host


def run_up(settings: Settings, *, demo: bool, workers: int) -> int:
    """Start everything and supervise it until Ctrl-C or SIGTERM; returns the exit code."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    # Started in the background by a shell without job control, a process inherits SIGINT
    # as ignored; Ctrl-C (or kill -INT) must still stop the stack.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ports = check_ports(settings, workers=workers)  # before anything starts
        return _run(settings, demo=demo, workers=workers, ports=ports)
    except (KeyboardInterrupt, _Stop):
        print("stopped", flush=True)
        return 0
    except (EmbeddedError, RuleEngineError, aiohttp.ClientError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _run(settings: Settings, *, demo: bool, workers: int, ports: list[PortUse]) -> int:
    started = time.perf_counter()
    data_dir = Path(settings.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    load_key(settings, create=True)
    api_token = _api_token(settings, data_dir)
    if (warning := version_warning(settings.graph_version, datetime.now(UTC).date())) is not None:
        _say("warning", warning)  # every process logs it too
    with ProcessGroup(log_dir=data_dir / "logs") as group:
        stack = Up(settings, group, workers=workers, ports=ports)
        stack.start_storage()
        if stack.servers.sandbox:
            stack.start_sandbox()
        rules = _demo_rules(demo)
        asyncio.run(_bootstrap(stack.settings, sandbox=stack.servers.sandbox, rules=rules))
        stack.start_engine(api_token)
        elapsed = time.perf_counter() - started
        print(f"{'logs':<12} {data_dir / 'logs'} (started in {elapsed:.1f}s; Ctrl-C stops)")
        print("ready", flush=True)
        return Supervisor(group, essential=ESSENTIAL, announce=stack.announce).watch()
