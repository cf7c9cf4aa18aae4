"""Meta's rate limits: rolling-hour call counters per app and per ad account, and their headers.

Every counted call (each sub-request of a batch too) lands in the app's window
and in the window of each ad account it touches, split by business use case
(``ads_management`` or ``ads_insights``). The usage headers report those windows
as percentages of their capacity; a call that would go over is refused with
Meta's error (4 for the app, 80004 / 80000 for an ad account). Refused calls do
not enter the windows, so a client that waits does regain access.

Insights calls also count against Meta's Insights load limit, reported on every
Insights response in ``X-FB-Ads-Insights-Throttle`` (the app's and the ad account's
share, in percent); at 100 % the call is refused with code 4, subcode 1504022 (the
app) or 1504039 (the ad account).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

import orjson

from graph_sandbox.errors import GraphError, account_throttled, budget_change_limit

#: Meta's subcodes of code 4 for its Insights load limit (app-wide, per ad account).
INSIGHTS_APP_THROTTLE_SUBCODE: Final = 1504022
INSIGHTS_ACCOUNT_THROTTLE_SUBCODE: Final = 1504039

WINDOW_S = 3600.0
#: Meta's own limit (a plain error 17 beyond it), not a setting of any client.
ADSET_BUDGET_CHANGES_PER_HOUR: Final = 4


class UseCase(StrEnum):
    """Meta's business use cases that the sandbox counts separately."""

    ADS_MANAGEMENT = "ads_management"
    ADS_INSIGHTS = "ads_insights"


# Relative cost of one call in CPU and wall time (an Insights call is heavier).
_COST = {UseCase.ADS_MANAGEMENT: (0.4, 0.5), UseCase.ADS_INSIGHTS: (1.0, 1.2)}


class RollingWindow:
    """Events of the last hour with their CPU and time costs."""

    def __init__(self) -> None:
        self._events: deque[tuple[float, float, float]] = deque()
        self.cputime = 0.0
        self.time = 0.0

    def _expire(self, now: float) -> None:
        while self._events and self._events[0][0] <= now - WINDOW_S:
            _, cpu, wall = self._events.popleft()
            self.cputime -= cpu
            self.time -= wall

    def count(self, now: float) -> int:
        """Events within the hour before ``now`` (a Unix time)."""
        self._expire(now)
        return len(self._events)

    def add(self, now: float, cputime: float = 0.0, time: float = 0.0) -> None:
        """Record one event."""
        self._expire(now)
        self._events.append((now, cputime, time))
        self.cputime += cputime
        self.time += time

    def seconds_until_below(self, now: float, capacity: int) -> float:
        """How long until fewer than ``capacity`` events remain in the window."""
        excess = self.count(now) - capacity
        if excess < 0:
            return 0.0
        return max(0.0, self._events[excess][0] + WINDOW_S - now)

    def seconds_until_empty(self, now: float) -> float:
        """How long until the window holds nothing."""
        if not self.count(now):
            return 0.0
        return max(0.0, self._events[-1][0] + WINDOW_S - now)


@dataclass
class UsageLimits:
    """Capacities per rolling hour; generous by default so tests and benchmarks never hit them."""

    app_calls_per_hour: int = 10_000_000
    account_calls_per_hour: int = 1_000_000
    # Meta's Insights load limit (X-FB-Ads-Insights-Throttle): Insights calls per rolling hour.
    insights_app_calls_per_hour: int = 10_000_000
    insights_account_calls_per_hour: int = 1_000_000


def _pct(used: float, capacity: int) -> int:
    return round(used * 100 / capacity) if capacity > 0 else 100


