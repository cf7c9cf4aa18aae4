"""A rule's ``filters`` applied to a listing the engine already has, as Meta's ``filtering``.

The dispatcher lists each ad account's campaigns (or ad sets) once per sweep and every
due rule on it picks its own entities here, so these must mean exactly what Meta's
server-side ``filtering`` means (the Graph sandbox, ``graph_sandbox/query.py``, is our
model of it and a test compares the two over generated filters):

- ``EQUAL``/``NOT_EQUAL``/``IN``/``NOT_IN`` compare as text, case-sensitive, or as numbers
  when both sides read as one (``EQUAL 5`` matches ``"5"`` and ``"5.0"``); an object
  without the field equals nothing, so the ``NOT_`` operators keep it;
- ``GREATER_THAN`` and the like compare numbers only: a value that is no number fails;
- ``CONTAIN``/``NOT_CONTAIN`` look for the text anywhere, ignoring case;
- archived and deleted objects are listed only when a filter names ``effective_status``
  (the listing leaves them out otherwise);
- ``campaign.name`` on an ad set is its campaign's name; ``adset.x`` on an ad set and
  ``campaign.x`` on a campaign are the object's own field; on an ad, ``adset.name`` is its
  ad set's name and ``adset.id``/``campaign.id`` its own ``adset_id``/``campaign_id``.

Filters are applied in their wire form — the JSON the listing would send — so a value
means here what it would mean to Meta.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ruleengine.rules.language.model import EFFECTIVE_STATUSES

Item = Mapping[str, Any]  # one object of a listing, as Graph sent it
Wire = list[dict[str, Any]]  # ``filtering`` as sent to Graph

HIDDEN_BY_DEFAULT = frozenset({"ARCHIVED", "DELETED"})
# Asks a listing for objects in every status, archived and deleted ones included.
EVERY_STATUS: Wire = [
    {"field": "effective_status", "operator": "IN", "value": sorted(EFFECTIVE_STATUSES)}
]


def wire(filtering: Sequence[Mapping[str, Any]]) -> Wire:
    """``filtering`` as Graph receives it (a JSON round trip)."""
    loaded: Wire = orjson.loads(orjson.dumps(list(filtering)))
    return loaded


def shows_hidden(filtering: Wire) -> bool:
    """True when ``filtering`` lists archived and deleted objects too (it names a status)."""
    return any(_split(entry)[1] == "effective_status" for entry in filtering)


def _split(entry: Mapping[str, Any]) -> tuple[str, str]:
    prefix, _, name = str(entry["field"]).rpartition(".")
    return prefix, name


def _number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _equal(actual: object, expected: object) -> bool:
    if actual is None:
        return False
    if str(actual) == str(expected):
        return True
    a, b = _number(actual), _number(expected)
    return a is not None and a == b


def _any_of(actual: object, expected: object) -> bool:
    return any(_equal(actual, item) for item in _as_list(expected))


def _contains(actual: object, expected: object) -> bool:
    return actual is not None and str(expected).lower() in str(actual).lower()


def _numeric(test: Callable[[float, float], bool]) -> Callable[[object, object], bool]:
    def compare(actual: object, expected: object) -> bool:
        a, b = _number(actual), _number(expected)
        return a is not None and b is not None and test(a, b)

    return compare


_TESTS: dict[str, Callable[[object, object], bool]] = {
    "EQUAL": _equal,
    "NOT_EQUAL": lambda a, e: not _equal(a, e),
    "IN": _any_of,
    "NOT_IN": lambda a, e: not _any_of(a, e),
    "CONTAIN": _contains,
    "NOT_CONTAIN": lambda a, e: not _contains(a, e),
    "GREATER_THAN": _numeric(lambda a, b: a > b),
    "GREATER_THAN_OR_EQUAL": _numeric(lambda a, b: a >= b),
    "LESS_THAN": _numeric(lambda a, b: a < b),
    "LESS_THAN_OR_EQUAL": _numeric(lambda a, b: a <= b),
}


#: The parents of each level whose fields a filter may read, and the id field naming each.
PARENTS: dict[str, dict[str, str]] = {
    "campaign": {},
    "adset": {"campaign": "campaign_id"},
    "ad": {"adset": "adset_id", "campaign": "campaign_id"},
}


@dataclass(frozen=True)
class _Test:
    source: str  # "" for the object's own field, else the parent level it reads
    name: str
    operator: Callable[[object, object], bool]
    value: object

    @property
    def own(self) -> bool:
        return not self.source


class LocalFilter:
    """The filters of one rule at one level, ready to run over a listing.

    Raises:
        ValueError: (when built) for an operator the rule language does not allow, or a
            field of another object than the listed one or its campaign.
    """

    def __init__(self, level: str, filtering: Wire) -> None:
        self.level = level
        self.shows_hidden = shows_hidden(filtering)
        self._tests = [self._compile(entry) for entry in filtering]

    def _compile(self, entry: Mapping[str, Any]) -> _Test:
        prefix, name = _split(entry)
        operator = str(entry["operator"]).upper()
        if operator not in _TESTS:
            raise ValueError(f"filtering operator {operator} cannot be applied locally")
        if prefix in ("", self.level):
            return _Test("", name, _TESTS[operator], entry.get("value"))
        parents = PARENTS[self.level]
        if prefix in parents:
            if name == "id":  # the object carries its parents' ids
                return _Test("", parents[prefix], _TESTS[operator], entry.get("value"))
            return _Test(prefix, name, _TESTS[operator], entry.get("value"))
        raise ValueError(f"filtering field {entry['field']} cannot filter {self.level}s")

    @property
    def fields(self) -> set[str]:
        """Fields of the listed objects the filters read (their status always)."""
        parents = PARENTS[self.level]
        return (
            {"effective_status"}
            | {t.name for t in self._tests if t.own}
            | {parents[level] for level in self.parent_levels}
        )

    @property
    def parent_levels(self) -> dict[str, set[str]]:
        """Parent level → the fields of it the filters read (empty: none)."""
        levels: dict[str, set[str]] = {}
        for test in self._tests:
            if not test.own:
                levels.setdefault(test.source, set()).add(test.name)
        return levels

    @property
    def parent_fields(self) -> set[str]:
        """Fields of the parents (campaigns, ad sets) the filters read (empty: none)."""
        return {t.name for t in self._tests if not t.own}

    def keep(self, item: Item, parent: Item | None = None, *, adset: Item | None = None) -> bool:
        """True when Meta's listing with these filters would list ``item``.

        ``parent`` is the object's campaign and ``adset`` an ad's ad set, when
        :attr:`parent_levels` names them.
        """
        if not self.shows_hidden and item.get("effective_status") in HIDDEN_BY_DEFAULT:
            return False
        for test in self._tests:
            source = {"": item, "campaign": parent, "adset": adset}[test.source]
            actual = None if source is None else source.get(test.name)
            if not test.operator(actual, test.value):
                return False
        return True

    def select(
        self,
        items: Iterable[Item],
        parents: Mapping[str, Item] | None = None,
        *,
        adsets: Mapping[str, Item] | None = None,
    ) -> list[Item]:
        """The items Meta would list with these filters, in the listing's order.

        ``parents``: campaigns by id; ``adsets``: ad sets by id (for ads).
        """
        lookup, sets = parents or {}, adsets or {}
        return [
            item
            for item in items
            if self.keep(
                item,
                lookup.get(str(item.get("campaign_id"))),
                adset=sets.get(str(item.get("adset_id"))),
            )
        ]
