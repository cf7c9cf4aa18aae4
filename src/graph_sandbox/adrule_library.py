"""The ad rules library of a world: Meta's Automated Rules, stored (never run), and their history.

A rule keeps its specs as they were sent (the POST body form); reads render them the
way Meta reads them back (:mod:`graph_sandbox.adrule_specs`). History entries are
whatever the scenario or the admin API put there: the sandbox never evaluates a rule.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from graph_sandbox.adrule_specs import read_back, read_back_conditions

#: Rule ids (``12026…``) and spec ids (``12027…``) look like Meta's: 15-digit numeric strings.
RULE_ID_PREFIX = "12026"
SPEC_ID_PREFIX = "12027"
#: The user the sandbox says made every rule (``GET /me`` is this user too).
CREATED_BY = {"id": "100000000000001", "name": "Sandbox User"}


@dataclass
class AdRule:
    """One rule of an ad account's library (``account_id`` without ``act_``)."""

    id: str
    account_id: str
    name: str
    status: str
    evaluation_spec: dict[str, Any]
    execution_spec: dict[str, Any]
    schedule_spec: dict[str, Any] | None
    created_time: datetime
    updated_time: datetime
    spec_ids: tuple[str, str]
    recommended_rule_key: str | None = None
    ui_creation_source: str | None = None

    @property
    def evaluation_type(self) -> str:
        """``SCHEDULE`` or ``TRIGGER``."""
        return str(self.evaluation_spec["evaluation_type"])

    def evaluation_read_back(self) -> dict[str, Any]:
        """``evaluation_spec`` as Meta reads it back: numbers as strings, the spec's id."""
        spec = dict(self.evaluation_spec)
        spec["filters"] = read_back_conditions(self.evaluation_spec, "filters")
        if isinstance(trigger := self.evaluation_spec.get("trigger"), dict):
            spec["trigger"] = {k: read_back(v) if k == "value" else v for k, v in trigger.items()}
        return spec | {"id": self.spec_ids[0]}

    def execution_read_back(self) -> dict[str, Any]:
        """``execution_spec`` as Meta reads it back: numbers as strings, the spec's id."""
        spec = dict(self.execution_spec)
        if "execution_options" in spec:
            spec["execution_options"] = read_back_conditions(spec, "execution_options")
        return spec | {"id": self.spec_ids[1]}


@dataclass(frozen=True)
class HistoryEntry:
    """One run of a rule, as ``/{rule_id}/history`` lists it (``results``: Meta's shape)."""

    key: str
    rule_id: str
    timestamp: datetime
    is_manual: bool
    evaluation_spec: dict[str, Any]
    execution_spec: dict[str, Any]
    schedule_spec: dict[str, Any] | None
    results: list[dict[str, Any]] = field(default_factory=list)
    exception_code: int | None = None
    exception_message: str | None = None

    def changed(self) -> bool:
        """True when the run changed something (an action other than ``NOT_CHANGED``/``ERROR``)."""
        return any(
            action.get("action") not in ("NOT_CHANGED", "ERROR", None)
            for result in self.results
            for action in result.get("actions", [])
        )


class AdRuleLibrary:
    """Every rule of one world and the history of their runs, in creation order."""

    def __init__(self, *, seed: int) -> None:
        self._seed = seed
        self.rules: dict[str, AdRule] = {}
        self.history: list[HistoryEntry] = []
        self._serial = {RULE_ID_PREFIX: 0, SPEC_ID_PREFIX: 0}

    def next_id(self, prefix: str = RULE_ID_PREFIX) -> str:
        """A fresh rule (or spec) id, deterministic from the seed and the order of creation."""
        self._serial[prefix] += 1
        return f"{prefix}{self._seed % 1000:03d}{self._serial[prefix]:07d}"

    def create(
        self,
        account_id: str,
        *,
        name: str,
        status: str,
        specs: tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None],
        at: datetime,
        extras: dict[str, str | None] | None = None,
    ) -> AdRule:
        """Store a rule whose specs were already checked (a copy of them); the new rule."""
        evaluation, execution, schedule = copy.deepcopy(specs)
        spec_ids = (self.next_id(SPEC_ID_PREFIX), self.next_id(SPEC_ID_PREFIX))
        rule = AdRule(
            self.next_id(),
            account_id,
            name,
            status,
            evaluation,
            execution,
            schedule,
            at,
            at,
            spec_ids,
        )
        rule.recommended_rule_key = (extras or {}).get("recommended_rule_key")
        rule.ui_creation_source = (extras or {}).get("ui_creation_source")
        self.rules[rule.id] = rule
        return rule

    def get(self, rule_id: str) -> AdRule | None:
        """The rule with this id, or ``None``."""
        return self.rules.get(rule_id)

    def of_account(self, act_id: str) -> list[AdRule]:
        """The rules of ``act_<n>``, in creation order (deleted ones left out)."""
        number = act_id.removeprefix("act_")
        return [r for r in self.rules.values() if r.account_id == number and r.status != "DELETED"]

    def owner(self, rule_id: str) -> str | None:
        """``act_<n>`` of the rule's ad account, or ``None`` for an unknown id."""
        rule = self.rules.get(rule_id)
        return None if rule is None else f"act_{rule.account_id}"

    def record(
        self,
        rule: AdRule,
        *,
        at: datetime,
        results: list[dict[str, Any]],
        is_manual: bool = False,
        exception: tuple[int, str] | None = None,
    ) -> HistoryEntry:
        """Add a run of ``rule`` to the history, with the rule's specs as they are now."""
        entry = HistoryEntry(
            key=f"{rule.id}:{len(self.history) + 1}",
            rule_id=rule.id,
            timestamp=at,
            is_manual=is_manual,
            evaluation_spec=rule.evaluation_read_back(),
            execution_spec=rule.execution_read_back(),
            schedule_spec=rule.schedule_spec,
            results=results,
            exception_code=exception[0] if exception else None,
            exception_message=exception[1] if exception else None,
        )
        self.history.append(entry)
        return entry

    def history_of(
        self, *, rule_id: str | None = None, act_id: str | None = None
    ) -> list[HistoryEntry]:
        """Runs of one rule, or of every rule of an ad account, newest first."""
        rules = {r.id for r in self.of_account(act_id)} if act_id else {rule_id}
        runs = [entry for entry in self.history if entry.rule_id in rules]
        return sorted(runs, key=lambda entry: entry.timestamp, reverse=True)
