"""``ruleengine rules validate --live``: what Meta would refuse of a valid rule, on live objects.

Each valid file's rule lists its entities on each of its ad accounts (GET only, with the
account's registered token) and names those its actions cannot change: objects of a
legacy Advantage+ campaign take a status change but no budget, bid, name or copy change
(``rules/advantage.py``) — a run records them ``skipped`` / ``advantage_plus_legacy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ruleengine.cli.common import one_line
from ruleengine.cli.stack import credentials, open_database
from ruleengine.errors import RuleEngineError
from ruleengine.rules.advantage import REASON, refuses
from ruleengine.rules.entity import Entity
from ruleengine.rules.language.model import Rule, Task
from ruleengine.settings import Settings
from ruleengine.store.credentials import token_ref


async def live_warnings(settings: Settings, valid: Sequence[tuple[Path, Rule]], out: TextIO) -> int:
    """Print a warning per (rule, entity, task) Meta would refuse; how many were printed."""
    from ruleengine.meta.http import GraphSession
    from ruleengine.meta.reader import GraphReader

    lines: list[str] = []
    session = GraphSession(settings)
    try:
        async with open_database(settings) as db:
            store, reader = credentials(db, settings), GraphReader.from_settings(session)
            for path, rule in valid:
                for account in rule.ad_accounts if _refusable(rule) else []:
                    try:
                        token = await store.usable_token(token_ref(account))
                        entities = await reader.list_for_rule(rule, account, token=token)
                    except RuleEngineError as exc:
                        lines.append(f"warning: {path}: {account}: {exc}")
                        continue
                    lines += _refusals(path, rule, account, entities)
    finally:
        await session.close()
    for line in lines:
        print(one_line(line), file=out)
    return len(lines)


def _refusable(rule: Rule) -> list[Task]:
    """The tasks whose actions a legacy Advantage+ campaign refuses."""
    return [t for t in rule.tasks if refuses(t.action.type)]


def _refusals(path: Path, rule: Rule, account: str, entities: list[Entity]) -> list[str]:
    return [
        f"warning: {path}: {account} {entity.id} {entity.name!r}: a {kind} — task {task.id}"
        f" ({task.action.type}) will be skipped ({REASON}): Meta no longer lets the API"
        " change it but for its status"
        for entity in entities
        if (kind := entity.legacy_advantage) is not None
        for task in _refusable(rule)
    ]
