"""MongoDB access: the client factory, idempotent index creation and the TTL (retention) indexes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, IndexModel
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, OperationFailure

from ruleengine import constants as c
from ruleengine.settings import Settings

log = logging.getLogger(__name__)

Document = dict[str, Any]
Database = AsyncDatabase[Document]


@dataclass(frozen=True)
class Page:
    """One page of documents and how many match the filter in all."""

    items: list[Document]
    total: int


#: How long a pooled connection may stay unused before the driver closes it (ms). A server
#: closes a connection idle for long (the embedded one after 300 s; a load balancer or a
#: firewall on the way often sooner): the first command sent on it then fails ("connection
#: closed", AutoReconnect), and with retryable writes off nothing retries it. A busy worker's
#: pool opens connections in bursts and leaves some unused for minutes. Closing them first
#: costs a new connection now and then (a few ms). A ``maxIdleTimeMS`` in the URL wins.
MAX_IDLE_MS: Final = 60_000


def create_client(settings: Settings, **options: Any) -> AsyncMongoClient[Document]:
    """An ``AsyncMongoClient`` that returns timezone-aware UTC datetimes and closes pooled
    connections unused for :data:`MAX_IDLE_MS`."""
    defaults: dict[str, Any] = {"serverSelectionTimeoutMS": 5000}
    if "maxidletimems" not in settings.mongodb_url.lower():
        defaults["maxIdleTimeMS"] = MAX_IDLE_MS
    return AsyncMongoClient(
        settings.mongodb_url,
        tz_aware=True,
        tzinfo=UTC,
        appname="ruleengine",
        **(defaults | options),
    )


def database(client: AsyncMongoClient[Document], settings: Settings) -> Database:
    """The engine's database on ``client``."""
    return client[settings.mongodb_database]


#: MongoDB's error code for a write that would duplicate a unique key.
DUPLICATE_KEY: Final = 11000


async def insert_new(collection: Any, docs: list[Document]) -> set[int]:
    """Insert ``docs`` (unordered, each on its own); the positions of those whose unique key
    another document already held (each left as it was). Any other write error is raised."""
    try:
        await collection.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        if any(error.get("code") != DUPLICATE_KEY for error in errors):
            raise
        return {int(error["index"]) for error in errors}
    return set()


async def bump_counter(
    collection: Any,
    key: str,
    counter: str,
    fields: Document,
    *,
    on_insert: Document,
    likely_new: bool = False,
) -> Document:
    """Raise the counter ``counter`` of the document ``_id = key`` by one (created at 1, with
    ``on_insert`` too), set ``fields`` with it, and return the document as it is then — what
    ``findAndModify`` with ``$inc`` and upsert does, as a read and a compare-and-set on the
    counter, retried when another writer raised it in between.

    The embedded server answers a ``findAndModify`` that finds its document by scanning the
    whole collection (~15 µs a document: 150 ms at 10,000), where a find and an update by
    ``_id`` look it up by the index (~2 ms together); real MongoDB uses the index for both.
    ``likely_new``: try the insert first (one command where the document is new).
    """
    new = {"_id": key, **on_insert, **fields, counter: 1}
    if likely_new and not await insert_new(collection, [dict(new)]):
        return new
    while True:
        doc = await collection.find_one({"_id": key})
        if doc is None:
            if not await insert_new(collection, [dict(new)]):
                return new
            continue  # another writer created it first: raise theirs
        value = doc.get(counter)
        raised = int(value or 0) + 1
        done = await collection.update_one(
            {"_id": key, counter: value}, {"$set": {**fields, counter: raised}}
        )
        if done.matched_count == 1:
            return {**doc, **fields, counter: raised}


# No find or aggregate names a hint: the embedded server walks the WHOLE hinted index
# (every entry, then filters), where its planner, unhinted, looks up the first clause an
# index leads with (``{"rule_id": r, "cooling_from": {"$gt": t}}``: a range of the
# (rule_id, cooling_from) index) — and a top-level ``$or`` scans the collection. Real MongoDB
# plans these shapes on the same indexes.

#: A task's ``execution_count_limit``: its intents, ever, per (rule, task, entity).
EXECUTION_COUNT_INDEX: Final = [
    ("rule_id", ASCENDING),
    ("task_id", ASCENDING),
    ("entity_id", ASCENDING),
    ("status", ASCENDING),
]

#: Cooldowns: a rule's intents whose cooldown started after an instant (MongoDB's clock).
COOLING_INDEX: Final = [("rule_id", ASCENDING), ("cooling_from", ASCENDING)]

#: The index of an entity's budget changes (the write path's look at Meta's hourly limit and
#: minimum budgets: the changes applied in the last hour, and the refusals never applied).
BUDGET_HISTORY_INDEX: Final = [
    ("entity_id", ASCENDING),
    ("field", ASCENDING),
    ("applied_at", DESCENDING),
]

