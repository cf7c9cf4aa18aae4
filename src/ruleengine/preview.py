"""Preview: what would a rule do right now? The same engine code, with nothing written.

Lists the rule's entities on each account (read-only), then runs the engine in
dry-run mode: Insights are fetched and conditions evaluated for real, live
values are re-read for the actions, but nothing is written to Meta, to the
records or to intents (so no cooldown starts). The answer is the would-be execution records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ruleengine.engine import Engine, evaluate_account
from ruleengine.errors import RuleEngineError
from ruleengine.meta.http import READ_ONLY
from ruleengine.meta.reader import GraphReader
from ruleengine.payload import EvaluateJob
from ruleengine.rules.model import Rule
from ruleengine.store.credentials import token_ref

log = logging.getLogger(__name__)


@dataclass
class Preview:
    """Would-be records per account, and the accounts that could not be previewed."""

    records: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # account → problem
    graph: dict[str, int] = field(default_factory=lambda: {"http_requests": 0, "counted_calls": 0})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the API returns)."""
        would = [r for r in self.records if r["outcome"] == "would_apply"]
        return {
            "records": self.records,
            "errors": self.errors,
            "graph": self.graph,
            "summary": {
                "evaluated": sum(1 for r in self.records if r["passed"] is not None),
                "matched": sum(1 for r in self.records if r["passed"]),
                "would_apply": len(would),
            },
        }


async def preview_rule(
    engine: Engine, rule: Rule, *, rule_id: str, version: int, now: datetime
) -> Preview:
    """Evaluate ``rule`` now on every account, writing nothing anywhere."""
    result = Preview()
    reader = GraphReader.from_settings(engine.session.view(methods=READ_ONLY))
    for account in rule.ad_accounts:
        try:
            token = await engine.credentials.token(token_ref(account))
            entities = await reader.list_for_rule(rule, account, token=token)
        except (RuleEngineError, ValueError) as exc:
            result.errors[account] = str(exc)
            continue
        job = EvaluateJob.of(
            rule,
            batch_id=f"preview-{rule_id}-{account}",
            rule_id=rule_id,
            version=version,
            account=account,
            entities=entities,
            scheduled_at=now,
            dispatched_at=now,
        )
        summary = await evaluate_account(engine, job, now=now, dry_run=True)
        if summary.error:
            result.errors[account] = summary.error
        result.records.extend(summary.records)
        for key, value in summary.cost.items():
            result.graph[key] = result.graph.get(key, 0) + value
    result.graph["http_requests"] += reader.session.cost.http_requests
    result.graph["counted_calls"] += reader.session.cost.counted_calls
    return result
