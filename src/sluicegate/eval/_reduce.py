"""Reducers: one value per task from the scores of its rollouts (``--reduce``).

``mean``, ``max``, ``min``, ``median``, ``mode``, ``pass_at_K`` and
``at_least_K``; see ``docs/eval.md`` ("Reducers over the rollouts of a
task") for what each computes and how a reduced score is named.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction

from ._stats import exact_mean

__all__ = ["REDUCERS", "check_reducer", "reduce_values", "reduced_name", "rollouts_needed"]

# The reducers without a parameter; pass_at_K and at_least_K take K >= 1.
REDUCERS = ("mean", "max", "min", "median", "mode")
_WITH_K = re.compile(r"(pass_at|at_least)_([1-9][0-9]*)")


def check_reducer(name: object) -> str:
    """``name`` if it names a reducer.

    Raises:
        TypeError: ``name`` is not text.
        ValueError: it names no reducer; the message lists them.
    """
    if not isinstance(name, str):
        raise TypeError(f"--reduce must be reducer names, not {name!r}")
    if name in REDUCERS or _WITH_K.fullmatch(name):
        return name
    raise ValueError(
        f"--reduce must be one of {', '.join(REDUCERS)}, pass_at_K or at_least_K "
        f"(K a whole number >= 1), not {name!r}"
    )


def rollouts_needed(reducer: str) -> int:
    """The scored rollouts a task needs for ``reducer`` to have a value: K for
    ``pass_at_K`` and ``at_least_K``, else 1."""
    match = _WITH_K.fullmatch(reducer)
    return int(match.group(2)) if match is not None else 1


def reduced_name(score: str, reducer: str, plain: str) -> str:
    """A reduced score's name: the reducer alone for the plain score, else ``score/reducer``."""
    return reducer if score == plain else f"{score}/{reducer}"


def pass_at(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k estimate ``1 - C(n - c, k) / C(n, k)``; None when ``n < k``."""
    if n < k:
        return None
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def _mode(values: Sequence[float]) -> float:
    counts = Counter(values)
    top = max(counts.values())
    return min(value for value, count in counts.items() if count == top)


_PLAIN: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": exact_mean,
    "max": max,
    "min": min,
    "median": lambda values: float(statistics.median(values)),
    "mode": _mode,
}


def reduce_values(reducer: str, values: Sequence[float], threshold: float) -> float | None:
    """Reduce one task's scores (at least one) with ``reducer``; None when it has no value.

    Args:
        reducer: A name :func:`check_reducer` accepts.
        values: The scores of the task's ok rollouts.
        threshold: A rollout is correct when its score is at least this.
    """
    plain = _PLAIN.get(reducer)
    if plain is not None:
        return float(plain(values))
    match = _WITH_K.fullmatch(reducer)
    assert match is not None, reducer
    kind, k = match.group(1), int(match.group(2))
    correct = sum(1 for value in values if value >= threshold)
    if kind == "pass_at":
        return pass_at(len(values), correct, k)
    return 1.0 if correct >= k else 0.0
