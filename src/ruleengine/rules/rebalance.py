"""Planning ``rebalance_budget``, pure: which budgets of one run's group move, and by how much.

The entities one task matched in one run are ranked by the action's metric (better first,
ties by id); daily budget moves from the worst to the best, two pointers walking towards
each other, so an entity either gives or receives and a better one never gives to a worse
one. Every move is a whole number of minor units taken from one entity and added to
another: the group's total stays the same to the minor unit. Each entity moves at most its
cap (``max_change_percent`` of its live budget, the engine-wide ``max_budget_change_pct``,
and ``max_change_pct_while_learning`` for an ad set in learning, all rounded down, and what
the change budget still lets it move in 24 h, its ``room``); a donor
never goes below the lower bound (``min_budget``, the account's minimum daily budget), a
receiver never above ``max_budget``. An entity without the metric, or in learning while the
task respects the learning phase without a limit, does not move.

``give_back``: minor units an interrupted earlier rebalance of the task took from its
group and never gave (:func:`owed`); they go to the best entities first, as from a donor
worse than all, before the group's own moves. The write path and the preview plan through
:func:`plan_rebalance` (:func:`ruleengine.acting.rebalance.plan_group`); the backtest's
replay, which walks each entity through time on its own, does not plan groups yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import Final

from ruleengine.rules.plan import percent_of

#: The pseudo-member a ``give_back`` is taken from (ranked below every entity).
_OWED: Final = "\x00owed"


@dataclass(frozen=True)
class Member:
    """One entity of the group: its live daily budget (minor units), the metric that ranks it
    (None: no data), whether Meta says it is learning, and what the change budget still
    lets it move in 24 h (``room``, minor units; None: no change budget)."""

    id: str
    budget: int
    metric: float | None
    learning: bool = False
    room: int | None = None


@dataclass(frozen=True)
class Limits:
    """How far budgets may move in one run.

    Attributes:
        higher_is_better: the metric's direction (a ROAS: True; a cost: False).
        max_change_pct: the most one entity moves, in % of its live budget (the action's
            ``max_change_percent`` and the engine's cap, the smaller).
        lower: the lowest budget a donor may be left with (minor units, at least 1).
        upper: the highest budget a receiver may reach (None: no maximum).
        respect_learning: entities in learning move at most ``learning_pct`` (None: not at all).
        learning_pct: the cap while learning.
    """

    higher_is_better: bool
    max_change_pct: float
    lower: int = 1
    upper: int | None = None
    respect_learning: bool = False
    learning_pct: float | None = None


@dataclass(frozen=True)
class Move:
    """What the plan does to one entity: ``before`` → ``after`` (equal: nothing, and why)."""

    id: str
    before: int
    after: int
    metric: float | None
    reason: str | None = None
    rank: int | None = None  # 0 for the best; None: not ranked (it does not move)

    @property
    def delta(self) -> int:
        """``after - before``: negative for a donor, positive for a receiver."""
        return self.after - self.before


@dataclass(frozen=True)
class Rebalance:
    """A group's plan: one move per member (in the members' order), and the owed minor
    units it could not place (carried to the next run)."""

    moves: list[Move]
    unplaced: int = 0

    @property
    def total_before(self) -> int:
        return sum(m.before for m in self.moves)

    @property
    def total_after(self) -> int:
        return sum(m.after for m in self.moves)


def _cap(member: Member, limits: Limits) -> int | None:
    """The most ``member`` may move this run (None: it does not move)."""
    percent = limits.max_change_pct
    if member.learning and limits.respect_learning:
        if limits.learning_pct is None:
            return None
        percent = min(percent, limits.learning_pct)
    cap = percent_of(member.budget, Decimal(str(percent)), rounding=ROUND_DOWN)
    return cap if member.room is None else max(0, min(cap, member.room))


def _why_still(member: Member, limits: Limits) -> str | None:
    if member.metric is None:
        return "no_data"
    if _cap(member, limits) is None:
        return "in_learning_phase"
    return None


def plan_rebalance(members: Sequence[Member], limits: Limits, *, give_back: int = 0) -> Rebalance:
    """The moves of one group (see the module): totals equal, plus ``give_back`` placed."""
    still = {m.id: why for m in members if (why := _why_still(m, limits)) is not None}
    movable = [m for m in members if m.id not in still]
    sign = -1 if limits.higher_is_better else 1
    ranked = sorted(movable, key=lambda m: (sign * float(m.metric or 0), m.id))
    if give_back > 0:
        ranked.append(Member(_OWED, give_back, None))
    give = {m.id: _give(m, limits) for m in ranked}
    give[_OWED] = max(0, give_back)
    take = {m.id: _take(m, limits) for m in ranked}
    delta = dict.fromkeys(give, 0)
    best, worst = 0, len(ranked) - 1
    while best < worst and _better(ranked[best], ranked[worst], limits):
        giver, taker = ranked[worst].id, ranked[best].id
        amount = min(give[giver], take[taker])
        give[giver] -= amount
        take[taker] -= amount
        delta[giver] -= amount
        delta[taker] += amount
        if give[giver] == 0:
            worst -= 1
        if take[taker] == 0:
            best += 1
    rank = {m.id: index for index, m in enumerate(ranked)}
    moves = [
        Move(
            m.id, m.budget, m.budget + delta.get(m.id, 0), m.metric, still.get(m.id), rank.get(m.id)
        )
        for m in members
    ]
    return Rebalance(moves, unplaced=give[_OWED] if give_back > 0 else 0)


def _better(a: Member, b: Member, limits: Limits) -> bool:
    """True when ``a`` ranks strictly above ``b`` (the owed pseudo-member is below all)."""
    if b.id == _OWED:
        return True
    first, second = float(a.metric or 0), float(b.metric or 0)  # ranked members have one
    return first > second if limits.higher_is_better else first < second


def _give(member: Member, limits: Limits) -> int:
    cap = _cap(member, limits) or 0
    return max(0, min(cap, member.budget - limits.lower))


def _take(member: Member, limits: Limits) -> int:
    cap = _cap(member, limits) or 0
    room = cap if limits.upper is None else min(cap, limits.upper - member.budget)
    return max(0, room)


@dataclass(frozen=True)
class Previous:
    """What an earlier rebalance of the task recorded: the total its group was to keep
    (``total``), each member's budget when it planned (``befores``), and each written
    member's settled intent (``done``: the budget it left; a failed one is absent)."""

    total: int
    befores: Mapping[str, int]
    done: Mapping[str, int]
    pending: bool = False


