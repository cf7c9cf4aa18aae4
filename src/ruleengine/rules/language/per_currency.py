"""Amounts given per currency: ``{"USD": 20, "JPY": 3000}`` where one number would mean
different amounts on the rule's ad accounts.

A rule's amounts are in the ad account currency's units (:mod:`ruleengine.rules.language.money`),
so a bare ``20`` is $20 on a USD account and ¥20 (about 13 cents) on a JPY one. Wherever
a rule names money — a condition's ``value`` on a money metric, the money fields of an
action, an approval's ``budget_above`` — it may instead give one amount per currency, keyed
by the ISO 4217 code. This module checks that shape; :mod:`ruleengine.rules.language.money` finds
the amounts in a rule and picks each account's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any, Final, TypeVar

from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from ruleengine.rules.basics import MAX_BUDGET
from ruleengine.rules.language.validation import PathError

T = TypeVar("T")
#: An ISO 4217 code as Meta's ad accounts carry it (``currency``, "ISO 4217 Currency Code" in
#: https://developers.facebook.com/docs/marketing-api/reference/ad-account/), registered upper
#: case: three capital letters.
CURRENCY_CODE: Final = re.compile(r"[A-Z]{3}")
#: The largest amount in currency units a bid or a ``scale_to_target`` /
#: ``rebalance_budget`` bound may name: 10^10 is far above any real bid or budget (ten
#: billion yen, or dollars) and, in minor units, well inside BSON's int64.
MAX_AMOUNT: Final = 10**10


def per_currency(raw: dict[Any, Any], one: Callable[[Any], T]) -> dict[str, T]:
    """``raw`` checked as ``{currency code: amount}``: at least one entry, every key a
    code such as ``USD``, every amount what ``one`` makes of it (``one`` raises ValueError,
    or PathError for a part of it, on a bad one). Keys keep their order."""
    if not raw:
        raise ValueError('give at least one currency, e.g. {"USD": 20}')
    checked: dict[str, T] = {}
    for code, value in raw.items():
        if not isinstance(code, str) or not CURRENCY_CODE.fullmatch(code):
            raise ValueError(
                f"{str(code)[:12]!r} is not a currency code: key each amount by its currency's"
                ' three capital letters, e.g. {"USD": 20, "JPY": 3000}'
            )
        try:
            checked[code] = one(value)
        except PathError as exc:
            joiner = "" if exc.subpath.startswith("[") else "."
            raise PathError(f"{code}{joiner}{exc.subpath}", str(exc)) from None
        except ValueError as exc:
            raise PathError(code, str(exc)) from None
    return checked


def is_per_currency(raw: dict[Any, Any]) -> bool:
    """True when a dict is keyed by currency codes (at least one): meant as amounts per
    currency, not as some other shape (``{"low": 1, "high": 2}`` for a range)."""
    return any(isinstance(key, str) and CURRENCY_CODE.fullmatch(key) for key in raw)


def pick(value: T | dict[str, T], currency: str) -> T | None:
    """The amount of ``currency`` in a per-currency ``value`` (None when it gives none); a
    bare ``value`` is every currency's."""
    if isinstance(value, dict):
        return value.get(currency)
    return value


def bare(value: T | dict[str, Any]) -> T:
    """An amount of a rule already picked for its ad account's currency
    (:meth:`~ruleengine.rules.language.model.Rule.in_currency`): a per-currency one here is a
    bug."""
    if isinstance(value, dict):
        raise TypeError(
            "an amount given per currency is picked for the ad account's currency first"
            " (Rule.in_currency)"
        )
    return value


def bound_pairs(low: Any, high: Any) -> Iterator[tuple[str | None, float, float]]:
    """``(currency, low, high)`` of two bounds that may each be bare or per currency: one
    pair for two bare bounds (currency None), else one per currency both bounds give (a bare
    bound gives every currency)."""
    if low is None or high is None:
        return
    if not isinstance(low, dict) and not isinstance(high, dict):
        yield None, low, high
        return
    codes = {**(low if isinstance(low, dict) else {}), **(high if isinstance(high, dict) else {})}
    for code in codes:
        lo, hi = pick(low, code), pick(high, code)
        if lo is not None and hi is not None:
            yield code, lo, hi


def check_bounds(low: Any, high: Any, names: tuple[str, str]) -> None:
    """Refuse a lower bound above its upper bound, currency by currency."""
    for code, lo, hi in bound_pairs(low, high):
        if lo > hi:
            where = f"{names[0]}.{code}" if isinstance(low, dict) else names[0]
            of = f" ({code})" if code is not None else ""
            raise PathError(where, f"{names[0]} {lo:g} > {names[1]} {hi:g}{of}")


def listed(codes: Iterable[str]) -> str:
    """``["EUR", "JPY", "USD"]`` → ``"EUR, JPY and USD"``."""
    items = list(codes)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def shown(value: Any) -> str:
    """An amount for a sentence: ``20``, ``[10, 20]``, or ``USD 20 / JPY 3000``."""
    if isinstance(value, dict):
        return " / ".join(f"{code} {shown(amount)}" for code, amount in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------- the amount types


def _single(adapter: TypeAdapter[Any], raw: Any) -> Any:
    """``raw`` through ``adapter``, its first problem as one ValueError (not one per member
    of a union, with pydantic's paths)."""
    try:
        return adapter.validate_python(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["type"] in ("greater_than", "less_than_equal", "finite_number"):
            raise ValueError(str(error["msg"])) from None
        raise ValueError(f"needs a number, e.g. 500 or 123.45, not {raw!r:.40}") from None


def _bare_or_map(adapter: TypeAdapter[Any]) -> WrapValidator:
    def validate(raw: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(raw, dict):
            return per_currency(raw, lambda one: _single(adapter, one))
        return _single(adapter, raw)

    return WrapValidator(validate)


# An amount of money: an int stays an int (a stored format-1 definition reads back as it was).
Money = Annotated[int | float, Field(gt=0, le=MAX_BUDGET, allow_inf_nan=False)]
#: A budget action's amount (:data:`Money`), or one per currency.
BudgetAmount = Annotated[Money | dict[str, Money], _bare_or_map(TypeAdapter(Money))]
Bounded = Annotated[float, Field(gt=0, le=MAX_AMOUNT, allow_inf_nan=False)]
#: A bid, a target or a bound of ``scale_to_target``/``rebalance_budget``, or one per currency.
Amount = Annotated[Bounded | dict[str, Bounded], _bare_or_map(TypeAdapter(Bounded))]
