"""Every ``ruleengine`` sub-command with no stack running, and with garbage arguments.

The sub-commands are read from the parser itself, so a new one is covered (and must be
given plausible arguments below) as soon as it exists. MongoDB, Redis and Graph point at a
port that is bound and never listens: a connection to it is refused.

- With plausible arguments: a command that needs MongoDB exits 2 with one line naming the
  URL, the setting and how to start the stack; a command about files alone does its work.
- With garbage arguments: never a traceback (an exception out of ``main``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruleengine.cli import build_parser, main
from ruleengine.cli.stack import shown_url

ROOT = Path(__file__).parents[1]
EXAMPLES = sorted((ROOT / "examples" / "rules").glob("*.json"))
FIGHT = [
    str(ROOT / "examples" / "rules" / f"{n}.json")
    for n in ("09-fight-scale-up", "10-fight-cut-down")
]
META_RULES = sorted((ROOT / "tests" / "fixtures" / "meta_rules").glob("*.json"))


def commands() -> list[tuple[str, ...]]:
    """Every sub-command the parser knows, as the words that name it."""
    found: list[tuple[str, ...]] = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found.append(path)
        for action in subs:
            for name, child in action.choices.items():
                walk(child, (*path, name))

    walk(build_parser(), ())
    return found


def options_of(path: tuple[str, ...]) -> list[str]:
    """The option strings of one sub-command (garbage is made of them too)."""
    parser = build_parser()
    for word in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return [o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")]


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port bound and never listened on: connecting to it is refused, and no other
    process can take it while the test runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with closed_port() as number:
        yield number


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Files a user would pass: an old-format rule, a file that is not JSON."""
    folder = tmp_path_factory.mktemp("files")
    old = orjson.loads(EXAMPLES[1].read_bytes())
    old.pop("format", None)
    old["tasks"][0]["action"]["max_budget"] = 50000  # format 1: one number, in cents
    old["tasks"][1]["conditions"][0]["value"] = 450
    old["tasks"][1]["action"]["amount"] = 30000
    (folder / "old.json").write_bytes(orjson.dumps(old))
    (folder / "broken.json").write_text("{")
    return {"old": str(folder / "old.json"), "broken": str(folder / "broken.json")}


def stack_env(port: int, data_dir: Path) -> dict[str, str]:
    """RULEENGINE_* variables of a shell where nothing of the stack runs (and no token)."""
    return {
        "RULEENGINE_MONGODB_URL": f"mongodb://127.0.0.1:{port}/?directConnection=true",
        "RULEENGINE_REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "RULEENGINE_GRAPH_URL": f"http://127.0.0.1:{port}",
        "RULEENGINE_DATA_DIR": str(data_dir),
        "RULEENGINE_READ_RETRY_WAITS_S": "[0.01]",
    }


# ---------------------------------------------------------------- plausible arguments

STACK = "stack"  # exit 2, one line naming MongoDB's URL


@dataclass(frozen=True)
class Case:
    """A sub-command with plausible arguments, and what it must end in without a stack."""

    argv: tuple[str, ...]
    expect: str | tuple[int, ...]  # STACK, or the exit statuses its own meaning allows
    says: str = ""  # a piece of stderr (or stdout) it must print
    stdin: str = ""

    @property
    def id(self) -> str:
        return " ".join(Path(a).name if "/" in a else a for a in self.argv)


