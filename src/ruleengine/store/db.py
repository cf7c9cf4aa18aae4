"""MongoDB access: the client factory and idempotent index creation."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, IndexModel
from pymongo.asynchronous.database import AsyncDatabase

from ruleengine import constants as c
from ruleengine.settings import Settings

Document = dict[str, Any]
Database = AsyncDatabase[Document]


def create_client(settings: Settings, **options: Any) -> AsyncMongoClient[Document]:
    """An ``AsyncMongoClient`` that returns timezone-aware UTC datetimes."""
    return AsyncMongoClient(
        settings.mongodb_url,
        tz_aware=True,
        tzinfo=UTC,
        appname="ruleengine",
        **({"serverSelectionTimeoutMS": 5000} | options),
    )


def database(client: AsyncMongoClient[Document], settings: Settings) -> Database:
    """The engine's database on ``client``."""
    return client[settings.mongodb_database]


_INDEXES: dict[str, list[IndexModel]] = {
    c.RULES: [
        IndexModel([("name", ASCENDING)], unique=True),
        IndexModel([("status", ASCENDING), ("next_execute_at", ASCENDING)]),
    ],
    c.RULE_VERSIONS: [
        IndexModel([("rule_id", ASCENDING), ("version", ASCENDING)], unique=True),
    ],
    c.BATCHES: [
        IndexModel([("started_at", DESCENDING)]),
        IndexModel([("rule_id", ASCENDING), ("started_at", DESCENDING)]),
        IndexModel([("account", ASCENDING), ("started_at", DESCENDING)]),
        IndexModel([("status", ASCENDING), ("started_at", DESCENDING)]),
    ],
    c.EXECUTIONS: [
        # one record per (batch, task, entity); older records without a key stay as they are
        IndexModel(
            [("key", ASCENDING)], unique=True, partialFilterExpression={"key": {"$exists": True}}
        ),
        IndexModel([("batch_id", ASCENDING)]),
        IndexModel([("rule_id", ASCENDING), ("created_at", DESCENDING)]),
        IndexModel([("entity_id", ASCENDING), ("created_at", DESCENDING)]),
    ],
    c.ACTION_INTENTS: [
        IndexModel(
            [("batch_id", ASCENDING), ("task_id", ASCENDING), ("entity_id", ASCENDING)],
            unique=True,
        ),
        IndexModel([("entity_id", ASCENDING), ("field", ASCENDING), ("applied_at", DESCENDING)]),
        IndexModel([("status", ASCENDING), ("created_at", ASCENDING)]),
        # cooldowns are derived from intents
        IndexModel([("rule_id", ASCENDING), ("entity_id", ASCENDING), ("created_at", DESCENDING)]),
    ],
    c.ERROR_LOG: [
        IndexModel([("function", ASCENDING), ("fingerprint", ASCENDING)], unique=True),
        IndexModel([("status", ASCENDING), ("last_seen", DESCENDING)]),
    ],
    c.FOLLOWUPS: [
        IndexModel([("status", ASCENDING), ("due_at", ASCENDING)]),
        IndexModel([("batch_id", ASCENDING)]),
        IndexModel([("rule_id", ASCENDING), ("due_at", ASCENDING)]),
    ],
}


async def ensure_indexes(db: Database) -> None:
    """Create every index the engine relies on (safe to call on every start)."""
    for collection, indexes in _INDEXES.items():
        await db[collection].create_indexes(indexes)
