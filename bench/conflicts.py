"""Static conflict analysis over a big rule set: the whole set (the Rules screen's badges) and
one rule being saved against it (every save's ``warnings``).

1,000 rules × 2 tasks, drawn with a fixed seed over 3 ad accounts, 2 levels, 4 name filters,
6 actions and ROAS thresholds — far more fighting than a real rule set, so every finding's
sentence is built too. Pure code, no servers. Last line: one JSON object.
"""

from __future__ import annotations

import random
import time
from typing import Any

from _common import figures, say
from ruleengine.rules.conflicts import RuleEntry, find_conflicts
from ruleengine.rules.model import parse_rule

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


def main() -> None:
    rng = random.Random(1)
    entries = [_rule(rng, n) for n in range(RULES)]
    say(f"{RULES} rules, {2 * RULES} tasks: the whole set")
    started = time.perf_counter()
    every = find_conflicts(entries)
    whole_s = time.perf_counter() - started
    say("one rule against the rest, for each of the first 50")
    started = time.perf_counter()
    for entry in entries[:50]:
        find_conflicts(entries, only_involving={entry.id})
    save_ms = (time.perf_counter() - started) / 50 * 1000
    figures(
        {
            "rules": RULES,
            "findings": len(every),
            "conflicts": sum(1 for f in every if f.severity == "conflict"),
            "whole_set_s": round(whole_s, 2),
            "one_save_ms": round(save_ms, 1),
        }
    )


if __name__ == "__main__":
    main()
