"""Rules that fight: pairs of tasks that act on one field of the same entities in opposite ways.

Pure and static: given rules (id, name, parsed :class:`~ruleengine.rules.language.model.Rule`,
status), :func:`find_conflicts` lists every pair of tasks — of one rule or of two —
whose effects on a field oppose (pause vs activate; a budget or bid up vs down or set;
a rename that drops what another appends; a ``then`` that undoes another task's
action), and says for each:

- ``scope``: ``overlap`` when every entity of one rule is an entity of the other (same
  level, shared ad accounts, one rule's filters a subset of the other's), ``may_overlap``
  when the filters cannot be compared. A pair whose scopes are provably disjoint (other
  level, no shared ad account, filters that exclude each other: ``CONTAIN "[A]"`` vs
  ``NOT_CONTAIN "[A]"``, ``EQUAL`` of different values, ``IN`` sets with nothing in
  common, numeric ranges that do not meet) is not a finding at all.
- ``conditions``: ``cannot_fire_together`` when the thresholds on the same metric and
  period exclude each other (ROAS last_7d < 1 vs > 2), ``can_fire_together`` when some
  numbers pass both, ``may_fire_together`` when that depends on what cannot be decided
  here (metric-vs-metric conditions, different metrics or periods, a follow-up that runs
  later whatever the numbers).
- ``severity``: ``note`` for pairs that cannot fire together, ``conflict`` otherwise.

Soundness is one-sided on purpose: "disjoint" and "cannot fire together" are claimed only
when proven; anything undecided is reported as "may".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import combinations, product
from typing import Any, Literal

from ruleengine.rules.language.catalog import RANKING_SCALE
from ruleengine.rules.language.model import Condition, Filter, Rule, Task
from ruleengine.rules.language.per_currency import shown

Scope = Literal["overlap", "may_overlap"]
Fire = Literal["can_fire_together", "may_fire_together", "cannot_fire_together"]
Kind = Literal["opposing", "undoes_followup", "may_undo", "holdout_touched"]
# Directions of a change to a numeric field
UP, DOWN, SET, EITHER = "up", "down", "set", "either"
HIDDEN = ("ARCHIVED", "DELETED")  # effective statuses a listing leaves out unless asked


@dataclass(frozen=True)
class RuleEntry:
    """A rule as the analysis sees it."""

    id: str
    name: str
    rule: Rule
    status: str = "ACTIVE"


@dataclass(frozen=True)
class Effect:
    """What a task does to one field: a direction (status, numbers) or a text (names)."""

    field: str  # status | daily_budget | bid_amount | name
    direction: str  # ACTIVE/PAUSED; up/down/set/either; rename/append/prepend/restore
    detail: str  # the action in words, for ``why``
    followup: bool = False  # the delayed ``then`` step rather than the action
    value: Any = None  # set amount, rename template, appended text
    # a restore_budget/restore_name: it re-checks the value its action left and skips
    # (changed_by_someone_else) when another change landed since, so it cannot undo that
    guarded: bool = False


@dataclass(frozen=True)
class Side:
    """One task of a finding."""

    rule_id: str
    rule_name: str
    task_id: str
    status: str
    does: str


@dataclass(frozen=True)
class Finding:
    """Two tasks that can act on one field of the same entities in opposite ways."""

    a: Side
    b: Side
    field: str
    kind: Kind
    scope: Scope
    conditions: Fire
    why: str
    level: str
    accounts: tuple[str, ...]
    entities: list[dict[str, Any]] | None = None  # filled by a live check
    guarded: bool = False  # a restore follow-up, which leaves a later change alone

    @property
    def severity(self) -> str:
        """``note`` when the two cannot fire together (or a restore's re-check guards the
        pair), else ``conflict``."""
        if self.conditions == "cannot_fire_together" or self.guarded:
            return "note"
        if self.kind == "holdout_touched":  # no fight: a measurement another rule blurs
            return "note"
        return "conflict"

    @property
    def both_active(self) -> bool:
        """Both rules are ACTIVE: they fight now, not only once activated."""
        return self.a.status == "ACTIVE" and self.b.status == "ACTIVE"

    def involves(self, rule_id: str) -> bool:
        """True when one side is ``rule_id``."""
        return rule_id in (self.a.rule_id, self.b.rule_id)

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON."""
        data: dict[str, Any] = {
            "rules": [self._side(self.a), self._side(self.b)],
            "field": self.field,
            "kind": self.kind,
            "scope": self.scope,
            "conditions": self.conditions,
            "severity": self.severity,
            "both_active": self.both_active,
            "level": self.level,
            "ad_accounts": list(self.accounts),
            "why": self.why,
        }
        if self.entities is not None:
            data["entities"] = self.entities
        return data

    @staticmethod
    def _side(side: Side) -> dict[str, Any]:
        return {
            "rule_id": side.rule_id,
            "name": side.rule_name,
            "task_id": side.task_id,
            "status": side.status,
            "does": side.does,
        }


