"""Validation messages: pydantic's errors as JSON paths and sentences a rule author can act on.

The models of :mod:`ruleengine.rules.language.model` raise :class:`PathError` for a problem
that belongs to one of their sub-fields; :func:`field_errors` turns a pydantic
``ValidationError`` into :class:`~ruleengine.errors.FieldError` items such as
``tasks[0].conditions[1].metric: unknown metric 'roas'; …``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ruleengine.errors import FieldError


class PathError(ValueError):
    """A validation error that belongs to a sub-field of the model that raised it."""

    def __init__(self, subpath: str, message: str) -> None:
        self.subpath = subpath
        super().__init__(message)


def _json_path(loc: tuple[int | str, ...], union_tags: Mapping[str, frozenset[str]]) -> str:
    parts: list[str] = []
    previous: int | str | None = None
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif isinstance(previous, str) and item in union_tags.get(previous, ()):
            pass  # pydantic names the union member in the path; users never wrote it
        elif item.startswith("["):
            parts.append(item)
        else:
            parts.append(f".{item}" if parts else item)
        previous = item
    return "".join(parts)


def _message(error: Any) -> tuple[str, str]:
    kind = error["type"]
    exc = (error.get("ctx") or {}).get("error")
    if isinstance(exc, PathError):
        return exc.subpath, str(exc)
    if kind == "missing":
        return "", "is required"
    if kind == "extra_forbidden":
        return "", "unknown field; check the spelling against `ruleengine rules schema`"
    if kind == "union_tag_invalid":
        tag = error["ctx"].get("tag")
        expected = error["ctx"].get("expected_tags")
        return "", f"unknown type '{tag}'; expected one of {expected}"
    if kind == "union_tag_not_found":
        return "", f"needs '{error['ctx'].get('discriminator', '').strip(chr(39))}'"
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    return "", message[:1].lower() + message[1:]


def field_errors(
    exc: ValidationError, *, union_tags: Mapping[str, frozenset[str]] | None = None
) -> list[FieldError]:
    """Turn a pydantic ``ValidationError`` into JSON-path errors.

    Args:
        exc: what pydantic raised.
        union_tags: per field holding a discriminated union, the member names pydantic
            puts in the location (``action`` → ``pause``, …), left out of the path.
    """
    errors: list[FieldError] = []
    for error in exc.errors():
        subpath, message = _message(error)
        path = _json_path(tuple(error["loc"]), union_tags or {})
        if subpath:
            joiner = "" if subpath.startswith("[") or not path else "."
            path = f"{path}{joiner}{subpath}"
        errors.append(FieldError(path=path, message=message))
    return errors
