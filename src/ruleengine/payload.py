"""The job payloads that cross Redis, and their orjson serializer.

Jobs are serialised with orjson, never pickle: anyone who can write to Redis
must not be able to run code in a worker. A payload carries a *token
reference*, never a token.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from ruleengine.rules.entity import Entity
from ruleengine.rules.model import Rule
from ruleengine.store.credentials import token_ref


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
    entities: list[Entity]
    scheduled_at: datetime
    dispatched_at: datetime
    fence: int | None = None

    @classmethod
    def of(
        cls,
        rule: Rule,
        *,
        batch_id: str,
        rule_id: str,
        version: int,
        account: str,
        entities: list[Entity],
        scheduled_at: datetime,
        dispatched_at: datetime,
        fence: int | None = None,
    ) -> EvaluateJob:
        """The job evaluating ``rule`` (that version's full definition) on ``account``."""
        return cls(
            batch_id=batch_id,
            rule_id=rule_id,
            rule_version=version,
            rule=rule.model_dump(mode="json"),
            account=account,
            token_ref=token_ref(account),
            entities=entities,
            scheduled_at=scheduled_at,
            dispatched_at=dispatched_at,
            fence=fence,
        )

    def parsed_rule(self) -> Rule:
        """The rule snapshot as a model (it was valid when saved, so this does not fail)."""
        return Rule.model_validate(self.rule)

    def to_job(self) -> dict[str, Any]:
        """JSON-ready form for ``enqueue_job``."""
        return self.model_dump(mode="json", exclude_none=True)
