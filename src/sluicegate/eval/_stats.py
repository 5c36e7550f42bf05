"""The statistics of scores: a mean, its standard error and a 95% interval.

Pure functions over plain numbers, so that ``run.json``, the summary and
``sluicegate compare`` compute them one way. The formulas are in
``docs/eval.md`` ("Statistics"): the sample standard deviation (``n - 1``),
the standard error of the mean of per-task means when a task has several
values (rollouts of one task are not independent), and Student's t for the
interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, localcontext
from fractions import Fraction
from statistics import NormalDist
from typing import final

import attrs

__all__ = ["ScoreStats", "exact_mean", "paired", "stats_of", "t_quantile"]


@final
@attrs.frozen
class ScoreStats:
    """A mean with its uncertainty: one score's (or reduced score's) statistics.

    See ``docs/eval.md`` ("Statistics") for the formulas.

    Attributes:
        mean: The task-weighted mean: each task's values averaged first,
            then the mean of those over the tasks (the plain mean when every
            task has one value). It is *the* mean of a run everywhere: the
            summary, ``--min-score``, ``run.json``'s ``scores``, the report
            and ``compare``.
        stderr: Its standard error; None with fewer than two units.
        ci95: The 95% confidence interval ``(lo, hi)``; None when ``stderr`` is.
        n: How many values (scored rollouts, or tasks for a reduced score).
        tasks: How many tasks they come from.
        clustered: Whether the units are tasks (some task had several values).
        beyond_range: ``ci95`` reaches below the lowest or above the highest
            value observed. The interval is Student's t, which knows nothing
            of the scores' range: with few units it says "too few to tell"
            rather than where the mean lies (see ``docs/eval.md``,
            "Statistics", for why it is not clipped).
    """

    mean: float
    stderr: float | None = None
    ci95: tuple[float, float] | None = None
    n: int = 0
    tasks: int = 0
    clustered: bool = False
    beyond_range: bool = False


# Above this many degrees of freedom the series for the t distribution needs
# too many terms; the Cornish-Fisher expansion is exact to ~1e-9 there.
_SERIES_LIMIT = 1000


def _two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` degrees of freedom (exact finite series)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        term, total = math.cos(theta), math.cos(theta)
        for k in range(3, df - 1, 2):
            term *= cos2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * total)
    term, total = 1.0, 1.0
    for k in range(2, df - 1, 2):
        term *= cos2 * (k - 1) / k
        total += term
    return math.sin(theta) * total


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (``p`` in (0.5, 1)) of Student's t with ``df`` degrees of freedom.

    Raises:
        ValueError: ``df < 1`` or ``p`` outside (0.5, 1).
    """
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if not 0.5 < p < 1:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    z = NormalDist().inv_cdf(p)
    if df > _SERIES_LIMIT:
        # Abramowitz and Stegun 26.7.5.
        g1 = (z**3 + z) / 4
        g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
        g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
        return z + g1 / df + g2 / df**2 + g3 / df**3
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    target = 2 * p - 1
    low, high = z, z
    while _two_sided(high, df) < target:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if _two_sided(middle, df) < target:
            low = middle
        else:
            high = middle
        if high - low < 1e-12:
            break
    return (low + high) / 2


def exact_mean(values: Sequence[float]) -> float:
    """The mean of ``values`` (at least one): finite whenever they are, however large their sum.

    ``math.fsum`` sums floats exactly and rounds once; a sum beyond the float
    range (``1e308 + 1e308``) is taken in exact fractions instead, which is
    100 times slower and only needed then.
    """
    try:
        return math.fsum(values) / len(values)
    except OverflowError:
        return float(sum((Fraction(value) for value in values), Fraction(0)) / len(values))


def _stderr(values: Sequence[float], mean: float) -> float:
    """``s / sqrt(n)`` with ``s`` the sample standard deviation (exact when floats overflow)."""
    count = len(values)
    try:
        squares = math.fsum((value - mean) ** 2 for value in values)
        if math.isfinite(squares):
            return math.sqrt(squares / (count - 1)) / math.sqrt(count)
    except OverflowError:
        pass
    centre = Fraction(mean)
    exact = sum(((Fraction(value) - centre) ** 2 for value in values), Fraction(0))
    variance = exact / ((count - 1) * count)
    # Decimal's exponent range holds a variance past the float range whose
    # square root is within it.
    with localcontext() as context:
        context.prec = 30
        return float((Decimal(variance.numerator) / Decimal(variance.denominator)).sqrt())


def _spread(
    values: Sequence[float], mean: float
) -> tuple[float | None, tuple[float, float] | None]:
    """The standard error of ``mean`` and its 95% interval; None with fewer than two values."""
    count = len(values)
    if count < 2:
        return None, None
    stderr = _stderr(values, mean)
    half = t_quantile(0.975, count - 1) * stderr
    low, high = mean - half, mean + half
    if not (math.isfinite(low) and math.isfinite(high)):
        # Beyond the float range: run.json (strict JSON) has no infinity.
        return stderr, None
    return stderr, (low, high)


def _beyond(ci95: tuple[float, float] | None, lowest: float, highest: float) -> bool:
    return ci95 is not None and (ci95[0] < lowest or ci95[1] > highest)


def stats_of(groups: Mapping[str, Sequence[float]]) -> ScoreStats | None:
    """The statistics of values grouped by task (``{task id: values}``); None without a value.

    Clustered by task as soon as one task has two values: the mean and its
    standard error are then those of the per-task means.
    """
    groups = {task: values for task, values in groups.items() if values}
    if not groups:
        return None
    n = sum(len(values) for values in groups.values())
    clustered = n > len(groups)
    units = (
        [exact_mean(values) for values in groups.values()]
        if clustered
        else [values[0] for values in groups.values()]
    )
    mean = exact_mean(units)
    stderr, ci95 = _spread(units, mean)
    lowest = min(min(values) for values in groups.values())
    highest = max(max(values) for values in groups.values())
    return ScoreStats(
        mean=mean,
        stderr=stderr,
        ci95=ci95,
        n=n,
        tasks=len(groups),
        clustered=clustered,
        beyond_range=_beyond(ci95, lowest, highest),
    )


def paired(differences: Iterable[float]) -> ScoreStats | None:
    """The statistics of per-task differences ``b_j - a_j`` (one per shared task); None if none."""
    values = list(differences)
    if not values:
        return None
    mean = exact_mean(values)
    stderr, ci95 = _spread(values, mean)
    return ScoreStats(
        mean=mean,
        stderr=stderr,
        ci95=ci95,
        n=len(values),
        tasks=len(values),
        beyond_range=_beyond(ci95, min(values), max(values)),
    )
