"""Pure parts of the web app: the slow-rule ranking, which requests need the token."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from ruleengine.settings import Settings
from ruleengine.store.batchstats import RuleDurations
from ruleengine.web.auth import needs_token
from ruleengine.web.slowrules import slow_rules


def _stats(rule_id: str, *, p95_s: float, max_s: float, name: str = "") -> RuleDurations:
    return RuleDurations(
        rule_id=rule_id,
        rule_name=name or rule_id.upper(),
        count=4,
        p50_s=0.1234567,
        p95_s=p95_s,
        max_s=max_s,
        stages_mean_s={"cooldown": 0.0, "fetch": 1.0000004, "evaluate": 0.0, "act": 0.5},
        graph_calls_mean=6.66666,
        http_requests_mean=2.0,
        evaluated_mean=40.0,
    )


def test_slow_rules_rank_by_p95_then_max_then_name_and_round_the_figures() -> None:
    report = slow_rules(
        [
            _stats("a", p95_s=1.0, max_s=2.0),
            _stats("b", p95_s=3.0, max_s=3.0),
            _stats("c", p95_s=1.0, max_s=5.0),
            _stats("d", p95_s=1.0, max_s=2.0, name="0 first by name"),
        ]
    )
    assert [r["rule_id"] for r in report] == ["b", "c", "d", "a"]
    b = report[0]
    assert (b["count"], b["p50_s"], b["p95_s"]) == (4, 0.123457, 3.0)
    assert b["stages_mean_s"] == {"cooldown": 0.0, "fetch": 1.0, "evaluate": 0.0, "act": 0.5}
    assert (b["graph_calls_mean"], b["evaluated_mean"]) == (6.667, 40.0)


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
    settings = Settings(api_token=SecretStr("t" * 32), api_reads_require_token=reads_closed)
    assert needs_token(method, path, settings) is expected
