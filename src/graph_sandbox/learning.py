"""An ad set's learning phase (``learning_stage_info``), computed from its delivery and the clock.

Meta's documented rule: an ad set learns from its creation or its last *significant edit*
until it has had about 50 optimisation events; if 7 days pass without them it is "learning
limited" (``FAIL``). Which edits are significant is decided where they are made
(:func:`is_significant`, called by the write path); this module only counts the events
delivered since the last one. Nothing is stored: the stage is recomputed at every read,
so it moves with the clock like the Insights do.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from graph_sandbox.delivery import Totals
from graph_sandbox.insights import InsightsEngine
from graph_sandbox.results import GOALS, default_goal
from graph_sandbox.timeline import day_window
from graph_sandbox.world import ACTIVE, AdObject, World

#: Optimisation events an ad set needs to exit learning, and the days it has to get them.
EXIT_EVENTS = 50
WINDOW = timedelta(days=7)
#: A budget (or bid) change by more than this share of the value before it is significant.
SIGNIFICANT_CHANGE = 0.2
#: An ad set paused at least this long restarts learning when it is activated again.
LONG_PAUSE = timedelta(days=7)
#: What the sandbox reports: Meta's default attribution setting.
ATTRIBUTION_WINDOWS = ["7d_click", "1d_view"]


def is_significant(obj: AdObject, name: str, old: Any, new: Any) -> bool:
    """True when changing ``name`` of an ad set (or a campaign's shared budget) from ``old``
    to ``new`` restarts learning: a budget or bid moved by more than 20 %, or another
    optimisation goal (the event it learns about changes).

    (A long pause is decided from the status log, :func:`after_long_pause`.)
    """
    if name == "optimization_goal":
        return bool(old != new)
    if name not in ("daily_budget", "lifetime_budget", "bid_amount"):
        return False
    if not isinstance(old, int) or not isinstance(new, int) or old <= 0:
        return False
    return abs(new - old) > old * SIGNIFICANT_CHANGE


def after_long_pause(world: World, obj: AdObject, at: datetime) -> bool:
    """True when activating ``obj`` at ``at`` ends a pause of :data:`LONG_PAUSE` or more
    (a pause the status log knows of: a scenario's paused ad set counts as paused since
    the day of its first logged change, as :mod:`graph_sandbox.timeline` has it)."""
    pauses = [change.at for change in world.status_log(obj.id) if change.after != ACTIVE]
    return bool(pauses) and at - pauses[-1] >= LONG_PAUSE


def learning_since(world: World, adset: AdObject, now: datetime) -> datetime:
    """When the ad set's current learning started: its creation or its last significant edit
    (logged, or the scenario's edit ``n`` days ago) that is not after ``now``."""
    starts = [adset.created_time, *(at for at in world.significant_edits(adset.id) if at <= now)]
    days_ago = world.edited_days_ago.get(adset.id)
    if days_ago is not None:
        tz = world.account_of(adset).tz
        day = now.astimezone(tz).date() - timedelta(days=days_ago)
        starts.append(day_window(day, tz)[0])
    return max(start for start in starts if start <= now) if adset.created_time <= now else now


def optimisation_events(adset: AdObject, totals: Totals) -> int:
    """The events the ad set optimises for (its results): purchases, leads, people reached…"""
    return GOALS[adset.optimization_goal or default_goal(adset.objective)].count(totals)


def events_between(
    insights: InsightsEngine, world: World, adset: AdObject, start: datetime, end: datetime
) -> int:
    """Optimisation events the ad set delivered in ``[start, end)`` (conversions as
    delivered, not as attribution lag shows them)."""
    if end <= start:
        return 0
    tz = world.account_of(adset).tz
    period = (start.astimezone(tz).date(), end.astimezone(tz).date())
    by_end = insights.adset_totals(adset, period, end)
    by_start = insights.adset_totals(adset, period, start)
    return max(0, optimisation_events(adset, by_end) - optimisation_events(adset, by_start))


def stage_info(
    world: World, insights: InsightsEngine, adset: AdObject, now: datetime
) -> dict[str, Any] | None:
    """Meta's ``learning_stage_info`` of an ad set at ``now``; None unless it is delivering
    (Meta returns it for active ad sets only)."""
    if adset.kind != "adset" or world.effective_status(adset) != ACTIVE:
        return None
    since = learning_since(world, adset, now)
    window_end = since + WINDOW
    events = events_between(insights, world, adset, since, min(now, window_end))
    if events >= EXIT_EVENTS:
        status, conversions = "SUCCESS", 0  # Meta reports 0 once the ad set has exited
    else:
        status, conversions = ("FAIL" if now >= window_end else "LEARNING"), events
    return {
        "attribution_windows": ATTRIBUTION_WINDOWS,
        "conversions": conversions,
        "last_sig_edit_ts": int(since.timestamp()),
        "status": status,
    }
