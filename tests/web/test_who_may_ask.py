"""Who may ask, and what it costs: ``HEAD`` decided as ``GET``, no process on a placeholder
API token, costly reads bounded (a few at once, 429 past that, answers kept, CPU off the
loop), names that cannot speak in webhooks or terminals, secret files 0600 from creation,
and ``/api/`` only for the app's own host names."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
import time
import unicodedata
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError
from web_helpers import AUTH, Client, rule_body, start_client

from flow import process_env
from graph_sandbox.admin import SandboxAdmin
from ruleengine.approvals.proposing import message as approval_message
from ruleengine.cli import main as cli_main
from ruleengine.cli.batches import undo_table
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.language.template import message_text, one_line_text
from ruleengine.secret_files import read_secret
from ruleengine.settings import API_TOKEN_MIN_CHARS, Settings, api_token_problem
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore
from ruleengine.web.hosts import host_allowed
from ruleengine.writes.notify import MessageContext, render

PROBE_EVERY_S = 0.02
#: Unicode's explicit embeddings, overrides and isolates (what can reorder shown text).
BIDI_CONTROLS = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})
HOSTILE_NAME = "<!channel> <https://evil.example|Approve here>\nbudget 100 → 1\x1b[2J\u202e"

# ---------------------------------------------------------------- HEAD is a GET


def _api_reads(client: Client) -> list[str]:
    """Every GET route under /api/, its path parameters filled in."""
    paths = set()
    for route in client.app.router.routes():
        canonical = route.resource.canonical if route.resource else ""
        if route.method == "GET" and canonical.startswith("/api/"):
            paths.add(re.sub(r"\{[^}]+\}", "x", canonical))
    return sorted(paths)


@pytest.mark.parametrize("reads_closed", [False, True])
async def test_every_api_read_answers_an_anonymous_head_as_its_get(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str], reads_closed: bool
) -> None:
    settings = web_settings.model_copy(update={"api_reads_require_token": reads_closed})
    client = await start_client(settings)
    try:
        paths = _api_reads(client)
        assert "/api/rules/x/impact" in paths and "/api/benchmark/slow-rules" in paths
        for path in paths:
            get = await client.get(path)
            head = await client.head(path)
            assert (path, head.status) == (path, get.status)
        assert (await client.head("/api/rules/x/impact")).status == 401
    finally:
        await client.close()


# ---------------------------------------------------------------- the configured API token


@given(st.text(max_size=API_TOKEN_MIN_CHARS - 1))
def test_an_api_token_shorter_than_32_characters_is_refused(token: str) -> None:
    assert api_token_problem(token) is not None


@given(st.text(alphabet=st.characters(codec="ascii", categories=["L", "N"]), min_size=32))
def test_a_long_random_api_token_is_taken(token: str) -> None:
    if not token.lower().startswith("replaceme"):
        assert api_token_problem(token) is None


@pytest.mark.parametrize("token", ["REPLACE_ME", "x", "changeme", "replace-me-" + "x" * 30])
def test_settings_refuse_a_placeholder_api_token(token: str) -> None:
    with pytest.raises(ValidationError, match="make one with python3"):
        Settings(api_token=SecretStr(token))


ENTRY_POINTS = {
    "web": [sys.executable, "-m", "ruleengine.web", "--port", "0"],
    "dispatcher": [sys.executable, "-m", "ruleengine.dispatch", "--once"],
    "worker": [sys.executable, "-m", "arq", "ruleengine.jobs.WorkerSettings"],
    "cli": [sys.executable, "-m", "ruleengine", "rules", "list"],
}


@pytest.mark.parametrize("process", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("token", ["REPLACE_ME", "short-but-not-a-placeholder"])
def test_no_process_starts_on_a_placeholder_or_short_api_token(
    settings: Settings, process: str, token: str
) -> None:
    result = subprocess.run(
        ENTRY_POINTS[process],
        env=process_env(settings, api_token=token, web_port="0"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: setting RULEENGINE_API_TOKEN ")
    assert "secrets.token_urlsafe(32)" in lines[0]
    assert token not in lines[0]  # even a refused token is not repeated


def test_the_shipped_example_holds_a_token_no_process_takes() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy/systemd/ruleengine.env.example"
    found = re.search(r"^RULEENGINE_API_TOKEN=(.*)$", example.read_text(), re.MULTILINE)
    assert found is not None
    assert api_token_problem(found.group(1).strip("'\"")) is not None


# ---------------------------------------------------------------- costly reads


async def _draft_previews(client: Client, count: int) -> list[Any]:
    return list(
        await asyncio.gather(
            *(
                client.post("/api/rules/preview", json=rule_body(name=f"Draft {n}"), headers=AUTH)
                for n in range(count)
            )
        )
    )


async def _health_while(pending: asyncio.Future[Any], client: Client) -> list[float]:
    """``/health``'s answer times, asked one after another until ``pending`` is done."""
    took = []
    while not pending.done():
        started = time.perf_counter()
        response = await client.get("/health")
        took.append(time.perf_counter() - started)
        assert response.status == 200
        await asyncio.sleep(PROBE_EVERY_S)  # pacing, not waiting: a probe every 20 ms
    return took


