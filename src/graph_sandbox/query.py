"""Graph query parameters: ``fields``, ``filtering``, ``limit`` and cursor pagination.

Cursors are opaque to clients (base64, as Meta's are) and point at one item
of the listing. As at Meta, a cursor whose item left the listing between two
requests (deleted, or no longer matching the filters: paused under an
``effective_status`` filter, say) is invalid: the next page answers error 2642
and the client must start the listing again.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

import orjson

from graph_sandbox.errors import invalid_cursor, invalid_param

T = TypeVar("T")

DEFAULT_LIMIT = 25
MAX_LIMIT = 5000


def parse_fields(
    raw: str | None, *, default: Sequence[str], allowed: Collection[str], node: str
) -> list[str]:
    """The comma-separated ``fields`` parameter, checked against what ``node`` has.

    Raises:
        GraphError: 100 naming the first field the node does not have, or for a field
            expansion (``a{b}``, ``a.b(…)``).
    """
    fields, _ = parse_expanded_fields(
        raw, default=default, allowed=allowed, node=node, expandable={}
    )
    return fields


def parse_expanded_fields(
    raw: str | None,
    *,
    default: Sequence[str],
    allowed: Collection[str],
    node: str,
    expandable: Mapping[str, tuple[str, Collection[str]]],
) -> tuple[list[str], dict[str, list[str]]]:
    """``fields`` with one level of field expansion on the edges in ``expandable``, e.g.
    ``name,adset{id,name}``; the fields, and the subfields of each expanded one.

    Args:
        expandable: For each field that may be expanded, the node type it names and the
            fields that node has.

    Raises:
        GraphError: 100 naming the first field a node does not have, or for an expansion
            the sandbox does not take (another field, a nested one, ``a.b(…)`` modifiers).
    """
    if not raw:
        return list(default), {}
    fields: list[str] = []
    expanded: dict[str, list[str]] = {}
    for item in _top_level(raw):
        name, brace, rest = item.partition("{")
        name = name.strip()
        if "." in item or (brace and name not in expandable) or "{" in rest:
            raise invalid_param(
                f"Field expansion of {item} is not supported by the sandbox"
                + (f"; it expands {', '.join(expandable)}" if expandable else "")
            )
        if name not in allowed:
            raise invalid_param(f"Tried accessing nonexisting field ({name}) on node type ({node})")
        if brace:
            if not rest.endswith("}"):
                raise invalid_param(f"Syntax error in fields: {item}")
            inner_node, inner_allowed = expandable[name]
            expanded[name] = parse_fields(
                rest[:-1], default=("id",), allowed=inner_allowed, node=inner_node
            )
        fields.append(name)
    return list(dict.fromkeys(fields)), expanded


def _top_level(raw: str) -> list[str]:
    """The items of ``fields``: a JSON array, or a comma list whose commas inside braces
    belong to an expansion (``adset{id,name}`` is one item)."""
    if raw.lstrip().startswith("["):
        return parse_list_param(raw, "fields")
    items, depth, current = [], 0, ""
    for char in raw:
        depth += (char == "{") - (char == "}")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def parse_list_param(raw: str | None, name: str) -> list[str]:
    """A list parameter in either form Graph takes, ``["a","b"]`` or ``a,b``; absent → ``[]``.

    Raises:
        GraphError: 100 when the value starts like a JSON array but is not an array of
            strings or numbers.
    """
    if raw is None or not raw.strip():
        return []
    if raw.lstrip().startswith("["):
        items = parse_json_list(raw, name)
        if not all(isinstance(item, str | int | float) for item in items):
            raise invalid_param(f"{name} must be an array of strings")
        return [str(item).strip() for item in items if str(item).strip()]
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_json_list(raw: str | None, name: str) -> list[Any]:
    """A parameter carrying a JSON list (``filtering``, ``effective_status``); absent → ``[]``."""
    if raw is None or raw == "":
        return []
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_param(f"{name} must be a JSON array") from exc
    if not isinstance(value, list):
        raise invalid_param(f"{name} must be a JSON array")
    return value


def parse_limit(raw: str | None) -> int:
    """``limit`` (default 25, at most 5000: larger values are capped as Meta caps them)."""
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError as exc:
        raise invalid_param("limit must be a positive integer") from exc
    if limit < 1:
        raise invalid_param("limit must be a positive integer")
    return min(limit, MAX_LIMIT)


_SET_OPERATORS = frozenset({"IN", "ANY", "NOT_IN", "NONE"})


@dataclass(frozen=True)
class Filter:
    """One ``{field, operator, value}`` entry of ``filtering``."""

    field: str
    operator: str
    value: Any

    @cached_property
    def _members(self) -> tuple[frozenset[str], frozenset[float]]:
        items = _as_list(self.value)
        numbers = frozenset(n for n in map(_number, items) if n is not None)
        return frozenset(str(item) for item in items), numbers

    def test(self, actual: object) -> bool:
        """True when a field whose value is ``actual`` passes this filter."""
        if self.operator in _SET_OPERATORS:
            # Set lookups: an account-level Insights request filtered on 50
            # campaign ids runs this for every ad set of the account.
            strings, numbers = self._members
            number = _number(actual)
            hit = actual is not None and (str(actual) in strings or number in numbers)
            return hit == (self.operator in ("IN", "ANY"))
        return _TESTS[self.operator](actual, self.value)


def parse_filtering(raw: str | None, allowed: Collection[str]) -> list[Filter]:
    """The ``filtering`` parameter, each field and operator checked.

    Raises:
        GraphError: 100 for malformed JSON, an unknown field or an unknown operator.
    """
    filters = []
    for entry in parse_json_list(raw, "filtering"):
        if not isinstance(entry, dict) or not {"field", "operator"} <= entry.keys():
            raise invalid_param("filtering entries must be objects with field, operator and value")
        field, operator = str(entry["field"]), str(entry["operator"]).upper()
        if field not in allowed:
            raise invalid_param(f"Filtering field {field} is invalid")
        if operator not in OPERATORS:
            raise invalid_param(f"Filtering operator {operator} is invalid for field {field}")
        filters.append(Filter(field, operator, entry.get("value")))
    return filters


def matches(filters: Sequence[Filter], value_of: Callable[[str], object]) -> bool:
    """True when the item whose fields ``value_of`` reads passes every filter."""
    return all(f.test(value_of(f.field)) for f in filters)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _equal(actual: object, expected: object) -> bool:
    if actual is None:
        return False
    if str(actual) == str(expected):
        return True
    a, b = _number(actual), _number(expected)
    return a is not None and a == b


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _contains(actual: object, expected: object) -> bool:
    return actual is not None and str(expected).lower() in str(actual).lower()


def _in_range(actual: object, expected: object) -> bool:
    bounds = [_number(item) for item in _as_list(expected)][:2]
    a = _number(actual)
    if a is None or len(bounds) != 2 or bounds[0] is None or bounds[1] is None:
        return False
    return bounds[0] <= a <= bounds[1]


def _numeric(test: Callable[[float, float], bool]) -> Callable[[object, object], bool]:
    def compare(actual: object, expected: object) -> bool:
        a, b = _number(actual), _number(expected)
        return a is not None and b is not None and test(a, b)

    return compare


def _any_of(actual: object, expected: object) -> bool:
    return any(_equal(actual, item) for item in _as_list(expected))


_TESTS: dict[str, Callable[[object, object], bool]] = {
    "EQUAL": _equal,
    "NOT_EQUAL": lambda a, e: not _equal(a, e),
    "IN": _any_of,
    "ANY": _any_of,
    "NOT_IN": lambda a, e: not _any_of(a, e),
    "NONE": lambda a, e: not _any_of(a, e),
    "ALL": lambda a, e: all(_equal(a, item) for item in _as_list(e)),
    "CONTAIN": _contains,
    "NOT_CONTAIN": lambda a, e: not _contains(a, e),
    "IN_RANGE": _in_range,
    "NOT_IN_RANGE": lambda a, e: not _in_range(a, e),
    "GREATER_THAN": _numeric(lambda a, b: a > b),
    "GREATER_THAN_OR_EQUAL": _numeric(lambda a, b: a >= b),
    "LESS_THAN": _numeric(lambda a, b: a < b),
    "LESS_THAN_OR_EQUAL": _numeric(lambda a, b: a <= b),
}

OPERATORS = frozenset(_TESTS)


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing and the cursors around it."""

    items: list[T]
    before: str | None
    after: str | None
    has_next: bool
    has_previous: bool


