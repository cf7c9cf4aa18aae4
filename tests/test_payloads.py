"""Job payloads stay small: a big listing is stored once in MongoDB and jobs carry a reference."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import ValidationError

from flow import LOSER, campaign_rule, dispatch, records, save_rule, successful_writes, work
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.payload import EvaluateJob, deserialize, serialize
from ruleengine.errors import ListingExpired
from ruleengine.rules.entity import Entity
from ruleengine.settings import Settings
from ruleengine.store.credentials import CredentialStore, load_key
from ruleengine.store.db import Database
from ruleengine.store.snapshots import MARGIN, ListingRef, ListingSnapshots, entities_json
from support import SANDBOX_NOW, SANDBOX_TOKEN

BIG = "act_2001"
# no Insights needed (age is the ad set's own field) and nothing ever passes: every ad set
# is evaluated, nothing is written
NEVER = {"metric": "age_hours", "operator": ">", "value": 1_000_000_000}


async def queued(redis: Any) -> list[bytes]:
    """The raw arq job bytes of every queued job."""
    return [
        await redis.get(b"arq:job:" + job_id) for job_id in await redis.zrange(c.QUEUE_NAME, 0, -1)
    ]


def job_of(raw: bytes) -> EvaluateJob:
    return EvaluateJob.model_validate(deserialize(raw)["a"][0])


async def snapshot_parts(db: Database) -> list[dict[str, Any]]:
    return [d async for d in db[c.LISTING_SNAPSHOTS].find({}).sort("_id")]


async def test_a_5000_adset_job_stays_small_in_redis_and_every_adset_is_evaluated(
    settings: Settings, db: Database, redis: Any, sandbox: SandboxAdmin
) -> None:
    await sandbox.reset(
        scenario="bench", accounts=1, campaigns_per_account=1000, adsets_per_campaign=5
    )
    await sandbox.set_clock(SANDBOX_NOW)
    await CredentialStore(db, load_key(settings)).add(BIG, SANDBOX_TOKEN, now=datetime.now(UTC))
    rule = await save_rule(
        db, campaign_rule({"type": "pause"}, [NEVER], level="adset", ad_accounts=[BIG])
    )
    await dispatch(settings, db)
    [raw] = await queued(redis)
    job = job_of(raw)
    assert job.listing is not None and job.entities == []
    assert job.listing.count == 5000
    assert job.listing.bytes > 900_000  # what the job would have carried inline
    assert len(raw) < settings.payload_inline_max_bytes  # what it carries: the rule and a ref
    parts = await snapshot_parts(db)
    assert len(parts) == job.listing.parts == 5
    assert {p["account"] for p in parts} == {BIG}
    assert {p["level"] for p in parts} == {"adset"}
    for stored in (raw, orjson.dumps(parts, default=str)):
        assert SANDBOX_TOKEN.encode() not in stored
        assert b"access_token" not in stored

    await work(settings)
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None
    assert (batch["status"], batch["evaluated_count"]) == ("DONE", 5000), batch.get("error")
    assert batch["progress"] == {"done": 5000, "total": 5000}
    assert len({r["entity_id"] for r in await records(db, batch_id=job.batch_id)}) == 5000


async def test_small_accounts_stay_inline(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    await save_rule(db, campaign_rule({"type": "pause"}, [LOSER]))
    await dispatch(settings, db)
    [raw] = await queued(redis)
    job = job_of(raw)
    assert job.listing is None and len(job.entities) == job.entity_count > 0
    assert b'"listing"' not in raw
    assert await snapshot_parts(db) == []


async def test_a_stored_listing_is_shared_by_the_rules_of_a_tick_and_runs_like_an_inline_one(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    stored = settings.model_copy(update={"payload_inline_max_bytes": 0})
    for name, minutes in (("quarter-hourly", 15), ("hourly", 60)):
        schedule = {"mode": "interval", "every_minutes": minutes}
        await save_rule(db, campaign_rule({"type": "pause"}, [LOSER], name=name, schedule=schedule))
    now = datetime.now(UTC)
    await dispatch(stored, db, now=now)
    jobs = [job_of(raw) for raw in await queued(redis)]
    refs = {job.listing for job in jobs}
    assert len(jobs) == 2 and len(refs) == 1 and None not in refs
    [part] = await snapshot_parts(db)  # one listing, one part, stored once
    # kept until the hourly rule's job may still start (its next run) and run to its timeout
    latest_end = now + timedelta(minutes=59, seconds=stored.job_timeout_s)
    assert part["expires_at"] > latest_end + MARGIN

    await work(stored)
    paused = await records(db, outcome="applied")
    assert paused and len(await successful_writes(sandbox)) == len(paused)
    assert {r["batch_id"] for r in paused} <= {j.batch_id for j in jobs}
    for job in jobs:
        batch = await db[c.BATCHES].find_one({"_id": job.batch_id})
        assert batch is not None and batch["status"] == "DONE"
        assert batch["evaluated_count"] == job.entity_count


async def test_a_job_whose_listing_is_gone_fails_cleanly_and_writes_nothing(
    settings: Settings, db: Database, redis: Any, accounts: list[str], sandbox: SandboxAdmin
) -> None:
    stored = settings.model_copy(update={"payload_inline_max_bytes": 0})
    rule = await save_rule(db, campaign_rule({"type": "pause"}, [LOSER]))
    await dispatch(stored, db)
    await db[c.LISTING_SNAPSHOTS].delete_many({})  # expired before a worker took the job

    worker = await work(stored)
    assert (worker.jobs_complete, worker.jobs_failed) == (1, 0)  # the job ended, no crash
    batch = await db[c.BATCHES].find_one({"rule_id": rule.id})
    assert batch is not None
    assert (batch["status"], batch["reason"]) == ("FAILED", "listing_expired")
    assert "listing of act_1001" in batch["error"] and "is gone" in batch["error"]
    assert batch["evaluated_count"] == 0
    assert await records(db, rule_id=rule.id) == []
    assert await successful_writes(sandbox) == []
    [group] = [g async for g in db[c.ERROR_LOG].find({"function": "engine.evaluate_account"})]
    assert "ListingExpired" in group["samples"][-1]["message"]


def entity(number: int) -> Entity:
    return Entity(id=str(number), name=f"Ad set {number}", status="ACTIVE", daily_budget=1000)


async def test_storing_is_idempotent_and_only_moves_the_expiry_later(db: Database) -> None:
    snapshots = ListingSnapshots(db)
    entities = [entity(n) for n in range(2500)]
    body = entities_json(entities)
    later = SANDBOX_NOW + timedelta(hours=3)

    async def store(keep_until: datetime) -> ListingRef:
        return await snapshots.store(
            "act_1", "adset", entities, listing_json=body, now=SANDBOX_NOW, keep_until=keep_until
        )

    first = await store(later)
    assert (first.count, first.parts, first.bytes) == (2500, 3, len(body))
    assert await store(SANDBOX_NOW) == first  # an earlier expiry changes nothing
    expiries = {p["expires_at"] for p in await snapshot_parts(db)}
    assert expiries == {later + MARGIN}
    await snapshots.keep(first, until=later + timedelta(hours=1))
    assert {p["expires_at"] for p in await snapshot_parts(db)} == {
        later + timedelta(hours=1) + MARGIN
    }
    assert len(await snapshot_parts(db)) == 3
    assert await snapshots.load(first, account="act_1", level="adset") == entities
    # another account's job cannot read it, and a missing part is a gone listing
    with pytest.raises(ListingExpired):
        await snapshots.load(first, account="act_2", level="adset")
    await db[c.LISTING_SNAPSHOTS].delete_one({"part": 1})
    with pytest.raises(ListingExpired, match=r"2 of 3 parts left"):
        await snapshots.load(first, account="act_1", level="adset")


async def test_snapshots_expire_by_a_ttl_index(db: Database) -> None:
    indexes = await db[c.LISTING_SNAPSHOTS].index_information()
    assert indexes["expires_at_ttl"]["expireAfterSeconds"] == 0


# ---------------------------------------------------------------- parsing references


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)  # what JSON from Redis can hold
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=70),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
REF_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "sha256": st.text("0123456789abcdefABCDEF-", min_size=63, max_size=65) | JSON,
        "count": st.integers(-3, 10**7) | JSON,
        "parts": st.integers(-3, 10**4) | JSON,
        "bytes": st.integers(-3, 10**9) | JSON,
        "extra": JSON,
    },
)


@hypothesis_settings(max_examples=150, deadline=None)
@given(REF_FIELDS)
def test_a_listing_reference_from_redis_is_valid_or_refused(data: dict[str, Any]) -> None:
    raw = serialize({"listing": data})
    try:
        ref = ListingRef.model_validate(deserialize(raw)["listing"])
    except ValidationError:
        return
    assert len(ref.sha256) == 64 and set(ref.sha256) <= set("0123456789abcdef")
    assert ref.count >= 0 and ref.parts >= 1 and ref.bytes >= 0
    assert ListingRef.model_validate(deserialize(serialize(ref.model_dump()))) == ref
