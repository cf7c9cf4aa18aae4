"""A campaign, ad set or ad as the engine sees it: the fields the listing returned, typed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ruleengine.rules.advantage import legacy_kind

# The currencies Meta's currency table gives offset 1 — exactly these eleven: budgets and
# Insights money are whole units there (¥5000 is "5000"). Every other currency Meta
# supports has offset 100 (UGX too: Meta does not list it as zero-decimal).
ZERO_DECIMAL = frozenset(
    {"CLP", "COP", "CRC", "HUF", "ISK", "IDR", "JPY", "KRW", "PYG", "TWD", "VND"}
)


def currency_offset(currency: str | None) -> int:
    """How many budget units make one currency unit (100 for USD cents, 1 for JPY)."""
    return 1 if (currency or "").upper() in ZERO_DECIMAL else 100


def parse_meta_time(value: str) -> datetime:
    """Meta's ``2026-10-01T09:30:00+0000`` (or ISO 8601) as an aware datetime."""
    return datetime.fromisoformat(value.replace("+0000", "+00:00"))


class Entity(BaseModel):
    """A campaign, ad set or ad from the entity listing (an ad has no budget).

    Budgets are integers in the account currency's minor unit, as Meta sends them
    (Meta sends them as strings); ``None`` when the object has no such budget.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    name: str = ""
    status: str | None = None
    effective_status: str | None = None
    created_time: datetime | None = None
    daily_budget: int | None = None
    lifetime_budget: int | None = None
    budget_remaining: int | None = Field(default=None)
    campaign_id: str | None = None
    adset_id: str | None = None
    #: A campaign's Advantage+ state (``rules/advantage.py``); an ad set's or ad's come in
    #: ``campaign`` (the listing's ``campaign{…}`` expansion).
    smart_promotion_type: str | None = None
    advantage_state_info: dict[str, Any] | None = None
    is_adset_budget_sharing_enabled: bool | None = None
    campaign: dict[str, Any] | None = None

    @field_validator("created_time", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return parse_meta_time(value) if isinstance(value, str) else value

    @field_validator("daily_budget", "lifetime_budget", "budget_remaining", mode="before")
    @classmethod
    def _budget(cls, value: Any) -> Any:
        # Meta sends "0" for a budget the object does not use.
        if value in (None, "", "0", 0):
            return None
        return int(value)

    @property
    def legacy_advantage(self) -> str | None:
        """What kind of legacy Advantage+ campaign this is (or belongs to), if it is one."""
        return legacy_kind(self.model_dump(exclude_none=True))

    def snapshot(self) -> dict[str, Any]:
        """The entity as stored in execution records (JSON-ready)."""
        return self.model_dump(mode="json", exclude_none=True)