#: The index of pending intents: the reaper's orphans, and the claim each acquisition of an
#: account's write lock makes on the account's pending intents (an update: the embedded
#: server looks its ``status`` up; MongoDB is told the index by a hint).
PENDING_INTENTS_INDEX: Final = [("status", ASCENDING), ("created_at", ASCENDING)]

#: The intents flagged ``record_unconfirmed`` (sparse: the flag is there or absent).
UNCONFIRMED_INDEX: Final = "record_unconfirmed_sparse"

#: The index of the lag model's reading of an ad account's execution records over a time
#: range (``backtest/lag_fit.py``).
EXECUTIONS_BY_ACCOUNT_INDEX: Final = [("account", ASCENDING), ("created_at", DESCENDING)]
#: An entity's evaluations: the chunks holding it (``entity_ids`` is an array: a multikey
#: index, one entry per entity of the chunk), newest first.
EVALUATIONS_BY_ENTITY_INDEX: Final = [("entity_ids", ASCENDING), ("created_at", DESCENDING)]
#: An account's evaluations over a time range (the lag learner's reading).
EVALUATIONS_BY_ACCOUNT_INDEX: Final = [("account", ASCENDING), ("created_at", DESCENDING)]

#: The index of the history cache's one query: an account's buckets at a level and
#: granularity over a range of months (``store/insights_history.py``).
INSIGHTS_HISTORY_INDEX: Final = [
    ("account", ASCENDING),
    ("level", ASCENDING),
    ("granularity", ASCENDING),
    ("month", ASCENDING),
]

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
        # one record per (batch, task, entity); every record has a key (see _keyed_executions)
        IndexModel([("key", ASCENDING)], unique=True),
        IndexModel([("batch_id", ASCENDING)]),
        IndexModel([("rule_id", ASCENDING), ("created_at", DESCENDING)]),
        IndexModel([("entity_id", ASCENDING), ("created_at", DESCENDING)]),
        IndexModel(EXECUTIONS_BY_ACCOUNT_INDEX),
    ],
    c.EVALUATIONS: [
        # a batch's chunks are found by their _id (store/evaluations.py chunk_id)
        IndexModel(EVALUATIONS_BY_ENTITY_INDEX),
        IndexModel(EVALUATIONS_BY_ACCOUNT_INDEX),
    ],
    c.ACTION_INTENTS: [
        IndexModel(
            [("batch_id", ASCENDING), ("task_id", ASCENDING), ("entity_id", ASCENDING)],
            unique=True,
        ),
        IndexModel(BUDGET_HISTORY_INDEX),
        IndexModel(PENDING_INTENTS_INDEX),
        # cooldowns and execution counts (a task's execution_count_limit) are derived from intents
        IndexModel(COOLING_INDEX),
        IndexModel(EXECUTION_COUNT_INDEX),
        # the reaper's look for settled intents whose batch's record was not corrected: sparse,
        # for only intents whose write went unanswered carry the flag (every other insert and
        # update of an intent then leaves this index alone)
        IndexModel([("record_unconfirmed", ASCENDING)], sparse=True, name=UNCONFIRMED_INDEX),
        # an intent nothing reads again expires (store/intents.py `expires_at`, deleted by the
        # retention cron; not a TTL index: the embedded server's TTL monitor walks the whole
        # collection); one kept for good has no date, and no entry: sparse
        IndexModel([("expires_at", ASCENDING)], sparse=True),
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
    c.APPROVALS: [
        # one open approval per (rule, task, entity): the key of a decided one is its own id
        IndexModel([("open_key", ASCENDING)], unique=True),
        IndexModel([("status", ASCENDING), ("created_at", DESCENDING)]),
        IndexModel([("status", ASCENDING), ("expires_at", ASCENDING)]),
    ],
    c.HOLDS: [
        IndexModel([("entity_id", ASCENDING)]),
        IndexModel([("status", ASCENDING), ("placed_at", DESCENDING)]),
    ],
    c.ROLLUPS: [
        IndexModel([("date", DESCENDING), ("rule_name", ASCENDING)]),
        IndexModel([("rule_id", ASCENDING), ("date", DESCENDING)]),
    ],
    c.LISTING_SNAPSHOTS: [
        IndexModel([("snapshot", ASCENDING), ("part", ASCENDING)]),
        # each part carries its own expiry (set by the dispatcher): expire at that date
        IndexModel([("expires_at", ASCENDING)], name="expires_at_ttl", expireAfterSeconds=0),
    ],
    c.INSIGHTS_HISTORY: [IndexModel(INSIGHTS_HISTORY_INDEX)],
    # a backtest's listing is reused for 15 minutes (reads check expires_at too)
    c.BACKTEST_LISTINGS: [
        IndexModel([("expires_at", ASCENDING)], name="expires_at_ttl", expireAfterSeconds=0),
    ],
    c.BACKTESTS: [
        # kept a week: each document carries its expiry (created + 7 days)
        IndexModel([("expires_at", ASCENDING)], name="expires_at_ttl", expireAfterSeconds=0),
        # the web app's startup marks those an earlier process left unfinished
        IndexModel([("status", ASCENDING)]),
    ],
    # _id is the token's name; every authenticated request looks its token up by hash
    c.API_TOKENS: [IndexModel([("hash", ASCENDING)], unique=True)],
}


