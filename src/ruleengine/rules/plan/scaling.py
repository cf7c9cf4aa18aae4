"""Planning ``change_bid`` and ``scale_to_target``, pure: from the live value to the target.

Both actions take money in the account currency's units; the live value and the target
are in minor units, as Graph holds them. The conversion happens here, at the boundary,
with exact decimals and one rounding rule per kind of number: an upper bound rounds
**down** (``max_bid`` 2.509 USD → 250 cents: never above what was written), a lower bound
rounds **up** (``min_bid`` 0.015 → 2 cents: never below), an amount to the nearest
(half up). Offsets come from :func:`ruleengine.rules.entity.currency_offset` (100 for
cents, 1 for yen).

Like the other budget actions, a target never moves against the action's direction: a
clamp that would turn an increase into a decrease leaves the value where it is instead
(``at_max_bid``, ``at_max_budget`` …).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_DOWN, ROUND_FLOOR, ROUND_HALF_UP, Decimal

from ruleengine.rules.language.action_types import ChangeBidAction, ScaleToTargetAction
from ruleengine.rules.language.catalog import resolve_metric, scaling_direction
from ruleengine.rules.language.money import to_minor
from ruleengine.rules.language.per_currency import bare
from ruleengine.rules.plan.plan import Plan, percent_of


def _decimal(value: float) -> Decimal:
    # str() gives the shortest decimal that reads back as the same float: 2.51 → "2.51"
    return Decimal(str(value))


def upper_bound(amount: float | dict[str, float] | None, offset: int) -> int | None:
    """A maximum in minor units: rounded down, so the bound is never exceeded."""
    return None if amount is None else to_minor(amount, offset, rounding=ROUND_FLOOR)


def lower_bound(amount: float | dict[str, float] | None, offset: int) -> int:
    """A minimum in minor units (at least 1): rounded up, so the bound is never undercut."""
    return 1 if amount is None else max(1, to_minor(amount, offset, rounding=ROUND_CEILING))


def _bounded(
    value: int, lower: int, upper: int | None, names: tuple[str, str]
) -> tuple[int, list[str]]:
    if upper is not None and value > upper:
        return upper, [names[1]]
    if value < lower:
        return lower, [names[0]]
    return value, []


def _toward(target: int, live: int, sign: int) -> int:
    """``target``, but never on the wrong side of ``live`` for a move of ``sign``."""
    if sign > 0:
        return max(target, live)
    if sign < 0:
        return min(target, live)
    return live


def _why_unchanged(clamped: list[str], what: str) -> str:
    if f"max_{what}" in clamped:
        return f"at_max_{what}"
    if f"min_{what}" in clamped or "min_daily_budget" in clamped:
        return f"at_min_{what}"
    return "no_change"


def plan_bid(action: ChangeBidAction, *, live: int, offset: int) -> Plan:
    """The ``bid_amount`` to write (minor units) from the live bid.

    A percentage is rounded half up to the nearest minor unit; an ``amount`` is converted
    to the nearest. The result is clamped to ``[min_bid, max_bid]`` (and to at least one
    minor unit); a percentage change never moves against its direction.
    """
    lower = lower_bound(action.min_bid, offset)
    upper = upper_bound(action.max_bid, offset)
    if action.percent is not None:
        sign = 1 if action.direction == "increase" else -1
        requested = percent_of(live, 100 + sign * _decimal(action.percent), rounding=ROUND_HALF_UP)
    else:
        assert action.amount is not None  # the model requires one of the two
        sign = 0
        requested = to_minor(action.amount, offset, rounding=ROUND_HALF_UP)
    if upper is not None and upper < lower:  # sub-cent bounds that round past each other
        return Plan("bid_amount", live, live, requested, reason="bid_bounds_empty")
    target, clamped = _bounded(requested, lower, upper, ("min_bid", "max_bid"))
    if sign:
        target = _toward(target, live, sign)
    reason = None if target != live else _why_unchanged(clamped, "bid")
    return Plan("bid_amount", live, target, requested, clamped, reason)


def scale_ratio(action: ScaleToTargetAction, metric: float) -> Decimal:
    """How much the budget scales: ``metric / target`` where higher is better, ``target /
    metric`` for a cost. ``metric`` must be above 0."""
    direction = scaling_direction(resolve_metric(action.metric))
    value, target = _decimal(metric), _decimal(bare(action.target))
    return value / target if direction == "higher" else target / value


def plan_scale(
    action: ScaleToTargetAction,
    *,
    live: int,
    metric: float,
    offset: int,
    max_change_pct: float,
    account_minimum: int | None = None,
) -> Plan:
    """The daily budget to write (minor units): the live budget × :func:`scale_ratio`.

    Rounded half up, then clamped in this order: to ``[min_budget, max_budget]``, to
    ``max_change_percent`` of the live budget (rounded down), to the engine-wide
    ``max_budget_change_pct`` (rounded down), to the ad account's minimum daily budget;
    and never against the metric's verdict (a metric better than its target never lowers
    the budget, a worse one never raises it). ``metric`` must be above 0.
    """
    ratio = scale_ratio(action, metric)
    requested = int((Decimal(live) * ratio).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    lower = lower_bound(action.min_budget, offset)
    upper = upper_bound(action.max_budget, offset)
    if upper is not None and upper < lower:
        return Plan("daily_budget", live, live, requested, reason="budget_bounds_empty")
    # the bounds first: the per-run caps then win over them, so a budget far outside
    # [min_budget, max_budget] walks back into it run by run, never by more than a cap
    target, clamped = _bounded(requested, lower, upper, ("min_budget", "max_budget"))
    if action.max_change_percent is not None:
        target, own = _capped(target, live, action.max_change_percent, "max_change_percent")
        clamped += own
    target, engine = _capped(target, live, max_change_pct, "max_budget_change_pct")
    clamped += engine
    if account_minimum is not None and target < account_minimum:
        target, clamped = account_minimum, [*clamped, "min_daily_budget"]
    target = _toward(target, live, (ratio > 1) - (ratio < 1))
    reason = None if target != live else _why_unchanged(clamped, "budget")
    return Plan("daily_budget", live, target, requested, clamped, reason)


def _capped(target: int, live: int, percent: float, name: str) -> tuple[int, list[str]]:
    """``target`` within ``percent`` of ``live`` (the allowed change rounded down)."""
    cap = percent_of(live, _decimal(percent), rounding=ROUND_DOWN)
    if target > live + cap:
        return live + cap, [name]
    if target < live - cap:
        return max(1, live - cap), [name]
    return target, []
