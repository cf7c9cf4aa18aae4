"""Entity listings of a sweep: one per (ad account, level), shared by every due rule.

Each ad account's campaigns (ad sets, ads) are listed once per sweep with the union of
the fields its due rules need; each rule then picks its entities with its own filters,
applied locally with the semantics of Meta's ``filtering``
(:mod:`ruleengine.rules.filtering`), so the number of listings grows with accounts, not
with the number of distinct filters. Archived and deleted objects are listed only when
some due rule's filter asks for them (rules that do not ask still never see them). Ad
set and ad rules that filter on their campaign's name or objective read it from the
account's campaign listing, which is then made too (one more listing for the account,
shared with its campaign rules); ad rules that filter on their ad set's name read the ad
set listing the same way.

Listings of different accounts run concurrently (bounded by the dispatcher's semaphore).
A listing that fails its three tries — or an account whose token cannot be read, or an
entity Meta sent that does not parse — becomes the error for every rule on that account
and level, reported once to the error log and the ``listing_failures`` metric, and the
rules skip that account this run. A token Meta refuses (190, or a missing permission) is
recorded on the account (:mod:`ruleengine.accounts.token_state`); from then on the
account is skipped without a Graph call — and without a report each tick — until its
token is replaced.
Read-only: it uses the GET-only reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from ruleengine.accounts.token_state import record_refusal
from ruleengine.errors import ErrorReport, RuleEngineError, TokenUnusableError
from ruleengine.meta.errors import GraphError
from ruleengine.meta.reader import GraphReader
from ruleengine.observability import DispatcherMetrics
from ruleengine.rules.entity import Entity
from ruleengine.rules.filtering import EVERY_STATUS, Item, LocalFilter, Wire, wire
from ruleengine.rules.language.model import Rule
from ruleengine.store.credentials import CredentialStore, token_ref
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.fences import FenceStore


@dataclass(frozen=True)
class ListingKey:
    """One listing of a sweep: an ad account's campaigns, ad sets or ads."""

    account: str
    level: str


@dataclass
class ListingPlan:
    """What one listing asks Graph for, from every due rule that reads it."""

    fields: set[str] = field(default_factory=lambda: {"id"})
    every_status: bool = False  # archived and deleted objects too
    # the listings whose rules filter on fields of these objects (their parents)
    parents_of: set[ListingKey] = field(default_factory=set)

    @property
    def filtering(self) -> Wire:
        """The listing's own ``filtering``: none, or every status."""
        return EVERY_STATUS if self.every_status else []


def plan_listings(rules: Sequence[Rule]) -> dict[ListingKey, ListingPlan]:
    """The listings ``rules`` need: one per (ad account, level), fields and statuses merged."""
    plans: dict[ListingKey, ListingPlan] = {}
    for rule in rules:
        local = LocalFilter(rule.level, wire(rule.filtering()))
        for account in rule.ad_accounts:
            key = ListingKey(account, rule.level)
            plan = plans.setdefault(key, ListingPlan())
            plan.fields |= set(rule.entity_fields()) | local.fields
            plan.every_status |= local.shows_hidden
            for level, names in local.parent_levels.items():
                parents = plans.setdefault(ListingKey(account, level), ListingPlan())
                parents.fields |= names
                parents.parents_of.add(key)
    for plan in plans.values():
        # the children of archived or deleted objects are archived or deleted themselves
        for child in plan.parents_of:
            plan.every_status |= plans[child].every_status
    return plans


Listing = list[Entity] | RuleEngineError
_Raw = list[dict[str, Any]] | RuleEngineError


