"""The CLI on hostile input: ``FILE: path: message`` and exit 1, never a traceback."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from ruleengine import constants as c
from ruleengine.cli import main as cli_main
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore


def rule(**change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Tag",
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": "tag",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "rename", "template": "{name} [tagged]"},
            }
        ],
    }
    return body | change


def test_validate_prints_file_path_message_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed = rule()["tasks"][0] | {"action": {"type": "rename", "template": "{name:>999999999}"}}
    files = []
    for name, body in (
        ("tz.json", rule(timezone="x" * 300)),
        ("date.json", rule(date_range={"start": "0001-01-01"})),
        ("template.json", rule(tasks=[renamed])),
        ("ok.json", rule()),
    ):
        path = tmp_path / name
        path.write_bytes(orjson.dumps(body))
        files.append(path)

    assert cli_main(["rules", "validate", *map(str, files)]) == 1

    out = capsys.readouterr().out
    assert f"{files[0]}: timezone: unknown timezone 'xxx" in out
    assert f"{files[1]}: date_range.start: 0001-01-01 is out of range" in out
    assert f"{files[2]}: tasks[0].action.template: {{name:>999999999}} has a format spec" in out
    assert f"{files[3]}: ok (Tag, 1 task(s))" in out


def test_accounts_add_refuses_an_id_with_a_newline(
    settings: Settings,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert settings.token_encryption_key is not None
    for name, value in {
        "RULEENGINE_MONGODB_URL": settings.mongodb_url,
        "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
        "RULEENGINE_TOKEN_ENCRYPTION_KEY": settings.token_encryption_key.get_secret_value(),
        "THE_TOKEN": "EAAGsomethingsecret123456",
    }.items():
        monkeypatch.setenv(name, value)
    for account in ("act_12\n", "act_١٢"):
        assert cli_main(["accounts", "add", account, "--token-env", "THE_TOKEN"]) == 1
        assert "is not an ad account id" in capsys.readouterr().err
    assert (
        cli_main(["accounts", "add", "act_12", "--currency", "EU", "--token-env", "THE_TOKEN"]) == 1
    )
    assert "currency" in capsys.readouterr().err


def test_each_problem_is_one_line_whatever_the_rule_carried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps(rule(**{"colour\nred": 1}, timezone="Mars\u2028Olympus")))
    assert cli_main(["rules", "validate", str(path)]) == 1
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert lines == [
        f"{path}: timezone: unknown timezone 'Mars\\u2028Olympus'; use an IANA name such as"
        " 'Asia/Jakarta'",
        f"{path}: colour\\nred: unknown field; check the spelling against"
        " `ruleengine rules schema`",
    ]


async def test_rules_list_shows_a_rule_that_no_longer_validates(
    settings: Settings,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = RuleStore(db)
    for name in ("Good", "Bad"):
        await store.save(parse_rule(rule(name=name)), now=datetime.now(UTC), author="t", source="t")
    await db[c.RULES].update_one({"name": "Bad"}, {"$set": {"definition.timezone": "Mars/X"}})
    monkeypatch.setenv("RULEENGINE_MONGODB_URL", settings.mongodb_url)
    monkeypatch.setenv("RULEENGINE_MONGODB_DATABASE", settings.mongodb_database)

    assert await asyncio.to_thread(cli_main, ["rules", "list"]) == 0

    bad, good = capsys.readouterr().out.splitlines()
    assert "Bad: timezone: unknown timezone 'Mars/X'" in bad
    assert "every 15 min" in good and good.endswith("Good")
