"""Meta's Automated Rules in and out, for the CLI and the API: the account's currency and
timezone, reading its ``adrules_library`` (read-only Graph client), saving imported rules.

The conversions themselves are pure (:mod:`ruleengine.rules.meta.importing`,
:mod:`ruleengine.rules.meta.exporting`); this module gives them their context and stores what
they make, through the same :meth:`RuleStore.save` as ``rules apply`` and ``POST
/api/rules`` — with the store's admission, so an imported rule that fights active rules is
refused like a save when ``RULEENGINE_REFUSE_CONFLICTING_RULES`` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ruleengine.analysis.conflicts import NEW_RULE_ID, ConflictingRuleError, findings_json
from ruleengine.errors import NotFoundError, RuleEngineError, RuleValidationError
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.conflicts import Finding
from ruleengine.rules.language.model import parse_rule
from ruleengine.rules.meta.importing import Imported, meta_rules_of
from ruleengine.rules.meta.vocab import MetaAccount
from ruleengine.store.credentials import Account, CredentialStore, token_ref
from ruleengine.store.rules import RuleStore

log = logging.getLogger(__name__)


async def registered(credentials: CredentialStore, account_id: str) -> Account | None:
    """The registered account, or None."""
    try:
        return await credentials.get(account_id)
    except NotFoundError:
        return None


async def meta_account(
    account_id: str,
    *,
    credentials: CredentialStore | None,
    reader: GraphReader | None = None,
    currency: str | None = None,
    timezone: str | None = None,
) -> MetaAccount:
    """The account's currency and timezone: given, else Meta's (through ``reader``), else as
    registered.

    Raises:
        RuleEngineError: the currency is known from nowhere.
    """
    account = await registered(credentials, account_id) if credentials else None
    live: dict[str, Any] = {}
    if reader is not None and account is not None and credentials is not None:
        token = await credentials.usable_token(token_ref(account_id))
        live = await reader.get_object(
            account_id, token=token, fields=["currency", "timezone_name"], account_id=account_id
        )
    currency = currency or live.get("currency") or (account.currency if account else None)
    if not currency:
        raise RuleEngineError(
            f"the currency of {account_id} is not known: register the account"
            f" (ruleengine accounts add {account_id} --currency …) or give --currency"
        )
    timezone = timezone or live.get("timezone_name") or (account.timezone if account else None)
    return MetaAccount(account_id, str(currency).upper(), timezone)


async def read_library(
    reader: GraphReader, credentials: CredentialStore, account_id: str
) -> list[dict[str, Any]]:
    """Every rule of the account's ``adrules_library``, with the registered token.

    Raises:
        NotFoundError: the account is not registered (there is no token to read with).
    """
    if await registered(credentials, account_id) is None:
        raise NotFoundError(
            f"ad account '{account_id}' is not registered: its rules are read with its token"
            f" (ruleengine accounts add {account_id})"
        )
    token = await credentials.usable_token(token_ref(account_id))
    return await reader.ad_rules(account_id, token=token)


def account_of_document(document: Any) -> str | None:
    """The one ad account the rules of a document name (``account_id`` as Meta reads back)."""
    found = {
        str(rule["account_id"])
        for rule in meta_rules_of(document)
        if isinstance(rule, dict) and isinstance(rule.get("account_id"), str | int)
    }
    if len(found) != 1:
        return None
    number = found.pop().removeprefix("act_")
    return f"act_{number}" if number.isdigit() else None


@dataclass(frozen=True)
class Saved:
    """What saving one imported rule did."""

    index: int
    name: str
    state: str  # created, new version, unchanged, skipped, refused
    rule_id: str | None = None
    version: int | None = None
    message: str = ""
    findings: tuple[Finding, ...] = ()  # its conflicts: warnings, or why it was refused

    @property
    def refused(self) -> bool:
        """Not saved because it fights active rules (``RULEENGINE_REFUSE_CONFLICTING_RULES``)."""
        return self.state == "refused"

    def findings_json(self) -> list[dict[str, Any]]:
        """The findings as JSON, a created rule's ``new`` id renamed to its id."""
        rename = {NEW_RULE_ID: self.rule_id} if self.rule_id else None
        return findings_json(self.findings, rename=rename)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``warnings`` of a saved rule, ``conflicts`` of a refused one."""
        return {
            "state": self.state,
            "rule_id": self.rule_id,
            "version": self.version,
            "message": self.message,
            ("conflicts" if self.refused else "warnings"): self.findings_json(),
        }

    def line(self) -> str:
        """One line for the CLI."""
        if self.refused:
            return self.message  # "not saved: the rule fights …"
        if self.rule_id is None:
            return f"not saved: {self.message}"
        return f"{self.rule_id} v{self.version} {self.state}"


async def save_imported(
    store: RuleStore,
    results: list[Imported],
    *,
    accounts: Mapping[str, str],
    webhooks: set[str],
    now: datetime,
    author: str,
    source: str,
) -> list[Saved]:
    """Save every converted rule (validated as ``rules apply`` validates).

    A rule is matched by name; a rule of that name imported from the same Meta rule is
    updated (a new version only when the definition changed; its status kept), one of
    another origin is left alone and reported. ``store``'s admission checks each one:
    a rule it refuses is reported ``refused`` with its conflicts, the others are saved.
    """
    saved: list[Saved] = []
    for result in results:
        if result.rule is None:
            continue
        saved.append(await _save_one(store, result, accounts, webhooks, now, author, source))
    return saved


async def _save_one(
    store: RuleStore,
    result: Imported,
    accounts: Mapping[str, str],
    webhooks: set[str],
    now: datetime,
    author: str,
    source: str,
) -> Saved:
    assert result.rule is not None
    document = dict(result.rule)
    existing = await store.find_by_name(result.name)
    if existing is not None:
        if existing.definition.get("description") != document.get("description"):
            return Saved(
                result.index,
                result.name,
                "skipped",
                message=f"a rule named '{result.name}' already exists (id {existing.id}) and"
                " was not imported from this Meta rule; rename one of them",
            )
        document["status"] = existing.status  # a re-import never pauses or activates
    try:
        rule = parse_rule(document, accounts=accounts, webhooks=webhooks)
    except RuleValidationError as exc:
        problems = "; ".join(f"{e.path}: {e.message}" for e in exc.errors)
        return Saved(result.index, result.name, "skipped", message=problems)
    try:
        outcome = await store.save(rule, now=now, author=author, source=source)
    except ConflictingRuleError as exc:
        findings = tuple(exc.findings)
        return Saved(result.index, result.name, "refused", message=str(exc), findings=findings)
    state = "created" if outcome.created else "unchanged"
    state = "new version" if outcome.new_version and not outcome.created else state
    log.info(
        "imported Meta rule %s as %s v%d", result.meta_id, outcome.rule.id, outcome.rule.version
    )
    return Saved(
        result.index,
        result.name,
        state,
        outcome.rule.id,
        outcome.rule.version,
        findings=outcome.warnings,
    )