class SweepListings:
    """A sweep's listings, and what each rule sees of them (its filters, its fields)."""

    def __init__(
        self, raw: dict[ListingKey, _Raw], *, fences: dict[str, int] | None = None
    ) -> None:
        self._raw = raw
        self._fences = fences or {}
        self._seen: dict[tuple[str, str, str, tuple[str, ...]], Listing] = {}
        self._parsed: dict[tuple[ListingKey, tuple[str, ...]], dict[str, Entity]] = {}
        self._parents: dict[ListingKey, dict[str, Item]] = {}

    def __len__(self) -> int:
        return len(self._raw)

    def fence(self, account: str) -> int | None:
        """The account's newest fence whose changes all came before its listings (None: not
        read)."""
        return self._fences.get(account)

    def entities(self, rule: Rule, account: str) -> Listing:
        """The entities ``rule`` applies to on ``account``, or why they could not be listed.

        Rules with the same filters and fields get the same list.
        """
        filtering = wire(rule.filtering())
        fields = tuple(rule.entity_fields())
        view = (account, rule.level, orjson.dumps(filtering).decode(), fields)
        if view not in self._seen:
            self._seen[view] = self._select(rule.level, account, filtering, fields)
        return self._seen[view]

    def _select(
        self, level: str, account: str, filtering: Wire, fields: tuple[str, ...]
    ) -> Listing:
        key = ListingKey(account, level)
        source = self._raw[key]
        if isinstance(source, RuleEngineError):
            return source
        local = LocalFilter(level, filtering)
        parents: dict[str, dict[str, Item]] = {}
        for parent_level in local.parent_levels:
            parent_key = ListingKey(account, parent_level)
            listed = self._raw[parent_key]
            if isinstance(listed, RuleEngineError):
                return listed
            parents[parent_level] = self._parents.setdefault(
                parent_key, {str(p["id"]): p for p in listed}
            )
        parsed = self._parsed.setdefault((key, fields), {})
        chosen = []
        for item in local.select(source, parents.get("campaign"), adsets=parents.get("adset")):
            entity_id = str(item["id"])
            if entity_id not in parsed:
                # only the fields this rule asked for: what it sees does not depend on others
                keys = [f.partition("{")[0] for f in fields]  # campaign{…} answers campaign
                parsed[entity_id] = Entity.model_validate({k: item[k] for k in keys if k in item})
            chosen.append(parsed[entity_id])
        return chosen


class Listings:
    """Lists the entities the due rules of a sweep need, once per ad account and level."""

    def __init__(
        self,
        *,
        reader: GraphReader,
        credentials: CredentialStore,
        errors: ErrorLog,
        metrics: DispatcherMetrics,
        limit: asyncio.Semaphore,
        fences: FenceStore | None = None,
    ) -> None:
        self.reader = reader
        self.credentials = credentials
        self.fences = fences
        self.errors = errors
        self.metrics = metrics
        self._limit = limit

    async def fetch(self, rules: Sequence[Rule], *, now: datetime | None = None) -> SweepListings:
        """Every listing ``rules`` need on their ad accounts: objects, or the error."""
        plans = plan_listings(rules)
        tokens: dict[str, str | RuleEngineError] = {}
        for account in {k.account for k in plans}:
            try:
                tokens[account] = await self.credentials.usable_token(token_ref(account))
            except RuleEngineError as exc:
                tokens[account] = exc
        when = now or datetime.now(UTC)
        # Read before listing: a listing is then known to be later than every change written
        # under an older fence (see EvaluateJob.listed_fence).
        fences = {} if self.fences is None else await self.fences.settled_many(tokens)
        results = await asyncio.gather(
            *(self._list(k, p, tokens[k.account], when) for k, p in plans.items())
        )
        return SweepListings(dict(zip(plans, results, strict=True)), fences=fences)

    async def _list(
        self, key: ListingKey, plan: ListingPlan, token: str | RuleEngineError, now: datetime
    ) -> _Raw:
        if isinstance(token, TokenUnusableError):
            return token  # recorded when Meta refused it; the rules say they skip the account
        if isinstance(token, RuleEngineError):
            await self._report(key, plan, token)
            return token
        async with self._limit:
            try:
                raw = await self.reader.list_entities(
                    key.account,
                    key.level,
                    token=token,
                    fields=sorted(plan.fields),
                    filtering=plan.filtering,
                )
                for item in raw:
                    Entity.model_validate(item)  # the whole listing parses, or none of it
                return raw
            except GraphError as exc:
                await record_refusal(self.credentials, key.account, exc, token=token, now=now)
                await self._report(key, plan, exc)
                return exc
            except ValueError as exc:  # an entity Meta sent that does not parse
                error = RuleEngineError(f"malformed entity in the listing: {exc}")
                await self._report(key, plan, error)
                return error

    async def _report(self, key: ListingKey, plan: ListingPlan, error: RuleEngineError) -> None:
        self.metrics.listing_failures.labels(account=key.account).inc()
        response = error.as_dict() if isinstance(error, GraphError) else None
        await self.errors.report(
            ErrorReport.of(
                error,
                function="dispatch.list_entities",
                message=f"listing {key.level}s of {key.account} failed: {error}",
                params={
                    "account": key.account,
                    "level": key.level,
                    "filtering": orjson.dumps(plan.filtering).decode(),
                    "fields": sorted(plan.fields),
                },
                response=response,
                context={"account": key.account},
            )
        )
