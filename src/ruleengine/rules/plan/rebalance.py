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
worse than all, before the group's own moves. A write of that rebalance whose answer was
lost counts as it leaves the group lowest (a decrease as not made, an increase as made);
the next run carries it (:class:`Unsettled`) until its intent is settled, and the run after
that settling gives back what it then turns out to owe — so a lost answer never loses the
group budget for good. The write path and the preview plan through
:func:`plan_rebalance` (:func:`ruleengine.acting.rebalance.plan_group`); the backtest's
replay, which walks each entity through time on its own, does not plan groups yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from typing import Final

from ruleengine.rules.plan.plan import percent_of

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
class Unsettled:
    """A write of an earlier rebalance whose outcome a later run could not count (its intent
    was pending): ``batch`` and ``entity`` name the intent; the group is owed ``amount`` if
    the intent is settled ``owes_if`` — ``done`` for a decrease (it freed budget nobody was
    given), ``failed`` for an increase (budget set aside for it was never placed).
    ``status``: the intent's status as read now."""

    batch: str
    entity: str
    owes_if: str
    amount: int
    status: str = "pending"

    def as_list(self) -> list[str | int]:
        """As a plan keeps it (``unsettled`` of the intents' ``rebalance``)."""
        return [self.batch, self.entity, self.owes_if, self.amount]


@dataclass(frozen=True)
class Previous:
    """What an earlier rebalance of the task recorded: the total its group was to keep
    (``total``), each member's budget when it planned (``befores``), each written member's
    settled intent (``done``: the budget it left; a failed one is absent), the targets of
    its writes not settled yet (``pending``), its batch, and what it carried from runs
    before it (``carried``, with their intents' statuses now)."""

    total: int
    befores: Mapping[str, int]
    done: Mapping[str, int]
    pending: Mapping[str, int] = field(default_factory=dict)
    batch: str = ""
    carried: Sequence[Unsettled] = ()


@dataclass(frozen=True)
class Owed:
    """What a run gives back first (``amount``), and the writes it carries unsettled."""

    amount: int = 0
    unsettled: tuple[Unsettled, ...] = ()


def owed(previous: Previous | None, live: Mapping[str, int]) -> Owed:
    """What an earlier rebalance still owes its group: ``total`` less what its members hold
    now, plus what a carried write turned out to owe once settled — but only while every
    member holds what that rebalance left it (someone else's change since owes nothing:
    budgets are planned from live values, never from a memory of them).

    A member whose write is still pending may hold either value; it counts as the higher
    (a decrease not made, an increase made), so nothing is given back that may not be owed,
    and the write is carried (:class:`Unsettled`) until it is settled."""
    if previous is None:
        return Owed()
    expected: dict[str, int] = {}
    unsettled: list[Unsettled] = []
    for i, before in previous.befores.items():
        target = previous.pending.get(i)
        if target is None:
            expected[i] = previous.done.get(i, before)
            continue
        if live.get(i) not in (before, target):
            return Owed()
        expected[i] = max(before, target)
        owes_if = "done" if target < before else "failed"
        unsettled.append(Unsettled(previous.batch, i, owes_if, abs(target - before)))
    if any(live.get(i) != value for i, value in expected.items() if i not in previous.pending):
        return Owed()
    amount = max(0, previous.total - sum(expected.values()))
    for carried in previous.carried:
        if carried.status == carried.owes_if:
            amount += carried.amount
        elif carried.status == "pending":
            unsettled.append(carried)
    return Owed(amount, tuple(unsettled))


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
