"""``ruleengine rules import-meta`` / ``export-meta`` as a user runs them, against the Graph
sandbox's demo rules of act_1001 (dollars) and the yen account act_1004."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from graph_sandbox.admin import SandboxAdmin
from ruleengine.rules.language.model import parse_rule
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.rules import RuleStore

ROOT = Path(__file__).parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "meta_rules"
HOOK = '{"meta-rules": "http://127.0.0.1:9/hook"}'


def run(*args: str, settings: Settings) -> subprocess.CompletedProcess[str]:
    assert settings.token_encryption_key is not None
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "RULEENGINE_MONGODB_URL": settings.mongodb_url,
        "RULEENGINE_MONGODB_DATABASE": settings.mongodb_database,
        "RULEENGINE_DATA_DIR": str(settings.data_dir),
        "RULEENGINE_GRAPH_URL": settings.graph_url,
        "RULEENGINE_TOKEN_ENCRYPTION_KEY": settings.token_encryption_key.get_secret_value(),
        "RULEENGINE_WEBHOOKS": HOOK,
    }
    return subprocess.run(
        [sys.executable, "-m", "ruleengine.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def by_name(rules: Any) -> dict[str, dict[str, Any]]:
    return {rule["name"]: rule for rule in (rules if isinstance(rules, list) else [rules])}


async def test_import_from_the_dollar_account_converts_what_maps_and_reports_the_rest(
    settings: Settings, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    result = run("rules", "import-meta", "--account", "act_1001", settings=settings)
    assert result.returncode == 1, result.stderr  # some of the demo's rules do not map
    rules = by_name(orjson.loads(result.stdout))
    spender = rules["Tell me when a campaign spends over $250 today"]
    assert spender["level"] == "campaign"
    assert spender["timezone"] == "America/New_York"
    assert spender["schedule"] == {"mode": "interval", "every_minutes": 60}
    (task,) = spender["tasks"]
    assert task["conditions"] == [
        {"metric": "spend", "period": "today", "operator": ">", "value": 250}
    ]
    assert task["action"] == {"type": "notify", "webhook": "meta-rules"}
    winners = rules["Scale winners +20% (ROAS over 3)"]
    assert winners["level"] == "adset"
    (task,) = winners["tasks"]
    assert task["action"] == {"type": "increase_budget", "percent": 20, "max_budget": 500}
    assert (task["cooldown_minutes"], task["execution_count_limit"]) == (1440, 5)
    report = result.stderr
    assert "2 of 6 Meta rule(s) converted" in report
    assert "Pause ad sets with CPA over $40 (7 days)" in report
    assert "evaluation_spec.filters[2].field: cpa — " in report
    assert "(warning) execution_spec.execution_options[2]: 5 — the same limit per object" in report
    assert "execution_spec.execution_options[0].value.unit: ACCOUNT_CURRENCY — " in report
    assert "evaluation_spec.evaluation_type: TRIGGER — " in report
    assert "execution_spec.execution_type: ROTATE — " in report
    assert "access_token" not in report + result.stdout


async def test_import_from_the_yen_account_is_in_whole_yen_and_applies_paused(
    settings: Settings, db: Database, accounts: list[str], sandbox: SandboxAdmin, tmp_path: Path
) -> None:
    out = tmp_path / "rules"
    result = run(
        "rules", "import-meta", "--account", "act_1004", "--out", str(out), settings=settings
    )
    # Meta's PROPORTIONAL rebalance gives budget to ad sets the rule did not match
    assert "execution_spec.execution_options[0].value.type: PROPORTIONAL — " in result.stderr
    (written,) = out.glob("*.json")
    rule = orjson.loads(written.read_bytes())
    assert rule["name"] == "Pause ad sets spending ¥5,000 without a purchase"
    assert (rule["level"], rule["timezone"], rule["format"]) == ("adset", "Asia/Tokyo", 2)
    assert rule["tasks"][0]["conditions"] == [
        {"metric": "spend", "period": "last_3_days", "operator": ">", "value": 5000},
        {
            "metric": "actions.offsite_conversion.fb_pixel_purchase",
            "period": "last_3_days",
            "operator": "<",
            "value": 1,
        },
    ]
    assert rule["schedule"] == {"mode": "interval", "every_minutes": 30}

    applied = run("rules", "import-meta", "--account", "act_1004", "--apply", settings=settings)
    assert " v1 created" in applied.stderr, applied.stderr
    store = RuleStore(db)
    doc = await store.find_by_name(rule["name"])
    assert doc is not None
    assert doc.status == "PAUSED"
    assert doc.definition == parse_rule(rule).definition()
    again = run("rules", "import-meta", "--account", "act_1004", "--apply", settings=settings)
    assert " v1 unchanged" in again.stderr, again.stderr

    exported = run("rules", "export-meta", doc.id, settings=settings)
    assert exported.returncode == 0, exported.stderr
    (meta,) = orjson.loads(exported.stdout)
    filters = meta["evaluation_spec"]["filters"]
    assert {"field": "spent", "value": 5000, "operator": "GREATER_THAN"} in filters
    assert {"field": "time_preset", "value": "LAST_3_DAYS", "operator": "EQUAL"} in filters


def test_files_import_offline_and_export_reports_what_meta_cannot_say(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, token_encryption_key="x" * 44)
    fixture = FIXTURES / "roas_website_budget.json"
    args = ("--account", "act_7", "--currency", "USD", "--timezone", "UTC")
    result = run("rules", "import-meta", str(fixture), *args, settings=settings)
    assert result.returncode == 0, result.stderr
    rule = orjson.loads(result.stdout)
    assert rule["tasks"][0]["action"] == {"type": "increase_budget", "percent": 20}
    path = tmp_path / "rule.json"
    rule["tasks"][0]["conditions"][0]["operator"] = ">="
    path.write_bytes(orjson.dumps(rule))
    exported = run("rules", "export-meta", str(path), "--currency", "USD", settings=settings)
    assert exported.returncode == 1
    assert f"{path}: tasks[0].conditions[0].operator: >= — " in exported.stderr


def test_help_explains_sources_and_reports(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, token_encryption_key="x" * 44)
    text = run("rules", "import-meta", "--help", settings=settings).stdout
    assert "--account" in text
    assert "JSON path" in text
    assert "PAUSED unless --activate" in text
