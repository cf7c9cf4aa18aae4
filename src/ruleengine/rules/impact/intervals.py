"""Confidence intervals for a difference of means, pure: Welch's t interval, stratified.

The impact report (:mod:`ruleengine.rules.impact.measure`) compares the mean change of acted
entities with that of held-out ones. Its interval is Welch's: the difference of the means ±
Student's t quantile × its standard error, the groups' variances estimated apart and the
degrees of freedom by Welch–Satterthwaite. Where the groups were drawn under different
holdout settings (a percent or salt changed in the period), each setting is a *stratum*:
the difference is taken within each one and the differences are weighted by their acted
entities (the effect on the entities acted on), and so is the variance.

Student's t distribution is computed here (no SciPy): its CDF from the regularized
incomplete beta function (Numerical Recipes' continued fraction, §6.4), its quantile by
bisection on that CDF.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

_EPS: Final = 1e-14
_TINY: Final = 1e-300
_CF_ITERATIONS: Final = 300


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _CF_ITERATIONS + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    # the continued fraction converges fast on this side of the mean; the other by symmetry
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` > 0 degrees of freedom (any real ``df``)."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (0 < p < 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be strictly between 0 and 1, not {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:  # the quantile of df = 1 at 0.999 is 318: a few doublings
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


@dataclass(frozen=True)
class Interval:
    """A difference of means with its two-sided interval.

    Attributes:
        estimate: the (weighted) difference, first group minus second.
        low, high: the interval's ends.
        first_mean, second_mean: the (weighted) means whose difference ``estimate`` is.
        stderr: the standard error of ``estimate``.
        df: Welch–Satterthwaite degrees of freedom (``inf`` with no variance at all).
    """

    estimate: float
    low: float
    high: float
    first_mean: float
    second_mean: float
    stderr: float
    df: float


@dataclass(frozen=True)
class Stratum:
    """One stratum's values: the first group's (acted) and the second's (held out)."""

    first: Sequence[float]
    second: Sequence[float]

    @property
    def usable(self) -> bool:
        """Two values or more in each group: a variance can be estimated in each."""
        return len(self.first) >= 2 and len(self.second) >= 2


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    mean = math.fsum(values) / len(values)
    return mean, math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)


def welch_interval(strata: Sequence[Stratum], *, level: float = 0.95) -> Interval | None:
    """Welch's interval of ``first − second``, stratified (see the module); None without a
    usable stratum. Each usable stratum weighs as many acted values as it holds."""
    usable = [s for s in strata if s.usable]
    if not usable:
        return None
    total = sum(len(s.first) for s in usable)
    estimate = first_mean = second_mean = variance = df_denominator = 0.0
    for stratum in usable:
        weight = len(stratum.first) / total
        (m1, v1), (m2, v2) = _mean_var(stratum.first), _mean_var(stratum.second)
        a, b = v1 / len(stratum.first), v2 / len(stratum.second)
        first_mean += weight * m1
        second_mean += weight * m2
        variance += weight**2 * (a + b)
        df_denominator += weight**4 * (
            a**2 / (len(stratum.first) - 1) + b**2 / (len(stratum.second) - 1)
        )
    estimate = first_mean - second_mean
    stderr = math.sqrt(variance)
    if df_denominator <= 0.0:
        return Interval(estimate, estimate, estimate, first_mean, second_mean, 0.0, math.inf)
    df = variance**2 / df_denominator
    half = t_quantile(0.5 + level / 2.0, df) * stderr
    return Interval(estimate, estimate - half, estimate + half, first_mean, second_mean, stderr, df)
