"""docs/rules.md stays true to the rule model, every example rule stays valid, and the
settings are documented where operators look.

The reference names every action type, follow-up, special key, period, metric and
top-level property the model knows; every JSON block in it that is a whole rule
validates; so does every file in ``examples/rules``. README's settings table and the
systemd env example name every setting (and nothing else), and both port tables follow
``PORT_LAYOUT``. Change the model or the settings and this test says which part of the
docs to update.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest

from ruleengine.errors import RuleValidationError
from ruleengine.rules.basics import NOTIFY_PLACEHOLDERS, RENAME_PLACEHOLDERS, Period
from ruleengine.rules.language.action_types import ACTION_TYPES, FollowUpDo
from ruleengine.rules.language.catalog import SPECIAL_KEYS, known_names
from ruleengine.rules.language.model import (
    FILTER_FIELDS,
    FilterOperator,
    parse_rule,
    rule_json_schema,
)
from ruleengine.settings import PORT_LAYOUT, Settings
from support import SANDBOX_ACCOUNTS

ROOT = Path(__file__).resolve().parents[1]
RULES_MD = ROOT / "docs" / "rules.md"
README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
ENV_EXAMPLE = ROOT / "deploy" / "systemd" / "ruleengine.env.example"
SETTINGS = sorted(name.upper() for name in Settings.model_fields)
EXAMPLES = sorted((ROOT / "examples" / "rules").glob("*.json"))
_JSON_BLOCK = re.compile(r"```json\n(.*?)```", re.DOTALL)
#: The demo's ad accounts and their currencies (what `ruleengine up` loads the examples on).
DEMO_CURRENCIES = {account: currency for account, (_, _, currency) in SANDBOX_ACCOUNTS.items()}


@pytest.fixture(scope="module")
def reference() -> str:
    return RULES_MD.read_text(encoding="utf-8")


def _missing(reference: str, names: Any) -> list[str]:
    """The names that do not appear in the reference as inline code (`name`)."""
    return sorted(n for n in names if f"`{n}`" not in reference)


@pytest.mark.parametrize(
    ("what", "names"),
    [
        ("action types", ACTION_TYPES),
        ("follow-up 'do' values", get_args(FollowUpDo)),
        ("special keys", SPECIAL_KEYS),
        ("periods", get_args(Period)),
        ("filter operators", get_args(FilterOperator)),
        ("filter fields", set().union(*FILTER_FIELDS.values())),
        ("metrics", [n.split(".<")[0] for n in known_names()]),
        ("top-level properties", rule_json_schema()["properties"]),
        ("notification placeholders", [f"{{{p}}}" for p in NOTIFY_PLACEHOLDERS]),
        ("rename placeholders", [f"{{{p}}}" for p in RENAME_PLACEHOLDERS]),
    ],
)
def test_the_reference_mentions_everything_the_model_knows(
    reference: str, what: str, names: Any
) -> None:
    assert _missing(reference, names) == [], f"docs/rules.md does not mention these {what}"


def _whole_rules(reference: str) -> list[tuple[int, str]]:
    """(line number, text) of every ```json block that looks like a whole rule."""
    blocks = []
    for match in _JSON_BLOCK.finditer(reference):
        if '"tasks"' in match.group(1):
            blocks.append((reference.count("\n", 0, match.start()) + 1, match.group(1)))
    return blocks


def test_the_reference_has_whole_rule_examples(reference: str) -> None:
    assert len(_whole_rules(reference)) >= 2


def test_every_whole_rule_in_the_reference_is_valid(reference: str) -> None:
    """Valid as the API saves it on the demo accounts: their currencies differ (USD, EUR,
    JPY), so an example's amounts must say what they mean on each."""
    problems = []
    for line, text in _whole_rules(reference):
        try:
            parse_rule(text, accounts=DEMO_CURRENCIES)
        except RuleValidationError as exc:
            problems.append(f"docs/rules.md:{line}: {exc}")
    assert problems == []


def test_every_json_block_in_the_reference_is_json(reference: str) -> None:
    for match in _JSON_BLOCK.finditer(reference):
        orjson.loads(match.group(1))  # a typo in a snippet fails here, with its text


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_rule_is_valid(path: Path) -> None:
    rule = parse_rule(path.read_bytes(), accounts=DEMO_CURRENCIES, new=True)
    assert rule.name


def test_there_are_example_rules() -> None:
    assert EXAMPLES, "examples/rules/*.json is empty"


def _settings_rows() -> dict[str, str]:
    """README's settings table: each setting named in a row's first cell -> that row."""
    section = README.read_text(encoding="utf-8").split("\n## Settings\n", 1)[1]
    rows = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        if line.startswith("| `"):
            rows |= dict.fromkeys(re.findall(r"`([A-Z0-9_]+)`", line.split("|")[1]), line)
    return rows