# ---------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Interval:
    """A set of reals ``lo..hi``; each end open or closed; ``lo == hi`` closed is one point."""

    lo: float
    hi: float
    lo_closed: bool = True
    hi_closed: bool = True

    @property
    def empty(self) -> bool:
        """True when no number lies in it."""
        if self.lo > self.hi:
            return True
        return self.lo == self.hi and not (self.lo_closed and self.hi_closed)

    def meet(self, other: Interval) -> Interval:
        """The intersection."""
        if self.lo > other.lo or (self.lo == other.lo and not self.lo_closed):
            lo, lo_closed = self.lo, self.lo_closed
        else:
            lo, lo_closed = other.lo, other.lo_closed
        if self.hi < other.hi or (self.hi == other.hi and not self.hi_closed):
            hi, hi_closed = self.hi, self.hi_closed
        else:
            hi, hi_closed = other.hi, other.hi_closed
        return Interval(lo, hi, lo_closed, hi_closed)

    def holds(self, x: float) -> bool:
        """True when ``x`` is in the interval."""
        above = x > self.lo or (self.lo_closed and x == self.lo)
        below = x < self.hi or (self.hi_closed and x == self.hi)
        return above and below


INF = math.inf
Union = tuple[Interval, ...]  # a union of intervals
EVERYTHING: Union = (Interval(-INF, INF, False, False),)


def interval_set(operator: str, value: float | Sequence[float]) -> Union:
    """The numbers ``x`` for which ``x <operator> value`` holds, as a union of intervals."""
    if isinstance(value, Sequence):
        low, high = float(value[0]), float(value[1])
        if operator == "IN_RANGE":
            return (Interval(low, high),)
        return (Interval(-INF, low, False, False), Interval(high, INF, False, False))
    v = float(value)
    match operator:
        case ">":
            return (Interval(v, INF, False, False),)
        case ">=":
            return (Interval(v, INF, True, False),)
        case "<":
            return (Interval(-INF, v, False, False),)
        case "<=":
            return (Interval(-INF, v, False, True),)
        case "==":
            return (Interval(v, v),)
        case "!=":
            return (Interval(-INF, v, False, False), Interval(v, INF, False, False))
    raise ValueError(f"unknown operator {operator}")


def meet_all(sets: Iterable[Union]) -> Union:
    """The intersection of unions of intervals (the empty ones dropped)."""
    result = EVERYTHING
    for other in sets:
        result = tuple(m for a, b in product(result, other) if not (m := a.meet(b)).empty)
        if not result:
            break
    return result


# ---------------------------------------------------------------- conditions


Key = tuple[str, str | None]  # (metric, period)


def _decided(condition: Condition) -> tuple[Key, Union] | None:
    """A condition on a fixed value as (metric, period) and the numbers that pass it."""
    if condition.compare_to is not None or condition.value is None:
        return None
    value = condition.value
    if isinstance(value, dict):  # per currency: which one applies depends on the account
        return None
    if isinstance(value, str):  # a ranking: its place on the scale
        value = float(RANKING_SCALE.index(value))
    return (condition.metric, condition.period), interval_set(condition.operator, value)


