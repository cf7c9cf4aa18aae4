"""What sets an ad apart from its siblings: its weights in its ad set's delivery, and Meta's
three ad relevance rankings.

An ad delivers a share of its ad set's delivery (:mod:`graph_sandbox.split`): its
``delivery`` weight sizes its share of spend and impressions, ``clicks`` (70–130, 100 is
its ad set's rate) its click-through rate, ``conversions`` (60–140) its conversion rate. The
weights come from the seed and the ad's id — a copy keeps its source's, as a copy shows
the same creative — unless the admin API set them. The rankings follow from them:
``engagement_rate_ranking`` from ``clicks``, ``conversion_rate_ranking`` from
``conversions``, ``quality_ranking`` from ``quality`` (a percentile in [0, 1)); an ad with
fewer than 500 impressions in the row is ``UNKNOWN``, as Meta ranks only ads with enough.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from graph_sandbox.split import Weights

#: The bounds of each weight (inclusive).
DELIVERY_RANGE: Final = (40, 160)
CLICKS_RANGE: Final = (70, 130)
CONVERSIONS_RANGE: Final = (60, 140)
#: Meta's ranking values, worst first, and the percentile each one starts at.
RANKINGS: Final = (
    ("BELOW_AVERAGE_10", 0.0),
    ("BELOW_AVERAGE_20", 0.10),
    ("BELOW_AVERAGE_35", 0.20),
    ("AVERAGE", 0.35),
    ("ABOVE_AVERAGE", 0.55),
)
UNKNOWN: Final = "UNKNOWN"
#: Fewer impressions than this and Meta does not rank an ad.
MIN_RANKED_IMPRESSIONS: Final = 500
RANKING_FIELDS: Final = ("quality_ranking", "engagement_rate_ranking", "conversion_rate_ranking")


@dataclass(frozen=True)
class AdFactors:
    """One ad's weights in its ad set's delivery and its quality percentile."""

    delivery: int
    clicks: int
    conversions: int
    quality: float

    def __post_init__(self) -> None:
        for name, (low, high) in (
            ("delivery", DELIVERY_RANGE),
            ("clicks", CLICKS_RANGE),
            ("conversions", CONVERSIONS_RANGE),
        ):
            if not low <= getattr(self, name) <= high:
                raise ValueError(f"{name} must be an integer from {low} to {high}")
        if not 0 <= self.quality < 1:
            raise ValueError("quality must be a percentile from 0 to below 1")


def seeded_factors(seed: int, ad_id: str) -> AdFactors:
    """The factors the seed gives an ad."""
    digest = hashlib.blake2b(f"{seed}|ad|{ad_id}".encode(), digest_size=16).digest()
    draws = [int.from_bytes(digest[i : i + 4], "little") / 2.0**32 for i in range(0, 16, 4)]

    def within(bounds: tuple[int, int], draw: float) -> int:
        return bounds[0] + int(draw * (bounds[1] - bounds[0] + 1))

    return AdFactors(
        delivery=within(DELIVERY_RANGE, draws[0]),
        clicks=within(CLICKS_RANGE, draws[1]),
        conversions=within(CONVERSIONS_RANGE, draws[2]),
        quality=draws[3],
    )


def weights(factors: list[AdFactors]) -> Weights:
    """The split weights of ads with these factors (in the same order)."""
    return Weights(
        delivery=tuple(f.delivery for f in factors),
        clicks=tuple(f.delivery * f.clicks for f in factors),
        conversions=tuple(f.delivery * f.clicks * f.conversions for f in factors),
    )


def _ranking(percentile: float) -> str:
    value = RANKINGS[0][0]
    for name, start in RANKINGS:
        if percentile >= start:
            value = name
    return value


def rankings(factors: AdFactors, impressions: int) -> dict[str, str]:
    """The three rankings of an ad with ``impressions`` in the row."""
    if impressions < MIN_RANKED_IMPRESSIONS:
        return dict.fromkeys(RANKING_FIELDS, UNKNOWN)
    clicks = (factors.clicks - CLICKS_RANGE[0]) / (CLICKS_RANGE[1] - CLICKS_RANGE[0] + 1)
    conversions = (factors.conversions - CONVERSIONS_RANGE[0]) / (
        CONVERSIONS_RANGE[1] - CONVERSIONS_RANGE[0] + 1
    )
    return {
        "quality_ranking": _ranking(factors.quality),
        "engagement_rate_ranking": _ranking(clicks),
        "conversion_rate_ranking": _ranking(conversions),
    }