class UsageModel:
    """The app's and the ad accounts' rolling-hour usage.

    Args:
        limits: Capacities; change them later through ``limits``.
    """

    def __init__(self, limits: UsageLimits | None = None) -> None:
        self.limits = limits or UsageLimits()
        self._app = RollingWindow()
        self._accounts: dict[tuple[str, UseCase], RollingWindow] = {}
        self._insights_app = RollingWindow()

    def _window(self, account: str, use_case: UseCase) -> RollingWindow:
        key = (account, use_case)
        window = self._accounts.get(key)
        if window is None:
            window = self._accounts[key] = RollingWindow()
        return window

    def admit(self, now: datetime, accounts: tuple[str, ...], use_case: UseCase) -> None:
        """Count one call, or refuse it when the app or an ad account is at capacity.

        Raises:
            GraphError: 4 (app), 80004 (ads management) or 80000 (Insights).
        """
        t = now.timestamp()
        if self._app.count(t) >= self.limits.app_calls_per_hour:
            raise GraphError(4)
        for account in accounts:
            if self._window(account, use_case).count(t) >= self.limits.account_calls_per_hour:
                raise account_throttled(insights=use_case is UseCase.ADS_INSIGHTS)
        if use_case is UseCase.ADS_INSIGHTS:
            self._admit_insights(t, accounts)
        cputime, time = _COST[use_case]
        self._app.add(t, cputime, time)
        for account in accounts:
            self._window(account, use_case).add(t, cputime, time)

    def _admit_insights(self, t: float, accounts: tuple[str, ...]) -> None:
        """Refuse an Insights call at Meta's Insights load limit; else count it app-wide."""
        if self._insights_app.count(t) >= self.limits.insights_app_calls_per_hour:
            raise insights_throttled(INSIGHTS_APP_THROTTLE_SUBCODE)
        cap = self.limits.insights_account_calls_per_hour
        if any(self._window(a, UseCase.ADS_INSIGHTS).count(t) >= cap for a in accounts):
            raise insights_throttled(INSIGHTS_ACCOUNT_THROTTLE_SUBCODE)
        self._insights_app.add(t)

    def insights_throttle(self, now: datetime, accounts: tuple[str, ...]) -> dict[str, str]:
        """``X-FB-Ads-Insights-Throttle``: the Insights load of the app and the ad account."""
        t = now.timestamp()
        windows = [self._window(account, UseCase.ADS_INSIGHTS) for account in accounts]
        value = {
            "app_id_util_pct": _pct(
                self._insights_app.count(t), self.limits.insights_app_calls_per_hour
            ),
            "acc_id_util_pct": max(
                (_pct(w.count(t), self.limits.insights_account_calls_per_hour) for w in windows),
                default=0,
            ),
            "ads_api_access_tier": "standard_access",
        }
        return {"X-FB-Ads-Insights-Throttle": _json(value)}

    def headers(
        self, now: datetime, accounts: tuple[str, ...], use_case: UseCase
    ) -> dict[str, str]:
        """``X-App-Usage``, and for ad accounts ``X-Ad-Account-Usage`` and the BUC header."""
        t = now.timestamp()
        app_cap = self.limits.app_calls_per_hour
        headers = {
            "X-App-Usage": _json(
                {
                    "call_count": _pct(self._app.count(t), app_cap),
                    "total_cputime": _pct(self._app.cputime, app_cap),
                    "total_time": _pct(self._app.time, app_cap),
                }
            )
        }
        if accounts:
            headers["X-Ad-Account-Usage"] = _json(self._account_usage(t, accounts))
            buc = {acc.removeprefix("act_"): self._buc(t, acc, use_case) for acc in accounts}
            headers["X-Business-Use-Case-Usage"] = _json(buc)
        return headers

    def _account_usage(self, t: float, accounts: tuple[str, ...]) -> dict[str, object]:
        cap = self.limits.account_calls_per_hour
        windows = [self._window(acc, case) for acc in accounts for case in UseCase]
        return {
            "acc_id_util_pct": max(_pct(w.count(t), cap) for w in windows),
            "reset_time_duration": math.ceil(max(w.seconds_until_empty(t) for w in windows)),
            "ads_api_access_tier": "standard_access",
        }

    def _buc(self, t: float, account: str, current: UseCase) -> list[dict[str, int | str]]:
        cap = self.limits.account_calls_per_hour
        entries: list[dict[str, int | str]] = []
        for case in UseCase:
            window = self._window(account, case)
            if case is not current and not window.count(t):
                continue
            entries.append(
                {
                    "type": case.value,
                    "call_count": _pct(window.count(t), cap),
                    "total_cputime": _pct(window.cputime, cap),
                    "total_time": _pct(window.time, cap),
                    "estimated_time_to_regain_access": math.ceil(
                        window.seconds_until_below(t, cap) / 60
                    ),
                    "ads_api_access_tier": "standard_access",
                }
            )
        return entries

    def snapshot(self, now: datetime) -> dict[str, object]:
        """Capacities and current call counts (for ``GET /_sandbox/limits``)."""
        t = now.timestamp()
        return {
            "app_calls_per_hour": self.limits.app_calls_per_hour,
            "account_calls_per_hour": self.limits.account_calls_per_hour,
            "insights_app_calls_per_hour": self.limits.insights_app_calls_per_hour,
            "insights_account_calls_per_hour": self.limits.insights_account_calls_per_hour,
            "insights_app_calls": self._insights_app.count(t),
            "app_calls": self._app.count(t),
            "account_calls": {
                f"{acc}:{case.value}": window.count(t)
                for (acc, case), window in self._accounts.items()
                if window.count(t)
            },
        }


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


def insights_throttled(subcode: int) -> GraphError:
    """Code 4 with 1504022 (the app) or 1504039 (the ad account): Insights load at 100 %."""
    return GraphError(
        4,
        subcode=subcode,
        user_title="Too many API requests",
        user_msg="Your app has exceeded the allowed number of API requests. Wait before retrying.",
    )


class BudgetChangeLimiter:
    """Meta's rule that an ad set's budget changes at most ``per_hour`` times in a rolling hour.

    Changes made anywhere count (the API, Ads Manager). The change that would exceed
    the limit is refused with error 17, and the ad set's budget then stays blocked for
    an hour from that refusal, as Meta's rate-limiting guide says.
    """

    def __init__(self, per_hour: int = ADSET_BUDGET_CHANGES_PER_HOUR) -> None:
        self.per_hour = per_hour
        self._changes: dict[str, RollingWindow] = {}
        self._blocked_until: dict[str, datetime] = {}

    def check(self, adset_id: str, now: datetime) -> None:
        """Raise error 17 if the ad set is blocked, or if a change now would break the limit."""
        blocked = self._blocked_until.get(adset_id)
        if blocked is not None and now < blocked:
            raise budget_change_limit()
        window = self._changes.get(adset_id)
        if window is not None and window.count(now.timestamp()) >= self.per_hour:
            self._blocked_until[adset_id] = now + timedelta(seconds=WINDOW_S)
            raise budget_change_limit()

    def record(self, adset_id: str, now: datetime) -> None:
        """Remember one successful budget change."""
        self._changes.setdefault(adset_id, RollingWindow()).add(now.timestamp())