def owed(previous: Previous | None, live: Mapping[str, int]) -> int:
    """The minor units an interrupted earlier rebalance still owes its group: ``total`` less
    what its members hold now — but only while every member holds exactly what that
    rebalance left it (someone else's change since, or an intent not yet settled, owes
    nothing: budgets are planned from live values, never from a memory of them)."""
    if previous is None or previous.pending:
        return 0
    expected = {i: previous.done.get(i, before) for i, before in previous.befores.items()}
    if any(live.get(i) != value for i, value in expected.items()):
        return 0
    return max(0, previous.total - sum(expected.values()))


def in_order(moves: Sequence[Move]) -> tuple[list[Move], list[Move]]:
    """The decreases and the increases (best first) of a plan: the decreases are written
    first, so an interruption between them never leaves the total above what it was."""
    increases = sorted((m for m in moves if m.delta > 0), key=lambda m: (m.rank or 0, m.id))
    return [m for m in moves if m.delta < 0], increases


def trimmed(increases: Sequence[Move], freed: int) -> list[Move]:
    """``increases`` (best first) cut down to ``freed`` minor units in all: what the
    decreases actually released (one refused or clamped leaves less to give)."""
    out: list[Move] = []
    for move in increases:
        amount = max(0, min(move.delta, freed))
        freed -= amount
        out.append(
            Move(move.id, move.before, move.before + amount, move.metric, move.reason, move.rank)
        )
    return out
