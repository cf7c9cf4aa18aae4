"""What every command group of ``ruleengine`` shares: handlers, the clock, who is acting,
argument types, and output that stays on one line."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import re
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TextIO

from ruleengine.settings import Settings

#: What a sub-command runs: its exit status from its arguments and the process's settings.
Handler = Callable[[argparse.Namespace, Settings], int]


def now() -> datetime:
    """The command's clock (timezone-aware UTC)."""
    return datetime.now(UTC)


def run_async(fn: Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]) -> Handler:
    """A handler that runs the coroutine handler ``fn`` in its own event loop."""
    return lambda args, settings: asyncio.run(fn(args, settings))


def one_line(text: str) -> str:
    """``text`` with its control characters escaped: what a rule carried stays on one line."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def say(line: str, *, file: TextIO | None = None) -> None:
    """Print one line of a listing or a table: names from Meta or a rule (``one_line``) can
    neither add lines nor send the terminal escape sequences."""
    print(one_line(line), file=file or sys.stdout)


def cli_actor() -> str:
    """Who an undo or a decision made from this shell is recorded as: ``cli:<login name>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name in the environment or the password database
        return "cli:unknown"


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argument type: a whole number from ``low`` to ``high`` (argparse's error otherwise,
    before MongoDB sees a number it cannot store)."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"-?[0-9]{1,19}", text.strip()) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number from {low} to {high}")
        return int(text)

    return parse
