"""Spacing Insights calls out as Meta's Insights throttle header nears its limit.

Every Insights response carries ``X-FB-Ads-Insights-Throttle`` (the app's and the ad
account's share of the Insights load allowance). Meta's advice is to slow down before
100 % rather than be refused (code 4, subcodes 1504022/1504039): from
``slowdown_pct`` on, each Insights call waits first, from nothing at ``slowdown_pct``
up to ``max_wait_s`` at 100 %. Callers wait one after another, so concurrent chunks
are spaced out too, not released together.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ruleengine.meta.http import GraphSession, InsightsThrottle

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


def pace_wait_s(throttle: InsightsThrottle, *, slowdown_pct: float, max_wait_s: float) -> float:
    """How long to wait before the next Insights call at this throttle (pure)."""
    pct = throttle.max_pct
    if pct < slowdown_pct or max_wait_s <= 0:
        return 0.0
    share = min(1.0, (pct - slowdown_pct) / (100.0 - slowdown_pct))
    return round(max_wait_s * share, 3)


class InsightsPacer:
    """Waits before Insights calls while an ad account's Insights load is high.

    Args:
        session: where the latest throttle of each ad account is kept.
        slowdown_pct: the load from which calls are spaced out.
        max_wait_s: the wait at 100 % (bounded by the caller, e.g. by the rate-limit cap).
        sleep: how to wait (tests pass a recorder).
    """

    def __init__(
        self,
        session: GraphSession,
        *,
        slowdown_pct: float,
        max_wait_s: float,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.session = session
        self.slowdown_pct = slowdown_pct
        self.max_wait_s = max_wait_s
        self.sleep = sleep
        self._turn = asyncio.Lock()

    async def before_call(self, account_id: str | None) -> float:
        """Wait as the last throttle Meta reported for ``account_id`` asks; the wait in s."""
        async with self._turn:
            throttle = self.session.insights_throttle(account_id)
            wait = pace_wait_s(throttle, slowdown_pct=self.slowdown_pct, max_wait_s=self.max_wait_s)
            if wait > 0:
                log.info(
                    "Insights load at %.0f%% for %s: waiting %.1fs before the next call",
                    throttle.max_pct,
                    account_id or "the app",
                    wait,
                )
                await self.sleep(wait)
            return wait
