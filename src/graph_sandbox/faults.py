"""Fault injection: latency, random errors, error rules, ``null`` batch items, revoked tokens,
and changes made "elsewhere" between two calls.

Randomness comes from a generator seeded with the world's seed, so a test that
sets ``error_rate`` sees the same failures on every run.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from graph_sandbox.errors import GraphError


class FaultRule(BaseModel):
    """Fail the next ``times`` calls whose path contains ``path_contains`` (``None``: forever),
    after letting the first ``skip`` of them through."""

    model_config = ConfigDict(extra="forbid")

    path_contains: str = ""
    method: Literal["GET", "POST"] | None = None
    code: int = 2
    subcode: int | None = None
    message: str | None = None
    times: int | None = Field(default=None, ge=1)
    skip: int = Field(default=0, ge=0)


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
    """True for a write: a POST to an object, or a Batch API call carrying one
    (``batch_writes``)."""
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


class Faults:
    """The faults in force, and how many more times each rule will fire.

    Args:
        seed: Seeds the generator behind ``error_rate`` and ``null_item_rate``.
    """

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"faults:{seed}")
        self.settings = FaultSettings()
        self._remaining: list[int | None] = []
        self._to_skip: list[int] = []
        self._calls_left: list[int] = []

    def update(self, changes: dict[str, Any]) -> None:
        """Replace the settings named in ``changes``, keep the others.

        Raises:
            pydantic.ValidationError: A value is out of range or a key is unknown.
        """
        merged = self.settings.model_dump() | changes
        self.settings = FaultSettings.model_validate(merged)
        if "rules" in changes:
            self._remaining = [rule.times for rule in self.settings.rules]
            self._to_skip = [rule.skip for rule in self.settings.rules]
        if "changes" in changes:
            self._calls_left = [change.after_calls for change in self.settings.changes]

    def clear(self) -> None:
        """No faults at all."""
        self.settings = FaultSettings()
        self._remaining = []
        self._to_skip = []
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
        for index, rule in enumerate(self.settings.rules):
            remaining = self._remaining[index]
            if remaining == 0 or rule.path_contains not in path:
                continue
            if rule.method is not None and rule.method != method:
                continue
            if self._to_skip[index] > 0:
                self._to_skip[index] -= 1
                continue
            if remaining is not None:
                self._remaining[index] = remaining - 1
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

    def null_item(self) -> bool:
        """True when a batch item must come back as ``null``."""
        rate = self.settings.null_item_rate
        return bool(rate) and self._rng.random() < rate

    def describe(self) -> dict[str, Any]:
        """The settings, with each rule's remaining count and tokens masked."""
        described = self.settings.model_dump()
        described["revoked_tokens"] = [_mask(token) for token in self.settings.revoked_tokens]
        for rule, remaining in zip(described["rules"], self._remaining, strict=True):
            rule["remaining"] = remaining
        for change, left in zip(described["changes"], self._calls_left, strict=True):
            change["calls_left"] = left
        return described


def _mask(token: str) -> str:
    # Admin answers are response bodies too: never echo a token in full.
    return f"…{token[-4:]}" if len(token) > 8 else "…"