def _conjuncts(task: Task) -> list[list[Condition]]:
    """The task as an OR of ANDs: ``all`` is one conjunct, ``any`` one per condition."""
    if task.match == "all":
        return [list(task.conditions)]
    return [[c] for c in task.conditions]


def _satisfiable(conditions: Iterable[Condition]) -> bool | None:
    """True: some numbers pass them all; False: none can; None: undecided (compare_to)."""
    by_key: dict[Key, list[Union]] = {}
    undecided = False
    for condition in conditions:
        decided = _decided(condition)
        if decided is None:
            undecided = True
            continue
        by_key.setdefault(decided[0], []).append(decided[1])
    if any(not meet_all(sets) for sets in by_key.values()):
        return False
    return None if undecided else True


def fire_together(a: Task, b: Task) -> Fire:
    """Whether the conditions of ``a`` and ``b`` can pass on one entity at one evaluation."""
    verdicts = {_satisfiable([*ca, *cb]) for ca, cb in product(_conjuncts(a), _conjuncts(b))}
    if True in verdicts:
        return "can_fire_together"
    if None in verdicts:
        return "may_fire_together"
    return "cannot_fire_together"


# ---------------------------------------------------------------- scopes


def _number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number


def _equivalent(a: object, b: object) -> bool:
    """Every value ``EQUAL a`` matches also matches ``EQUAL b`` (and the other way)."""
    if str(a) == str(b):
        return True
    na, nb = _number(a), _number(b)
    return na is not None and na == nb


def _members(item: Filter) -> list[object]:
    return list(item.value) if isinstance(item.value, list) else [item.value]


@dataclass(frozen=True)
class _Test:
    """One filter with its field normalised (``adset.name`` on ad sets is ``name``)."""

    field: str
    operator: str
    values: tuple[object, ...]

    @property
    def text(self) -> str:
        return str(self.values[0]).lower()


def _tests(rule: Rule, *, moving: frozenset[str] = frozenset()) -> list[_Test]:
    """The rule's filters, without those on ``moving`` fields (which its actions change)."""
    tests = []
    for item in rule.filters:
        prefix, _, name = item.field.rpartition(".")
        key = name if prefix in ("", rule.level) else item.field
        tests.append(_Test(key, item.operator, tuple(_members(item))))
    if not any(t.field == "effective_status" for t in tests):
        # a listing without a status filter leaves archived and deleted objects out
        tests.append(_Test("effective_status", "NOT_IN", HIDDEN))
    return [t for t in tests if t.field not in moving]


_NUMERIC = {
    "GREATER_THAN": ">",
    "GREATER_THAN_OR_EQUAL": ">=",
    "LESS_THAN": "<",
    "LESS_THAN_OR_EQUAL": "<=",
}


def _excludes(p: _Test, q: _Test) -> str | None:
    """Why no entity passes both filters of one field, or None when some may."""
    for x, y in ((p, q), (q, p)):
        reason = _excludes_ordered(x, y)
        if reason:
            return reason
    if p.operator in _NUMERIC and q.operator in _NUMERIC:
        a, b = _number(p.values[0]), _number(q.values[0])
        if a is None or b is None:
            return None
        if not meet_all(
            [interval_set(_NUMERIC[p.operator], a), interval_set(_NUMERIC[q.operator], b)]
        ):
            return f"{p.field} {p.operator} {a:g} and {q.operator} {b:g} do not meet"
    return None


