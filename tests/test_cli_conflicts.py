"""``ruleengine rules conflicts`` and the warnings of ``rules apply``, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from ruleengine.analysis.conflicts import stored_entries
from ruleengine.devstack.up import _load_rules
from ruleengine.rules.conflicts import find_conflicts
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

ROOT = Path(__file__).parents[1]
FIGHT = [
    ROOT / "examples" / "rules" / n for n in ("09-fight-scale-up.json", "10-fight-cut-down.json")
]
AUTO = [{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}]
ROAS = "purchase_roas.omni_purchase"


def run(*args: str, settings: Settings, **extra: str) -> subprocess.CompletedProcess[str]:
    assert settings.token_encryption_key is not None
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "PYTHONPATH": str(ROOT / "src"),  # this tree's code, whatever is installed
        "RULEENGINE_MONGODB_URL": settings.mongodb_url,
        "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
        "RULEENGINE_DATA_DIR": str(settings.data_dir),
        "RULEENGINE_GRAPH_URL": settings.graph_url,
        "RULEENGINE_TOKEN_ENCRYPTION_KEY": settings.token_encryption_key.get_secret_value(),
        **extra,
    }
    return subprocess.run(
        [sys.executable, "-m", "ruleengine.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def rule_file(
    tmp_path: Path,
    name: str,
    action: dict[str, Any],
    *,
    filters: Any = AUTO,
    condition: Any = None,
    **extra: Any,
) -> Path:
    doc = {
        "name": name,
        "format": 2,
        "level": "campaign",
        "ad_accounts": ["act_1001"],
        "filters": filters,
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": "budget",
                "conditions": [
                    condition or {"metric": "spend", "period": "today", "operator": ">", "value": 1}
                ],
                "action": action,
            }
        ],
    }
    doc |= extra
    path = tmp_path / f"{name.lower().replace(' ', '-')}.json"
    path.write_bytes(orjson.dumps(doc))
    return path


UP = {"type": "increase_budget", "percent": 20}
DOWN = {"type": "decrease_budget", "percent": 20}


async def test_scale_up_and_cut_down_are_reported_by_the_command_and_by_apply(
    settings: Settings, db: Database, accounts: list[str], tmp_path: Path
) -> None:
    up, down = rule_file(tmp_path, "Scale up", UP), rule_file(tmp_path, "Cut down", DOWN)
    applied = run("rules", "apply", str(up), settings=settings)
    assert applied.returncode == 0, applied.stderr
    assert "warning" not in applied.stdout

    checked = run("rules", "conflicts", str(down), settings=settings)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "CONFLICT: daily_budget (opposing; scopes overlap; can fire together)" in checked.stdout
    assert "Scale up [" in checked.stdout and f"Cut down [{down}, ACTIVE]" in checked.stdout
    assert "1 conflict(s), 0 note(s) among 2 rule(s)" in checked.stdout

    applied = run("rules", "apply", str(down), settings=settings)
    assert applied.returncode == 0  # saved, with the conflict as a warning
    assert f"{down}: warning: CONFLICT: daily_budget" in applied.stdout
    assert len(await stored_entries(RuleStore(db))) == 2

    stored = run("rules", "conflicts", "--json", "--live", settings=settings)
    assert stored.returncode == 1, stored.stderr
    (finding,) = orjson.loads(stored.stdout)["findings"]
    assert {r["name"] for r in finding["rules"]} == {"Scale up", "Cut down"}
    assert 1 <= len(finding["entities"]) <= 5
    assert all("[AUTO]" in e["name"] for e in finding["entities"])


async def test_the_refusing_setting_makes_apply_refuse(
    settings: Settings, db: Database, accounts: list[str], tmp_path: Path
) -> None:
    up, down = rule_file(tmp_path, "Scale up", UP), rule_file(tmp_path, "Cut down", DOWN)
    refuse = {"RULEENGINE_REFUSE_CONFLICTING_RULES": "true"}
    assert run("rules", "apply", str(up), settings=settings, **refuse).returncode == 0
    refused = run("rules", "apply", str(down), settings=settings, **refuse)
    assert refused.returncode == 1
    assert "not applied (Cut down)" in refused.stderr
    assert [e.name for e in await stored_entries(RuleStore(db))] == ["Scale up"]
    paused = rule_file(tmp_path, "Cut down later", DOWN, status="PAUSED")
    applied = run("rules", "apply", str(paused), settings=settings, **refuse)
    assert applied.returncode == 0, applied.stderr  # a paused rule fights nothing yet
    assert "warning: CONFLICT: daily_budget" in applied.stdout


async def test_disjoint_scopes_are_not_reported_and_exclusive_thresholds_are_a_note(
    settings: Settings, db: Database, accounts: list[str], tmp_path: Path
) -> None:
    in_a = rule_file(
        tmp_path, "In A", UP, filters=[{"field": "name", "operator": "CONTAIN", "value": "[A]"}]
    )
    not_a = rule_file(
        tmp_path,
        "Not A",
        DOWN,
        filters=[{"field": "name", "operator": "NOT_CONTAIN", "value": "[A]"}],
    )
    quiet = run("rules", "conflicts", str(in_a), str(not_a), settings=settings)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "0 conflict(s), 0 note(s) among 2 rule(s)" in quiet.stdout

    low = rule_file(
        tmp_path,
        "Low",
        UP,
        condition={"metric": ROAS, "period": "last_7d", "operator": "<", "value": 1},
    )
    high = rule_file(
        tmp_path,
        "High",
        DOWN,
        condition={"metric": ROAS, "period": "last_7d", "operator": ">", "value": 2},
    )
    noted = run("rules", "conflicts", str(low), str(high), settings=settings)
    assert noted.returncode == 0, noted.stdout
    assert "note: daily_budget (opposing; scopes overlap; cannot fire together)" in noted.stdout


def test_bad_usage_exits_two(settings: Settings, tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert run("rules", "conflicts", str(broken), settings=settings).returncode == 2
    assert run("rules", "conflicts", "--nope", settings=settings).returncode == 2
    helped = run("rules", "conflicts", "--help", settings=settings)
    assert "Example: ruleengine rules conflicts" in helped.stdout


async def test_the_example_pair_is_loaded_paused_and_reported_as_conflicting(
    settings: Settings, db: Database, accounts: list[str]
) -> None:
    files = [(p, p.read_bytes()) for p in FIGHT]
    await _load_rules(settings, db, CredentialStore(db, load_key(settings)), files)
    entries = await stored_entries(RuleStore(db))
    assert {e.status for e in entries} == {"PAUSED"}  # the demo does not fight
    (finding,) = find_conflicts(entries)
    assert finding.severity == "conflict" and finding.field == "daily_budget"
    assert not finding.both_active
    assert {finding.a.rule_name, finding.b.rule_name} == {
        "Fight demo: scale up [AUTO] campaigns",
        "Fight demo: cut down [AUTO] campaigns",
    }


async def test_the_refusing_setting_refuses_a_rollback_to_a_fighting_version(
    settings: Settings, db: Database, accounts: list[str], tmp_path: Path
) -> None:
    refuse = {"RULEENGINE_REFUSE_CONFLICTING_RULES": "true"}
    assert (
        run("rules", "apply", str(rule_file(tmp_path, "Up", UP)), settings=settings).returncode == 0
    )
    fighting = rule_file(tmp_path, "Down", DOWN, status="PAUSED")  # v1: fights Up, paused
    assert run("rules", "apply", str(fighting), settings=settings, **refuse).returncode == 0
    apart = [{"field": "name", "operator": "NOT_CONTAIN", "value": "[AUTO]"}]
    elsewhere = rule_file(tmp_path, "Down", DOWN, filters=apart)  # v2: ACTIVE, other campaigns
    applied = run("rules", "apply", str(elsewhere), settings=settings, **refuse)
    assert applied.returncode == 0, applied.stderr
    down = await RuleStore(db).find_by_name("Down")
    assert down is not None and (down.version, down.status) == (2, "ACTIVE")

    refused = run("rules", "rollback", down.id, "1", settings=settings, **refuse)
    assert refused.returncode == 1, refused.stdout
    assert "not rolled back" in refused.stderr
    assert "CONFLICT: daily_budget (opposing; scopes overlap" in refused.stderr
    assert (await RuleStore(db).get(down.id)).version == 2  # nothing moved

    rolled = run("rules", "rollback", down.id, "1", "--expected-version", "2", settings=settings)
    assert rolled.returncode == 0, rolled.stderr  # without the setting: done, with a warning
    assert f"{down.id} v1 is active (Down, ACTIVE)" in rolled.stdout
    assert "warning: CONFLICT: daily_budget" in rolled.stdout
    assert (await RuleStore(db).get(down.id)).version == 1


async def test_the_refusing_setting_refuses_an_activating_import(
    settings: Settings, db: Database, accounts: list[str], sandbox: Any, tmp_path: Path
) -> None:
    # the sandbox's act_1001 has "Scale winners +20% (ROAS over 3)", ad sets, ENABLED at Meta
    cut = rule_file(tmp_path, "Cut ad sets", DOWN, filters=[], level="adset")
    assert run("rules", "apply", str(cut), settings=settings).returncode == 0
    hooks = {"RULEENGINE_WEBHOOKS": '{"meta-rules": "http://127.0.0.1:9/hook"}'}
    refuse = {"RULEENGINE_REFUSE_CONFLICTING_RULES": "true"} | hooks
    args = ("rules", "import-meta", "--account", "act_1001", "--apply", "--activate")

    refused = run(*args, settings=settings, **refuse)
    assert refused.returncode == 1
    assert "Scale winners +20% (ROAS over 3) (Meta" in refused.stderr
    assert "converted, not saved: the rule fights 1 time(s)" in refused.stderr
    assert "CONFLICT: daily_budget" in refused.stderr
    assert "1 rule(s) not saved: they fight active rules" in refused.stderr
    assert await RuleStore(db).find_by_name("Scale winners +20% (ROAS over 3)") is None

    saved = run(*args, settings=settings, **hooks)  # without the setting: saved, warned
    assert "warning: CONFLICT: daily_budget" in saved.stderr, saved.stderr
    winners = await RuleStore(db).find_by_name("Scale winners +20% (ROAS over 3)")
    assert winners is not None and winners.status == "ACTIVE"
