"""The rows of an Insights request, before they are rendered: ad sets and ads grouped by
``level``, sliced by period, hour or breakdown cell, each row kept as parts per
optimisation goal (its results are counted per goal).

A row of an account, a campaign or an ad set exists when its group had impressions in
the slice, as before ads were measured. A row of an ad, or of a breakdown cell, exists
when the row it is part of does (its ad set's, its group's) and it delivered anything at
all (any count above zero): that way the rows of a breakdown, and the ads of an ad set,
always add up exactly to the row they break down, even in a slice where a part had a
cent of spend but no impression.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from graph_sandbox.attribution_lag import Curve
from graph_sandbox.breakdowns import NO_BREAKDOWNS, CellBreakdown
from graph_sandbox.delivery import ZERO, Totals, add
from graph_sandbox.insights import InsightsEngine
from graph_sandbox.insights_params import Slicing, hour_label
from graph_sandbox.periods import Period
from graph_sandbox.results import default_goal
from graph_sandbox.world import Account, AdObject, World

#: ``(optimisation goal, totals)``: a row's delivery for one goal among its ad sets.
Part = tuple[str, Totals]


@dataclass(frozen=True)
class Query:
    """What to compute: the ad sets (and at level ``ad`` the ads) that pass the filters.

    Attributes:
        level: ``account``, ``campaign``, ``adset`` or ``ad``.
        account: The ad account of the node.
        adsets: The ad sets measured, in account order.
        ads: At level ``ad``, the chosen ads of each ad set (by ad set id).
        slicing: Periods and breakdowns.
        now: The sandbox clock's instant.
        lag: The attribution-lag curve in force, if any.
    """

    level: str
    account: Account
    adsets: list[AdObject]
    ads: dict[str, list[AdObject]]
    slicing: Slicing
    now: datetime
    lag: Curve | None


@dataclass
class Row:
    """One row before rendering: its paging key, the object it is about (or the account),
    its period, its parts per goal and its breakdown columns."""

    key: str
    group: str
    period: Period
    parts: list[Part]
    extra: dict[str, str] = field(default_factory=dict)

    @cached_property
    def totals(self) -> Totals:
        """The row's delivery over every goal."""
        total = ZERO
        for _, part in self.parts:
            total = add(total, part)
        return total


def goal_of(adset: AdObject) -> str:
    """An ad set's optimisation goal (its objective's default for one built without)."""
    return adset.optimization_goal or default_goal(adset.objective)


def delivered(totals: Totals) -> bool:
    """True when any count is above zero (reach aside, which follows impressions)."""
    return any(value for name, value in totals._asdict().items() if name != "reach")


def rows(engine: InsightsEngine, world: World, query: Query) -> Iterator[Row]:
    """Every row with delivery: period by period, then group by group, then hour or cell."""
    breakdowns = query.slicing.breakdowns
    sliced = len(query.slicing.periods) > 1 or breakdowns != NO_BREAKDOWNS
    for period in query.slicing.periods:
        compute = _Slice(engine, world, query, period, sliced)
        if query.level == "ad":
            yield from compute.ad_rows()
        elif breakdowns.cells is not None:
            yield from compute.cell_rows(breakdowns.cells)
        elif breakdowns.hourly is not None:
            yield from compute.hourly_rows(breakdowns.hourly)
        else:
            yield from compute.plain_rows()


def _no_unique_people(totals: Totals) -> Totals:
    # Meta counts no unique people within an hourly breakdown.
    return totals._replace(reach=0, unique_clicks=0)


