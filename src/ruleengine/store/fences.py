"""Lock fences: each ad account's fencing counter for its write lock, kept in MongoDB.

Every acquisition of an ad account's write lock (:mod:`ruleengine.writes.lock`) takes the
next value of the account's counter — one document per account in ``lock_fences``,
raised by a compare-and-set (:func:`~ruleengine.store.db.bump_counter`) — so the values only
grow. The counter lives in MongoDB, beside the
intents it guards, and not in Redis: a Redis restart, which loses the lock keys, never
starts it again at 1. A holder whose value is no longer the account's current one has
been taken over and is fenced out (:class:`~ruleengine.errors.Fenced`); the intent
store refuses its transitions (:meth:`~ruleengine.store.intents.IntentStore.under`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from ruleengine import constants as c
from ruleengine.errors import Fenced
from ruleengine.store.db import Database, bump_counter


@dataclass(frozen=True)
class Fence:
    """One acquisition of an ad account's write lock: the account and its fencing value."""

    account: str
    value: int


class FenceStore:
    """The ``lock_fences`` collection: ``_id`` = the ad account, ``fence`` = its counter."""

    def __init__(self, db: Database) -> None:
        self._fences = db[c.LOCK_FENCES]

    async def take(self, account: str) -> Fence:
        """The next fence of ``account`` (the counter raised by one, created at 1)."""
        taken = {"taken_at": datetime.now(UTC)}
        doc = await bump_counter(self._fences, account, "fence", taken, on_insert={})
        return Fence(account, int(doc["fence"]))

    async def current(self, account: str) -> int:
        """The account's latest fence (0 before its lock was ever taken)."""
        doc = await self._fences.find_one({"_id": account}, {"fence": 1})
        return 0 if doc is None else int(doc["fence"])

    async def finish(self, fence: Fence) -> None:
        """Note that the holder of ``fence`` has written and been answered all it will: what
        is read of the account from now on follows every change made under it."""
        await self._fences.update_one(
            {"_id": fence.account, "fence": fence.value}, {"$set": {"done": fence.value}}
        )

    async def settled_many(self, accounts: Iterable[str]) -> dict[str, int]:
        """Per account of ``accounts``, the newest fence every change of which — and of every
        older fence — is behind us: the latest fence when its holder finished, else the one
        before it (its holder may be writing). 0 for an account never locked. One query."""
        wanted = list(dict.fromkeys(accounts))
        found = dict.fromkeys(wanted, 0)
        async for doc in self._fences.find({"_id": {"$in": wanted}}, {"fence": 1, "done": 1}):
            fence = int(doc["fence"])
            found[str(doc["_id"])] = fence if doc.get("done") == fence else fence - 1
        return found

    async def check(self, fence: Fence) -> None:
        """Raise :class:`~ruleengine.errors.Fenced` unless ``fence`` is still the account's
        latest: a newer holder has taken the lock since."""
        current = await self.current(fence.account)
        if current != fence.value:
            raise Fenced(
                f"the write lock of {fence.account} was taken over "
                f"(fence {current}, this holder's {fence.value})"
            )
