"""Holdouts, pure: which entities a task leaves alone so that its effect can be measured.

A task with ``"holdout": {"percent": P}`` holds out a stable share P % of the entities it
matches: they are recorded ``held_out`` with the change the task would have made, and
nothing is written to them. Which entity is held out is a hash of (rule id, task id,
entity id, the holdout's ``salt``), mapped to a number in [0, 1) and compared with P/100:
the same entity stays in or out for as long as the rule's holdout setting is unchanged
(raising P only moves entities into the held-out group, never out of it), and over many
entities the held-out share converges to P %.
"""

from __future__ import annotations

import hashlib
from typing import Final

from pydantic import Field

from ruleengine.rules.basics import RuleModel

#: The outcome of a (task, entity) the holdout kept from the change.
HELD_OUT: Final = "held_out"
_SCALE: Final = float(2**64)


class Holdout(RuleModel):
    """A task's holdout: the share of matched entities left unchanged, and the salt of the
    draw (kept with the rule; a new salt draws the groups again)."""

    percent: float = Field(ge=1, le=50)
    salt: str = Field(default="", max_length=64)


def holdout_draw(rule_id: str, task_id: str, entity_id: str, salt: str) -> float:
    """A number in [0, 1), fixed for (rule, task, entity, salt) and uniform over entities."""
    key = "\x1f".join((rule_id, task_id, entity_id, salt)).encode()
    digest = hashlib.sha256(key).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def is_held_out(rule_id: str, task_id: str, entity_id: str, holdout: Holdout | None) -> bool:
    """True when the task's holdout keeps this entity from the change (False: no holdout)."""
    if holdout is None:
        return False
    draw = holdout_draw(rule_id, task_id, entity_id, holdout.salt)
    return draw < holdout.percent / 100
