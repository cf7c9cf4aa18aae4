"""The custom-metric table, pure: a sheet's rows → a number per entity and metric.

Sheet layout: the first row is a header. One column is the key — its header
is ``id``, ``campaign_id``, ``adset_id``, ``ad_set_id``, ``ad_id`` or ``entity_id`` (rows
matched on the entity id) or ``name``, ``campaign_name``, ``adset_name``, ``ad_set_name`` or
``ad_name`` (matched on the entity name, trimmed, case-insensitive). Every
other column is a metric named by its normalised header (:func:`normalise_name`).
Cells are parsed leniently (:func:`parse_number`); what is not a number is no data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final, Literal

from ruleengine.errors import RuleEngineError

KeyKind = Literal["id", "name"]

CUSTOM_PREFIX: Final = "custom:"
ID_HEADERS: Final = ("id", "campaign_id", "adset_id", "ad_set_id", "ad_id", "entity_id")
NAME_HEADERS: Final = ("name", "campaign_name", "adset_name", "ad_set_name", "ad_name")


class SheetsError(RuleEngineError):
    """A sheet could not be read or understood; the message says which one and what to do."""


_SEPARATORS_RE = re.compile(r"[\W_]+")
# Currency marks a sheet may format numbers with; "Rp" is the rupiah (the seeds' market).
_CURRENCY_RE = re.compile(r"[$€£¥₹₩₽₺₫฿₱]|Rp\.?", re.IGNORECASE)
# After currency marks and whitespace are gone: "(1,234.5)", "-35%", "1.5e3".
# Commas group thousands and a dot is the decimal point; anything else is not a number.
_NUMBER_RE = re.compile(
    r"""
    (?P<open>\()?
    (?P<sign>[-+−])?
    (?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)
    (?P<exponent>[eE][-+]?\d+)?
    %?
    (?P<close>\))?
    """,
    re.VERBOSE,
)


def normalise_name(text: str) -> str:
    """Normalise a column header or metric name so spelling variants meet.

    Trimmed and lower-cased; ``%`` becomes ``pct``; every run of spaces,
    punctuation and underscores becomes one ``_``, none at either end. So
    ``Margin %``, ``Margin Pct``, ``margin-pct`` and ``margin_pct`` are all
    ``margin_pct``, and ``Target CPA ($)`` is ``target_cpa``.
    """
    text = text.strip().casefold().replace("%", " pct ")
    return _SEPARATORS_RE.sub("_", text).strip("_")


def normalise_metric(metric: str) -> str:
    """A metric as a rule names it (``custom:Margin %`` or ``margin_pct``) → its column name."""
    if metric[: len(CUSTOM_PREFIX)].lower() == CUSTOM_PREFIX:
        metric = metric[len(CUSTOM_PREFIX) :]
    return normalise_name(metric)


def parse_number(raw: object) -> float | None:
    """Read a cell as a number, or None when it does not hold one.

    Accepts ``12.5``, ``1,234.5``, `` 7 ``, ``-3``, ``(1,200)`` (accounting
    negative), ``1.5E+3``, currency marks (``$1,200``, ``Rp 15,000``, ``€3``)
    and a trailing ``%`` — ``35%`` is 35.0, the number as written, not 0.35.
    Empty cells, ``#N/A`` and other errors, ``-``, words, and numbers written
    with a comma as decimal point (``1.234,5``) are None: guessing a locale
    could turn 1.234 into 1234.
    """
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw) if math.isfinite(raw) else None
    if not isinstance(raw, str):
        return None
    text = "".join(_CURRENCY_RE.sub("", raw).split())
    match = _NUMBER_RE.fullmatch(text)
    if match is None or bool(match["open"]) != bool(match["close"]):
        return None
    if match["open"] and match["sign"]:
        return None
    value = float(match["digits"].replace(",", "") + (match["exponent"] or ""))
    negative = bool(match["open"]) or match["sign"] in ("-", "−")
    return -value if negative else value


def _cell(row: Sequence[object], index: int) -> object:
    return row[index] if index < len(row) else ""


def _entity_key(value: object, key: KeyKind) -> str:
    """The form a key cell and an entity's id or name are compared in."""
    text = str(value).strip()
    return text.casefold() if key == "name" else text


def _key_column(header: list[str], key: KeyKind) -> int:
    """Index of the first column whose header names the ``key`` kind; SheetsError if none."""
    wanted = ID_HEADERS if key == "id" else NAME_HEADERS
    for index, name in enumerate(header):
        if name in wanted:
            return index
    found = ", ".join(repr(name) for name in header if name) or "nothing"
    raise SheetsError(
        f"no key column: to match rows by {key}, the first row needs a column titled one of "
        f"{', '.join(wanted)}; it has {found}"
    )


def _metric_columns(header: list[str]) -> dict[str, int]:
    """Metric name → column index; key columns and blank headers are not metrics.

    When two headers normalise to the same name, the left-most column wins.
    """
    columns: dict[str, int] = {}
    for index, name in enumerate(header):
        if name and name not in ID_HEADERS and name not in NAME_HEADERS:
            columns.setdefault(name, index)
    return columns


class CustomMetricTable:
    """The custom metrics of one worksheet, keyed by entity id or by entity name.

    Built once per job from the sheet's rows (the first row is the header);
    lookups are pure dictionary reads. Rows with an empty key are ignored.
    When two rows have the same key **the last one wins**, as a whole row:
    a value the earlier row had is not carried over.

    Args:
        rows: The worksheet's cells, row by row, as strings (formatted values).
        key: ``"id"`` to match rows on the entity id, ``"name"`` on its name.

    Raises:
        SheetsError: The sheet is empty or has no key column of the ``key`` kind.
    """

    def __init__(self, rows: Sequence[Sequence[object]], *, key: KeyKind = "id") -> None:
        if not rows or not any(str(cell).strip() for cell in rows[0]):
            raise SheetsError("the worksheet is empty: its first row must be a header")
        header = [normalise_name(str(cell)) for cell in rows[0]]
        key_index = _key_column(header, key)
        columns = _metric_columns(header)
        self._key: KeyKind = key
        self._metrics = tuple(columns)
        self._rows: dict[str, dict[str, float]] = {}
        for row in rows[1:]:
            entity = _entity_key(_cell(row, key_index), key)
            if not entity:
                continue
            parsed = {name: parse_number(_cell(row, index)) for name, index in columns.items()}
            self._rows[entity] = {name: v for name, v in parsed.items() if v is not None}

    @property
    def key(self) -> KeyKind:
        """Whether rows are matched on the entity ``id`` or its ``name``."""
        return self._key

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metric column names (normalised), in sheet order."""
        return self._metrics

    def __len__(self) -> int:
        """The number of distinct keys (entities) the sheet has rows for."""
        return len(self._rows)

    def value(self, *, entity_id: str, entity_name: str, metric: str) -> float | None:
        """The value of ``metric`` for one entity, or None (no data).

        Args:
            entity_id: The campaign, ad set or ad id (used when the table is keyed by id).
            entity_name: Its name (used when keyed by name).
            metric: ``margin_pct``, ``custom:margin_pct`` or any spelling that
                normalises to the column's name.

        Returns:
            The number, or None when the entity has no row, the sheet has no such
            column, or the cell is empty or not a number.
        """
        lookup = entity_id if self._key == "id" else entity_name
        row = self._rows.get(_entity_key(lookup, self._key))
        return None if row is None else row.get(normalise_metric(metric))