@dataclass
class _Slice:
    """The rows of one period."""

    engine: InsightsEngine
    world: World
    query: Query
    period: Period
    sliced: bool

    def _key(self, group: str, tail: object) -> str:
        return f"{group}|{self.period[0]}|{tail}" if self.sliced else group

    def _groups(self) -> dict[str, list[AdObject]]:
        groups: dict[str, list[AdObject]] = {}
        for adset in self.query.adsets:
            if self.query.level == "account":
                key = self.query.account.id
            elif self.query.level == "campaign":
                key = adset.campaign_id or adset.id
            else:
                key = adset.id
            groups.setdefault(key, []).append(adset)
        return groups

    def _by_goal(
        self, members: Sequence[AdObject], compute: Callable[[list[AdObject]], Totals]
    ) -> list[Part]:
        goals: dict[str, list[AdObject]] = {}
        for adset in members:
            goals.setdefault(goal_of(adset), []).append(adset)
        return [(goal, compute(adsets)) for goal, adsets in goals.items()]

    def plain_rows(self) -> Iterator[Row]:
        """A row per group with impressions."""
        q = self.query
        for group, members in self._groups().items():
            parts = self._by_goal(
                members, lambda adsets: self.engine.totals(adsets, self.period, q.now, lag=q.lag)
            )
            row = Row(self._key(group, None), group, self.period, parts)
            if row.totals.impressions:
                yield row

    def hourly_rows(self, name: str) -> Iterator[Row]:
        """A row per group and hour with impressions."""
        q = self.query
        for group, members in self._groups().items():
            goals: dict[str, list[AdObject]] = {}
            for adset in members:
                goals.setdefault(goal_of(adset), []).append(adset)
            hours = {
                goal: self.engine.hourly_totals(adsets, self.period, q.now, lag=q.lag)
                for goal, adsets in goals.items()
            }
            for hour in range(24):
                parts = [
                    (goal, _no_unique_people(by_hour[hour])) for goal, by_hour in hours.items()
                ]
                row = Row(
                    self._key(group, hour), group, self.period, parts, {name: hour_label(hour)}
                )
                if row.totals.impressions:
                    yield row

    def cell_rows(self, cells: CellBreakdown) -> Iterator[Row]:
        """A row per group and breakdown cell that delivered, when the group had impressions."""
        q = self.query
        for group, members in self._groups().items():
            labels: dict[tuple[str, ...], dict[str, Totals]] = {}
            for adset in members:
                per_ad = self.engine.ad_cells(adset, self.period, q.now, cells.family, lag=q.lag)
                for ad_cells in per_ad:
                    self._add_cells(labels, cells, goal_of(adset), ad_cells)
            yield from self._cell_group(group, cells, labels)

    def _add_cells(
        self,
        labels: dict[tuple[str, ...], dict[str, Totals]],
        cells: CellBreakdown,
        goal: str,
        values: list[Totals],
    ) -> None:
        for cell, value in zip(cells.cells(), values, strict=True):
            by_goal = labels.setdefault(cells.label(cell), {})
            by_goal[goal] = add(by_goal.get(goal, ZERO), value)

    def _cell_group(
        self,
        group: str,
        cells: CellBreakdown,
        labels: dict[tuple[str, ...], dict[str, Totals]],
        *,
        parent_delivered: bool | None = None,
    ) -> Iterator[Row]:
        built = [
            Row(
                self._key(group, "/".join(label)),
                group,
                self.period,
                list(by_goal.items()),
                cells.row_values(label),
            )
            for label, by_goal in labels.items()
        ]
        if parent_delivered is None:
            parent_delivered = sum(row.totals.impressions for row in built) > 0
        if parent_delivered:
            yield from (row for row in built if delivered(row.totals))

    def ad_rows(self) -> Iterator[Row]:
        """A row per chosen ad (and hour or cell) that delivered, when its ad set had
        impressions."""
        q = self.query
        breakdowns = q.slicing.breakdowns
        for adset in q.adsets:
            chosen = q.ads.get(adset.id, [])
            if not chosen:
                continue
            if breakdowns.cells is not None:
                yield from self._ad_cell_rows(adset, chosen, breakdowns.cells)
            elif breakdowns.hourly is not None:
                yield from self._ad_hourly_rows(adset, chosen, breakdowns.hourly)
            else:
                per_ad = self.engine.ad_totals(adset, self.period, q.now, lag=q.lag)
                if not sum(part.impressions for part in per_ad):
                    continue
                for ad in chosen:
                    value = per_ad[self._index(adset, ad)]
                    if delivered(value):
                        yield Row(
                            self._key(ad.id, None), ad.id, self.period, [(goal_of(adset), value)]
                        )

    def _index(self, adset: AdObject, ad: AdObject) -> int:
        return self.world.ads_of(adset.id).index(ad)

    def _ad_hourly_rows(self, adset: AdObject, chosen: list[AdObject], name: str) -> Iterator[Row]:
        q = self.query
        hours = self.engine.ad_hourly_totals(adset, self.period, q.now, lag=q.lag)
        for ad in chosen:
            index = self._index(adset, ad)
            for hour, by_ad in enumerate(hours):
                value = _no_unique_people(by_ad[index])
                if sum(part.impressions for part in by_ad) and delivered(value):
                    extra = {name: hour_label(hour)}
                    row = Row(
                        self._key(ad.id, hour), ad.id, self.period, [(goal_of(adset), value)], extra
                    )
                    yield row

    def _ad_cell_rows(
        self, adset: AdObject, chosen: list[AdObject], cells: CellBreakdown
    ) -> Iterator[Row]:
        q = self.query
        per_ad = self.engine.ad_cells(adset, self.period, q.now, cells.family, lag=q.lag)
        adset_delivered = sum(value.impressions for ad_cells in per_ad for value in ad_cells) > 0
        for ad in chosen:
            ad_cells = per_ad[self._index(adset, ad)]
            labels: dict[tuple[str, ...], dict[str, Totals]] = {}
            self._add_cells(labels, cells, goal_of(adset), ad_cells)
            ad_delivered = adset_delivered and any(delivered(value) for value in ad_cells)
            yield from self._cell_group(ad.id, cells, labels, parent_delivered=ad_delivered)