async def server_time(db: Database) -> datetime:
    """MongoDB's clock now (``hello``'s ``localTime``), aware UTC; a host's step leaves it be."""
    reply = await db.command("hello", codec_options=db.codec_options)
    when: datetime = reply["localTime"]
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


#: Indexes no query uses any more, dropped at start: each index costs every insert and
#: update of its collection (on the embedded server, about as much as the write itself).
RETIRED_INDEXES: Final = {
    # what cooldowns were first looked up by; EXECUTION_COUNT_INDEX serves them now
    c.ACTION_INTENTS: (
        "rule_id_1_entity_id_1_created_at_-1",
        # the flag's first index held an entry for every intent; UNCONFIRMED_INDEX replaces it
        "record_unconfirmed_1",
    ),
    # a batch's chunks were first found by it; their _id serves (store/evaluations.py)
    c.EVALUATIONS: ("batch_id_1_chunk_1",),
}


async def ensure_indexes(db: Database) -> None:
    """Create every index the engine relies on, drop the retired ones (safe on every start)."""
    await _keyed_executions(db)
    await _cooling_from_everywhere(db)
    # retired first: a replacement may have the same keys (MongoDB refuses a second index
    # of one key pattern with other options)
    for collection, names in RETIRED_INDEXES.items():
        present = await db[collection].index_information()
        for name in names:
            if name in present:
                await db[collection].drop_index(name)
    for collection, indexes in _INDEXES.items():
        await db[collection].create_indexes(indexes)


async def _keyed_executions(db: Database) -> None:
    """Give keys to execution records written before records had one, once.

    A first version indexed ``key`` only where it existed (a partial index); the
    embedded server never uses a partial index for its lookups, so each upsert of a
    record scanned the whole collection. Records without a key get ``legacy|<_id>``
    and the plain unique index replaces the partial one — done only while the plain
    index is missing, so a normal start scans nothing.
    """
    executions = db[c.EXECUTIONS]
    index = (await executions.index_information()).get("key_1")
    if index is not None and "partialFilterExpression" not in index:
        return
    if index is not None:
        await executions.drop_index("key_1")
    legacy_key = {"$concat": ["legacy|", {"$toString": "$_id"}]}
    await executions.update_many({"key": {"$exists": False}}, [{"$set": {"key": legacy_key}}])


async def _cooling_from_everywhere(db: Database) -> None:
    """Give ``cooling_from`` (its ``created_at``) to intents recorded before intents had one,
    once: cooldowns are read by ``cooling_from`` alone. Done only while the cooling index is
    missing — before it is created — so a normal start scans nothing."""
    intents = db[c.ACTION_INTENTS]
    if index_name(COOLING_INDEX) in await intents.index_information():
        return
    await intents.update_many({"cooling_from": None}, [{"$set": {"cooling_from": "$created_at"}}])


def index_name(keys: list[tuple[str, int]]) -> str:
    """The name MongoDB gives an index of ``keys`` (``rule_id_1_cooling_from_1``)."""
    return "_".join(f"{name}_{direction}" for name, direction in keys)


TtlChange = Literal["created", "unchanged", "updated", "recreated"]


@dataclass(frozen=True)
class TtlIndex:
    """Documents of ``collection`` expire ``expire_after_s`` after their date in ``field``.

    A document whose field is missing or not a date never expires (a RUNNING
    batch has no ``finished_at`` yet).
    """

    collection: str
    field: str
    expire_after_s: int

    @property
    def name(self) -> str:
        """The index name (``<field>_ttl``)."""
        return f"{self.field}_ttl"


async def ensure_ttl_index(db: Database, ttl: TtlIndex) -> TtlChange:
    """Create the TTL index, or change its expiry in place when the setting changed.

    The expiry is changed with ``collMod``; a server that refuses it gets the
    index dropped and created again. The server's TTL monitor (about once a
    minute) deletes what has expired.
    """
    collection = db[ttl.collection]
    key = {ttl.field: ASCENDING}
    existing = [i async for i in await collection.list_indexes() if dict(i["key"]) == key]
    if not existing:
        await collection.create_index(
            list(key.items()), name=ttl.name, expireAfterSeconds=ttl.expire_after_s
        )
        return "created"
    index = existing[0]
    if index.get("expireAfterSeconds") == ttl.expire_after_s:
        return "unchanged"
    try:
        await db.command(
            {
                "collMod": ttl.collection,
                "index": {"keyPattern": key, "expireAfterSeconds": ttl.expire_after_s},
            }
        )
        return "updated"
    except OperationFailure as exc:
        log.info("collMod refused on %s.%s (%s); recreating it", ttl.collection, index["name"], exc)
    await collection.drop_index(index["name"])
    await collection.create_index(
        list(key.items()), name=ttl.name, expireAfterSeconds=ttl.expire_after_s
    )
    return "recreated"
