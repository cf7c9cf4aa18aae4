"""Fault injection: latency, random errors, error rules, ``null`` batch items, revoked tokens,
changes made "elsewhere" between two calls, and answers lost after the call ran.

Randomness comes from a generator seeded with the world's seed, so a test that
sets ``error_rate`` sees the same failures on every run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from graph_sandbox.errors import GraphError

#: How an answer is lost: HTTP 502 with an HTML page (a proxy's), the connection closed
#: without an answer, or (a Batch API item) ``null``.
LostAs = Literal["bad_gateway", "reset", "null"]


class CallRule(BaseModel):
    """Act on the next ``times`` calls whose path contains ``path_contains`` (``None``: forever)
    and whose method matches, if given, after letting the first ``skip`` of them through."""

    model_config = ConfigDict(extra="forbid")

    path_contains: str = ""
    method: Literal["GET", "POST", "DELETE"] | None = None
    times: int | None = Field(default=None, ge=1)
    skip: int = Field(default=0, ge=0)

    def matches(self, method: str, path: str) -> bool:
        """True for a call this rule is about (whether or not it still fires)."""
        return self.path_contains in path and self.method in (None, method)


_Rule = TypeVar("_Rule", bound=CallRule)


class FaultRule(CallRule):
    """Fail matching calls with Meta's error ``code`` (see :class:`CallRule`)."""

    code: int = 2
    subcode: int | None = None
    message: str | None = None


class LostAnswer(CallRule):
    """Run matching calls — a write lands — then lose their ``answer``: a Batch API call
    carrying a matching item loses its whole answer (``bad_gateway``, ``reset``) or answers
    that item ``null``; a ``null`` rule leaves calls sent alone alone (see :class:`CallRule`)."""

    answer: LostAs = "bad_gateway"


class FaultChange(BaseModel):
    """Change an object's ``status`` right after the ``after_calls``-th call whose path contains
    ``path_contains`` — as if someone changed it in Ads Manager between two of your calls."""

    model_config = ConfigDict(extra="forbid")

    path_contains: str = ""
    method: Literal["GET", "POST"] | None = None
    after_calls: int = Field(default=1, ge=1)
    object_id: str
    status: Literal["ACTIVE", "PAUSED"] = "PAUSED"


def is_write(method: str, path: str, *, batch_writes: bool = False) -> bool:
    """True for a write: a POST to an object or a DELETE of one, or a Batch API call carrying
    one (``batch_writes``)."""
    if method == "DELETE":
        return True
    return method == "POST" and (path.strip("/") != "" or batch_writes)


