"""Money in rules: the document format, and the one place amounts become minor units.

Format 2 (the current one): every amount a person writes is in the ad account
currency's units — ``"max_budget": 500`` is $500.00 on a USD account and ¥500 on a
JPY one, like a condition's ``"value"``. Format 1 (the old one, a document without
``"format"``): action budgets were minor units (``50000`` = $500.00).

Minor units exist only at the Graph boundary: :func:`budget_in_minor_units` turns a
budget action's amounts into minor units where they are planned against the live budget
(:func:`~ruleengine.rules.plan.plan_budget`, with the account currency's offset),
rounding so that a bound is never crossed — a maximum rounds down, a minimum up, an
amount to the nearest minor unit (half up). Any number of decimals is accepted; the
rounding happens here, once. :func:`migrate_definition` is the other direction, for
moving a stored format-1 definition to format 2 (exact: a minor unit ÷ the offset).

:func:`format_money` is how an amount in currency units is shown to a person (CLI tables,
reports): the currency's symbol and its decimals — none for JPY and Meta's other
zero-decimal currencies.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Final

from ruleengine.rules.action_types import PercentBudgetAction, SetBudgetAction
from ruleengine.rules.entity import currency_offset

CURRENT_FORMAT: Final = 2
# The action fields that hold money, per action type.
MONEY_FIELDS: Final = {
    "increase_budget": ("max_budget", "min_budget"),
    "decrease_budget": ("max_budget", "min_budget"),
    "set_budget": ("amount",),
    "set_spend_limit": ("amount",),
    "increase_spend_limit": ("max_budget", "min_budget"),
    "decrease_spend_limit": ("max_budget", "min_budget"),
}
# How each field rounds into minor units: a bound never lets a budget past it.
_ROUNDING: Final = {"max_budget": ROUND_FLOOR, "min_budget": ROUND_CEILING, "amount": ROUND_HALF_UP}
MIGRATE_HINT: Final = "convert it with 'ruleengine rules migrate FILE --write'"


def to_minor(amount: float, offset: int, *, rounding: str) -> int:
    """``amount`` currency units in whole minor units, rounded as ``rounding`` says — a
    :mod:`decimal` rounding mode: ``ROUND_FLOOR`` for a maximum, ``ROUND_CEILING`` for a
    minimum, ``ROUND_HALF_UP`` for an amount. The one conversion every rule amount, bound,
    bid, target and Meta export goes through (exact: no float arithmetic)."""
    # str() gives the shortest decimal that reads back as the same float: 123.45 → "123.45"
    exact = Decimal(str(amount)) * offset
    return int(exact.quantize(Decimal(1), rounding=rounding))


def to_currency(minor: int, offset: int) -> int | float:
    """``minor`` minor units as currency units: an int when whole (50000/100 → 500)."""
    exact = Decimal(minor) / offset
    return int(exact) if exact == exact.to_integral_value() else float(exact)


#: Symbols of common account currencies; any other is shown with its code after the amount.
CURRENCY_SYMBOLS: Final = {
    "USD": "$",
    "EUR": "€",
    "GBP": "£",
    "JPY": "¥",
    "INR": "₹",
    "AUD": "A$",
    "CAD": "CA$",
    "NZD": "NZ$",
    "BRL": "R$",
    "MXN": "MX$",
    "KRW": "₩",
    "IDR": "Rp",
}


def format_money(amount: float, currency: str, *, signed: bool = False) -> str:
    """``amount`` currency units as a person reads them: ``$1,234.50``, ``¥1,235``,
    ``-€3.10``, ``1,234.50 CHF`` (``signed``: ``+`` before a positive amount). Rounded half
    up to the currency's decimals (none for zero-decimal currencies such as JPY)."""
    code = currency.upper()
    if not math.isfinite(amount):
        return f"{amount} {code}"
    places = Decimal(1) if currency_offset(code) == 1 else Decimal("0.01")
    with localcontext() as context:
        context.prec = 400  # any finite float's digits, and its decimals
        exact = Decimal(str(amount)).quantize(places, rounding=ROUND_HALF_UP)
    sign = "-" if exact < 0 else ("+" if signed and exact > 0 else "")
    digits = f"{exact.copy_abs():,f}"
    symbol = CURRENCY_SYMBOLS.get(code)
    return f"{sign}{symbol}{digits}" if symbol else f"{sign}{digits} {code}"


def amount_scale(rule_format: int, offset: int) -> int:
    """Minor units per unit a rule's action amounts are written in (format 1: already minor)."""
    return offset if rule_format >= CURRENT_FORMAT else 1


@dataclass(frozen=True)
class MinorBudget:
    """A budget action's amounts in whole minor units (None: the action sets none)."""

    amount: int | None = None
    min_budget: int | None = None
    max_budget: int | None = None