def _excludes_ordered(p: _Test, q: _Test) -> str | None:
    if p.operator == "CONTAIN" and q.operator == "NOT_CONTAIN" and q.text in p.text:
        return f"{p.field} CONTAIN {p.values[0]!r} vs NOT_CONTAIN {q.values[0]!r}"
    if p.operator not in ("EQUAL", "IN"):
        return None
    if q.operator in ("EQUAL", "IN"):
        if not any(_equivalent(a, b) for a in p.values for b in q.values):
            return f"{p.field} {_shown(p)} and {_shown(q)} share no value"
    elif q.operator in ("NOT_EQUAL", "NOT_IN"):
        if all(any(_equivalent(a, b) for b in q.values) for a in p.values):
            return f"{p.field} {_shown(p)} is excluded by {q.operator} {_shown(q)}"
    elif q.operator in ("CONTAIN", "NOT_CONTAIN") and all(_number(v) is None for v in p.values):
        # only text values: a number would also equal other spellings of it ("5.0")
        contains = [q.text in str(v).lower() for v in p.values]
        if q.operator == "CONTAIN" and not any(contains):
            return f"no {p.field} of {_shown(p)} contains {q.values[0]!r}"
        if q.operator == "NOT_CONTAIN" and all(contains):
            return f"every {p.field} of {_shown(p)} contains {q.values[0]!r}"
    return None


def _shown(test: _Test) -> str:
    values = [str(v) for v in test.values]
    return values[0] if test.operator in ("EQUAL", "NOT_EQUAL") else "[" + ", ".join(values) + "]"


def scope_overlap(
    a: Rule, b: Rule, *, moving: frozenset[str] = frozenset()
) -> tuple[Scope | None, str]:
    """``overlap``, ``may_overlap`` or None (disjoint), with the reason in words.

    ``moving``: filter fields the fight itself changes, left out of the comparison — a
    rule that pauses ``ACTIVE`` campaigns and one that activates ``PAUSED`` ones act on
    the same campaign in turn, each moving it into the other's scope.
    """
    if a.level != b.level:
        return None, f"one lists {a.level}s, the other {b.level}s"
    shared = sorted(set(a.ad_accounts) & set(b.ad_accounts))
    if not shared:
        return None, "no ad account in common"
    ta, tb = _tests(a, moving=moving), _tests(b, moving=moving)
    for p, q in product([*ta, *tb], repeat=2):
        if p is not q and p.field == q.field:
            reason = _excludes(p, q)
            if reason:
                return None, reason
    accounts = ", ".join(shared)
    if set(ta) <= set(tb) or set(tb) <= set(ta):
        same = "the same filters" if set(ta) == set(tb) else "one rule's filters within the other's"
        return "overlap", f"{a.level}s of {accounts} with {same}"
    return "may_overlap", f"{a.level}s of {accounts}; their filters may select the same ones"


# ---------------------------------------------------------------- effects


_NUMBER_DIRECTION = {
    "increase_budget": UP,
    "decrease_budget": DOWN,
    "set_budget": SET,
    "scale_to_target": EITHER,
    "rebalance_budget": EITHER,
    # a raise for a window: it fights a cut or a set of the same budget (Meta puts the daily
    # budget in force back when the window ends, whatever another rule wrote meanwhile)
    "schedule_budget": UP,
}
_OPPOSITE = {UP: DOWN, DOWN: UP, SET: EITHER, EITHER: EITHER}


def _number_effect(task: Task) -> Effect | None:
    action: Any = task.action
    if action.type in _NUMBER_DIRECTION:
        direction = _NUMBER_DIRECTION[action.type]
        value = getattr(action, "amount", None)
        return Effect("daily_budget", direction, _describe(action), value=value)
    if action.type == "change_bid":
        if action.amount is not None:
            return Effect(
                "bid_amount", SET, f"change_bid to {shown(action.amount)}", value=action.amount
            )
        direction = UP if action.direction == "increase" else DOWN
        return Effect(
            "bid_amount", direction, f"change_bid {action.direction} {action.percent:g} %"
        )
    return None


def _describe(action: Any) -> str:
    match action.type:
        case "increase_budget" | "decrease_budget":
            return f"{action.type} {action.percent:g} %"
        case "set_budget":
            return f"set_budget {shown(action.amount)}"
        case "rename":
            return f"rename to {action.template!r}"
        case "append_to_name" | "prepend_to_name":
            return f"{action.type} {action.text!r}"
        case "scale_to_target":
            return f"scale_to_target {action.metric} {shown(action.target)}"
        case "rebalance_budget":
            return f"rebalance_budget by {action.metric}"
        case "schedule_budget":
            return f"schedule_budget {_scheduled(action)} for {_window(action.window)}"
    return str(action.type)


