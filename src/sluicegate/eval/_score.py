"""What ``score(task, result)`` may return, and how it becomes a row's score.

A score is a real number, a mapping of names to real numbers, or a
:class:`Score` carrying either with an explanation and metadata. Whatever
form it takes, :func:`judged` turns it into a :class:`Judged`: the value
the statistics count (floats), and what the row records beside it.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, final

import attrs

__all__ = [
    "SCORE",
    "Judged",
    "Score",
    "ScoreValue",
    "finite_score_items",
    "judge",
    "judged",
    "score_items",
]

ScoreValue = float | dict[str, float] | None
"""A row's score: a float, floats by name, or None (no ``score`` member)."""

# The name a plain number score goes by in run.json, --min-score and tasks.jsonl.
SCORE = "score"


@final
@attrs.frozen
class Score:
    """A score with its reasons: what ``score(task, result)`` may return instead of a number.

    Attributes:
        value: A real number, or a mapping of score names to real numbers,
            counted exactly as if ``score()`` had returned it.
        explanation: Why the rollout got this score, shown in the row's
            ``explanation`` and in the report; or None.
        metadata: Anything else worth keeping with the score (the row's
            ``score_metadata``, written by the same bounded encoder as the
            result); or None.

    Raises:
        TypeError: ``explanation`` is not text or None.
    """

    value: float | Mapping[str, float]
    explanation: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    metadata: Any = None


@attrs.frozen
class Judged:
    """A score in the form a row keeps it.

    Attributes:
        value: The score as floats (None when the environment has no ``score``).
        explanation: The :class:`Score`'s explanation, if any.
        metadata: The :class:`Score`'s metadata, if any.
    """

    value: ScoreValue = None
    explanation: str | None = None
    metadata: Any = None


def _number(value: object, what: str) -> float:
    """``value`` as a finite float, if it is a real number (numpy's and ``Decimal`` too).

    A ``bool`` is not a score (``True`` is an answer, not 1.0), nor is text
    that looks like a number: the same rule for a score and for each value
    of a mapping of scores.

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: it is not finite, or too large for a float.
    """
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Decimal)):
        hint = "" if what else ", a mapping of names to real numbers, or a Score"
        raise TypeError(f"score() returned {what}{value!r}: a score must be a real number{hint}")
    try:
        number = float(value)
    except (OverflowError, ValueError) as error:  # 10**400, Decimal("sNaN")
        raise ValueError(f"score() returned {what}{value!r}: {error}") from None
    if not math.isfinite(number):
        raise ValueError(f"score() returned {what}{value!r}: a score must be a finite number")
    return number


def judged(value: object) -> Judged:
    """What ``score()`` returned, checked and in row form.

    Raises:
        TypeError: a value that is not a real number (a ``bool``, text, a
            ``Score`` holding a ``Score``), or a value of a mapping that is not.
        ValueError: a number that is not finite or too large for a float.
    """
    explanation: str | None = None
    metadata: Any = None
    if isinstance(value, Score):
        explanation, metadata = value.explanation, value.metadata
        value = value.value
        if isinstance(value, Score):
            raise TypeError("score() returned a Score whose value is a Score: give its number")
    if isinstance(value, Mapping):
        floats = {str(key): _number(inner, f"{key!r}: ") for key, inner in value.items()}
        return Judged(floats, explanation, metadata)
    return Judged(_number(value, ""), explanation, metadata)


async def judge(score: Callable[[Any, Any], Any] | None, task: Any, result: Any) -> Judged:
    """Call ``score(task, result)`` (awaiting it when it is async) and check what it returned."""
    if score is None:
        return Judged()
    value = score(task, result)
    if inspect.isawaitable(value):
        value = await value
    return judged(value)


def score_items(value: ScoreValue) -> list[tuple[str, float]]:
    """A row's score as ``(name, value)`` pairs; a plain number is named :data:`SCORE`."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return list(value.items())
    return [(SCORE, value)]


def finite_score_items(value: ScoreValue) -> list[tuple[str, float]]:
    """:func:`score_items` without the values that are not finite.

    A row sluicegate wrote never holds one, but a row read back may
    (``Infinity``, ``NaN`` or ``1e400`` edited in, or written by another
    tool): every reader that computes over scores (the report, ``compare``)
    skips them, so that one such row neither crashes nor poisons a mean.
    """
    return [(key, number) for key, number in score_items(value) if math.isfinite(number)]
