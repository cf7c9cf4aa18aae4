"""``ruleengine rules backtest``: the command in this process, on the sandbox and a real MongoDB.

It runs the backtest service in-process: the summary table (or ``--json``) on stdout,
progress on stderr, exit 1 with ``FILE: path: message`` for a file that is not a valid rule.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from ruleengine.backtest.service import Progress
from ruleengine.cli import main as cli_main
from ruleengine.cli.backtest import ProgressLine, backtest_table
from ruleengine.settings import Settings

RESULT_KEYS = {
    "rule", "since", "until", "days", "accounts", "view", "runs", "fires", "per_day",
    "entities", "views", "differs_as_seen", "as_seen", "graph_calls", "cache_hits", "caveats",
}  # fmt: skip


def rule(**change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Pause spenders",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 60},
        "timezone": "America/New_York",
        "tasks": [
            {
                "id": "pause-spenders",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "pause"},
                "cooldown_minutes": 60,
            }
        ],
    }
    return body | change


@pytest.fixture
def env(
    settings: Settings, db: object, accounts: list[str], monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The command's RULEENGINE_* variables: this test's database, the sandbox, its accounts."""
    assert settings.token_encryption_key is not None
    for name, value in {
        "MONGODB_URL": settings.mongodb_url,
        "MONGODB_DATABASE": settings.mongodb_database,
        "REDIS_URL": settings.redis_url,
        "GRAPH_URL": settings.graph_url,
        "DATA_DIR": str(settings.data_dir),
        "TOKEN_ENCRYPTION_KEY": settings.token_encryption_key.get_secret_value(),
    }.items():
        monkeypatch.setenv(f"RULEENGINE_{name}", value)
    return settings


def write(tmp_path: Path, body: Any, name: str = "rule.json") -> Path:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(body))
    return path


