"""A small async client for the sandbox's ``/_sandbox`` admin routes (tests and benchmarks).

Usage::

    async with SandboxAdmin("http://127.0.0.1:8081") as admin:
        await admin.reset(seed=2)
        await admin.set_clock(datetime(2026, 12, 1, 15, tzinfo=UTC))
        await admin.set_faults(latency_ms=150)
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from types import TracebackType
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp

from graph_sandbox.errors import SandboxError


class SandboxAdminError(SandboxError):
    """An admin call failed; the message carries the sandbox's answer."""


class SandboxAdmin:
    """Drives one sandbox's admin routes.

    Args:
        base_url: The sandbox's root, e.g. ``http://127.0.0.1:8081`` (no version prefix).
        session: An aiohttp session to reuse; without one the client opens its own
            on first use and ``close()`` closes it.
    """

    def __init__(self, base_url: str, session: aiohttp.ClientSession | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> SandboxAdmin:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session if this client opened it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        params: dict[str, str] | None = None,
    ) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = f"{self.base_url}/_sandbox/{path}"
        async with self._session.request(method, url, json=body, params=params) as response:
            payload = await response.json(content_type=None)
            if response.status >= 400:
                raise SandboxAdminError(f"{method} {url} answered {response.status}: {payload}")
            return payload

    async def reset(self, **config: Any) -> dict[str, Any]:
        """Rebuild the world (``seed``, ``scenario``, ``accounts``, ``campaigns_per_account``,
        ``adsets_per_campaign``, ``timezones`` — ``{"act_1001": "Asia/Kolkata"}``; missing ones
        take the app's defaults) and clear everything else."""
        result: dict[str, Any] = await self._call("POST", "reset", config)
        return result

    async def world(self) -> dict[str, Any]:
        """Seed, scenario, ad account ids and object counts of the current world."""
        result: dict[str, Any] = await self._call("GET", "world")
        return result

    async def accounts(self) -> list[str]:
        """The world's ad account ids (``act_…``), without a counted Graph call."""
        return list((await self.world())["accounts"])

    async def set_faults(self, **faults: Any) -> dict[str, Any]:
        """Set ``latency_ms``, ``error_rate``, ``error_code``, ``null_item_rate``,
        ``revoked_tokens``, ``rules``, ``changes`` (status changes made "in Ads Manager" after
        a given call) or ``async_batch_delay_s``; settings not named stay as they are."""
        result: dict[str, Any] = await self._call("POST", "faults", faults)
        return result

    async def faults(self) -> dict[str, Any]:
        """The faults in force (rules with their remaining counts)."""
        result: dict[str, Any] = await self._call("GET", "faults")
        return result

    async def clear_faults(self) -> None:
        """Remove every fault."""
        await self._call("DELETE", "faults")

    async def tokens(self) -> list[dict[str, Any]]:
        """Every token the sandbox accepts: the demo tokens in full, the others masked."""
        result: list[dict[str, Any]] = await self._call("GET", "tokens")
        return result

    async def demo_token(self, account_id: str) -> str:
        """The token the sandbox issued for one ad account of its world."""
        for grant in await self.tokens():
            if grant["origin"] == "demo" and grant["accounts"] == [account_id]:
                return str(grant["token"])
        raise SandboxAdminError(f"no demo token for {account_id}")

    async def issue_token(
        self,
        token: str | None = None,
        *,
        accounts: list[str] | None = None,
        permissions: list[str] | None = None,
        expires_in_s: float | None = None,
    ) -> dict[str, Any]:
        """Register ``token`` (or let the sandbox make one up: then ``["token"]`` holds it) for
        ``accounts`` (every one when ``None``), with ``permissions`` (both by default)."""
        body: dict[str, Any] = {"token": token, "accounts": accounts, "expires_in_s": expires_in_s}
        if permissions is not None:
            body["permissions"] = permissions
        result: dict[str, Any] = await self._call("POST", "tokens", body)
        return result

    async def update_token(self, token: str, **changes: Any) -> dict[str, Any]:
        """Change a token: ``expire=True``, ``invalidate="password_changed"|"logged_out"``,
        ``permissions=[...]`` or ``restore=True``."""
        result: dict[str, Any] = await self._call(
            "POST", "tokens/update", {"token": token, **changes}
        )
        return result

    async def stats(self) -> dict[str, Any]:
        """HTTP requests, counted calls and errors since the last reset or clear."""
        result: dict[str, Any] = await self._call("GET", "stats")
        return result

    async def clear_stats(self) -> None:
        """Zero the counters (the usage model keeps its windows)."""
        await self._call("DELETE", "stats")

    async def writes(self) -> list[dict[str, Any]]:
        """Every POST to an object, in order, successful or not."""
        result: list[dict[str, Any]] = await self._call("GET", "writes")
        return result

    async def object(self, object_id: str) -> dict[str, Any]:
        """The stored campaign, ad set or ad account, raw."""
        result: dict[str, Any] = await self._call("GET", f"objects/{object_id}")
        return result

    async def clock(self) -> dict[str, Any]:
        """``{"now": iso, "frozen": bool}``."""
        result: dict[str, Any] = await self._call("GET", "clock")
        return result

    async def set_clock(self, now: datetime | None) -> dict[str, Any]:
        """Freeze the clock at ``now`` (naive means UTC), or return to real time with ``None``."""
        if now is not None and now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        body = {"now": now.isoformat() if now is not None else None}
        result: dict[str, Any] = await self._call("POST", "clock", body)
        return result

    async def advance_clock(self, seconds: float) -> dict[str, Any]:
        """Move the clock forward by ``seconds``."""
        result: dict[str, Any] = await self._call("POST", "clock", {"advance_s": seconds})
        return result

    async def set_limits(self, **limits: int) -> dict[str, Any]:
        """Set ``account_calls_per_hour``, ``app_calls_per_hour``,
        ``insights_app_calls_per_hour`` and/or ``insights_account_calls_per_hour``."""
        result: dict[str, Any] = await self._call("POST", "limits", limits)
        return result

    async def limits(self) -> dict[str, Any]:
        """Capacities and current rolling-hour call counts."""
        result: dict[str, Any] = await self._call("GET", "limits")
        return result

    async def set_insights(self, **settings: Any) -> dict[str, Any]:
        """Set ``sync_max_cells``, ``sync_timeout_subcode``, ``report_polls``,
        ``report_outcomes`` (queued for the next report runs), ``page_max_rows`` and/or
        ``attribution_lag`` (``{"enabled": True, "curve": [[0, 0.5], …, [168, 1]]}``, keys
        not named stay); others stay as they are."""
        result: dict[str, Any] = await self._call("POST", "insights", settings)
        return result

    async def insights(self) -> dict[str, Any]:
        """The Insights settings (with the attribution-lag curve), the outcomes still queued
        and the number of report runs."""
        result: dict[str, Any] = await self._call("GET", "insights")
        return result

    async def ads_manager_change(self, object_id: str, **changes: Any) -> dict[str, Any]:
        """Change ``status``, ``daily_budget``, ``lifetime_budget``, ``bid_amount``,
        ``optimization_goal`` or ``name`` of a campaign, ad set or ad (``status`` and ``name``)
        as a person in Ads Manager would: it shows in the activity log and counts toward the
        ad set's budget-change limit. A refusal raises with Meta's error."""
        result: dict[str, Any] = await self._call("POST", f"ads_manager/{object_id}", changes)
        return result

    async def set_ad_factors(self, ad_id: str, **factors: Any) -> dict[str, Any]:
        """Set an ad's weights in its ad set's delivery: ``delivery`` (40–160, its share of
        spend and impressions), ``clicks`` (70–130, its click-through rate against its
        siblings'), ``conversions`` (60–140, its conversion rate against theirs), ``quality``
        (a percentile, 0 to below 1); those not named stay. Its rankings follow; its ad
        set's numbers do not change. Returns the ad's factors."""
        result: dict[str, Any] = await self._call("POST", f"ads/{ad_id}/factors", factors)
        return result

    async def add_rule_run(self, rule_id: str, **run: Any) -> dict[str, Any]:
        """Add a run to an ad rule's history (``timestamp``, ``is_manual``, ``results``,
        ``exception_code``, ``exception_message``); the entry as ``/{rule_id}/history`` shows it."""
        body = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in run.items()}
        result: dict[str, Any] = await self._call("POST", f"adrules/{rule_id}/history", body)
        return result

    async def quality(self, object_id: str) -> dict[str, Any]:
        """The hidden quality of an ad account, campaign or ad set: ``archetype``,
        ``typical_spend_cents``, ``true_roas`` (at the budget it was built with),
        ``true_roas_now`` (at the budget in force), ``elasticity``, and each ad set's in
        ``adsets`` (with its ``budget_ratio``). Graph never shows these."""
        result: dict[str, Any] = await self._call("GET", f"quality/{object_id}")
        return result

    async def counterfactual(
        self,
        object_id: str,
        *,
        since: datetime | None = None,
        date_start: date | None = None,
        date_stop: date | None = None,
        increment: str = "all",
    ) -> dict[str, Any]:
        """What an ad account, campaign or ad set delivered, what it would have delivered
        with no Graph API write at or after ``since`` (``None``: ever; naive means UTC), and
        the difference: ``{"rows": [{"date_start", "date_stop", "hour"?, "actual",
        "counterfactual", "effect"}], …}``, each a dict of totals (money in minor units).

        ``date_start``/``date_stop`` are account-local days (default: the day of ``since``,
        or of the oldest ad set's creation, to today); ``increment`` is ``"all"`` (one row),
        ``"day"`` or ``"hour"`` (24 rows a day)."""
        query = {"increment": increment}
        if since is not None:
            query["since"] = (since if since.tzinfo else since.replace(tzinfo=UTC)).isoformat()
        if date_start is not None:
            query["date_start"] = date_start.isoformat()
        if date_stop is not None:
            query["date_stop"] = date_stop.isoformat()
        result: dict[str, Any] = await self._call(
            "GET", f"counterfactual/{object_id}", params=query
        )
        return result

    async def true_effect(
        self, object_id: str, *, since: datetime, start: datetime, end: datetime
    ) -> dict[str, Any]:
        """The true effect of the Graph API's writes at or after ``since`` on a node over the
        instants ``start`` to ``end`` (aware): the sum of ``actual − counterfactual`` over the
        account-local hours that start in that span — a half-hour zone's start at :30 UTC —
        as ``{"currency", "spend_cents", "purchases", "purchase_value_cents", …}`` (money in
        minor units, whole units for a zero-decimal currency)."""
        answer = await self.counterfactual(
            object_id,
            since=since,
            # every account-local day the span touches, whatever the zone (UTC−12…UTC+14)
            date_start=(start - timedelta(days=1)).date(),
            date_stop=(end + timedelta(days=1)).date(),
            increment="hour",
        )
        tz = ZoneInfo(answer["timezone"])
        total: dict[str, Any] = {}
        for row in answer["rows"]:
            local = datetime.combine(date.fromisoformat(row["date_start"]), time(row["hour"]), tz)
            if start <= local.astimezone(UTC) < end:
                for name, value in row["effect"].items():
                    total[name] = total.get(name, 0) + value
        return {"currency": answer["currency"], **total}
