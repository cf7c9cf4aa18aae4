"""The dependency direction of docs/architecture.md, checked on the import graph.

``rules/`` is pure and imports nothing of ours but ``errors``; ``store/`` and ``meta/``
build on ``rules/`` and the shared basics, never on each other or on the processes that
compose them; the dispatcher reaches no code that can write to Meta. The Graph simulator
``graph_sandbox`` and the product stand apart: neither imports the other, but for
``ruleengine up``, which loads the simulator inside the function that starts it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from graph_sandbox import batch as sandbox_batch
from graph_sandbox import limits as sandbox_limits
from ruleengine import constants

SRC = Path(__file__).parents[1] / "src" / "ruleengine"
SANDBOX_SRC = SRC.parent / "graph_sandbox"
# What any layer may use besides itself (the package, errors, constants, settings, redaction).
BASICS = frozenset(
    {
        "ruleengine",
        "ruleengine.clocks",
        "ruleengine.constants",
        "ruleengine.errors",
        "ruleengine.redact",
        "ruleengine.secret_files",
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
    for path in (SRC / package).rglob("*.py"):
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
        ("accounts", {"accounts", "store", "meta", "rules"}, BASICS),
        ("acting", {"acting", "accounts", "store", "meta", "rules"}, BASICS),
        ("guards", {"guards", "acting", "store", "rules"}, BASICS),
        ("analysis", {"analysis", "backtest", "store", "meta", "rules"}, BASICS),
        ("backtest", {"backtest", "store", "meta", "rules"}, BASICS),
        ("interop", {"interop", "analysis", "store", "meta", "rules"}, BASICS),
        ("devstack", {"devstack", "store", "rules"}, BASICS),
        ("writes", {"writes", "acting", "guards", "accounts", "store", "meta", "rules"}, BASICS),
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
        "ruleengine.writes.executor",
        "ruleengine.writes.batched",
        "ruleengine.worker.job",
        "ruleengine.writes.lock",
        "ruleengine.maintenance.reaper",
        "ruleengine.followups.running",
        "ruleengine.worker.deps",
    }
    assert reachable.isdisjoint(forbidden), reachable & forbidden
    assert not _under(reachable, "ruleengine.writes")  # the write path, all of it


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
        "ruleengine.writes.executor",
        "ruleengine.worker.job",
        "ruleengine.maintenance.reaper",
    }
    assert loaded.isdisjoint(forbidden), loaded & forbidden
    assert not _under(loaded, "ruleengine.writes")


# Modules that write to Meta, or build the worker that does.
WRITING = frozenset(
    {
        "ruleengine.meta.writer",
        "ruleengine.writes.executor",
        "ruleengine.writes.batched",
        "ruleengine.writes.copies",
        "ruleengine.worker.job",
        "ruleengine.writes.lock",
        "ruleengine.maintenance.reaper",
        "ruleengine.followups.running",
    }
)


@pytest.mark.parametrize("module", ["ruleengine.worker.preview", "ruleengine.web.app"])
def test_the_preview_and_the_web_app_reach_no_code_that_writes_to_meta(module: str) -> None:
    reachable = reachable_from(module)
    assert "ruleengine.worker.stages" in reachable or module != "ruleengine.worker.preview"
    assert reachable.isdisjoint(WRITING), reachable & WRITING


def test_the_web_app_takes_the_stage_names_from_constants() -> None:
    from ruleengine import constants
    from ruleengine.worker import stages as evaluation

    assert evaluation.STAGES is constants.STAGES == ("cooldown", "fetch", "evaluate", "act")


def _imported_modules(path: Path) -> tuple[set[str], set[str]]:
    """Every module a file imports: (at import time, inside a function body)."""
    tree = ast.parse(path.read_text())
    in_functions = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
    }
    eager: set[str] = set()
    lazy: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names = {a.name for a in node.names}
        else:
            continue
        (lazy if id(node) in in_functions else eager).update(names)
    return eager, lazy


def _under(names: set[str], *packages: str) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(f"{p}.") for p in packages)}


def test_the_simulator_imports_nothing_from_the_product() -> None:
    found = {}
    for path in sorted(SANDBOX_SRC.rglob("*.py")):
        eager, lazy = _imported_modules(path)
        if product := _under(eager | lazy, "ruleengine"):
            found[path.name] = sorted(product)
    assert found == {}, f"graph_sandbox imports ruleengine: {found}"


def test_loading_every_module_of_the_simulator_loads_nothing_of_the_product() -> None:
    code = (
        "import importlib, pkgutil, sys, graph_sandbox\n"
        "for m in pkgutil.walk_packages(graph_sandbox.__path__, 'graph_sandbox.'):\n"
        "    importlib.import_module(m.name)\n"
        "print([m for m in sys.modules if m.split('.')[0] == 'ruleengine'])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_no_product_module_imports_the_simulator_but_up_inside_a_function() -> None:
    found = {}
    up_lazy: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("sandbox/"):
            continue  # the alias ``python -m ruleengine.sandbox``, kept for one release
        eager, lazy = _imported_modules(path)
        simulator = ("graph_sandbox", "ruleengine.sandbox")
        if relative == "devstack/up.py":
            up_lazy = _under(lazy, *simulator)
            lazy = set()
        if imports := _under(eager | lazy, *simulator):
            found[relative] = sorted(imports)
    assert found == {}, f"the product imports the simulator: {found}"
    assert "graph_sandbox.extras" in up_lazy  # the one lazy use this test allows


def test_loading_the_product_loads_no_simulator() -> None:
    code = (
        "import ruleengine, sys; import ruleengine.dispatch, ruleengine.jobs, ruleengine.web; "
        "print([m for m in sys.modules if 'sandbox' in m])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_simulator_enforces_the_meta_limits_the_product_plans_for() -> None:
    # Two copies on purpose (the simulator stands on its own); they describe one Meta.
    assert sandbox_batch.BATCH_MAX_ITEMS == constants.BATCH_MAX_ITEMS
    assert sandbox_limits.ADSET_BUDGET_CHANGES_PER_HOUR == constants.ADSET_BUDGET_CHANGES_PER_HOUR


# ---------------------------------------------------------------- the house


def _product_modules() -> dict[str, Path]:
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _import_graph() -> dict[str, set[str]]:
    """Module → the product modules it imports: at import time, under ``TYPE_CHECKING`` or
    inside a function alike (a cycle of types is a cycle of concepts)."""
    modules = _product_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        eager, lazy = _imported_modules(path)
        graph[name] = {m for m in eager | lazy if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_product_modules() -> None:
    assert _cycles(_import_graph()) == []


def test_the_cycle_check_finds_a_cycle_of_types() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from x.y import Z\n"
    assert "x.y" in _imported_modules_of(source)[0]


def _imported_modules_of(source: str) -> tuple[set[str], set[str]]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(source)
    return _imported_modules(Path(handle.name))


def test_at_most_twelve_modules_at_the_top_of_the_product() -> None:
    top = sorted(p.name for p in SRC.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 12, top


def test_every_package_says_what_it_owns_and_what_it_may_import() -> None:
    missing = []
    for init in sorted(SRC.rglob("__init__.py")):
        package = init.parent.relative_to(SRC).as_posix()
        if package in (".", "sandbox"):
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if "May import" not in doc and "may import" not in doc.lower():
            missing.append(package)
    assert missing == []


#: a module may be longer than this when its docstring says why ("(Over N lines: …)")
MAX_MODULE_LINES = 800


def test_no_product_module_is_over_800_lines_without_a_reason() -> None:
    long = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text().count("\n")
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_MODULE_LINES and "(Over " not in doc:
            long.append(f"{path.relative_to(SRC)}: {lines}")
    assert long == []


#: What a module doing I/O would import: the pure core imports none of it.
IO_MODULES = frozenset(
    {
        "aiohttp",
        "arq",
        "asyncio",
        "gspread",
        "http",
        "os",
        "pymongo",
        "redis",
        "requests",
        "shutil",
        "socket",
        "subprocess",
        "urllib",
        "pathlib",
        "time",
        "threading",
    }
)
RULES = SRC / "rules"


def _third_party(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_the_pure_core_imports_nothing_that_does_io() -> None:
    doing_io = {
        str(p.relative_to(SRC)): sorted(_third_party(p) & IO_MODULES) for p in RULES.rglob("*.py")
    }
    assert {k: v for k, v in doing_io.items() if v} == {}


def _room(module: str) -> str:
    """``ruleengine.rules.plan.targets`` → ``plan``; a module at the top is its own room."""
    return module.split(".")[2]


def test_the_rooms_of_the_pure_core_form_no_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for path in RULES.rglob("*.py"):
        relative = path.relative_to(RULES)
        room = relative.parts[0] if len(relative.parts) > 1 else relative.stem
        outside = {
            _room(m)
            for m in _imports_of(path)
            if m.startswith("ruleengine.rules.") and _room(m) != room
        }
        edges.setdefault(room, set()).update(outside)
    cycles = _cycles(edges)
    assert cycles == [], f"the rooms of rules/ import each other: {cycles}"


def test_the_pure_core_keeps_at_most_twelve_modules_at_its_top() -> None:
    top = sorted(p.name for p in RULES.glob("*.py"))
    assert len(top) <= 12, top
    assert all(
        (d / "__init__.py").exists()
        for d in RULES.iterdir()
        if d.is_dir() and d.name != "__pycache__"
    )
