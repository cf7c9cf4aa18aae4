"""The REST API under ``/api``: one module per resource, composed here.

Each module registers its own routes (``add_routes``); :func:`add_routes` puts them
together in the order aiohttp needs (fixed paths under ``/api/rules/`` before
``/api/rules/{id}``). Handlers read the process's services from :mod:`ruleengine.web.state`
and never write to Meta: writes are queued for the workers. May import ``store``, ``meta``
(read-only), ``rules``, the capability packages' read sides and ``web``'s own helpers —
never ``writes`` (tests/test_layers.py).
"""

from __future__ import annotations

from aiohttp import web

from ruleengine.web.api import (
    accounts,
    admin,
    approvals,
    conflicts,
    entities,
    entity_insights,
    followups,
    holds,
    impact,
    imports,
    records,
    rules,
    trends,
    undo,
    vocabulary,
    whoami,
)


def add_routes(app: web.Application) -> None:
    """Register every ``/api`` route but the backtests' (the app adds those with their runner)."""
    conflicts.add_routes(app)  # /api/rules/conflicts, before /api/rules/{id}
    vocabulary.add_routes(app)  # /api/rules/vocabulary, before /api/rules/{id}
    rules.add_routes(app)
    for resource in (
        records,
        followups,
        undo,
        holds,
        approvals,
        entities,
        entity_insights,
        accounts,
        admin,
        whoami,
    ):
        resource.add_routes(app)
    imports.add_routes(app)
    trends.add_routes(app)
    impact.add_routes(app)
