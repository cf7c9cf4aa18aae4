"""Error-log samples bounded in depth and size, whatever a failure carried.

A sample keeps the request, the answer and the context of one failure. Those
can be anything: a 50,000-item list from Meta, a dict nested 500 levels deep,
an integer MongoDB cannot store, a key with a NUL byte. Every sample is made
storable (tokens masked, keys and numbers BSON accepts, depth and width
limited) and then fitted into :data:`SAMPLE_MAX_BYTES` of BSON: small fields
stay whole, and the largest ones share what is left, each cut to a JSON text
that ends with a marker saying how big it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Final

import bson
import orjson

from ruleengine.redact import MASK, REDACTOR

SAMPLE_MAX_BYTES: Final = 16 * 1024  # one sample, as BSON; a group keeps 10
MAX_DEPTH: Final = 8
MAX_ITEMS: Final = 200  # per list or object
MAX_TEXT: Final = 8000  # characters per string
MAX_KEY: Final = 200  # characters per key
_NODES: Final = 5000  # values visited per field: the walk's own work stays bounded
_TEXT_TOTAL: Final = 128 * 1024  # characters kept per field before fitting
_INT64: Final = 2**63
_SECRET_KEYS: Final = frozenset({"access_token", "authorization", "token"})


class _Walk:
    """One field made storable, within a budget of visited values and kept text."""

    def __init__(self) -> None:
        self.nodes = _NODES
        self.text = _TEXT_TOTAL

    def value(self, value: Any, depth: int) -> Any:
        self.nodes -= 1
        if self.nodes < 0:
            return "…"
        if value is None or isinstance(value, bool | float | datetime):
            return value
        if isinstance(value, int):
            return _integer(value)
        if isinstance(value, str):
            return self.string(value, MAX_TEXT)
        if isinstance(value, bytes | bytearray):
            return f"<{len(value)} bytes>"
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, Mapping):
            return self.mapping(value, depth)
        if isinstance(value, list | tuple | set | frozenset):
            return self.sequence(value, depth)
        try:
            text = str(value)
        except Exception:  # a value whose __str__ fails is still worth a sample
            text = f"<{type(value).__name__}>"
        return self.string(text, MAX_TEXT)

    def string(self, text: str, limit: int, *, tail: bool = False) -> str:
        # Mask tokens before cutting, so a cut never leaves half a token readable.
        keep = max(0, min(limit, self.text))
        if tail:
            masked = REDACTOR.text(text[-(keep + 512) :])
            clipped = masked if len(masked) <= keep else "…" + masked[len(masked) - keep :]
        else:
            masked = REDACTOR.text(text[: keep + 512])
            clipped = masked if len(masked) <= keep else masked[:keep] + "…"
        self.text -= len(clipped)
        return valid_utf8(clipped)

    def mapping(self, value: Mapping[Any, Any], depth: int) -> Any:
        if depth >= MAX_DEPTH:
            return f"<object nested deeper than {MAX_DEPTH} levels>"
        out: dict[str, Any] = {}
        for n, (key, item) in enumerate(value.items()):
            if n == MAX_ITEMS:
                out["…"] = f"{len(value) - MAX_ITEMS} more keys"
                break
            name = _key(self.string(key if isinstance(key, str) else repr(key), MAX_KEY))
            out[name] = MASK if name.lower() in _SECRET_KEYS else self.value(item, depth + 1)
        return out

    def sequence(self, value: Any, depth: int) -> Any:
        if depth >= MAX_DEPTH:
            return f"<list nested deeper than {MAX_DEPTH} levels>"
        out = []
        for n, item in enumerate(value):
            if n == MAX_ITEMS:
                out.append(f"… {len(value) - MAX_ITEMS} more items")
                break
            out.append(self.value(item, depth + 1))
        return out


def _integer(value: int) -> int | str:
    """An integer BSON can hold, or its digits (within reason) as text."""
    if -_INT64 <= value < _INT64:
        return value
    if value.bit_length() > 1024:
        return f"<integer of {value.bit_length()} bits>"
    return str(value)


def valid_utf8(text: str) -> str:
    """``text`` without lone surrogates (BSON strings are UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _key(name: str) -> str:
    """A field name every MongoDB stores: no NUL, no leading ``$``, no dots (look-alikes)."""
    name = name.replace("\x00", "\ufffd").replace(".", "\uff0e")
    return "\uff04" + name[1:] if name.startswith("$") else name


def storable(value: Any, *, keep_tail: bool = False) -> Any:
    """``value`` with tokens masked, as BSON can store it, at most MAX_DEPTH levels deep.

    A long text keeps its end with ``keep_tail`` (a stack's last frames), else its start.
    """
    if keep_tail and isinstance(value, str):
        return _Walk().string(value, MAX_TEXT, tail=True)
    return _Walk().value(value, 0)


def _cost(value: Any) -> int:
    """Bytes ``value`` adds to a document under a given key, beyond a ``None`` there."""
    return len(bson.encode({"v": value})) - len(bson.encode({"v": None}))


def _cut(value: Any, budget: int, *, keep_tail: bool = False) -> str:
    """``value`` as text (JSON unless it is text already) cut to ``budget`` BSON bytes."""
    if isinstance(value, str):
        text = value.encode("utf-8")
    else:
        text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    marker = f"…[cut: {len(text)} bytes]".encode()
    room = max(0, budget - 5 - len(marker))  # a BSON string: length, bytes, NUL
    if keep_tail:
        kept = marker + text[len(text) - room :] if room else marker
    else:
        kept = text[:room] + marker
    out = kept.decode("utf-8", "ignore")  # a cut inside a character drops its bytes
    while _cost(out) > budget and out:
        out = out[1:] if keep_tail else out[:-1]
    return out


def bounded_sample(
    fields: Mapping[str, Any], *, keep_tail: frozenset[str] = frozenset({"stack"})
) -> dict[str, Any]:
    """A sample of storable ``fields`` whose BSON encoding is at most SAMPLE_MAX_BYTES.

    Fields that fit keep their structure; the largest share the rest and become
    cut text (``keep_tail`` fields keep their end: the last frames of a stack).
    """
    sample = {name: storable(v, keep_tail=name in keep_tail) for name, v in fields.items()}
    remaining = SAMPLE_MAX_BYTES - len(bson.encode(dict.fromkeys(sample)))
    costs = {name: _cost(value) for name, value in sample.items()}
    if sum(costs.values()) <= remaining:
        return sample
    by_size = sorted(sample, key=costs.__getitem__)
    for n, name in enumerate(by_size):
        share = remaining // (len(by_size) - n)
        if costs[name] > share:
            sample[name] = _cut(sample[name], share, keep_tail=name in keep_tail)
        remaining -= _cost(sample[name])
    return sample
