"""Rule files: read, validated (offline, or against the registered accounts and configured
webhooks), converted from the old format; each problem as ``FILE: path: message``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson

from ruleengine.cli.common import one_line
from ruleengine.errors import FieldError, RuleValidationError
from ruleengine.rules.language.model import Rule, parse_rule
from ruleengine.rules.language.money import (
    CURRENT_FORMAT,
    document_format,
    explain_old_format,
    migrate_stored,
)


def load_file(path: Path) -> Any:
    """The JSON document in ``path``.

    Raises:
        RuleValidationError: the file cannot be read, or is not JSON.
    """
    try:
        return orjson.loads(path.read_bytes())
    except OSError as exc:
        raise RuleValidationError([file_error(f"cannot read the file ({exc.strerror})")]) from None
    except orjson.JSONDecodeError as exc:
        raise RuleValidationError([file_error(f"not valid JSON ({exc})")]) from None


def file_error(message: str) -> FieldError:
    """A problem with a file as a whole (no path inside it)."""
    return FieldError(path="", message=message)


def is_file(source: str) -> bool:
    """A FILE_OR_ID names a file when one exists there, or when it looks like a path."""
    if source.endswith(".json") or "/" in source or os.sep in source:
        return True
    try:
        return Path(source).exists()
    except OSError:  # a name too long for the file system, or not one it can hold
        return False


def validate_files(
    paths: Sequence[Path],
    out: TextIO,
    *,
    accounts: Mapping[str, str] | None = None,
    webhooks: set[str] | None = None,
    explain_in: str | None = None,
) -> list[tuple[Path, Rule]]:
    """Parse every file; print ``FILE: path: message`` per problem. Returns the valid rules.

    What ``rules validate`` (offline) and ``rules apply`` (against the registered accounts
    and configured webhooks, as the API validates) run. Only the current format is
    valid; with ``explain_in`` a format-1 file is explained: its minor-unit amounts in
    that currency, and the command that converts it.
    """
    valid: list[tuple[Path, Rule]] = []
    for path in paths:
        data: Any = None
        try:
            data = load_file(path)
            rule = parse_rule(data, accounts=accounts, webhooks=webhooks, new=True)
            valid.append((path, rule))
        except RuleValidationError as exc:
            print_problems(path, exc, out)
            if explain_in and isinstance(data, dict) and document_format(data) == 1:
                for line in explain_old_format(data, explain_in, path=str(path)):
                    print(one_line(f"{path}: {line}"), file=out)
    return valid


def problem_line(path: Path, error: FieldError) -> str:
    """``FILE: path: message`` on one line: control characters a rule carried are escaped."""
    where = f"{error.path}: " if error.path else ""
    return one_line(f"{path}: {where}{error.message}")


def print_problems(path: Path | str, exc: RuleValidationError, out: TextIO) -> None:
    """Each problem of ``exc`` as ``FILE: path: message``."""
    for error in exc.errors:
        print(problem_line(Path(path), error), file=out)


def is_old_format(path: Path) -> bool:
    """Whether ``path`` holds a rule document of format 1 (False when it cannot be read)."""
    try:
        return bool(document_format(load_file(path)) == 1)
    except RuleValidationError:
        return False  # the conversion reports it


def migrate_file(
    path: Path, currencies: dict[str, str | None], *, currency: str | None
) -> dict[str, Any]:
    """The rule file at ``path`` in the current format (unchanged when it already is).

    Raises:
        RuleValidationError: the file is not a valid rule, or cannot be converted.
    """
    data = load_file(path)
    rule = parse_rule(data)  # a format-1 document must be valid as it is
    if rule.format == CURRENT_FORMAT:
        return dict(data)
    if currency is not None:
        currencies = dict.fromkeys(rule.ad_accounts, currency)
    migration = migrate_stored(data, currencies)
    if migration.definition is None:
        hint = "; or give the currency: --currency CODE" if currency is None else ""
        raise RuleValidationError([FieldError("", f"not converted: {migration.problem}{hint}")])
    parse_rule(migration.definition, new=True)
    return migration.definition