def _scheduled(action: Any) -> str:
    if action.multiplier is not None:
        return f"×{action.multiplier:g}"
    return f"to {shown(action.amount)}"


def _window(window: Any) -> str:
    if window.hours is None:
        return f"{window.start}–{window.end} local"
    later = f" from {window.start_in_hours:g} h after the run" if window.start_in_hours else ""
    return f"{window.hours:g} h{later}"


def effects(task: Task) -> list[Effect]:
    """What ``task`` does to each field it changes, its ``then`` step included."""
    action: Any = task.action
    found: list[Effect] = []
    if action.type in ("pause", "activate"):
        found.append(
            Effect("status", "PAUSED" if action.type == "pause" else "ACTIVE", action.type)
        )
    number = _number_effect(task)
    if number is not None:
        found.append(number)
    if action.type == "rename":
        found.append(Effect("name", "rename", _describe(action), value=action.template))
    if action.type in ("append_to_name", "prepend_to_name"):
        found.append(
            Effect("name", action.type.split("_")[0], _describe(action), value=action.text)
        )
    then = action.then
    if then is None:
        return found
    if then.do in ("pause", "activate"):
        status = "PAUSED" if then.do == "pause" else "ACTIVE"
        found.append(Effect("status", status, f"then {then.do}", followup=True))
    elif then.do == "restore_budget" and number is not None:
        found.append(
            Effect(
                number.field,
                _OPPOSITE[number.direction],
                "then restore_budget",
                followup=True,
                guarded=True,
            )
        )
    elif then.do == "restore_name":
        found.append(Effect("name", "restore", "then restore_name", followup=True, guarded=True))
    return found


def _numbers_oppose(x: Effect, y: Effect) -> bool:
    if EITHER in (x.direction, y.direction):
        return True
    if x.direction == SET and y.direction == SET:
        return x.value is None or y.value is None or x.value != y.value
    return x.direction != y.direction


def _names_oppose(x: Effect, y: Effect) -> tuple[Kind, str] | None:
    """Whether one name change undoes the other, decided or only possible."""
    for p, q in ((x, y), (y, x)):
        if p.direction == "rename" and "{name}" not in str(p.value):
            if q.direction in ("append", "prepend") and str(q.value) not in str(p.value):
                return "opposing", f"the rename template {p.value!r} drops {q.value!r}"
            if q.direction == "rename" and p.value != q.value:
                return "opposing", f"renames to {p.value!r} and {q.value!r} overwrite each other"
        if p.direction == "restore" and q.direction != "restore":
            return "may_undo", "restore_name may put back the name the other task changed"
    return None


def oppose(x: Effect, y: Effect) -> tuple[Kind, str] | None:
    """The kind of fight between two effects on one field and why, or None."""
    if x.field != y.field:
        return None
    kind: Kind = "undoes_followup" if x.followup or y.followup else "opposing"
    if x.field == "status":
        if x.direction == y.direction:
            return None
        return kind, f"one sets status {x.direction}, the other {y.direction}"
    if x.field == "name":
        named = _names_oppose(x, y)
        if named and kind == "undoes_followup" and named[0] == "opposing":
            return kind, named[1]
        return named
    if not _numbers_oppose(x, y):
        return None
    return kind, f"{x.detail} and {y.detail} move {x.field} in opposite directions"


# ---------------------------------------------------------------- findings


@dataclass
class _Pair:
    entry: RuleEntry
    task: Task
    effects: list[Effect] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.entry.id, self.task.id)

    @cached_property
    def accounts(self) -> frozenset[str]:
        return frozenset(self.entry.rule.ad_accounts)


def _side(pair: _Pair, effect: Effect) -> Side:
    e = pair.entry
    return Side(e.id, e.name, pair.task.id, e.status, effect.detail)