def test_the_readme_settings_table_lists_every_setting_and_no_other() -> None:
    documented = set(_settings_rows())
    assert sorted(set(SETTINGS) - documented) == [], "add these to README.md's settings table"
    assert sorted(documented - set(SETTINGS)) == [], "README.md names settings that do not exist"


def test_the_env_example_names_every_setting() -> None:
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    missing = [name for name in SETTINGS if f"RULEENGINE_{name}=" not in text]
    assert missing == [], f"{ENV_EXAMPLE.name} does not mention these settings"


def _operations_port_rows() -> list[str]:
    """The table of docs/operations.md's section on the ports of ``ruleengine up``."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("\n### Ports of `ruleengine up`", 1)[1].split("\n#", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ")]


@pytest.mark.parametrize(("name", "offset"), PORT_LAYOUT.items())
def test_both_port_tables_follow_the_layout(name: str, offset: int) -> None:
    variable = name.upper()
    assert f"base + {offset}" in _settings_rows()[variable], (
        f"README.md: {variable} is base + {offset}"
    )
    row = next(line for line in _operations_port_rows() if f"`RULEENGINE_{variable}`" in line)
    assert f"| N{f'+{offset}' if offset else ''}" in row, row


# ---------------------------------------------------------------- the module map


def _module_map() -> set[str]:
    """The modules docs/architecture.md's module map lists, as paths under src/."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Module map", 1)[1].split("```", 2)[1]
    listed: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, folder) of the enclosing folders
    for line in block.splitlines():
        name = line.strip().split(" ", 1)[0]
        if not name.endswith((".py", "/")):
            continue  # a description going on from the line above
        indent = len(line) - len(line.lstrip())
        folders = [(i, f) for i, f in folders if i < indent]
        path = "".join(f for _, f in folders) + name
        if name.endswith("/"):
            folders.append((indent, name))
        else:
            listed.add(path)
    return listed


def test_the_module_map_lists_every_module_of_the_product_and_nothing_else() -> None:
    actual = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "src" / "ruleengine").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    listed = _module_map()
    assert sorted(actual - listed) == [], "modules missing from the map"
    assert sorted(listed - actual) == [], "the map lists modules that do not exist"


def test_no_text_file_keeps_a_merge_conflict_marker() -> None:
    marker = re.compile(r"^(<{7}|>{7}) ", re.MULTILINE)
    texts = [*(ROOT / "docs").glob("*.md"), README, ENV_EXAMPLE]
    texts += [*(ROOT / "src").rglob("*.py"), *(ROOT / "src").rglob("*.js")]
    texts += [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
    marked = [str(p.relative_to(ROOT)) for p in texts if marker.search(p.read_text("utf-8"))]
    assert marked == []


# ---------------------------------------------------------------- the README shows today

BENCH_DIR = ROOT / "bench"
PERFORMANCE = ROOT / "docs" / "performance.md"
_NUMBER = re.compile(r"[0-9][0-9,.]*[0-9]|[0-9]")


def _bench_rows() -> dict[str, list[str]]:
    """README's benchmark table: script → the rows naming it."""
    section = README.read_text(encoding="utf-8").split("\n## Benchmarks\n", 1)[1]
    rows: dict[str, list[str]] = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        found = re.match(r"\| \[`([a-z_]+\.py)`\]", line)
        if found:
            rows.setdefault(found.group(1), []).append(line)
    return rows


def test_no_readme_line_is_over_400_characters() -> None:
    long = [n for n, line in enumerate(README.read_text().splitlines(), 1) if len(line) > 400]
    assert long == [], "shorten these README lines (history goes to docs/performance.md)"


def test_every_benchmark_has_exactly_one_readme_row() -> None:
    scripts = sorted(p.name for p in BENCH_DIR.glob("*.py") if not p.name.startswith("_"))
    rows = _bench_rows()
    assert sorted(rows) == scripts, "one README row per bench/ script, and no other"
    assert [s for s, found in rows.items() if len(found) != 1] == []


def test_the_readme_figures_are_in_docs_performance() -> None:
    performance = PERFORMANCE.read_text(encoding="utf-8")
    for script, (row,) in _bench_rows().items():
        assert f"### `bench/{script}`" in performance, (
            f"docs/performance.md: a section for {script}"
        )
        figures = row.rstrip(" |").rsplit(" | ", 1)[1]
        missing = [n for n in _NUMBER.findall(figures) if n not in performance]
        assert missing == [], f"{script}: README figures not in docs/performance.md: {missing}"
