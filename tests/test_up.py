"""``ruleengine up`` as a user runs it: real processes, their output, their ports.

One stack is moved with a port base, checked component by component, written to by the CLI
with the same environment, and survives a SIGKILLed worker; a taken port is refused before
anything starts; metrics port 0 and a sandbox port set on its own start a working stack that
stops with its storage. Every wait is on a condition (a line, a port, an exit).
"""

from __future__ import annotations

import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import orjson
import pytest
from pymongo import MongoClient

from ruleengine.devstack.embedded import mongodb_url, port_answers
from ruleengine.devstack.up import SANDBOX_TOKEN as UP_SANDBOX_TOKEN

ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "rules" / "01-pause-losers.json"
COMPONENTS = ("mongodb", "redis", "sandbox", "accounts", "rules", "dispatcher", "worker-1", "web")
# The documented layout: web = base, sandbox = base+1, redis = base+2, mongodb = base+3,
# dispatcher metrics = base+4, worker metrics = base+5, base+6, ...
LAYOUT = {"web": 0, "sandbox": 1, "redis": 2, "mongodb": 3, "dispatcher": 4, "worker-1": 5}


class Up:
    """A running ``ruleengine up``: its merged output, read line by line in a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.env = env
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ruleengine", "up", *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, wanted: Callable[[str], bool], *, timeout_s: float = 90) -> str:
        """The next line for which ``wanted`` is true (a pipe read cannot time out: a queue can)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if wanted(line):
                return line
        raise AssertionError(f"no such line; got: {self.lines}")

    def ready(self) -> dict[str, str]:
        """Wait for ``ready``; the component lines by name."""
        self.wait_for(lambda line: line == "ready")
        return {line.split()[0]: line for line in self.lines if line.strip()}

    def rest(self, *, timeout_s: float = 60) -> tuple[int, str]:
        """Exit code and the output after what was read so far."""
        code = self.process.wait(timeout=timeout_s)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return code, "\n".join(self.lines)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _pid(line: str) -> int:
    found = re.search(r"\(pid (\d+)\)", line)
    assert found, line
    return int(found.group(1))


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _quiet_base(count: int) -> int:
    """The first of ``count`` consecutive free ports, below the kernel's ephemeral range.

    The stack's own outgoing connections take ephemeral ports; a port picked from that range
    could be taken by one of them before the component listens on it.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = list(range(max(1024, low - 12000), low - count, count))
    random.shuffle(candidates)
    for base in candidates:
        if all(_bindable(port) for port in range(base, base + count)):
            return base
    raise AssertionError("no free ports below the ephemeral range")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _env(tmp_path: Path, **settings: str | int) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RULEENGINE_")}
    values = {f"RULEENGINE_{k.upper()}": str(v) for k, v in settings.items()}
    return {**clean, "RULEENGINE_DATA_DIR": str(tmp_path / "var"), **values}


def _all_closed(ports: Iterable[int]) -> list[int]:
    """Wait until none of ``ports`` answers; the ones still answering."""
    ports = list(ports)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(port_answers(p) for p in ports):
        time.sleep(0.2)
    return [p for p in ports if port_answers(p)]


@pytest.fixture
def up() -> Iterator[Callable[..., Up]]:
    started: list[Up] = []

    def start(*args: str, env: dict[str, str]) -> Up:
        started.append(Up(list(args), env))
        return started[-1]

    yield start
    for stack in started:
        stack.kill()


def test_a_stack_on_a_port_base_is_whole_the_cli_writes_into_it_and_a_killed_worker_restarts(
    tmp_path: Path, up: Callable[..., Up]
) -> None:
    base = _quiet_base(8)
    env = _env(tmp_path, port_base=base)
    stack = up(env=env)
    lines = stack.ready()
    for component in COMPONENTS:
        assert component in lines, stack.lines
    for component, offset in LAYOUT.items():
        assert f"127.0.0.1:{base + offset}" in lines[component], lines[component]
        assert port_answers(base + offset), component
    assert "#token=" in lines["web"]

    _the_cli_writes_into_the_stack(tmp_path, env, mongodb_url(base + LAYOUT["mongodb"]))

    worker, dispatcher = _pid(lines["worker-1"]), _pid(lines["dispatcher"])
    os.kill(worker, signal.SIGKILL)
    stack.wait_for(lambda line: line == "worker-1 exited with code -9; restarting (1/5)")
    again = stack.wait_for(lambda line: line.startswith("worker-1 ") and "(pid " in line)
    assert _pid(again) != worker and _alive(_pid(again))
    assert port_answers(base + LAYOUT["worker-1"])
    assert stack.process.poll() is None and _alive(dispatcher)

    stack.process.send_signal(signal.SIGINT)  # Ctrl-C
    code, output = stack.rest()
    assert code == 0 and "stopped" in output
    assert _all_closed(range(base, base + 8)) == []
    assert not _alive(_pid(again)) and not _alive(dispatcher)


def _the_cli_writes_into_the_stack(tmp_path: Path, env: dict[str, str], url: str) -> None:
    """``accounts add`` (reading the stack's sandbox) and ``rules apply`` with the stack's
    environment land in its database."""
    rule = orjson.loads(EXAMPLE.read_bytes()) | {"name": "Moved", "ad_accounts": ["act_1004"]}
    rule["tasks"][0]["conditions"][1]["value"] = 7500  # yen: a one-currency rule's bare amount
    (tmp_path / "moved.json").write_bytes(orjson.dumps(rule))
    cli = [sys.executable, "-m", "ruleengine"]
    commands = (
        ["accounts", "add", "act_1004", "--name", "Moved", "--token-env", "META_TOKEN"],
        ["rules", "apply", str(tmp_path / "moved.json")],
    )
    for args in commands:
        done = subprocess.run(
            [*cli, *args],
            env=env | {"META_TOKEN": UP_SANDBOX_TOKEN},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    client: MongoClient[dict[str, object]] = MongoClient(url, serverSelectionTimeoutMS=5000)
    with client:
        db = client["ruleengine"]
        moved = db["accounts"].find_one({"_id": "act_1004"})
        assert moved is not None
        assert (moved["name"], moved["currency"], moved["timezone"]) == (
            "Moved",
            "JPY",
            "Asia/Tokyo",
        )
        assert db["rules"].find_one({"name": "Moved"}) is not None


def test_a_taken_port_is_refused_by_name_before_anything_starts(
    tmp_path: Path, up: Callable[..., Up]
) -> None:
    base = _quiet_base(8)
    ports = {"mongodb_port": base, "redis_port": base + 1, "sandbox_port": base + 2}
    env = _env(tmp_path, **ports, web_port=base + 3, dispatcher_metrics_port=base + 4)
    env["RULEENGINE_WORKER_METRICS_PORT"] = str(base + 5)
    with socket.socket() as squatter:  # another program already listening on the web port
        squatter.bind(("127.0.0.1", base + 3))
        squatter.listen()
        stack = up("--no-demo", env=env)
        code, output = stack.rest()
        assert code == 1, output
        assert f"port {base + 3}" in output and "RULEENGINE_WEB_PORT" in output, output
        assert "mongodb " not in output  # nothing was started
        assert [p for p in range(base, base + 8) if p != base + 3 and port_answers(p)] == []


def test_metrics_off_and_a_moved_sandbox_make_a_working_stack_that_stops_with_its_storage(
    tmp_path: Path, up: Callable[..., Up]
) -> None:
    base = _quiet_base(8)
    sandbox = base + 7  # outside the layout of two workers
    env = _env(tmp_path, sandbox_port=sandbox, dispatcher_metrics_port=0, worker_metrics_port=0)
    stack = up("--port-base", str(base), "--workers", "2", env=env)
    lines = stack.ready()
    assert f"127.0.0.1:{sandbox}" in lines["sandbox"]
    assert "act_1001" in lines["accounts"]  # registered from the sandbox on its own port
    assert "14 demo rule(s)" in lines["rules"]
    for name in ("dispatcher", "worker-1", "worker-2"):
        assert "metrics off" in lines[name], lines[name]
    assert not any(port_answers(p) for p in (base + 1, base + 4, base + 5, base + 6))

    os.kill(_pid(lines["redis"]), signal.SIGKILL)
    code, output = stack.rest()
    assert code == 1
    assert "redis exited with code -9; stopping everything" in output, output
    assert _all_closed([*range(base, base + 8), sandbox]) == []
    assert not any(_alive(_pid(lines[name])) for name in ("mongodb", "web", "worker-2"))


def test_the_demo_acts_on_the_late_2026_campaigns_within_a_minute(
    tmp_path: Path, up: Callable[..., Up]
) -> None:
    """The legacy Advantage+ shopping campaign is paused (its one lever), the spend cap of a
    winning ad set under an Advantage campaign budget is opened, and a budget-sharing
    campaign's ad sets are rebalanced, and a winning campaign's evening gets a budget schedule
    (Meta's high-demand period) — each visible in Rule Logs within a minute."""
    base = _quiet_base(8)
    stack = up(env=_env(tmp_path, port_base=base))
    stack.ready()
    wanted = [
        "Pause a losing legacy Advantage+ shopping campaign",
        "Open the spend cap of winning ad sets under an Advantage campaign budget",
        "Rebalance a budget-sharing campaign's ad sets beyond Meta's own 20 %",
        "Evening push for winners",
    ]
    client: MongoClient[dict[str, object]] = MongoClient(
        mongodb_url(base + LAYOUT["mongodb"]), serverSelectionTimeoutMS=5000
    )
    seen: dict[str, dict[str, object]] = {}
    with client:
        db = client["ruleengine"]
        ids = {
            str(r["_id"]): str(r["name"]) for r in db["rules"].find({"name": {"$in": list(wanted)}})
        }
        assert len(ids) == len(wanted)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen) < len(wanted):
            for record in db["executions"].find(
                {"rule_id": {"$in": list(ids)}, "outcome": "applied"}
            ):
                seen.setdefault(ids[str(record["rule_id"])], record)
            time.sleep(1)
        found = [
            (ids[str(r["rule_id"])][:20], r.get("outcome"), r.get("reason"))
            for r in db["executions"].find({"rule_id": {"$in": list(ids)}})
        ]
        evening = seen.get("Evening push for winners", {}).get("rule_id")
        schedules = [
            (i["status"], i["schedule"]["op"])
            for i in db["action_intents"].find({"rule_id": evening, "field": "budget_schedules"})
        ]
    assert set(seen) == set(wanted), found
    assert schedules and set(schedules) == {("done", "create")}, schedules
    stack.process.send_signal(signal.SIGINT)
    assert stack.rest()[0] == 0