def test_a_file_prints_the_summary_table(
    env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, rule())
    assert cli_main(["rules", "backtest", str(path), "--days", "2", "--matured"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("Backtest of 'Pause spenders' (campaign) on act_1001: ")
    assert "(2 days)" in lines[0]
    assert "runs " in lines[1] and "graph_calls " in lines[1] and "cache_hits " in lines[1]
    header = next(line for line in lines if line.startswith("date"))
    assert header.split()[:3] == ["date", "fires", "pause-spenders"]
    assert "budget moved (USD)" in header
    assert header.split()[-2:] == ["paused", "activated"]
    days = [line for line in lines[lines.index(header) + 1 :] if line[:4].isdigit()]
    assert len(days) == 2
    assert any(line.startswith("total") for line in lines)
    assert "as seen:" in lines and "caveats:" in lines
    assert any(line.startswith("  act_1001: matured numbers") for line in lines)
    assert "backtest: " in err  # progress, a plain line per step (stderr is not a terminal)
    assert "\r" not in err


def test_json_prints_the_result_as_one_object(
    env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, rule())
    assert cli_main(["rules", "backtest", str(path), "--days", "2", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    result = orjson.loads(out)
    assert set(result) >= RESULT_KEYS
    assert result["days"] == 2
    assert result["rule"]["rule_id"] is None


def test_a_stored_rule_by_id(
    env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["rules", "apply", str(write(tmp_path, rule()))]) == 0
    rule_id = capsys.readouterr().out.split(": ", 1)[1].split()[0]
    assert cli_main(["rules", "backtest", rule_id, "--days", "1", "--json"]) == 0
    result = orjson.loads(capsys.readouterr().out)
    assert result["rule"]["rule_id"] == rule_id
    assert result["rule"]["version"] == 1


def test_an_invalid_file_exits_1_with_the_json_paths(
    env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = rule()["tasks"][0]
    bad = rule(
        timezone="Moon/Base",
        tasks=[task | {"conditions": [{"metric": "spendd", "period": "today", "operator": ">"}]}],
    )
    path = write(tmp_path, bad)
    assert cli_main(["rules", "backtest", str(path), "--days", "2"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{path}: timezone: unknown timezone 'Moon/Base'" in err
    assert f"{path}: tasks[0].conditions[0].metric: unknown metric 'spendd'" in err
    assert "nothing run" in err


def test_unreadable_broken_and_old_format_files_exit_1(
    env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.json"
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    old = write(tmp_path, {k: v for k, v in rule().items() if k != "format"}, "old.json")
    for path, expected in (
        (missing, f"{missing}: cannot read the file"),
        (broken, f"{broken}: not valid JSON"),
        (old, f"{old}: format: required"),
    ):
        assert cli_main(["rules", "backtest", str(path)]) == 1
        err = capsys.readouterr().err
        assert expected in err
    cli_main(["rules", "backtest", str(old)])
    assert "ruleengine rules migrate" in capsys.readouterr().err


def test_unknown_ids_and_foreign_accounts_exit_1(
    env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["rules", "backtest", "674a1f0c9b1e8a2f3c4d5e6f"]) == 1
    assert "rule '674a1f0c9b1e8a2f3c4d5e6f' does not exist" in capsys.readouterr().err
    path = write(tmp_path, rule())
    assert cli_main(["rules", "backtest", str(path), "--account", "act_1002"]) == 1
    assert "--account act_1002: not one of the rule's ad accounts" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options",
    [["--days", "0"], ["--days", "91"], ["--days", "x"], ["--account", "1001"],
     ["--as-seen", "--matured"]],
)  # fmt: skip
def test_wrong_options_exit_2(options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(["rules", "backtest", "rule.json", *options])
    assert exit_.value.code == 2


def test_help_explains_the_options_and_gives_an_example(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli_main(["rules", "backtest", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in ("FILE_OR_ID", "--days N", "--account ACT", "--as-seen", "--matured", "--json"):
        assert option in text
    assert "Example: ruleengine rules backtest examples/rules/02-scale-winners.json" in text


def test_the_table_shows_money_in_each_currency_and_tasks_in_rule_order() -> None:
    day = {"fires": 3, "by_task": {"b": 2, "a": 1}}
    day |= {"budget_delta": {"JPY": 1500}, "budget_total": {"JPY": 9000}}
    result: dict[str, Any] = {
        "rule": {"name": "Yen", "level": "adset"},
        "accounts": ["act_1004"],
        "since": "2026-11-30",
        "until": "2026-12-01",
        "days": 2,
        "view": "as_seen",
        "runs": 48,
        "graph_calls": 0,
        "cache_hits": 12,
        "per_day": [
            day | {"date": "2026-11-30", "paused": 0, "activated": 1},
            day | {"date": "2026-12-01", "budget_delta": {"JPY": -250.5}, "paused": 2},
        ],
        "entities": [{}, {}],
        "as_seen": {
            "used": True,
            "accounts": {"act_1004": {"observations": 40, "enough": True, "why": "40 records"}},
        },
        "differs_as_seen": [{"only_in": "as_seen"}, {"only_in": "matured"}, {"only_in": "as_seen"}],
        "caveats": ["changes made by people are not known"],
    }
    result["per_day"][1]["activated"] = 0
    text = backtest_table(result, tasks=["a", "b"], currencies={"act_1004": "JPY"})
    lines = text.splitlines()
    header = lines[3]
    assert header.split()[:4] == ["date", "fires", "a", "b"]
    assert "budget moved (JPY)" in header
    assert lines[4].split() == ["2026-11-30", "3", "1", "2", "+1,500", "0", "1"]
    assert lines[5].split() == ["2026-12-01", "3", "1", "2", "-250", "2", "0"]
    assert lines[6].split() == ["total", "6", "2", "4", "+1,250", "2", "1"]
    assert "  act_1004: as-seen numbers (40 observations; 40 records)" in lines
    assert any("3 fire(s) differ between the views: 2 only with as-seen" in x for x in lines)
    assert "  - changes made by people are not known" in lines


def test_the_table_gives_each_currency_its_own_column_never_a_sum() -> None:
    moved = [{"JPY": 1500, "USD": 12.5}, {"JPY": -250, "USD": 0}]
    result: dict[str, Any] = {
        "rule": {"name": "Both", "level": "adset"},
        "accounts": ["act_1001", "act_1004"],
        "per_day": [
            {"date": f"2026-12-0{n + 1}", "fires": 1, "by_task": {"a": 1}, "budget_delta": delta}
            | {"paused": 0, "activated": 0}
            for n, delta in enumerate(moved)
        ],
    }
    text = backtest_table(result, tasks=["a"], currencies={"act_1001": "USD", "act_1004": "JPY"})
    lines = text.splitlines()
    header = lines[3]
    assert "budget moved (JPY)" in header and "budget moved (USD)" in header
    assert "mixed" not in text
    assert lines[4].split() == ["2026-12-01", "1", "1", "+1,500", "+12.50", "0", "0"]
    assert lines[6].split() == ["total", "2", "2", "+1,250", "+12.50", "0", "0"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_progress_is_one_rewritten_line_on_a_terminal_and_lines_elsewhere() -> None:
    steps = [Progress(0, 3, "listing"), Progress(0, 3, "history"), Progress(0, 3, "history")]
    steps += [Progress(d, 3, "replay") for d in (1, 2, 3)] + [Progress(3, 3, "done")]
    terminal, log = Terminal(), io.StringIO()
    for out in (terminal, log):
        line = ProgressLine(out)
        for step in steps:
            await line(step)
        line.end()
    assert terminal.getvalue().count("\r") == 6
    assert terminal.getvalue().endswith(
        "\rbacktest: done, 3/3 days  \n"
    )  # padded over the longer line
    assert log.getvalue().splitlines() == [
        "backtest: listing, 0/3 days",
        "backtest: history, 0/3 days",
        "backtest: replay, 1/3 days",
        "backtest: replay, 2/3 days",
        "backtest: replay, 3/3 days",
        "backtest: done, 3/3 days",
    ]


def test_more_entities_than_the_limit_exit_1_saying_how_to_narrow(
    env: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RULEENGINE_BACKTEST_MAX_ENTITIES", "1")
    path = write(tmp_path, rule())
    assert cli_main(["rules", "backtest", str(path), "--days", "2", "--matured"]) == 1
    err = capsys.readouterr().err
    assert "error: the backtest was refused: the rule matches" in err
    assert "entities today (act_1001: " in err
    assert "RULEENGINE_BACKTEST_MAX_ENTITIES=1" in err
    assert "--account in the CLI) or narrow the rule's filters" in err
