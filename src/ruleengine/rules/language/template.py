"""Message and name templates, pure: plain ``{placeholder}`` fields and nothing else.

Templates come from users and are filled in on every run, so they take no
format specs (``{name:>99}``, ``{date:%Y}``), conversions (``{name!r}``),
indexes or attributes (``{name[0]}``, ``{name.upper}``): each of those could
fail at run time or build a gigabyte string. :func:`check_template` rejects
them on save; :func:`render_template` ignores them in templates stored before
that rule existed, so rendering never raises.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Final

_PARSER = string.Formatter()
#: What Slack-compatible message text treats as markup: ``<…>`` is a link, a mention or
#: ``<!channel>``; ``&`` starts an entity. Escaped as Slack's message formatting asks.
_MRKDWN: Final = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
#: Invisible characters that reorder how text is shown (bidirectional overrides and
#: isolates): a name could show one thing and say another.
_BIDI: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _known(allowed: Iterable[str]) -> str:
    return ", ".join(f"{{{name}}}" for name in sorted(allowed))


def _as_written(name: str, spec: str | None, conversion: str | None) -> str:
    marks = (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
    return "{" + name + marks + "}"


def _field_problem(
    name: str, spec: str | None, conversion: str | None, allowed: frozenset[str]
) -> str | None:
    written = _as_written(name, spec, conversion)
    if not name:
        return f"empty placeholder {written}; name one of {_known(allowed)}"
    if any(mark in name for mark in "[]."):
        return f"{written} takes an index or attribute; write a plain placeholder such as {{name}}"
    if name not in allowed:
        return f"unknown placeholder {written}; use {_known(allowed)}"
    if conversion:
        return f"{written} has a conversion (!{conversion}); write {{{name}}}"
    if spec:
        return f"{written} has a format spec (:{spec}); write {{{name}}}"
    return None


def check_template(template: str, allowed: frozenset[str]) -> str:
    """``template`` when every field is a plain ``{name}`` of ``allowed``.

    Raises:
        ValueError: naming the first offending field and what to write instead.
    """
    try:
        fields = [(n, s, c) for _, n, s, c in _PARSER.parse(template) if n is not None]
    except ValueError as exc:
        raise ValueError(f"invalid template ({exc}); write a literal brace as '{{{{'") from None
    for name, spec, conversion in fields:
        problem = _field_problem(name, spec, conversion, allowed)
        if problem:
            raise ValueError(problem)
    return template


def one_line_text(value: object) -> str:
    """``value`` as one line of text: control characters, line and paragraph separators and
    bidirectional overrides each become a space, so a name cannot start a line of its own,
    rewrite a terminal or reorder what is shown around it."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(" " if _folded(ch) else ch for ch in text)


def _folded(ch: str) -> bool:
    return ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp")


def message_text(value: object) -> str:
    """``value`` (a name from Meta or a user, a value) made safe to put into a
    Slack-compatible message: on one line (:func:`one_line_text`) and with ``&``, ``<``, ``>``
    escaped, so ``<!channel>`` pings nobody and ``<https://x|Approve>`` links nowhere."""
    return one_line_text(value).translate(_MRKDWN)


def render_template(template: str, values: Mapping[str, object]) -> str:
    """Fill each ``{name}`` with ``str(values[name])``; never raises.

    Format specs and conversions are ignored; a placeholder without a value stays as
    written; a template that does not parse is returned as it is.
    """
    try:
        parts = list(_PARSER.parse(template))
    except ValueError:
        return template
    out: list[str] = []
    for literal, name, spec, conversion in parts:
        out.append(literal)
        if name is None:
            continue
        out.append(str(values[name]) if name in values else _as_written(name, spec, conversion))
    return "".join(out)