async def test_twenty_costly_reads_at_once_get_429_past_the_limit_and_leave_health_fast(
    client: Client, sandbox: SandboxAdmin
) -> None:
    # Meta answering slowly holds the first previews in flight while the others arrive.
    await sandbox.set_faults(latency_ms=1500)
    previews = asyncio.ensure_future(_draft_previews(client, 20))
    took = await _health_while(previews, client)
    answers = await previews
    statuses = sorted(r.status for r in answers)
    assert statuses == [200, 200] + [429] * 18
    busy = next(r for r in answers if r.status == 429)
    assert 1 <= int(busy.headers["Retry-After"]) <= 60
    assert "RULEENGINE_COSTLY_READS_CONCURRENCY" in (await busy.json())["error"]
    assert len(took) >= 5 and max(took) < 0.1, took
    # The same question again within the cache's time: no new request reaches Meta.
    done = [n for n, r in enumerate(answers) if r.status == 200]
    await sandbox.clear_stats()
    again = await client.post(
        "/api/rules/preview", json=rule_body(name=f"Draft {done[0]}"), headers=AUTH
    )
    assert again.status == 200
    assert (await sandbox.stats())["http_requests"] == 0


async def test_identical_costly_reads_in_flight_are_computed_once(
    client: Client, sandbox: SandboxAdmin
) -> None:
    await sandbox.set_faults(latency_ms=500)
    await sandbox.clear_stats()
    answers = await asyncio.gather(
        *(client.post("/api/rules/preview", json=rule_body(), headers=AUTH) for _ in range(6))
    )
    assert [r.status for r in answers] == [200] * 6  # joined the one in flight: no 429
    bodies = [await r.json() for r in answers]
    assert len({b["previewed_at"] for b in bodies}) == 1
    single = (await sandbox.stats())["http_requests"]
    await sandbox.clear_stats()
    await client.post("/api/rules/preview", json=rule_body(name="Another"), headers=AUTH)
    assert single == (await sandbox.stats())["http_requests"]  # six asks cost one preview


async def _store_rules(db: Database, count: int) -> None:
    store, now = RuleStore(db), datetime.now(UTC)
    for n in range(count):
        body = rule_body(name=f"Rule {n}")
        body["tasks"] = [dict(body["tasks"][0], id=f"t{t}") for t in range(4)]
        await store.save(parse_rule(body), now=now, author="test", source="test")


async def test_a_draft_conflict_check_parses_the_rules_off_the_event_loop(
    client: Client, db: Database
) -> None:
    await _store_rules(db, 400)
    check = asyncio.ensure_future(
        client.post("/api/rules/conflicts", json=rule_body(name="Draft"), headers=AUTH)
    )
    took = await _health_while(check, client)
    response = await check
    assert response.status == 200
    assert (await response.json())["checked_rules"] == 401
    assert len(took) >= 3 and max(took) < 0.1, took


async def test_the_slow_rule_report_needs_a_token_and_at_most_a_week(client: Client) -> None:
    assert (await client.get("/api/benchmark/slow-rules")).status == 401
    wide = await client.get("/api/benchmark/slow-rules?since_hours=2160", headers=AUTH)
    assert wide.status == 422
    assert (await wide.json())["errors"][0]["path"] == "since_hours"
    week = await client.get("/api/benchmark/slow-rules?since_hours=168", headers=AUTH)
    assert week.status == 200