def _pair_findings(p: _Pair, q: _Pair, scope: Scope, where: str, fx: str) -> list[Finding]:
    found: list[Finding] = []
    fire: Fire | None = None
    for x, y in product(p.effects, q.effects):
        fight = oppose(x, y) if x.field == fx else None
        if fight is None:
            continue
        kind, reason = fight
        guarded = x.guarded or y.guarded
        if x.followup or y.followup:
            conditions: Fire = "may_fire_together"
            timing = "; the follow-up runs later, whatever the numbers then"
            if guarded:
                timing += (
                    ", but it re-checks the value its action left and skips"
                    " (changed_by_someone_else) when another change landed since"
                )
        else:
            fire = fire or fire_together(p.task, q.task)
            conditions, timing = fire, ""
        rule = p.entry.rule
        shared = tuple(sorted(set(rule.ad_accounts) & set(q.entry.rule.ad_accounts)))
        found.append(
            Finding(
                a=_side(p, x),
                b=_side(q, y),
                field=x.field,
                kind=kind,
                scope=scope,
                conditions=conditions,
                why=f"{reason}; on {where}; {_fire_words(conditions)}{timing}",
                level=rule.level,
                accounts=shared,
                guarded=guarded,
            )
        )
    if not found:
        found.extend(_holdout_findings(p, q, scope, where, fx))
    return found


def _holdout_findings(p: _Pair, q: _Pair, scope: Scope, where: str, fx: str) -> list[Finding]:
    """A task measured against a holdout (docs/impact.md) and another task that changes the
    same field of the same entities: the held-out ones are not left alone, and the measured
    effect is the difference between the two rules' work, not the task's own."""
    x = next((e for e in p.effects if e.field == fx and not e.followup), None)
    y = next((e for e in q.effects if e.field == fx and not e.followup), None)
    if x is None or y is None:
        return []
    return _holdout_finding(p, x, q, y, scope, where)


def _holdout_finding(
    p: _Pair, x: Effect, q: _Pair, y: Effect, scope: Scope, where: str
) -> list[Finding]:
    """The ``holdout_touched`` note of ``p`` and ``q`` (one has a holdout) over ``y``'s field:
    what the other task changes on the held-out entities."""
    held = [pair for pair in (p, q) if pair.task.holdout is not None]
    if not held:
        return []
    rule = p.entry.rule
    names = " and ".join(f"'{pair.entry.name}' task '{pair.task.id}'" for pair in held)
    return [
        Finding(
            a=_side(p, x),
            b=_side(q, y),
            field=y.field,
            kind="holdout_touched",
            scope=scope,
            conditions="may_fire_together",
            why=f"{names} holds out a share of its entities to measure its effect, and the"
            f" other task changes their {y.field} too: the held-out entities are not left"
            f" alone, so the measured effect is blurred; on {where}",
            level=rule.level,
            accounts=tuple(sorted(set(rule.ad_accounts) & set(q.entry.rule.ad_accounts))),
        )
    ]


def _holdouts_across_fields(
    pairs: Sequence[_Pair], found: Sequence[Finding], wanted: set[str] | None
) -> list[Finding]:
    """A measured task and another task of the same level that changes a *different* field
    of its entities — a budget cut or a rebalance on a pause task's held-out ad sets: those
    are not left alone either. Pairs already found over a shared field are not repeated."""
    met = {frozenset({(f.a.rule_id, f.a.task_id), (f.b.rule_id, f.b.task_id)}) for f in found}
    out: list[Finding] = []
    for p, q in combinations(pairs, 2):
        if p.task.holdout is None and q.task.holdout is None:
            continue
        if wanted is not None and not ({p.entry.id, q.entry.id} & wanted):
            continue
        if frozenset({p.key, q.key}) in met or p.accounts.isdisjoint(q.accounts):
            continue
        if p.task.holdout is None:  # the measured task first: the other's field is the touch
            p, q = q, p
        x = next((e for e in p.effects if not e.followup), None)
        y = (
            next((e for e in q.effects if not e.followup and e.field != x.field), None)
            if x
            else None
        )
        if x is None or y is None:
            continue
        moving = _moving(x.field, p, q) | _moving(y.field, p, q)
        scope, where = scope_overlap(p.entry.rule, q.entry.rule, moving=moving)
        if scope is not None:
            out.extend(_holdout_finding(p, x, q, y, scope, where))
    return out