def budget_in_minor_units(
    action: PercentBudgetAction | SetBudgetAction, *, scale: int
) -> MinorBudget:
    """The action's amounts × ``scale`` (see :func:`amount_scale`), whole, never past a bound.

    A min and a max inside one minor unit (1.001 and 1.001 yen: ¥2 and ¥1 once whole) can
    cross; the maximum wins, so a budget never passes ``max_budget``.
    """
    minor = {
        name: max(1, to_minor(value, scale, rounding=_ROUNDING[name]))
        for name in MONEY_FIELDS[action.type]
        if (value := getattr(action, name)) is not None
    }
    if "min_budget" in minor and "max_budget" in minor:
        minor["min_budget"] = min(minor["min_budget"], minor["max_budget"])
    return MinorBudget(**minor)


def money_fields(definition: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """``(json path, action dict, field)`` of every money field a rule definition sets."""
    tasks = definition.get("tasks")
    for index, task in enumerate(tasks if isinstance(tasks, list) else []):
        action = task.get("action") if isinstance(task, dict) else None
        if not isinstance(action, dict):
            continue
        for name in MONEY_FIELDS.get(str(action.get("type")), ()):
            if action.get(name) is not None:
                yield f"tasks[{index}].action.{name}", action, name


def document_format(data: Any) -> Any:
    """The ``format`` a rule document declares (1 when it declares none)."""
    return data.get("format", 1) if isinstance(data, dict) else None


def migrate_definition(definition: dict[str, Any], offset: int) -> dict[str, Any]:
    """A format-1 definition as format 2: action budgets ÷ ``offset``, ``"format": 2``.

    ``"format"`` goes right after ``"name"``; everything else keeps its order. The result
    means the same budgets on accounts of that offset (``to_minor`` of each is exact).
    """
    migrated: dict[str, Any] = {}
    for key, value in definition.items():
        if key == "format":
            continue
        migrated[key] = value
        if key == "name":
            migrated["format"] = CURRENT_FORMAT
    migrated.setdefault("format", CURRENT_FORMAT)
    migrated["tasks"] = [dict(t) if isinstance(t, dict) else t for t in migrated.get("tasks", [])]
    for task in migrated["tasks"]:
        if isinstance(task, dict) and isinstance(task.get("action"), dict):
            task["action"] = dict(task["action"])
    for _, action, name in money_fields(migrated):
        action[name] = to_currency(int(action[name]), offset)
    return migrated


def explain_old_format(data: dict[str, Any], currency: str, *, path: str = "FILE") -> list[str]:
    """What each minor-unit amount of a format-1 document means in ``currency``, and the fix."""
    offset, code = currency_offset(currency), currency.upper()
    lines = [
        "format 1 (the old format): action budgets are minor units (cents), conditions"
        f' currency units; rules are saved in format {CURRENT_FORMAT} ("format":'
        f" {CURRENT_FORMAT}), every amount in currency units"
    ]
    for where, action, name in money_fields(data):
        value = action[name]
        if isinstance(value, int | float) and not isinstance(value, bool):
            shown = f"{Decimal(str(value)) / offset:.{0 if offset == 1 else 2}f}"
            lines.append(f"{where}: {value} minor units = {shown} in {code}")
    if len(lines) == 1:
        lines.append(f'it names no budget: adding "format": {CURRENT_FORMAT} changes nothing else')
    lines.append(
        f"convert it with 'ruleengine rules migrate {path} --currency {code} --write'"
        " (without --currency: the currency of its registered ad accounts)"
    )
    return lines


@dataclass(frozen=True)
class Migration:
    """A stored format-1 definition moved to format 2, or why it stays at format 1."""

    definition: dict[str, Any] | None = None
    problem: str | None = None


def migrate_stored(definition: dict[str, Any], currencies: Mapping[str, str | None]) -> Migration:
    """Move a format-1 ``definition`` to format 2, given the ad accounts' currencies.

    Budgets need one currency offset: on accounts whose offsets differ (USD and JPY in
    one rule) the same minor-unit number meant different amounts, and no single amount
    in currency units means the same — the rule stays at format 1, with the reason. A
    rule without budgets converts whatever its accounts (nothing to convert).
    """
    if not any(True for _ in money_fields(definition)):
        return Migration(migrate_definition(definition, 1))
    accounts = definition.get("ad_accounts") or []
    unknown = [a for a in accounts if not currencies.get(a)]
    if unknown:
        return Migration(
            problem=f"the currency of {', '.join(unknown)} is unknown (not registered), so its"
            " minor-unit budgets cannot be turned into currency units; register the account"
            " ('ruleengine accounts add'), or save the rule as format 2 with the amounts you mean"
        )
    offsets = {currency_offset(currencies[a]) for a in accounts}
    if len(offsets) != 1:
        shown = ", ".join(f"{a} {currencies[a]}" for a in accounts)
        return Migration(
            problem=f"its ad accounts use currencies of different decimals ({shown}): one"
            " minor-unit budget meant different amounts on them, and no single amount in"
            " currency units means the same; split the rule by currency, or save it as"
            " format 2 with the amounts you mean. It keeps running as format 1 until then"
        )
    return Migration(migrate_definition(definition, offsets.pop()))
