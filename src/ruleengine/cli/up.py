"""``ruleengine up``: everything on embedded defaults (the stack itself lives in
:mod:`ruleengine.devstack`); the only command that needs no stack to be running."""

from __future__ import annotations

import argparse
from typing import Any

from ruleengine.cli.common import whole_number
from ruleengine.devstack.supervise import MAX_RESTARTS, RESTART_WINDOW_S
from ruleengine.settings import PORT_LAYOUT, Settings

#: The most worker processes ``up`` starts (each takes a metrics port of its own).
MAX_WORKERS = 64


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """Start everything on embedded defaults."""
    from ruleengine.devstack.up import run_up

    return run_up(settings, demo=not args.no_demo, workers=args.workers)


_PORT_NAMES = {
    "web_port": "web",
    "sandbox_port": "sandbox",
    "redis_port": "Redis",
    "mongodb_port": "MongoDB",
    "dispatcher_metrics_port": "dispatcher metrics",
    "worker_metrics_port": "worker metrics",
}


def _port_layout() -> str:
    """``web 8080 (N), sandbox 8081 (N+1), …`` from the settings' defaults and layout."""
    fields = Settings.model_fields
    return ", ".join(
        f"{_PORT_NAMES[name]} {fields[name].default} (N{f'+{offset}' if offset else ''})"
        for name, offset in PORT_LAYOUT.items()
    )


def add_command(sub: Any) -> None:
    """``up``."""
    up = sub.add_parser(
        "up",
        help="start everything on embedded defaults (Ctrl-C stops it)",
        description="Start the embedded MongoDB-compatible server, Redis, the Graph sandbox, the"
        " dispatcher, the workers and the web app on loopback; print each address and pid,"
        f" then 'ready'. Ports (with --port-base N): {_port_layout()}, one more per extra"
        " worker; a RULEENGINE_*_PORT setting moves one of them, metrics port 0 turns metrics"
        " off. A taken port is refused before anything starts. A dispatcher, worker or web"
        f" process that exits is restarted (at most {MAX_RESTARTS} times in"
        f" {RESTART_WINDOW_S / 60:g} minutes); MongoDB, Redis or the sandbox exiting stops"
        " everything. Data lives under RULEENGINE_DATA_DIR (default ./var).",
        epilog="Run the CLI (`ruleengine rules apply`, `accounts add`) with the same"
        " RULEENGINE_* settings (RULEENGINE_PORT_BASE rather than --port-base) to reach this"
        " stack's database.",
    )
    up.add_argument("--no-demo", action="store_true", help="do not load the demo rules")
    up.add_argument(
        "--workers",
        type=whole_number(1, MAX_WORKERS),
        default=1,
        metavar="N",
        help="worker processes (1)",
    )
    up.add_argument(
        "--port-base",
        type=int,
        metavar="N",
        help="move every port of the stack to N, N+1, … (overrides RULEENGINE_PORT_BASE)",
    )
    up.set_defaults(handler=cmd_up)
