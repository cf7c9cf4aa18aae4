"""``ruleengine tokens add|list|revoke``: the command in this process, on a real MongoDB."""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest

from ruleengine import constants as c
from ruleengine.cli import main as cli_main
from ruleengine.settings import Settings
from ruleengine.store.db import Database


@pytest.fixture
def env(settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The command's RULEENGINE_* variables: this test's database."""
    monkeypatch.setenv("RULEENGINE_MONGODB_URL", settings.mongodb_url)
    monkeypatch.setenv("RULEENGINE_MONGODB_DATABASE", settings.mongodb_database)
    monkeypatch.setenv("RULEENGINE_DATA_DIR", str(settings.data_dir))
    return settings


async def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(cli_main, ["tokens", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_add_prints_the_token_once_and_stores_only_its_hash(
    env: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await run(capsys, "add", "alice", "--role", "editor")
    assert code == 0, err
    token = out.strip()
    assert token.startswith("ret_") and len(token) > 40
    assert "will not be shown again" in err
    assert token not in err
    docs = await db[c.API_TOKENS].find({}).to_list()
    assert len(docs) == 1
    assert docs[0]["_id"] == "alice" and docs[0]["role"] == "editor"
    assert docs[0]["hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in repr(docs) and token[4:] not in repr(docs)

    code, out, _ = await run(capsys, "list")
    assert code == 0
    assert token not in out


async def test_list_and_revoke(
    env: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = await run(capsys, "list")
    assert code == 0 and "no named API tokens" in out
    for name, role in (("alice", "editor"), ("wall", "viewer")):
        assert (await run(capsys, "add", name, "--role", role))[0] == 0
    code, out, err = await run(capsys, "revoke", "wall")
    assert code == 0, err
    assert "API token 'wall' revoked at" in out

    code, out, _ = await run(capsys, "list")
    header, alice, wall = out.splitlines()
    assert header.split() == ["NAME", "ROLE", "CREATED", "LAST", "USED", "REVOKED"]
    assert alice.split()[:2] == ["alice", "editor"] and alice.endswith(" -")
    assert wall.split()[:2] == ["wall", "viewer"] and not wall.endswith(" -")

    code, out, _ = await run(capsys, "list", "--json")
    items = orjson.loads(out)["items"]
    assert [(t["name"], t["role"]) for t in items] == [("alice", "editor"), ("wall", "viewer")]
    assert items[0]["revoked_at"] is None and items[1]["revoked_at"] is not None
    assert set(items[0]) == {"name", "role", "created_at", "last_used_at", "revoked_at"}


async def test_mistakes_are_named_with_an_exit_code(
    env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await run(capsys, "add", "alice", "--role", "admin"))[0] == 0
    code, _, err = await run(capsys, "add", "alice", "--role", "viewer")
    assert code == 1
    assert "a token named 'alice' already exists" in err
    code, _, err = await run(capsys, "revoke", "nobody")
    assert code == 1
    assert "no token named 'nobody'" in err
    code, _, err = await run(capsys, "add", "api", "--role", "viewer")
    assert code == 1
    assert "RULEENGINE_API_TOKEN" in err
    code, _, err = await run(capsys, "add", "bad name", "--role", "viewer")
    assert code == 1
    assert "a token name is 1 to 64 letters" in err
    assert (await run(capsys, "revoke", "alice"))[0] == 0
    code, _, err = await run(capsys, "add", "alice", "--role", "admin")
    assert code == 1
    assert "revoked; its name stays in the records" in err


def test_a_bad_role_is_refused_and_help_lists_the_roles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["tokens", "add", "alice", "--role", "boss"])
    assert exited.value.code == 2
    assert "invalid choice: 'boss'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["tokens", "--help"])
    shown = capsys.readouterr().out
    for words in ("RULEENGINE_API_TOKEN", "viewer:", "editor:", "approver:", "admin:"):
        assert words in shown
