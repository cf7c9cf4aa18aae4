"""Pure parts of the web app: percentiles, the slow-rule ranking, which requests need the token."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import SecretStr

from ruleengine import constants, engine
from ruleengine.settings import Settings
from ruleengine.web import slowrules
from ruleengine.web.auth import needs_token
from ruleengine.web.slowrules import percentile, slow_rules


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    assert percentile([1.0, 2.0, 3.0], 100) == 3.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_the_slow_rule_report_takes_the_stage_names_from_constants_not_the_worker() -> None:
    tree = ast.parse(Path(slowrules.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "ruleengine.engine" not in imported
    assert constants.STAGES == engine.STAGES == ("cooldown", "fetch", "evaluate", "act")


def test_slow_rules_rank_by_p95_and_average_the_stages() -> None:
    rows = [
        {"rule_id": "a", "rule_name": "A", "duration_s": 1.0, "trace": {"fetch": 0.5, "act": 0.5}},
        {"rule_id": "a", "rule_name": "A", "duration_s": 3.0, "trace": {"fetch": 2.5, "act": 0.5}},
        {"rule_id": "b", "rule_name": "B", "duration_s": 2.0, "graph": {"counted_calls": 6}},
        {"rule_id": "c", "rule_name": "C", "duration_s": None, "trace": None},  # a broken row
    ]
    report = slow_rules(rows)
    assert [r["rule_id"] for r in report] == ["a", "b", "c"]
    a = report[0]
    assert (a["count"], a["p50_s"], a["max_s"]) == (2, 2.0, 3.0)
    assert a["p95_s"] == pytest.approx(2.9)
    assert a["stages_mean_s"] == {"cooldown": 0.0, "fetch": 1.5, "evaluate": 0.0, "act": 0.5}
    assert report[1]["graph_calls_mean"] == 6.0
    assert report[2]["p95_s"] == 0.0


@pytest.mark.parametrize(
    ("method", "path", "reads_closed", "expected"),
    [
        ("POST", "/api/rules", False, True),
        ("PUT", "/api/rules/x", False, True),
        ("PATCH", "/api/errors/x", False, True),
        ("POST", "/api/rules/x/preview", False, True),
        ("POST", "/api/rules/validate", False, False),
        ("POST", "/api/rules/validate", True, True),
        ("GET", "/api/rules", False, False),
        ("GET", "/api/rules", True, True),
        ("GET", "/health/ready", True, False),
        ("GET", "/metrics", True, False),
        ("GET", "/logs", True, False),
    ],
)
def test_which_requests_need_the_token(
    method: str, path: str, reads_closed: bool, expected: bool
) -> None:
    settings = Settings(api_token=SecretStr("t" * 20), api_reads_require_token=reads_closed)
    assert needs_token(method, path, settings) is expected
