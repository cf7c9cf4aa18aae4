"""Oscillation: one entity's field changed back and forth by rules that fight.

A change has a direction: a budget or a bid up (+1) or down (−1), a status to ``ACTIVE``
(+1) or to ``PAUSED`` (−1); a rename has none and never oscillates. The changes of one
entity's field within ``RULEENGINE_OSCILLATION_WINDOW_HOURS`` (by every rule, from their
intents, ``done`` or ``pending``), oldest first, fall into *swings*: runs of changes in the
same direction. ``RULEENGINE_OSCILLATION_CHANGES`` (3) swings or more — up, down, up — is an
oscillation. Changes from before a hold on the field was cleared do not count.

The write path looks after every change that lands (:mod:`ruleengine.guards.cross_rule`);
this module is the pure part: directions, swings, and what an oscillation says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ruleengine.rules.plan.targets import SPEND_LIMIT_FIELDS
from ruleengine.store.intents import PastChange

#: The error-log group (its function name) of an oscillation: one group per entity + field.
OSCILLATION: Final = "oscillation"
#: Why a change is not made: its field oscillated and is held until someone clears it.
OSCILLATION_HOLD: Final = "oscillation_hold"
#: The fields whose changes have a direction.
WATCHED_FIELDS: Final = ("daily_budget", "status", "bid_amount", *SPEND_LIMIT_FIELDS)


def direction(field: str, before: Any, after: Any) -> int:
    """+1 for a change up (or to ``ACTIVE``), −1 down (or to ``PAUSED``), 0 for none."""
    if before == after:
        return 0
    if field == "status":
        return 1 if after == "ACTIVE" else -1 if after == "PAUSED" else 0
    if isinstance(before, int) and isinstance(after, int):
        return 1 if after > before else -1
    return 0


def swings(changes: Sequence[PastChange]) -> int:
    """How many runs of same-direction changes ``changes`` (oldest first) make."""
    count, last = 0, 0
    for change in changes:
        way = direction(change.field, change.before, change.target)
        if way and way != last:
            count, last = count + 1, way
    return count


@dataclass(frozen=True)
class Oscillation:
    """An entity's field that swung ``swings`` times within the window."""

    entity_id: str
    entity_name: str | None
    field: str
    changes: list[PastChange]
    swings: int
    hold: bool  # a task involved asked to hold the field

    @property
    def rules(self) -> list[str]:
        """The rules whose changes make the oscillation, in order of their first change."""
        return list(dict.fromkeys(c.rule_id for c in self.changes))

    def message(self) -> str:
        """The error-log message: names the entity, the field, the rules."""
        name = f" ({self.entity_name})" if self.entity_name else ""
        return (
            f"{self.field} of {self.entity_id}{name} changed direction {self.swings} times"
            f" by rules {', '.join(self.rules)}"
        )

    def change_rows(self) -> list[dict[str, Any]]:
        """Each change: when, which rule and task, before → after."""
        return [
            {
                "at": c.at,
                "rule_id": c.rule_id,
                "task_id": c.task_id,
                "batch_id": c.batch_id,
                "before": c.before,
                "after": c.target,
            }
            for c in self.changes
        ]

    def flag(self) -> dict[str, Any]:
        """What an execution record carries (Rule Logs shows it)."""
        return {"swings": self.swings, "rules": self.rules, "hold": self.hold}


def detect(changes: Sequence[PastChange], *, threshold: int) -> Oscillation | None:
    """The oscillation ``changes`` (one entity's field, in the window, oldest first) make."""
    moving = [c for c in changes if direction(c.field, c.before, c.target)]
    count = swings(moving)
    if count < threshold or not moving:
        return None
    last = moving[-1]
    return Oscillation(
        entity_id=last.entity_id,
        entity_name=last.entity_name,
        field=last.field,
        changes=moving,
        swings=count,
        hold=any(c.on_oscillation == "hold" for c in moving),
    )
