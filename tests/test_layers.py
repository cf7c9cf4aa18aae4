"""The dependency direction of docs/architecture.md, checked on the import graph.

``rules/`` is pure and imports nothing of ours but ``errors``; ``store/`` and ``meta/``
build on ``rules/`` and the shared basics, never on each other or on the processes that
compose them; the dispatcher reaches no code that can write to Meta.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "ruleengine"
# What any layer may use besides itself (the package, errors, constants, settings, redaction).
BASICS = frozenset(
    {
        "ruleengine",
        "ruleengine.constants",
        "ruleengine.errors",
        "ruleengine.redact",
        "ruleengine.settings",
    }
)


def _imports_of(path: Path) -> set[str]:
    """Every ruleengine module a file imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("ruleengine")
        ):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ruleengine"))
    return found


def _module_file(module: str) -> Path | None:
    parts = module.split(".")[1:]
    if not parts:
        return SRC / "__init__.py"
    relative = Path(*parts)
    for candidate in (SRC / relative.with_suffix(".py"), SRC / relative / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _modules(package: str) -> set[str]:
    """The modules an import names (``from a.b import c`` names ``a.b`` and maybe ``a.b.c``)."""
    return {m for m in package_imports(package) if _module_file(m) is not None}


def package_imports(package: str) -> set[str]:
    """Every ruleengine import made by the modules of ``ruleengine.<package>``."""
    found: set[str] = set()
    for path in (SRC / package).glob("*.py"):
        found |= _imports_of(path)
    return found


def reachable_from(module: str) -> set[str]:
    """Every ruleengine module an import path from ``module`` reaches."""
    reachable: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in reachable:
            continue
        path = _module_file(current)
        if path is None:
            continue
        reachable.add(current)
        todo.extend(_imports_of(path))
    return reachable


def _foreign(modules: set[str], *, layers: set[str], basics: frozenset[str]) -> set[str]:
    """The imported modules that are neither in ``layers`` nor among ``basics``."""
    inside = {f"ruleengine.{layer}" for layer in layers}
    return {
        m
        for m in modules
        if m not in basics and m not in inside and not m.startswith(tuple(f"{i}." for i in inside))
    }


@pytest.mark.parametrize(
    ("package", "layers", "basics"),
    [
        # pure: not even settings, constants or redaction
        ("rules", {"rules"}, frozenset({"ruleengine", "ruleengine.errors"})),
        ("store", {"store", "rules"}, BASICS),
        ("meta", {"meta", "rules"}, BASICS),
    ],
)
def test_each_layer_imports_only_what_lies_below_it(
    package: str, layers: set[str], basics: frozenset[str]
) -> None:
    foreign = _foreign(_modules(package), layers=layers, basics=basics)
    assert not foreign, f"ruleengine.{package} imports {sorted(foreign)}"


def test_no_import_path_from_the_dispatcher_reaches_code_that_writes_to_meta() -> None:
    reachable = reachable_from("ruleengine.dispatch")
    assert "ruleengine.meta.reader" in reachable
    forbidden = {
        "ruleengine.meta.writer",
        "ruleengine.meta.batch",
        "ruleengine.actions",
        "ruleengine.engine",
        "ruleengine.locks",
        "ruleengine.reaper",
        "ruleengine.followups.running",
    }
    assert reachable.isdisjoint(forbidden), reachable & forbidden


def test_importing_the_dispatcher_loads_no_code_that_writes_to_meta() -> None:
    code = "import sys, ruleengine.dispatch; print(','.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        .stdout.strip()
        .split(",")
    )
    assert "ruleengine.dispatch" in loaded
    forbidden = {
        "ruleengine.meta.writer",
        "ruleengine.meta.batch",
        "ruleengine.actions",
        "ruleengine.engine",
        "ruleengine.reaper",
    }
    assert loaded.isdisjoint(forbidden), loaded & forbidden


# Modules that write to Meta, or build the worker that does.
WRITING = frozenset(
    {
        "ruleengine.meta.writer",
        "ruleengine.actions",
        "ruleengine.copies",
        "ruleengine.engine",
        "ruleengine.locks",
        "ruleengine.reaper",
        "ruleengine.followups.running",
    }
)


@pytest.mark.parametrize("module", ["ruleengine.preview", "ruleengine.web.app"])
def test_the_preview_and_the_web_app_reach_no_code_that_writes_to_meta(module: str) -> None:
    reachable = reachable_from(module)
    assert "ruleengine.evaluation" in reachable or module != "ruleengine.preview"
    assert reachable.isdisjoint(WRITING), reachable & WRITING


def test_the_web_app_takes_the_stage_names_from_constants() -> None:
    from ruleengine import constants, evaluation

    assert evaluation.STAGES is constants.STAGES == ("cooldown", "fetch", "evaluate", "act")