class FaultSettings(BaseModel):
    """Everything ``POST /_sandbox/faults`` can set."""

    model_config = ConfigDict(extra="forbid")

    latency_ms: float = Field(default=0.0, ge=0)
    write_latency_ms: float = Field(default=0.0, ge=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    error_code: int = 2
    null_item_rate: float = Field(default=0.0, ge=0, le=1)
    revoked_tokens: list[str] = Field(default_factory=list)
    rules: list[FaultRule] = Field(default_factory=list)
    #: How long an asynchronous batch stays in progress before its requests run.
    async_batch_delay_s: float = Field(default=0.0, ge=0)
    changes: list[FaultChange] = Field(default_factory=list)
    lost_answers: list[LostAnswer] = Field(default_factory=list)


def _every(rule: CallRule) -> bool:
    return True


class _Counts:
    """How many more times each rule of a list fires, and how many calls it still lets by."""

    def __init__(self, rules: Sequence[CallRule] = ()) -> None:
        self.remaining: list[int | None] = [rule.times for rule in rules]
        self.to_skip: list[int] = [rule.skip for rule in rules]

    def take(
        self,
        rules: Sequence[_Rule],
        method: str,
        path: str,
        *,
        only: Callable[[_Rule], bool] = _every,
    ) -> int | None:
        """The index of the first rule (of those ``only`` keeps) this call makes fire, counted."""
        for index, rule in enumerate(rules):
            remaining = self.remaining[index]
            if remaining == 0 or not only(rule) or not rule.matches(method, path):
                continue
            if self.to_skip[index] > 0:
                self.to_skip[index] -= 1
                continue
            if remaining is not None:
                self.remaining[index] = remaining - 1
            return index
        return None


class Faults:
    """The faults in force, and how many more times each rule will fire.

    Args:
        seed: Seeds the generator behind ``error_rate`` and ``null_item_rate``.
    """

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"faults:{seed}")
        self.settings = FaultSettings()
        self._failing = _Counts()
        self._losing = _Counts()
        self._calls_left: list[int] = []

    def update(self, changes: dict[str, Any]) -> None:
        """Replace the settings named in ``changes``, keep the others.

        Raises:
            pydantic.ValidationError: A value is out of range or a key is unknown.
        """
        merged = self.settings.model_dump() | changes
        self.settings = FaultSettings.model_validate(merged)
        if "rules" in changes:
            self._failing = _Counts(self.settings.rules)
        if "lost_answers" in changes:
            self._losing = _Counts(self.settings.lost_answers)
        if "changes" in changes:
            self._calls_left = [change.after_calls for change in self.settings.changes]

    def clear(self) -> None:
        """No faults at all."""
        self.settings = FaultSettings()
        self._failing = _Counts()
        self._losing = _Counts()
        self._calls_left = []

    def delay_s(self, method: str, path: str, *, batch_writes: bool = False) -> float:
        """The delay before handling a request: ``latency_ms``, plus ``write_latency_ms`` for
        a write (:func:`is_write`)."""
        write = is_write(method, path, batch_writes=batch_writes)
        return (self.settings.latency_ms + (self.settings.write_latency_ms if write else 0)) / 1000

    def token_revoked(self, token: str) -> bool:
        """True for a token that was revoked through ``revoked_tokens``."""
        return token in self.settings.revoked_tokens

    def failure(self, method: str, path: str) -> GraphError | None:
        """The error this call must fail with, if a rule or the random error rate says so."""
        index = self._failing.take(self.settings.rules, method, path)
        if index is not None:
            rule = self.settings.rules[index]
            return GraphError(rule.code, rule.message, subcode=rule.subcode)
        if self.settings.error_rate and self._rng.random() < self.settings.error_rate:
            return GraphError(self.settings.error_code)
        return None

    def changes_due(self, method: str, path: str) -> list[FaultChange]:
        """Count this call against every pending change; the changes it makes due (each once)."""
        due = []
        for index, change in enumerate(self.settings.changes):
            left = self._calls_left[index]
            if left <= 0 or change.path_contains not in path:
                continue
            if change.method is not None and change.method != method:
                continue
            self._calls_left[index] = left - 1
            if left == 1:
                due.append(change)
        return due

    def lost_answer(self, method: str, path: str, *, in_batch: bool) -> LostAs | None:
        """How this call's answer is lost once it has run, if a ``lost_answers`` rule says so
        (``in_batch``: the call is an item of a Batch API call)."""
        rules = self.settings.lost_answers
        index = self._losing.take(
            rules, method, path, only=lambda rule: in_batch or rule.answer != "null"
        )
        return None if index is None else rules[index].answer

    def null_item(self) -> bool:
        """True when a batch item must come back as ``null``."""
        rate = self.settings.null_item_rate
        return bool(rate) and self._rng.random() < rate

    def describe(self) -> dict[str, Any]:
        """The settings, with each rule's remaining count and tokens masked."""
        described = self.settings.model_dump()
        described["revoked_tokens"] = [_mask(token) for token in self.settings.revoked_tokens]
        for rule, remaining in zip(described["rules"], self._failing.remaining, strict=True):
            rule["remaining"] = remaining
        for lost, remaining in zip(described["lost_answers"], self._losing.remaining, strict=True):
            lost["remaining"] = remaining
        for change, left in zip(described["changes"], self._calls_left, strict=True):
            change["calls_left"] = left
        return described


def _mask(token: str) -> str:
    # Admin answers are response bodies too: never echo a token in full.
    return f"…{token[-4:]}" if len(token) > 8 else "…"
