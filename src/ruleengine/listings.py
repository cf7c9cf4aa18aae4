"""Entity listings of a sweep: one per (account, level, filters, fields), shared by rules.

Rules that ask for the same listing on the same ad account share one per tick;
listings of different accounts run concurrently (bounded by the dispatcher's
semaphore). A listing that fails its three tries — or an account whose token cannot
be read, or an entity Meta sent that does not parse — becomes the error for that
account, reported once to the error log and the ``listing_failures`` metric, and the
rules skip that account this run. A token Meta refuses (190, or a missing permission)
is recorded on the account (:mod:`ruleengine.tokens`); from then on the account is
skipped without a Graph call — and without a report each tick — until its token is
replaced. Read-only: it uses the GET-only reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from ruleengine.errors import ErrorReport, RuleEngineError, TokenUnusableError
from ruleengine.meta.errors import GraphError
from ruleengine.meta.reader import GraphReader
from ruleengine.observability import DispatcherMetrics
from ruleengine.rules.entity import Entity
from ruleengine.rules.model import Rule
from ruleengine.store.credentials import CredentialStore, token_ref
from ruleengine.store.errorlog import ErrorLog
from ruleengine.tokens import record_refusal


@dataclass(frozen=True)
class ListingKey:
    """What one entity listing asks for; rules asking the same share one listing per tick."""

    account: str
    level: str
    filtering: str  # canonical JSON of the rule filters
    fields: tuple[str, ...]

    @classmethod
    def of(cls, rule: Rule, account: str) -> ListingKey:
        """The listing ``rule`` needs on ``account``."""
        return cls(
            account=account,
            level=rule.level,
            filtering=orjson.dumps(rule.filtering(), option=orjson.OPT_SORT_KEYS).decode(),
            fields=tuple(rule.entity_fields()),
        )


Listing = list[Entity] | RuleEngineError


class Listings:
    """Lists the entities the due rules of a sweep need, once per distinct listing."""

    def __init__(
        self,
        *,
        reader: GraphReader,
        credentials: CredentialStore,
        errors: ErrorLog,
        metrics: DispatcherMetrics,
        limit: asyncio.Semaphore,
    ) -> None:
        self.reader = reader
        self.credentials = credentials
        self.errors = errors
        self.metrics = metrics
        self._limit = limit

    async def fetch(
        self, rules: Sequence[Rule], *, now: datetime | None = None
    ) -> dict[ListingKey, Listing]:
        """Every listing ``rules`` need on their ad accounts: entities, or the error."""
        keys = {ListingKey.of(rule, account) for rule in rules for account in rule.ad_accounts}
        tokens: dict[str, str | RuleEngineError] = {}
        for account in {k.account for k in keys}:
            try:
                tokens[account] = await self.credentials.usable_token(token_ref(account))
            except RuleEngineError as exc:
                tokens[account] = exc
        when = now or datetime.now(UTC)
        results = await asyncio.gather(*(self._list(k, tokens[k.account], when) for k in keys))
        return dict(zip(keys, results, strict=True))

    async def _list(self, key: ListingKey, token: str | RuleEngineError, now: datetime) -> Listing:
        if isinstance(token, TokenUnusableError):
            return token  # recorded when Meta refused it; the rules say they skip the account
        if isinstance(token, RuleEngineError):
            await self._report(key, token)
            return token
        async with self._limit:
            try:
                raw = await self.reader.list_entities(
                    key.account,
                    key.level,
                    token=token,
                    fields=key.fields,
                    filtering=orjson.loads(key.filtering),
                )
                return [Entity.model_validate(item) for item in raw]
            except GraphError as exc:
                await record_refusal(self.credentials, key.account, exc, token=token, now=now)
                await self._report(key, exc)
                return exc
            except ValueError as exc:  # an entity Meta sent that does not parse
                error = RuleEngineError(f"malformed entity in the listing: {exc}")
                await self._report(key, error)
                return error

    async def _report(self, key: ListingKey, error: RuleEngineError) -> None:
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
                    "filtering": key.filtering,
                    "fields": list(key.fields),
                },
                response=response,
                context={"account": key.account},
            )
        )
