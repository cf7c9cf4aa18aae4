"""Money in rules: the document format, and the one place amounts become minor units.

Format 2 (the current one): every amount a person writes is in the ad account
currency's units — ``"max_budget": 500`` is $500.00 on a USD account and ¥500 on a
JPY one, like a condition's ``"value"``. Format 1 (the old one, a document without
``"format"``): action budgets were minor units (``50000`` = $500.00).

Minor units exist only at the Graph boundary: :func:`budget_in_minor_units` turns a
budget action's amounts into minor units where they are planned against the live budget
(:func:`~ruleengine.rules.plan.plan.plan_budget`, with the account currency's offset),
rounding so that a bound is never crossed — a maximum rounds down, a minimum up, an
amount to the nearest minor unit (half up). Any number of decimals is accepted; the
rounding happens here, once. :func:`migrate_definition` is the other direction, for
moving a stored format-1 definition to format 2 (exact: a minor unit ÷ the offset).

Money shown to a person (screens, CLI tables, notifications) goes through one formatter:
:func:`format_minor` (an amount as Meta stores it, ``12000`` → ``$120.00``, ``¥12,000``),
:func:`format_change` (``$120.00 → $108.00 (−10 %)``) and, for any field of an entity,
:func:`format_value` / :func:`format_field_change` (budgets and bids as money, the rest as
text). The web screens' twin is ``RE.money`` in ``web/static/common.js``: the same text for
the same input (a test feeds both the same generated amounts).
:func:`format_money` (an amount in currency units, signed where asked) is
:func:`format_amount` by its other name.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Final

from ruleengine.errors import FieldError, NoAmountForCurrency
from ruleengine.rules.entity import currency_offset
from ruleengine.rules.language.action_types import (
    PercentBudgetAction,
    ScheduleBudgetAction,
    SetBudgetAction,
)
from ruleengine.rules.language.budget_schedules import ScheduleSpec
from ruleengine.rules.language.catalog import UnknownMetricError, resolve_metric
from ruleengine.rules.language.per_currency import bare, listed

CURRENT_FORMAT: Final = 2
# The action fields that hold money, per action type.
MONEY_FIELDS: Final = {
    "increase_budget": ("max_budget", "min_budget"),
    "decrease_budget": ("max_budget", "min_budget"),
    "set_budget": ("amount",),
    "set_spend_limit": ("amount",),
    "increase_spend_limit": ("max_budget", "min_budget"),
    "decrease_spend_limit": ("max_budget", "min_budget"),
    "schedule_budget": ("amount", "max_budget"),
}
#: Every action field that holds money, per action type: the budget fields above, and the
#: bids, bounds and (when its metric is money) the target of the Ad Rules actions.
AMOUNT_FIELDS: Final = {
    **MONEY_FIELDS,
    "change_bid": ("amount", "min_bid", "max_bid"),
    "scale_to_target": ("target", "min_budget", "max_budget"),
    "rebalance_budget": ("min_budget", "max_budget"),
}
# How each field rounds into minor units: a bound never lets a budget past it.
_ROUNDING: Final = {"max_budget": ROUND_FLOOR, "min_budget": ROUND_CEILING, "amount": ROUND_HALF_UP}
MIGRATE_HINT: Final = "convert it with 'ruleengine rules migrate FILE --write'"


def to_minor(amount: float | dict[str, float], offset: int, *, rounding: str) -> int:
    """``amount`` currency units in whole minor units, rounded as ``rounding`` says — a
    :mod:`decimal` rounding mode: ``ROUND_FLOOR`` for a maximum, ``ROUND_CEILING`` for a
    minimum, ``ROUND_HALF_UP`` for an amount. The one conversion every rule amount, bound,
    bid, target and Meta export goes through (exact: no float arithmetic)."""
    # str() gives the shortest decimal that reads back as the same float: 123.45 → "123.45"
    exact = Decimal(str(bare(amount))) * offset
    return int(exact.quantize(Decimal(1), rounding=rounding))


def to_currency(minor: int, offset: int) -> int | float:
    """``minor`` minor units as currency units: an int when whole (50000/100 → 500)."""
    exact = Decimal(minor) / offset
    return int(exact) if exact == exact.to_integral_value() else float(exact)


#: The entity fields that hold money in minor units, as Meta stores them (the write path's
#: integer fields, ``rules.targets.INTEGER_FIELDS``: a test keeps the two the same), and a
#: budget schedule's record (``budget_schedules``: the daily budget before → in its window).
MINOR_UNIT_FIELDS: Final = frozenset(
    {
        "budget_schedules",
        "daily_budget",
        "lifetime_budget",
        "bid_amount",
        "daily_spend_cap",
        "daily_min_spend_target",
        "lifetime_spend_cap",
        "lifetime_min_spend_target",
    }
)
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
    "CNY": "CN¥",
    "HKD": "HK$",
    "TWD": "NT$",
}
#: The minus of a percentage (U+2212, as typeset), and what shows no value.
MINUS: Final = "\u2212"
NO_VALUE: Final = "—"
_WHOLE: Final = re.compile(r"-?[0-9]{1,18}")


def whole_minor(value: object) -> int | None:
    """``value`` as whole minor units — an int, an integral float, or digits as Meta sends
    them (``"27000"``) — else ``None`` (not an amount: shown as text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        return int(value)
    return None


def format_amount(amount: Decimal | float, currency: str, *, signed: bool = False) -> str:
    """``amount`` currency units as a person reads them: ``$1,234.50``, ``¥1,235``,
    ``-€3.10``, ``1,234.50 CHF`` (``signed``: ``+`` before a positive amount), rounded half
    up to the currency's decimals (none for Meta's zero-decimal currencies such as JPY). A
    float counts as the decimal its shortest text is (``1.005`` is 1.005, so ``$1.01``)."""
    code = currency.upper()
    if isinstance(amount, float) and not math.isfinite(amount):
        return f"{amount} {code}"
    places = Decimal(1) if currency_offset(code) == 1 else Decimal("0.01")
    with localcontext() as context:
        context.prec = 400  # any float's digits, and its decimals
        exact = Decimal(str(amount) if isinstance(amount, float) else amount).quantize(
            places, rounding=ROUND_HALF_UP
        )
    sign = "-" if exact < 0 else ("+" if signed and exact > 0 else "")
    digits = f"{exact.copy_abs():,f}"
    symbol = CURRENCY_SYMBOLS.get(code)
    return f"{sign}{symbol}{digits}" if symbol else f"{sign}{digits} {code}"


#: The same formatter by the name the impact report calls it.
format_money = format_amount


def format_minor(minor: object, currency: str | None) -> str:
    """An amount as Meta stores it (minor units) in ``currency``: ``12000`` → ``$120.00`` in
    USD, ``¥12,000`` in JPY. Without a currency (an account no longer registered) the number
    as stored; ``—`` for no value; anything not a whole amount as its text."""
    if minor is None:
        return NO_VALUE
    whole = whole_minor(minor)
    if whole is None:
        return str(minor)
    if not currency:
        return str(whole)
    return format_amount(Decimal(whole) / currency_offset(currency), currency)


def percent_change(before: int, after: int) -> str:
    """``after`` against ``before`` in percent, to a tenth, rounded half away from zero:
    ``−10 %``, ``+7.5 %``, ``0 %``; ``<0.1 %`` with its sign for a change under a tenth.
    Exact (integers only), so the screens' twin gives the same text."""
    diff = after - before
    tenths = (abs(diff) * 2000 + before) // (2 * before)
    sign = "+" if diff > 0 else MINUS if diff < 0 else ""
    if tenths == 0 and diff != 0:
        return f"{sign}<0.1 %"
    whole, tenth = divmod(tenths, 10)
    return f"{sign}{whole:,}" + (f".{tenth}" if tenth else "") + " %"


def format_change(before: object, after: object, currency: str | None) -> str:
    """A change of an amount as a person reads it: ``$120.00 → $108.00 (−10 %)``; without
    the percentage when either side is no whole amount or the amount before is not above 0."""
    text = f"{format_minor(before, currency)} → {format_minor(after, currency)}"
    low, high = whole_minor(before), whole_minor(after)
    if low is None or high is None or low <= 0:
        return text
    return f"{text} ({percent_change(low, high)})"


def format_value(field: str | None, value: object, currency: str | None) -> str:
    """One value of an entity's ``field``: money for a budget or a bid, else its text."""
    if field in MINOR_UNIT_FIELDS:
        return format_minor(value, currency)
    return NO_VALUE if value is None else str(value)


#: What a field is called where people read it (the rest by their own name).
FIELD_WORDS: Final = {
    "daily_budget": "daily budget",
    "lifetime_budget": "lifetime budget",
    "bid_amount": "bid",
    "daily_spend_cap": "daily spend cap",
    "daily_min_spend_target": "daily minimum spend",
    "lifetime_spend_cap": "lifetime spend cap",
    "lifetime_min_spend_target": "lifetime minimum spend",
    "budget_schedules": "scheduled daily budget",
}


def field_words(field: str | None) -> str:
    """``daily_budget`` → ``daily budget``: a field as people call it."""
    return FIELD_WORDS.get(field or "", str(field))


def format_field_change(
    field: str | None,
    before: object,
    after: object,
    currency: str | None,
    schedule: object = None,
) -> str:
    """``before → after`` of an entity's ``field``, money with its percentage for a budget
    or a bid (:func:`format_change`), ``ACTIVE → PAUSED`` for the rest; a budget schedule's
    (``schedule``: what it sends) with its window, in UTC."""
    if field in MINOR_UNIT_FIELDS:
        text = format_change(before, after, currency)
    else:
        text = f"{format_value(field, before, None)} → {format_value(field, after, None)}"
    spec = ScheduleSpec.from_doc(schedule)
    if spec is None:
        return text
    where = "window deleted" if spec.op == "delete" else "in the window"
    return f"{text}, {where} {spec.window_text()} UTC"


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
    action: PercentBudgetAction | SetBudgetAction | ScheduleBudgetAction, *, scale: int
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


# ---------------------------------------------------------------- amounts per currency


@dataclass(frozen=True)
class Place:
    """Where a rule definition names an amount of money: its JSON path, and the dict holding
    it under ``key``."""

    path: str
    holder: dict[str, Any]
    key: str

    @property
    def value(self) -> Any:
        """The amount as written: a number, ``[low, high]``, or either per currency."""
        return self.holder[self.key]


def _items(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    for index, item in enumerate(value if isinstance(value, list) else []):
        if isinstance(item, dict):
            yield index, item


def _is_money(metric: Any) -> bool:
    try:
        return resolve_metric(str(metric)).money
    except UnknownMetricError:
        return False


def amounts(definition: dict[str, Any]) -> Iterator[Place]:
    """Every amount of money a rule definition names: a condition's ``value`` on a money
    metric, an action's money fields (:data:`AMOUNT_FIELDS`; a ``target`` only when its
    metric is money), an approval's ``budget_above``."""
    for t, task in _items(definition.get("tasks")):
        for c, condition in _items(task.get("conditions")):
            if condition.get("value") is not None and _is_money(condition.get("metric")):
                yield Place(f"tasks[{t}].conditions[{c}].value", condition, "value")
        action = task.get("action")
        if isinstance(action, dict):
            for name in AMOUNT_FIELDS.get(str(action.get("type")), ()):
                money = name != "target" or _is_money(action.get("metric"))
                if money and action.get(name) is not None:
                    yield Place(f"tasks[{t}].action.{name}", action, name)
        approval = task.get("approval")
        when = approval.get("when") if isinstance(approval, dict) else None
        if isinstance(when, dict) and when.get("budget_above") is not None:
            yield Place(f"tasks[{t}].approval.when.budget_above", when, "budget_above")


def amounts_in(definition: dict[str, Any], currency: str) -> dict[str, Any]:
    """A copy of ``definition`` with every per-currency amount replaced by ``currency``'s —
    what the rule means on an ad account in that currency (bare amounts stay as written).

    Raises:
        NoAmountForCurrency: an amount is given per currency, but not in ``currency``.
    """
    resolved = copy.deepcopy(definition)
    for place in list(amounts(resolved)):
        value = place.value
        if isinstance(value, dict):
            if currency not in value:
                raise NoAmountForCurrency(place.path, currency)
            place.holder[place.key] = value[currency]
    return resolved


def currency_problems(
    definition: dict[str, Any], currencies: Mapping[str, str]
) -> list[FieldError]:
    """What a rule's amounts leave unsaid on its ad accounts (``currencies``: account id →
    its registered currency; accounts not in it are not counted): a bare amount on accounts
    of different currencies — where one number means different amounts — and a per-currency
    amount without one of the accounts' currencies. Zero is the same in every currency: a
    bare ``0`` is taken."""
    held: dict[str, list[str]] = {}
    for account in definition.get("ad_accounts") or []:
        code = currencies.get(account) if isinstance(account, str) else None
        if code:
            held.setdefault(code.upper(), []).append(account)
    codes = sorted(held)
    problems = []
    for place in amounts(definition):
        value = place.value
        if isinstance(value, dict):
            problems += [
                FieldError(
                    place.path,
                    f"no amount for {code}, the currency of {listed(held[code])}: add"
                    f' "{code}": … in {code}\'s own units',
                )
                for code in codes
                if code not in value
            ]
        elif len(codes) > 1 and not _zero(value):
            problems.append(FieldError(place.path, _per_currency_hint(value, codes)))
    return problems


def _zero(value: Any) -> bool:
    """Whether a bare amount is nothing, in every currency alike (``0``, ``[0, 0]``)."""
    if isinstance(value, list):
        return all(_zero(v) for v in value)
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


def _per_currency_hint(value: Any, codes: list[str]) -> str:
    number = _json_number(value)
    example = ", ".join(f'"{code}": {number}' for code in codes)
    return (
        f"the rule's accounts are in {listed(codes)}, where {number} is a different amount in"
        f" each: give this amount per currency, e.g. {{{example}}} with each number in that"
        " currency's units"
    )


def _json_number(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_json_number(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
