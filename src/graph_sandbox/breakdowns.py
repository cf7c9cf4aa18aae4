"""Insights breakdowns the sandbox computes, and the combinations Graph takes.

By hour of the day (``hourly_stats_aggregated_by_advertiser_time_zone`` or
``…_by_audience_time_zone``, alone), by placement (``publisher_platform``, alone or with
``platform_position``) and by people (``age``, ``gender``, alone or together). Graph takes
only some combinations of breakdown columns (its "Combining Breakdowns" list); another
answers its error 100 "Current combination of data breakdown columns (…) is invalid", the
columns listed with the action breakdowns in force, in alphabetical order.

A placement or people breakdown shares out each ad's day (:mod:`graph_sandbox.split`)
between the finest cells of its family — every (platform, position), every (age, gender)
— with weights drawn from the seed and the ad set, so an audience keeps its shape from day
to day; a coarser breakdown (``publisher_platform`` alone, ``age`` alone) adds up the
finest cells. The rows of a breakdown therefore add up exactly to the row without it, and
a campaign's rows to its ad sets'. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final

from graph_sandbox.errors import invalid_param
from graph_sandbox.split import Weights

HOURLY: Final = (
    "hourly_stats_aggregated_by_advertiser_time_zone",
    "hourly_stats_aggregated_by_audience_time_zone",
)
PLACEMENT: Final = ("publisher_platform", "platform_position")
PEOPLE: Final = ("age", "gender")
COMPUTED: Final = frozenset((*HOURLY, *PLACEMENT, *PEOPLE))
#: The combinations of Meta's list the sandbox computes (as sets of breakdowns).
ALLOWED: Final = frozenset(
    frozenset(combination)
    for combination in (
        (),
        (HOURLY[0],),
        (HOURLY[1],),
        ("publisher_platform",),
        ("publisher_platform", "platform_position"),
        ("age",),
        ("gender",),
        ("age", "gender"),
    )
)

# The finest cells of each family and their typical share of delivery.
_PLACEMENTS: Final = (
    (("facebook", "feed"), 0.30),
    (("facebook", "facebook_reels"), 0.08),
    (("facebook", "facebook_stories"), 0.07),
    (("facebook", "marketplace"), 0.05),
    (("facebook", "video_feeds"), 0.04),
    (("facebook", "right_hand_column"), 0.03),
    (("instagram", "feed"), 0.18),
    (("instagram", "instagram_stories"), 0.10),
    (("instagram", "instagram_reels"), 0.09),
    (("instagram", "instagram_explore"), 0.03),
    (("audience_network", "an_classic"), 0.02),
    (("messenger", "messenger_inbox"), 0.01),
)
_AGES: Final = (
    ("18-24", 0.14),
    ("25-34", 0.30),
    ("35-44", 0.24),
    ("45-54", 0.15),
    ("55-64", 0.10),
    ("65+", 0.07),
)
_GENDERS: Final = (("female", 0.52), ("male", 0.45), ("unknown", 0.03))
_PEOPLE_CELLS: Final = tuple(
    ((age, gender), age_share * gender_share)
    for age, age_share in _AGES
    for gender, gender_share in _GENDERS
)


@dataclass(frozen=True)
class CellBreakdown:
    """A placement or people breakdown: its columns, in the order of its family."""

    names: tuple[str, ...]

    @property
    def family(self) -> tuple[str, ...]:
        """All the columns of the family (the finest cells' keys)."""
        return PLACEMENT if self.names[0] in PLACEMENT else PEOPLE

    def cells(self) -> tuple[tuple[str, ...], ...]:
        """The finest cells, in a fixed order."""
        table = _PLACEMENTS if self.family == PLACEMENT else _PEOPLE_CELLS
        return tuple(cell for cell, _ in table)

    def label(self, cell: tuple[str, ...]) -> tuple[str, ...]:
        """The values of the requested columns for a finest cell."""
        return tuple(
            value for name, value in zip(self.family, cell, strict=True) if name in self.names
        )

    def row_values(self, label: tuple[str, ...]) -> dict[str, str]:
        """The breakdown's columns of a row, e.g. ``{"age": "25-34", "gender": "female"}``."""
        return dict(zip(self.names, label, strict=True))


@dataclass(frozen=True)
class Breakdowns:
    """What ``breakdowns`` asks for: the hourly breakdown's name, or cells, or neither."""

    hourly: str | None = None
    cells: CellBreakdown | None = None


#: A request without breakdowns.
NO_BREAKDOWNS: Final = Breakdowns()


def parse_breakdowns(values: Sequence[str], *, action_columns: Collection[str]) -> Breakdowns:
    """Check the breakdowns (already Graph's values) against what the sandbox computes and
    the combinations Graph takes.

    Args:
        values: The ``breakdowns`` parameter's values.
        action_columns: The action breakdowns in force, which Meta lists in its error.

    Raises:
        GraphError: 100 for a breakdown the sandbox cannot compute, or a combination Graph
            refuses (Meta's message).
    """
    chosen = frozenset(values)
    unsupported = [value for value in values if value not in COMPUTED]
    if unsupported:
        raise invalid_param(
            f"breakdowns {unsupported[0]} is not supported by the sandbox; it computes "
            f"{', '.join(sorted(COMPUTED))}"
        )
    if chosen not in ALLOWED:
        columns = ", ".join(sorted(chosen | set(action_columns)))
        raise invalid_param(f"Current combination of data breakdown columns ({columns}) is invalid")
    hourly = next((value for value in values if value in HOURLY), None)
    family = PLACEMENT if chosen & set(PLACEMENT) else PEOPLE
    names = tuple(name for name in family if name in chosen)
    return Breakdowns(hourly=hourly, cells=CellBreakdown(names) if names else None)


@cache
def cell_weights(seed: int, adset_id: str, family: tuple[str, ...]) -> Weights:
    """An ad set's weights over its family's finest cells: the typical shares, varied by the
    seed and the ad set (delivery ×0.7–1.3, and each cell's click and conversion rates)."""
    table = _PLACEMENTS if family == PLACEMENT else _PEOPLE_CELLS
    delivery, clicks, conversions = [], [], []
    for index, (_, share) in enumerate(table):
        digest = hashlib.blake2b(
            f"{seed}|cell|{adset_id}|{family[0]}|{index}".encode(), digest_size=12
        ).digest()
        n0, n1, n2 = (int.from_bytes(digest[i : i + 4], "little") / 2.0**32 for i in (0, 4, 8))
        weight = max(1, round(1000 * share * (0.7 + 0.6 * n0)))
        delivery.append(weight)
        clicks.append(weight * (70 + int(61 * n1)))
        conversions.append(clicks[-1] * (60 + int(81 * n2)))
    return Weights(tuple(delivery), tuple(clicks), tuple(conversions))
