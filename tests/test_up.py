"""``ruleengine up`` as a newcomer runs it: each component answers, ``ready``; Ctrl-C stops all."""

from __future__ import annotations

import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ruleengine.embedded import port_answers

COMPONENTS = (
    "mongodb",
    "redis",
    "sandbox",
    "accounts",
    "rules",
    "dispatcher",
    "worker-1",
    "worker-2",
    "web",
)


def read_until_ready(process: subprocess.Popen[str], timeout_s: float) -> list[str]:
    """Lines of stdout up to ``ready`` (read in a thread: a pipe read cannot time out)."""
    assert process.stdout is not None
    stream = process.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
            if line.strip() == "ready":
                return
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if line == "ready":
            return seen
    raise AssertionError(f"no 'ready' line; got: {seen}")


def _quiet_ports(count: int) -> list[int]:
    """Free ports below the kernel's ephemeral range, in consecutive pairs' reach.

    The stack's own outgoing connections take ephemeral ports; a port picked from
    that range could be taken by one of them before the component listens on it.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = list(range(max(1024, low - 8000), low - 2, 2))
    random.shuffle(candidates)
    ports: list[int] = []
    for port in candidates:
        if all(_bindable(p) for p in (port, port + 1)):
            ports.append(port)
        if len(ports) == count:
            return ports
    raise AssertionError("no free ports below the ephemeral range")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_up_starts_everything_and_ctrl_c_leaves_nothing_behind(tmp_path: Path) -> None:
    names = ("mongodb", "redis", "sandbox", "web", "dispatcher", "worker")  # worker-2: worker + 1
    ports = dict(zip(names, _quiet_ports(len(names)), strict=True))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RULEENGINE_")},
        "RULEENGINE_DATA_DIR": str(tmp_path / "var"),
        "RULEENGINE_MONGODB_PORT": str(ports["mongodb"]),
        "RULEENGINE_REDIS_PORT": str(ports["redis"]),
        "RULEENGINE_SANDBOX_PORT": str(ports["sandbox"]),
        "RULEENGINE_GRAPH_URL": f"http://127.0.0.1:{ports['sandbox']}",
        "RULEENGINE_WEB_PORT": str(ports["web"]),
        "RULEENGINE_DISPATCHER_METRICS_PORT": str(ports["dispatcher"]),
        "RULEENGINE_WORKER_METRICS_PORT": str(ports["worker"]),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "ruleengine", "up", "--workers", "2"],
        env=env,
        cwd=Path(__file__).parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with process:  # closes the pipe at the end
        _run(process, ports)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(port_answers(p) for p in ports.values()):
        time.sleep(0.2)
    assert not [name for name, port in ports.items() if port_answers(port)]
    assert (tmp_path / "var" / "logs" / "dispatcher.log").exists()


def _run(process: subprocess.Popen[str], ports: dict[str, int]) -> None:
    try:
        lines = read_until_ready(process, timeout_s=90)
        names = [line.split()[0] for line in lines[:-1]]
        for component in COMPONENTS:
            assert component in names, lines
        assert any("8 demo rule(s)" in line for line in lines), lines
        web = next(line for line in lines if line.startswith("web"))
        assert "#token=" in web
        assert all(port_answers(port) for port in ports.values())
        assert port_answers(ports["worker"] + 1)  # the second worker's metrics
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert process.stdout is not None
        assert "stopped" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
