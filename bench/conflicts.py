"""Conflict analysis over a big stored rule set: the whole set (the Rules screen's badges) and
one rule being saved against it (every save's ``warnings``), each timed as the product runs it.

1,000 rules × 2 tasks, drawn with a fixed seed over 3 ad accounts, 2 levels, 4 name filters,
6 actions and ROAS thresholds — far more fighting than a real rule set, so every finding's
sentence is built too — stored ACTIVE in the embedded MongoDB-compatible server.

- ``analysis_*``: the pure analysis alone, on rules already parsed.
- ``whole_set_cold_s``: what the first ask after a change costs the web app
  (:class:`StoredAnalysis`: the rules loaded from MongoDB, parsed, analysed);
  ``whole_set_warm_ms``: an ask while the rules have not changed (one projected query).
- ``one_save_ms``: the conflict check of one save (:class:`ConflictGate`, which every save,
  activation and rollback runs): the ACTIVE rules loaded and parsed, then the rule checked
  against them — the part a save spends on conflicts. Mean over 20 saves.

Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime
from typing import Any

from _common import figures, open_database, say, stack, stack_settings
from ruleengine.analysis.conflicts import ConflictGate, StoredAnalysis
from ruleengine.rules.conflicts import RuleEntry, find_conflicts
from ruleengine.rules.language.model import parse_rule
from ruleengine.store.rules import RuleStore

RULES = 1_000
ACTIONS: list[dict[str, Any]] = [
    {"type": "increase_budget", "percent": 20},
    {"type": "decrease_budget", "percent": 10},
    {"type": "pause"},
    {"type": "activate"},
    {"type": "set_budget", "amount": 100},
    {"type": "append_to_name", "text": " [x]"},
]


def _rule(rng: random.Random, n: int) -> RuleEntry:
    doc = {
        "name": f"Rule {n}",
        "format": 2,
        "level": rng.choice(["campaign", "adset"]),
        "ad_accounts": [rng.choice(["act_1", "act_2", "act_3"])],
        "filters": [
            {
                "field": "name",
                "operator": "CONTAIN",
                "value": rng.choice(["[A]", "[B]", "[C]", "x"]),
            }
        ],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": f"t{t}",
                "conditions": [
                    {
                        "metric": "purchase_roas.omni_purchase",
                        "period": "last_7d",
                        "operator": rng.choice(["<", ">"]),
                        "value": rng.randint(0, 4),
                    }
                ],
                "action": rng.choice(ACTIONS),
            }
            for t in range(2)
        ],
    }
    rule = parse_rule(doc)
    return RuleEntry(f"rule-{n}", rule.name, rule)


def _analysis(entries: list[RuleEntry]) -> dict[str, Any]:
    """The pure analysis alone: the whole set, and one rule against the rest."""
    started = time.perf_counter()
    every = find_conflicts(entries)
    whole_s = time.perf_counter() - started
    started = time.perf_counter()
    for entry in entries[:50]:
        find_conflicts(entries, only_involving={entry.id})
    one_ms = (time.perf_counter() - started) / 50 * 1000
    return {
        "findings": len(every),
        "conflicts": sum(1 for f in every if f.severity == "conflict"),
        "analysis_whole_set_s": round(whole_s, 2),
        "analysis_one_rule_ms": round(one_ms, 1),
    }


async def _stored(entries: list[RuleEntry]) -> dict[str, Any]:
    """The same, as the product runs it on the rules stored in MongoDB."""
    with stack(databases=True) as servers:
        client, db = await open_database(stack_settings(servers))
        try:
            store = RuleStore(db)
            now = datetime.now(UTC)
            for entry in entries:
                await store.save(entry.rule, now=now, author="bench", source="bench")
            say(f"{len(entries)} rules stored ACTIVE")
            analysis = StoredAnalysis()
            started = time.perf_counter()
            cold = await analysis.get(store)
            cold_s = time.perf_counter() - started
            started = time.perf_counter()
            await analysis.get(store)
            warm_ms = (time.perf_counter() - started) * 1000
            gate = ConflictGate(refuse=False)
            saves = 20
            started = time.perf_counter()
            for entry in entries[:saves]:
                stored = await store.find_by_name(entry.name)
                assert stored is not None
                await gate(store, entry.rule, rule_id=stored.id, what="saved")
            save_ms = (time.perf_counter() - started) / saves * 1000
        finally:
            await client.close()
    return {
        "whole_set_findings": len(cold.findings),
        "whole_set_cold_s": round(cold_s, 2),
        "whole_set_warm_ms": round(warm_ms, 1),
        "one_save_ms": round(save_ms, 1),
    }


def main() -> None:
    rng = random.Random(1)
    entries = [_rule(rng, n) for n in range(RULES)]
    say(f"{RULES} rules, {2 * RULES} tasks: the analysis alone")
    pure = _analysis(entries)
    say("stored in MongoDB: the whole set as the web app keeps it, and one save's check")
    stored = asyncio.run(_stored(entries))
    figures({"rules": RULES} | pure | stored)


if __name__ == "__main__":
    main()