def _fire_words(fire: Fire) -> str:
    return {
        "can_fire_together": "their conditions can pass at once",
        "may_fire_together": "their conditions may pass at once",
        "cannot_fire_together": "their thresholds cannot both pass (cannot fire together)",
    }[fire]


def _pairs(entries: Sequence[RuleEntry]) -> list[_Pair]:
    pairs = [_Pair(e, t, effects(t)) for e in entries for t in e.rule.tasks]
    return sorted((p for p in pairs if p.effects), key=lambda p: p.key)


def find_conflicts(
    entries: Sequence[RuleEntry], *, only_involving: Iterable[str] | None = None
) -> list[Finding]:
    """Every pair of tasks of ``entries`` that fights, in a stable order.

    ``only_involving``: rule ids; pairs with neither side among them are left out (a rule
    being saved against the active set).
    """
    wanted = None if only_involving is None else set(only_involving)
    scopes: dict[tuple[str, str, frozenset[str]], tuple[Scope | None, str]] = {}
    found: list[Finding] = []
    for (_, fx), bucket in sorted(_buckets(_pairs(entries)).items()):
        for p, q in combinations(bucket, 2):
            if wanted is not None and not ({p.entry.id, q.entry.id} & wanted):
                continue
            if p.accounts.isdisjoint(q.accounts):
                continue
            moving = _moving(fx, p, q)
            ids = (p.entry.id, q.entry.id, moving)
            if ids not in scopes:
                scopes[ids] = scope_overlap(p.entry.rule, q.entry.rule, moving=moving)
            scope, where = scopes[ids]
            if scope is not None:
                found.extend(_pair_findings(p, q, scope, where, fx))
    found.extend(_holdouts_across_fields(_pairs(entries), found, wanted))
    found.sort(key=lambda f: (f.a.rule_id, f.a.task_id, f.b.rule_id, f.b.task_id, f.field))
    return found


def _buckets(pairs: Iterable[_Pair]) -> dict[tuple[str, str], list[_Pair]]:
    """Tasks by (level, field changed): only tasks of one bucket can fight (sorted by key)."""
    buckets: dict[tuple[str, str], list[_Pair]] = {}
    for pair in pairs:
        for fx in sorted({e.field for e in pair.effects}):
            buckets.setdefault((pair.entry.rule.level, fx), []).append(pair)
    return buckets


def _moving(fx: str, p: _Pair, q: _Pair) -> frozenset[str]:
    """The filter fields a fight over ``fx`` can move an entity across."""
    if fx == "status":
        return frozenset({"effective_status"})
    if fx != "name":
        return frozenset()
    texts = [
        str(t.values[0]).lower()
        for pair in (p, q)
        for t in _tests(pair.entry.rule)
        if t.field == "name" and t.operator in ("CONTAIN", "NOT_CONTAIN")
    ]
    for effect in (*p.effects, *q.effects):
        if effect.field != "name":
            continue
        if effect.direction in ("rename", "restore"):
            return frozenset({"name"})  # a new name may enter or leave any name filter
        if any(text in str(effect.value).lower() for text in texts):
            return frozenset({"name"})  # the added text is what a filter looks for
    return frozenset()


def conflicting_rule_ids(findings: Iterable[Finding]) -> dict[str, int]:
    """For each rule, how many findings of severity ``conflict`` name it."""
    counts: dict[str, int] = {}
    for finding in findings:
        if finding.severity == "conflict":
            for rule_id in {finding.a.rule_id, finding.b.rule_id}:
                counts[rule_id] = counts.get(rule_id, 0) + 1
    return counts
