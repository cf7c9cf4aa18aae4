"""The ruleengine command as a user runs it: a subprocess, its output and exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.devstack.embedded import free_port
from ruleengine.settings import Settings
from ruleengine.store.db import Database

ROOT = Path(__file__).parents[1]
EXAMPLES = sorted((ROOT / "examples" / "rules").glob("*.json"))
TOKEN = "EAAGsecretTOKENthatMustNeverLeak0123456789"


def run(
    *args: str, settings: Settings | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    if settings is not None:
        env |= {
            "RULEENGINE_MONGODB_URL": settings.mongodb_url,
            "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
            "RULEENGINE_DATA_DIR": str(settings.data_dir),
            "RULEENGINE_GRAPH_URL": settings.graph_url,
            "RULEENGINE_READ_RETRY_WAITS_S": orjson.dumps(settings.read_retry_waits_s).decode(),
        }
        assert settings.token_encryption_key is not None
        env["RULEENGINE_TOKEN_ENCRYPTION_KEY"] = settings.token_encryption_key.get_secret_value()
    return subprocess.run(
        [sys.executable, "-m", "ruleengine.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_validate_examples_exits_zero() -> None:
    result = run("rules", "validate", *map(str, EXAMPLES))
    assert result.returncode == 0, result.stdout
    assert result.stdout.count(": ok (") == len(EXAMPLES)


def test_validate_names_all_three_mistakes(tmp_path: Path) -> None:
    data = orjson.loads(EXAMPLES[1].read_bytes())
    data["timezone"] = "Moon/Base"
    data["tasks"][0]["conditions"][0]["operator"] = "=>"
    data["tasks"][0]["action"]["percent"] = 0
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps(data))
    result = run("rules", "validate", str(EXAMPLES[0]), str(bad))
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if line.startswith(str(bad))]
    assert len(lines) == 3
    assert f"{bad}: timezone: unknown timezone 'Moon/Base'" in lines[2] or any(
        "timezone:" in line for line in lines
    )
    assert any(": tasks[0].conditions[0].operator: " in line for line in lines)
    assert any(": tasks[0].action.percent: " in line for line in lines)


def test_validate_reports_broken_json(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    result = run("rules", "validate", str(broken))
    assert result.returncode == 1
    assert "not valid JSON" in result.stdout


def test_schema_is_json() -> None:
    result = run("rules", "schema")
    assert result.returncode == 0
    assert orjson.loads(result.stdout)["title"] == "Rule"


async def test_accounts_and_apply_round_trip(
    settings: Settings, db: object, sandbox: SandboxAdmin
) -> None:
    token = str((await sandbox.issue_token(accounts=["act_1001"]))["token"])
    added = run(
        "accounts", "add", "act_1001", "--name", "Shop", settings=settings, stdin=token + "\n"
    )
    assert added.returncode == 0, added.stderr
    assert token not in added.stdout
    listed = run("accounts", "list", settings=settings)
    assert "act_1001" in listed.stdout
    assert token not in listed.stdout

    only_1001 = [p for p in EXAMPLES if p.name.startswith("05-")]
    first = run("rules", "apply", *map(str, only_1001), settings=settings)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "v1 created" in first.stdout
    again = run("rules", "apply", *map(str, only_1001), settings=settings)
    assert "v1 unchanged" in again.stdout

    needs_more = run("rules", "apply", str(EXAMPLES[0]), settings=settings)
    assert needs_more.returncode == 1
    assert "ad_accounts[1]: ad account 'act_1002' is not registered" in needs_more.stdout


async def test_accounts_add_registers_metas_currency_and_timezone_or_nothing(
    settings: Settings, db: Database, sandbox: SandboxAdmin
) -> None:
    token = str((await sandbox.issue_token(accounts=["act_1004"]))["token"])
    accounts = db[c.ACCOUNTS]

    # A value given that Meta disagrees with is refused; nothing is stored.
    wrong = run("accounts", "add", "act_1004", "--currency", "USD", settings=settings, stdin=token)
    assert wrong.returncode == 1
    assert (
        wrong.stderr.count("\n") == 1 and "Meta holds act_1004 in the currency JPY" in wrong.stderr
    )
    assert await accounts.count_documents({}) == 0

    # Meta cannot be asked (nothing listens on its port): one line saying what to do.
    gone = settings.model_copy(update={"graph_url": f"http://127.0.0.1:{free_port()}"})
    unreachable = run(
        "accounts", "add", "act_1004", "--currency", "JPY", settings=gone, stdin=token
    )
    assert unreachable.returncode == 1
    (error,) = [line for line in unreachable.stderr.splitlines() if line.startswith("error:")]
    assert "could not read act_1004 from Meta" in error
    assert "nothing was registered" in error and "pass both --currency and --timezone" in error
    assert token not in unreachable.stderr
    assert await accounts.count_documents({}) == 0

    # Without --currency/--timezone: the yen account is registered in JPY, in Tokyo.
    added = run("accounts", "add", "act_1004", settings=settings, stdin=token)
    assert added.returncode == 0, added.stderr
    assert "JPY, Asia/Tokyo" in added.stdout
    stored = await accounts.find_one({"_id": "act_1004"})
    assert stored is not None
    assert (stored["currency"], stored["timezone"]) == ("JPY", "Asia/Tokyo")

    # Both given while Meta cannot be asked: stored as given, and said to be unchecked.
    both = ["--currency", "EUR", "--timezone", "Europe/Berlin"]
    unchecked = run("accounts", "add", "act_1002", *both, settings=gone, stdin=token)
    assert unchecked.returncode == 0, unchecked.stderr
    assert "not checked with Meta" in unchecked.stdout
    kept = await accounts.find_one({"_id": "act_1002"})
    assert kept is not None and (kept["currency"], kept["timezone"]) == ("EUR", "Europe/Berlin")

    # A token Meta refuses registers nothing either.
    refused = run("accounts", "add", "act_1003", settings=settings, stdin="EAAGnotIssued123\n")
    assert refused.returncode == 1 and "Meta refused the token for act_1003" in refused.stderr
    assert await accounts.find_one({"_id": "act_1003"}) is None


def test_token_on_the_command_line_is_not_accepted() -> None:
    result = run("accounts", "add", "act_1", "--token", TOKEN)
    assert result.returncode == 2
    assert "unrecognized arguments" in result.stderr


def test_help_explains_the_token_input() -> None:
    result = run("accounts", "add", "--help")
    assert "never from the command line" in result.stdout


# ---------------------------------------------------------------- rule formats


def example_in_usd() -> dict[str, Any]:
    """Example 02 with its amounts per currency as the dollar ones (what a one-currency rule
    of format 2 writes)."""
    data: dict[str, Any] = orjson.loads(EXAMPLES[1].read_bytes())
    data["tasks"][0]["action"]["max_budget"] = 500
    data["tasks"][1]["conditions"][0]["value"] = 450
    data["tasks"][1]["action"]["amount"] = 300
    return data


def old_format_file(tmp_path: Path) -> Path:
    """Example 02 as it was written before formats: budgets in cents, no "format"."""
    data = example_in_usd()
    del data["format"]
    data["tasks"][0]["action"]["max_budget"] = 50000
    data["tasks"][1]["action"]["amount"] = 30000
    path = tmp_path / "scale.json"
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return path


def test_validate_explains_an_old_format_file(tmp_path: Path) -> None:
    path = old_format_file(tmp_path)
    result = run("rules", "validate", str(path))
    assert result.returncode == 1
    assert f"{path}: format: required" in result.stdout
    assert f"{path}: tasks[0].action.max_budget: 50000 minor units = 500.00 in USD" in result.stdout
    assert f"{path}: tasks[1].action.amount: 30000 minor units = 300.00 in USD" in result.stdout
    assert f"ruleengine rules migrate {path} --currency USD --write" in result.stdout
    yen = run("rules", "validate", "--currency", "JPY", str(path))
    assert "max_budget: 50000 minor units = 50000 in JPY" in yen.stdout


def test_migrate_prints_or_writes_format_2(tmp_path: Path) -> None:
    path = old_format_file(tmp_path)
    printed = run("rules", "migrate", "--currency", "USD", str(path))
    assert printed.returncode == 0, printed.stderr
    assert orjson.loads(printed.stdout) == example_in_usd()
    written = run("rules", "migrate", "--currency", "USD", "--write", str(path))
    assert (written.returncode, written.stdout) == (0, f"{path}: format 2\n")
    assert orjson.loads(path.read_bytes()) == example_in_usd()
    assert run("rules", "validate", str(path)).returncode == 0


async def test_migrate_takes_the_registered_accounts_currencies(
    settings: Settings, db: object, accounts: list[str], tmp_path: Path
) -> None:
    path = old_format_file(tmp_path)
    data = orjson.loads(path.read_bytes())
    data["ad_accounts"] = ["act_1004"]  # yen: 50000 minor units are ¥50000
    path.write_bytes(orjson.dumps(data))
    result = run("rules", "migrate", str(path), settings=settings)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["tasks"][0]["action"]["max_budget"] == 50000
    data["ad_accounts"] = ["act_1001", "act_1004"]
    path.write_bytes(orjson.dumps(data))
    mixed = run("rules", "migrate", str(path), settings=settings)
    assert mixed.returncode == 1
    assert "different decimals" in mixed.stderr and "--currency CODE" in mixed.stderr


def test_apply_refuses_an_old_format_file(settings: Settings, tmp_path: Path) -> None:
    result = run("rules", "apply", str(old_format_file(tmp_path)), settings=settings)
    assert result.returncode == 1
    assert ": format: required" in result.stdout