def encode_cursor(offset: int, key: str) -> str:
    """An opaque cursor pointing at item ``key`` found at ``offset``."""
    return base64.urlsafe_b64encode(f"{offset}:{key}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, keys: Sequence[str]) -> int:
    """The index of the item the cursor points at.

    Raises:
        GraphError: 100 for a cursor that does not decode; 2642 when its item has left
            the listing.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        offset_text, key = raw.split(":", 1)
        int(offset_text)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise invalid_param(f"Invalid cursor: {cursor}") from exc
    try:
        return keys.index(key)
    except ValueError:
        raise invalid_cursor() from None


def paginate(
    items: Sequence[T],
    key: Callable[[T], str],
    *,
    limit: int,
    after: str | None = None,
    before: str | None = None,
) -> Page[T]:
    """The page of ``items`` after (or before) a cursor.

    Raises:
        GraphError: 2642 when the cursor's item is no longer among ``items``.
    """
    keys = [key(item) for item in items]
    if after:
        start = _decode_cursor(after, keys) + 1
        end = start + limit
    elif before:
        end = _decode_cursor(before, keys)
        start = max(0, end - limit)
    else:
        start, end = 0, limit
    chosen = list(items[start:end])
    if not chosen:
        return Page([], None, None, has_next=False, has_previous=start > 0)
    last = start + len(chosen) - 1
    return Page(
        chosen,
        before=encode_cursor(start, keys[start]),
        after=encode_cursor(last, keys[last]),
        has_next=last + 1 < len(items),
        has_previous=start > 0,
    )