async def test_a_preview_past_the_entity_cap_is_422_before_any_insights_are_read(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    client = await start_client(web_settings.model_copy(update={"preview_max_entities": 3}))
    try:
        response = await client.post("/api/rules/preview", json=rule_body(), headers=AUTH)
        assert response.status == 422
        error = (await response.json())["errors"][0]
        assert error["path"] == "ad_accounts"
        assert "RULEENGINE_PREVIEW_MAX_ENTITIES" in error["message"]
        calls = (await sandbox.stats()).get("calls", {})
        assert not any("insights" in str(kind) for kind in calls)
    finally:
        await client.close()


# ---------------------------------------------------------------- names that speak


def _live_markup(text: str) -> list[str]:
    return [m for m in ("<!channel>", "<https://", "\n", "\x1b", "\u202e") if m in text]


def test_a_hostile_name_in_a_webhook_message_pings_and_links_nobody() -> None:
    context = MessageContext(
        rule=HOSTILE_NAME,
        task="t",
        level="ad",
        account="act_1",
        entity_id="1",
        entity_name=HOSTILE_NAME,
        action="pause",
        conditions="spend (today) 60 > 50 ✓",
    )
    values = context.values(now=datetime(2026, 12, 5, tzinfo=UTC), tz=UTC)
    text = render("<!here> {rule}: {entity_name} ({entity_id}) {conditions}", values)
    assert text.startswith("<!here> ")  # the rule author's own markup stays
    assert _live_markup(text.removeprefix("<!here> ")) == []
    assert "&lt;!channel&gt;" in text and "60 &gt; 50" in text


def test_a_hostile_name_in_an_approval_announcement_fakes_no_line() -> None:
    doc = {
        "_id": "a1",
        "rule_name": "Scale",
        "entity_name": HOSTILE_NAME,
        "entity_id": "1",
        "field": "daily_budget",
        "before": 12000,
        "after": 10800,
        "expires_at": datetime(2026, 12, 6, tzinfo=UTC),
    }
    text = approval_message(doc, base_url="https://re.example")
    assert _live_markup(text) == []
    assert text.count("→") == 2  # the name's own arrow, now on the one line, and the change's


@given(st.text())
def test_message_text_is_one_line_without_markup(name: str) -> None:
    text = message_text(name)
    assert "<" not in text and ">" not in text
    assert not any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in text)
    assert not any(unicodedata.bidirectional(ch) in BIDI_CONTROLS for ch in one_line_text(name))


def test_a_cli_table_of_a_hostile_name_sends_no_escape_and_adds_no_line() -> None:
    plan = {
        "batch_id": "b1",
        "undo_batch_id": "u1",
        "changes": [
            {"entity_name": HOSTILE_NAME, "field": "status", "after": "PAUSED", "before": "ACTIVE"}
        ],
    }
    table = undo_table(plan)
    assert "\x1b" not in table and "\u202e" not in table
    assert len(table.splitlines()) == 3  # the heading, the columns' names, the one change


async def test_rules_list_prints_a_hostile_rule_name_on_its_line(
    settings: Settings, db: Database, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    from flow import point_cli_at

    await RuleStore(db).save(
        parse_rule(rule_body(name="x\x1b[2Jy\nfake line")),
        now=datetime.now(UTC),
        author="t",
        source="t",
    )
    point_cli_at(settings, monkeypatch)
    assert await asyncio.to_thread(cli_main, ["rules", "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert len(out.splitlines()) == 1


# ---------------------------------------------------------------- secret files


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_a_secret_file_is_owner_only_from_its_creation(tmp_path: Path, umask: int) -> None:
    seen: list[int] = []
    path = tmp_path / "var" / "api-token"

    def secret() -> bytes:
        return b"s" * 43

    real_link = os.link

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        seen.append(stat.S_IMODE(os.stat(src).st_mode))  # what the name will point at
        real_link(src, dst, **kwargs)

    old = os.umask(umask)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "link", link)
            assert read_secret(path, create=secret) == b"s" * 43
    finally:
        os.umask(old)
    assert seen == [0o600]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["api-token"]  # no temporary left


def test_an_existing_secret_file_others_may_read_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "token-encryption.key"
    path.write_bytes(b"key\n")
    path.chmod(0o644)
    assert read_secret(path) == b"key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_process_killed_while_making_a_secret_leaves_no_readable_partial_file(
    tmp_path: Path,
) -> None:
    code = (
        "import os, signal\n"
        "from pathlib import Path\n"
        "from ruleengine.secret_files import read_secret\n"
        "def make():\n"
        "    os.kill(os.getpid(), signal.SIGKILL)  # dies with the secret made, not placed\n"
        "read_secret(Path(os.environ['SECRET']), create=make)\n"
    )
    path = tmp_path / "api-token"
    env = dict(os.environ, SECRET=str(path))
    result = subprocess.run([sys.executable, "-c", code], env=env, check=False, timeout=60)
    assert result.returncode == -9
    assert not path.exists()
    assert read_secret(path, create=lambda: b"fresh") == b"fresh"


# ---------------------------------------------------------------- host names


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8080", True),
        ("[::1]:8080", True),
        ("localhost:8080", True),
        ("10.1.2.3", True),
        ("ruleengine.example.com", True),
        ("RuleEngine.Example.COM.:443", True),
        ("evil.example:8080", False),
        ("127.0.0.1.evil.example", False),
        ("", False),
    ],
)
def test_which_host_names_the_api_answers(host: str, allowed: bool) -> None:
    assert host_allowed(host, {"ruleengine.example.com"}) is allowed


async def test_a_rebinding_host_name_is_421_and_the_screens_still_load(client: Client) -> None:
    rebound = await client.get("/api/rules", headers={"Host": "attacker.example:8080"})
    assert rebound.status == 421
    assert "RULEENGINE_WEB_ALLOWED_HOSTS" in (await rebound.json())["error"]
    assert (await client.get("/api/rules", headers={"Host": "localhost"})).status == 200
    assert (await client.get("/health", headers={"Host": "attacker.example"})).status == 200
