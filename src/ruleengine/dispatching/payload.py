"""The job payloads that cross Redis, and their orjson serializer.

Jobs are serialised with orjson, never pickle: anyone who can write to Redis
must not be able to run code in a worker. A payload carries a *token
reference*, never a token, and — for an entity list bigger than
``RULEENGINE_PAYLOAD_INLINE_MAX_BYTES`` — a *listing reference* instead of the
entities (:class:`ListingPacker`, :mod:`ruleengine.store.snapshots`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from ruleengine.rules.entity import Entity
from ruleengine.rules.language.model import Rule
from ruleengine.store.credentials import token_ref
from ruleengine.store.snapshots import ListingRef, ListingSnapshots, entities_json


def _fallback(value: Any) -> Any:
    """What orjson cannot encode by itself: arq's failure results are exceptions."""
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "message": str(value)}
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def serialize(value: dict[str, Any]) -> bytes:
    """arq ``job_serializer``: orjson (datetimes become ISO strings).

    arq serialises a job's *result* with it too, and the result of a failed or
    expired job is an exception (``JobExecutionFailed``, ``TimeoutError`` …): it
    becomes ``{"error": <class name>, "message": …}`` instead of failing.
    """
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=_fallback)


def deserialize(raw: bytes) -> dict[str, Any]:
    """arq ``job_deserializer``."""
    value = orjson.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("a job must deserialize to an object")
    return value


def batch_id_for(rule_id: str, account: str, scheduled_at: datetime) -> str:
    """The batch id of one execution: the same (rule, account, scheduled time) → the same id."""
    return f"{rule_id}-{account}-{scheduled_at:%Y%m%dT%H%M%SZ}"


def evaluate_job_id(batch_id: str) -> str:
    """The arq job id of an execution (arq refuses a second job with the same id)."""
    return f"evaluate:{batch_id}"


class EvaluateJob(BaseModel):
    """Everything a worker needs to evaluate one rule on one ad account."""

    model_config = ConfigDict(frozen=True)

    batch_id: str
    rule_id: str
    rule_version: int
    rule: dict[str, Any]  # the full definition of that version, plus status (snapshot)
    account: str
    token_ref: str
    entities: list[Entity]  # empty when the listing is stored: see ``listing``
    listing: ListingRef | None = None
    scheduled_at: datetime
    dispatched_at: datetime
    fence: int | None = None
    #: The account's newest write-lock fence every change of which (and of every older fence)
    #: was behind us before its entities were listed (None: unknown): the listing follows
    #: those changes by the store's order, not by anyone's clock (the entity timeline).
    listed_fence: int | None = None

    @classmethod
    def of(
        cls,
        rule: Rule,
        *,
        batch_id: str,
        rule_id: str,
        version: int,
        account: str,
        entities: list[Entity] | ListingRef,
        scheduled_at: datetime,
        dispatched_at: datetime,
        fence: int | None = None,
        listed_fence: int | None = None,
    ) -> EvaluateJob:
        """The job evaluating ``rule`` (that version's full definition) on ``account``.

        ``entities`` is the entity list, or the reference of a stored listing.
        """
        stored = isinstance(entities, ListingRef)
        return cls(
            batch_id=batch_id,
            rule_id=rule_id,
            rule_version=version,
            rule=rule.model_dump(mode="json"),
            account=account,
            token_ref=token_ref(account),
            entities=[] if stored else entities,
            listing=entities if stored else None,
            scheduled_at=scheduled_at,
            dispatched_at=dispatched_at,
            fence=fence,
            listed_fence=listed_fence,
        )

    @property
    def entity_count(self) -> int:
        """How many entities the job evaluates (known before a stored listing is loaded)."""
        return self.listing.count if self.listing is not None else len(self.entities)

    def parsed_rule(self) -> Rule:
        """The rule snapshot as a model (it was valid when saved, so this does not fail)."""
        return Rule.model_validate(self.rule)

    def to_job(self) -> dict[str, Any]:
        """JSON-ready form for ``enqueue_job``."""
        return self.model_dump(mode="json", exclude_none=True)


Packed = list[Entity] | ListingRef


class ListingPacker:
    """What a job carries for its entities: the list itself, or a stored listing's reference.

    A list whose JSON is at most ``inline_max_bytes`` goes inline. A bigger one is
    stored once per tick in :class:`ListingSnapshots`, however many jobs (rules) use
    it, and kept until the latest ``keep_until`` any of them asked for.
    """

    def __init__(self, snapshots: ListingSnapshots, *, inline_max_bytes: int) -> None:
        self.snapshots = snapshots
        self.inline_max_bytes = inline_max_bytes
        self._tick: datetime | None = None
        # (id(list), account, level) → (the list, kept alive so its id is not reused meanwhile;
        # the list itself when inline, else the storing of its snapshot; the latest expiry)
        self._packed: dict[
            tuple[int, str, str],
            tuple[list[Entity], list[Entity] | asyncio.Task[ListingRef], datetime],
        ] = {}

    async def pack(
        self,
        entities: list[Entity],
        *,
        account: str,
        level: str,
        now: datetime,
        keep_until: datetime,
    ) -> Packed:
        """``entities`` inline, or the reference of their snapshot (stored if need be).

        ``now`` is the tick's time: within a tick one listing is measured and stored
        once, whichever rules share it.
        """
        if now != self._tick:
            self._tick, self._packed = now, {}
        key = (id(entities), account, level)
        known = self._packed.get(key)
        if known is None:
            listing_json = entities_json(entities)
            if len(listing_json) <= self.inline_max_bytes:
                self._packed[key] = (entities, entities, keep_until)
                return entities
            storing = asyncio.ensure_future(
                self.snapshots.store(
                    account,
                    level,
                    entities,
                    listing_json=listing_json,
                    now=now,
                    keep_until=keep_until,
                )
            )
            self._packed[key] = (entities, storing, keep_until)
            return await storing
        _, packed, kept_until = known
        if isinstance(packed, list):
            return packed
        ref = await packed
        if keep_until > kept_until:  # this rule's job may start later than the others'
            self._packed[key] = (entities, packed, keep_until)
            await self.snapshots.keep(ref, until=keep_until)
        return ref
