"""Splitting delivery totals into parts that add up exactly: the ads of an ad set, the cells
of a breakdown (ages, genders, placements).

Every count is shared out by D'Hondt's method (highest averages) over integer weights. It
gives each part at least the floor of its proportional share, the parts always add up to
the total, and it is *house monotone*: a bigger total never gives any part less. The last
property is what lets a part's numbers grow through the day like its whole's — an hour of
an ad is what the ad had by the hour's end less what it had by its start, never negative.

Counts are shared in three groups, each with its own weights, so parts differ in
click-through and conversion rates and not only in size: delivery (spend, impressions,
reach), clicks (clicks, unique clicks, link clicks, landing page views) and conversions
(add-to-carts, checkouts, purchases, leads). Within a group every count uses the same
weights, so a part never gets more link clicks than clicks or more purchases than
add-to-carts when its whole does not. Purchase value follows the purchases at the whole's
value per purchase. Pure: no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from graph_sandbox.delivery import ZERO, Totals

#: Weights stay below this, and totals shared with floats below ``FLOAT_TOTAL``: two
#: different averages ``w/k`` of such weights and divisors then differ by more than a
#: float's rounding (``w·k < 2**52``), so the order of their floats is their exact order.
#: A bigger total (never a day's count in practice) is shared with exact fractions.
MAX_WEIGHT = 2**24
FLOAT_TOTAL = 2**28

_DELIVERY = ("spend_cents", "impressions", "reach")
_CLICKS = ("clicks", "unique_clicks", "link_clicks", "landing_page_views")
_CONVERSIONS = ("add_to_cart", "initiate_checkout", "purchases", "leads")


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` shared between parts in proportion to ``weights`` (D'Hondt), exactly.

    Ties go to the earlier part. A part of weight 0 gets nothing.

    Raises:
        ValueError: a negative total or weight, a weight of ``MAX_WEIGHT`` or more, or a
            positive total with no positive weight.
    """
    if total < 0 or any(not 0 <= weight < MAX_WEIGHT for weight in weights):
        raise ValueError("a total and its weights must be non-negative (weights < 2**24)")
    whole = sum(weights)
    if total == 0:
        return [0] * len(weights)
    if whole == 0:
        raise ValueError("a positive total needs a positive weight to go to")
    # D'Hondt never gives a part less than the floor of its share: start there, then hand out
    # the few that are left (fewer than there are parts) by the highest next average.
    shares = [total * weight // whole for weight in weights]
    left = total - sum(shares)
    average = _float_average if total < FLOAT_TOTAL else _exact_average
    heap = [
        (average(weight, share), index)
        for index, (weight, share) in enumerate(zip(weights, shares, strict=True))
        if weight
    ]
    heapq.heapify(heap)
    for _ in range(left):
        _, index = heapq.heappop(heap)
        shares[index] += 1
        heapq.heappush(heap, (average(weights[index], shares[index]), index))
    return shares


def _float_average(weight: int, share: int) -> float:
    """The next average of a part, negated (the heap pops the smallest first)."""
    return -weight / (share + 1)


def _exact_average(weight: int, share: int) -> Fraction:
    return -Fraction(weight, share + 1)


@dataclass(frozen=True)
class Weights:
    """The weights of each part for the three groups of counts (parts in the same order)."""

    delivery: tuple[int, ...]
    clicks: tuple[int, ...]
    conversions: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.delivery)

    def only(self, keep: Sequence[bool]) -> Weights:
        """The same weights with the parts not kept set to 0 (they get nothing)."""

        def masked(values: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(value if kept else 0 for value, kept in zip(values, keep, strict=True))

        return Weights(masked(self.delivery), masked(self.clicks), masked(self.conversions))


def split(totals: Totals, weights: Weights) -> list[Totals]:
    """``totals`` shared between the parts of ``weights``; the parts add up to ``totals``.

    Raises:
        ValueError: a count to share while every weight of its group is 0.
    """
    if totals == ZERO:
        return [ZERO] * len(weights)
    columns: dict[str, list[int]] = {}
    for names, group in (
        (_DELIVERY, weights.delivery),
        (_CLICKS, weights.clicks),
        (_CONVERSIONS, weights.conversions),
    ):
        for name in names:
            columns[name] = apportion(getattr(totals, name), group)
    per_purchase = totals.purchase_value_cents // totals.purchases if totals.purchases else 0
    columns["purchase_value_cents"] = [n * per_purchase for n in columns["purchases"]]
    return [
        Totals(**{name: values[index] for name, values in columns.items()})
        for index in range(len(weights))
    ]