EXAMPLE, META = str(EXAMPLES[0]), str(META_RULES[0])
AN_ID = "65f0c0ffee0123456789abcd"
CASES = [
    Case(("up", "--port-base", "{taken}"), (1,), "nothing was started"),
    Case(("rules", "schema"), (0,), '"$defs"'),
    Case(("rules", "validate", *map(str, EXAMPLES)), (0,), ": ok ("),
    Case(("rules", "validate", "{broken}"), (1,), "not valid JSON"),
    Case(("rules", "migrate", EXAMPLE), (0,), '"format": 2'),
    Case(("rules", "migrate", "{old}", "--currency", "USD"), (0,), '"format": 2'),
    Case(("rules", "migrate", "{old}"), STACK, "--currency"),
    Case(("rules", "apply", EXAMPLE), STACK),
    Case(("rules", "list"), STACK),
    Case(("rules", "rollback", AN_ID, "1"), STACK),
    Case(("rules", "conflicts", *FIGHT), (1,), "among themselves only"),
    Case(("rules", "conflicts", *map(str, EXAMPLES[:3])), (0,), "0 conflict(s)"),
    Case(("rules", "conflicts"), STACK),
    Case(("rules", "conflicts", *FIGHT, "--live"), STACK),
    Case(("rules", "import-meta", META, "--currency", "USD", "--account", "act_1"), (0, 1)),
    Case(("rules", "import-meta", META, "--account", "act_1"), STACK, "--currency"),
    Case(("rules", "import-meta", "--account", "act_1"), STACK),
    Case(("rules", "export-meta", EXAMPLE, "--currency", "USD"), (0, 1), "["),
    Case(("rules", "export-meta", EXAMPLE), STACK, "--currency"),
    Case(("rules", "export-meta", AN_ID), STACK, "the stored rules"),
    Case(("rules", "export-meta", "missing.json", "--currency", "USD"), (1,), "cannot read"),
    Case(("rules", "backtest", EXAMPLE, "--days", "7"), STACK),
    Case(("rules", "impact", AN_ID, "--json"), STACK),
    Case(("accounts", "add", "act_123", "--name", "Shop"), STACK, stdin="EAAGtoken\n"),
    Case(("accounts", "refresh", "act_123"), STACK),
    Case(("accounts", "list"), STACK),
    Case(("accounts", "new-key"), (0,), "="),
    Case(("tokens", "add", "alice", "--role", "editor"), STACK),
    Case(("tokens", "list"), STACK),
    Case(("tokens", "revoke", "alice"), STACK),
    Case(("approvals", "list"), STACK),
    Case(("approvals", "approve", AN_ID), STACK),
    Case(("approvals", "reject", AN_ID), STACK),
    Case(("batches", "undo", "r-act_1-2024", "--dry-run"), STACK),
    Case(("batches", "undo", "r-act_1-2024"), STACK),
]


