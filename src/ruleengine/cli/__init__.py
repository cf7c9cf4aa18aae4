"""The ``ruleengine`` command: one module per command group, and ``main``.

Owns the command line: ``up`` (:mod:`.up`), ``rules`` (:mod:`.rules`, with ``conflicts``,
``import-meta``/``export-meta`` and ``backtest`` in :mod:`.conflicts`, :mod:`.meta_rules`
and :mod:`.backtest`), ``accounts``, ``tokens``, ``approvals`` and ``batches`` (a module
each); what they share: the stack a command opens and the one line it prints when MongoDB
or Redis cannot be reached (:mod:`.stack`), rule files (:mod:`.files`), handlers and
one-line output (:mod:`.common`).

May import every package of the product: it is an entry point, like ``web/``; never
``graph_sandbox`` (``up`` reaches the simulator through :mod:`ruleengine.devstack` only).
The modules of ``cli/`` import one another, never this package.

Exit status: what each command says; 2 for bad usage, a setting that is not valid, or
MongoDB or Redis that cannot be reached (one ``error:`` line, never a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ruleengine import __version__
from ruleengine.cli import accounts, approvals, batches, rules, tokens, up
from ruleengine.cli.common import Handler
from ruleengine.cli.stack import UNREACHABLE_EXIT, StackUnreachable
from ruleengine.errors import RuleEngineError
from ruleengine.settings import Settings, settings_problems


class _Parser(argparse.ArgumentParser):
    """No abbreviated options: ``--token`` must not silently mean ``--token-env``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``ruleengine`` command."""
    parser = _Parser(
        prog="ruleengine",
        description="Automation rules for Meta advertising. Settings come from RULEENGINE_*"
        " environment variables (see the README).",
        epilog="A command that needs MongoDB (or Redis) and cannot reach it exits 2 with one"
        " line naming the URL and the setting that moves it; `make run` (`ruleengine up`)"
        " starts the stack. None is needed by rules schema and validate, by migrate,"
        " export-meta and import-meta FILE… given --currency, nor by conflicts FILE… (the files"
        " among themselves when MongoDB cannot be reached).",
    )
    parser.add_argument("--version", action="version", version=f"ruleengine {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    up.add_command(sub)
    rules.add_commands(sub)
    accounts.add_commands(sub)
    tokens.add_commands(sub)
    approvals.add_commands(sub)
    batches.add_commands(sub)
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Settings given as options (they win over RULEENGINE_* variables)."""
    port_base = getattr(args, "port_base", None)
    return {} if port_base is None else {"port_base": port_base}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ruleengine`` console script."""
    args = build_parser().parse_args(argv)
    try:
        settings = Settings(**_overrides(args))
        handler: Handler = args.handler
        return handler(args, settings)
    except StackUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return UNREACHABLE_EXIT
    except RuleEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        for line in settings_problems(exc):
            print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`ruleengine rules schema | head -1`)
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush must not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (captured in tests)
        pass