def run(case: Case, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruleengine", *case.argv],
        input=case.stdin,
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), **env},
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def results(
    port: int, files: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every case run at once, as a user runs it (``python -m ruleengine …``), by its id."""
    cwd = tmp_path_factory.mktemp("shell")
    env = stack_env(port, cwd / "var")
    with socket.socket() as taken:  # `up` must refuse its port, not start anything
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        names = files | {"taken": str(taken.getsockname()[1])}
        todo = [
            Case(tuple(a.format(**names) for a in c.argv), c.expect, c.says, c.stdin) for c in CASES
        ]
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = list(pool.map(lambda c: run(c, env, cwd), todo))
    return {case.id: result for case, result in zip(CASES, done, strict=True)}


def test_every_sub_command_has_plausible_arguments_here() -> None:
    covered = {p for p in commands() for c in CASES if c.argv[: len(p)] == p}
    assert sorted(set(commands()) - covered) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_without_a_stack_each_command_ends_in_its_answer_or_one_line(
    case: Case, results: dict[str, subprocess.CompletedProcess[str]], port: int
) -> None:
    result = results[case.id]
    assert "Traceback" not in result.stderr, result.stderr
    if case.expect == STACK:
        assert result.returncode == 2, (result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: cannot reach MongoDB at mongodb://127.0.0.1:{port} ")
        assert "RULEENGINE_MONGODB_URL" in lines[0] and "'make run'" in lines[0]
        assert "directConnection" not in lines[0]
        assert result.stdout == ""
    else:
        assert result.returncode in case.expect, (result.stdout, result.stderr)
    assert case.says in result.stderr + result.stdout


def test_the_demo_rules_that_fight_are_found_without_a_stack(
    results: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    result = results[Case(("rules", "conflicts", *FIGHT), ()).id]
    assert result.stdout.count("CONFLICT: daily_budget") == 1
    assert result.stdout.endswith("1 conflict(s), 0 note(s) among 2 rule(s)\n")
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("note: MongoDB is not")


def test_a_closed_pipe_ends_the_command_without_a_traceback(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a byte
    with open(write, "wb") as out:
        result = subprocess.run(
            [sys.executable, "-m", "ruleengine", "rules", "schema"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr == ""


# ---------------------------------------------------------------- garbage


@pytest.fixture
def shell(port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as that shell: the same variables, an empty stdin, a scratch directory."""
    for name, value in stack_env(port, tmp_path / "var").items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


def call(argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` in this process: its exit status and what it printed. An exception out
    of it (but argparse's exit) is the traceback a user would see, and fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage and exit 2 (--help: 0)
            code = exc.code if isinstance(exc.code, int) else 1
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, err.getvalue() + out.getvalue()  # `rules validate` reports on stdout


GARBAGE = [
    ["--no-such-option"],
    ["\x01\x7f", "--", "-"],
    ["x" * 5000],
    [""],
    ["act_1", "act_2", "--currency", "", "--days", "-1", "--limit", "0"],
]


@pytest.mark.parametrize("path", commands(), ids=" ".join)
@pytest.mark.parametrize(
    "garbage", GARBAGE, ids=["unknown-option", "control-characters", "long", "empty", "misplaced"]
)
def test_garbage_arguments_end_in_one_error_not_a_traceback(
    shell: None, path: tuple[str, ...], garbage: list[str]
) -> None:
    code, err = call([*path, *garbage])
    assert code != 0
    assert err.strip(), "a refusal says why"


# Options that take a value, and values that are not what they expect.
WORDS = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12),
    st.sampled_from(["act_1", "USD", "JPY", "-1", "0", "99999999999999999999", "--", "-", "."]),
)


@pytest.mark.parametrize(
    "path", [p for p in commands() if p != ("up",)], ids=" ".join
)  # `up` with valid arguments would start the stack
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_generated_arguments_never_end_in_a_traceback(
    shell: None, path: tuple[str, ...], data: st.DataObject
) -> None:
    words = st.one_of(WORDS, st.sampled_from(options_of(path) or ["--x"]))
    argv = data.draw(st.lists(words, max_size=6))
    call([*path, *argv])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mutated(base: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**base, key: value}


def documents(examples: list[Path]) -> st.SearchStrategy[Any]:
    """JSON a user might hand over: anything, or one of the examples with a field changed."""
    bases = [orjson.loads(p.read_bytes()) for p in examples]
    bases = [b for b in bases if isinstance(b, dict)]
    keys = sorted({k for b in bases for k in b})
    return JSON | st.builds(_mutated, st.sampled_from(bases), st.sampled_from(keys), JSON)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rule=documents(EXAMPLES),
    meta=documents(META_RULES),
    currency=st.sampled_from(["USD", "JPY", "KWD", "usd", "", "XXXX"]),
    raw=st.binary(max_size=40),
)
def test_files_of_any_content_never_end_in_a_traceback(
    shell: None, tmp_path: Path, rule: Any, meta: Any, currency: str, raw: bytes
) -> None:
    rule_file, meta_file, raw_file = (
        tmp_path / "rule.json",
        tmp_path / "meta.json",
        tmp_path / "raw",
    )
    rule_file.write_text(json.dumps(rule))  # json: numbers beyond 64 bits too
    meta_file.write_text(json.dumps(meta))
    raw_file.write_bytes(raw)
    for argv in (
        ["rules", "validate", str(rule_file), str(raw_file), "--currency", currency],
        ["rules", "migrate", str(rule_file), "--currency", currency],
        ["rules", "conflicts", str(rule_file), *FIGHT],
        ["rules", "export-meta", str(rule_file), "--currency", currency],
        ["rules", "import-meta", str(meta_file), "--currency", currency, "--account", "act_1"],
        ["rules", "import-meta", str(raw_file), "--currency", currency],
    ):
        call(argv)


def test_a_url_is_shown_without_its_password_or_options() -> None:
    assert shown_url("mongodb://127.0.0.1:27018/?directConnection=true") == (
        "mongodb://127.0.0.1:27018"
    )
    assert shown_url("mongodb://ops:s3cret@db1:27017,db2:27017/engine?tls=true") == (
        "mongodb://ops:***@db1:27017,db2:27017/engine"
    )
    assert shown_url("redis://:hunter2@cache:6379/0") == "redis://:***@cache:6379/0"
    assert shown_url("garbage") == "(not a URL)"


@given(
    user=st.text(st.characters(exclude_characters=":@/?#"), max_size=8),
    password=st.text(st.characters(exclude_characters="@/?#"), min_size=1, max_size=12),
    host=st.from_regex(r"[a-z0-9.-]{1,20}(:[0-9]{1,5})?", fullmatch=True),
    query=st.text(max_size=20),
)
def test_a_shown_url_never_carries_the_password(
    user: str, password: str, host: str, query: str
) -> None:
    shown = shown_url(f"mongodb://{user}:{password}@{host}/?{query}")
    assert shown == f"mongodb://{user}:***@{host}"
