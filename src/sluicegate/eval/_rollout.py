"""One rollout: its attempts under the retry policy and the timeout, then its row.

Two pieces, so that where an attempt runs can change without touching the
rest. An :data:`AttemptFn` runs one attempt of one slot and returns its
:class:`Scored` result; :func:`attempt_here` is the default, in this
process. :class:`Rollouts` is the runner's ``run``: it applies the retry
policy and timeout (:func:`sluicegate._retry.attempt`, the same
loop ``serve()`` uses) to the attempt function and makes the
:class:`~sluicegate.eval._records.Row`. A bridge that runs attempts on a
cluster hands :class:`Rollouts` its own ``attempt``.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import attrs
import outcome
import trio

from .._retry import CutShort, Retry, attempt
from .._runner import Drain
from ._records import ErrorInfo, Row, Score
from ._tally import Tally
from ._target import Parts

if TYPE_CHECKING:
    from ._plan import Slot

__all__ = [
    "AttemptFn",
    "DuplicateTaskId",
    "Rollouts",
    "Scored",
    "attempt_here",
    "current_rollout",
    "rollout_of",
]

_rollout: ContextVar[int | None] = ContextVar("sluicegate_eval_rollout", default=None)


def current_rollout() -> int:
    """Which rollout of its task the calling code belongs to, counting from 0.

    Works inside an evaluation's ``run`` and ``score`` (at any depth, and in
    tasks they spawn) and in its ``SampleSource`` hooks ``on_complete`` and
    ``on_abandoned``: the rollout of the task they were called for.

    Raises:
        RuntimeError: outside an evaluation's rollout.
    """
    rollout = _rollout.get()
    if rollout is None:
        raise RuntimeError(
            "sluicegate.eval.current_rollout() must be called from inside an evaluation's "
            "run, score, on_complete or on_abandoned"
        )
    return rollout


@contextmanager
def rollout_of(rollout: int) -> Iterator[None]:
    """Make :func:`current_rollout` return ``rollout`` inside the block."""
    token = _rollout.set(rollout)
    try:
        yield
    finally:
        _rollout.reset(token)


@attrs.frozen
class Scored:
    """What one successful attempt produced: the run's result and its score."""

    result: Any
    score: Score


AttemptFn = Callable[[Parts, "Slot"], Awaitable[Scored]]
"""Runs one attempt of a slot's rollout: ``run(task)``, then ``score(task, result)``."""


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
        hint = "" if what else " or a mapping of names to real numbers"
        raise TypeError(f"score() returned {what}{value!r}: a score must be a real number{hint}")
    try:
        number = float(value)
    except (OverflowError, ValueError) as error:  # 10**400, Decimal("sNaN")
        raise ValueError(f"score() returned {what}{value!r}: {error}") from None
    if not math.isfinite(number):
        raise ValueError(f"score() returned {what}{value!r}: a score must be a finite number")
    return number


async def _score(env: Parts, task: Any, result: Any) -> Score:
    if env.score is None:
        return None
    value = env.score(task, result)
    if inspect.isawaitable(value):
        value = await value
    if isinstance(value, Mapping):
        return {str(key): _number(inner, f"{key!r}: ") for key, inner in value.items()}
    return _number(value, "")


async def attempt_here(env: Parts, slot: Slot) -> Scored:
    """The default :data:`AttemptFn`: run and score the slot's task in this process."""
    result = await env.run(slot.task)
    return Scored(result, await _score(env, slot.task, result))


class DuplicateTaskId(ValueError):
    """Two tasks of one evaluation have the same id, or one rollout was added twice."""


class _Fatal(BaseException):
    """Carries an exception past :func:`~sluicegate._retry.attempt`, which
    would otherwise make an error row of it."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


@attrs.frozen
class Rollouts:
    """The runner's ``run``: one slot in, one row out (None when a drain cut it short).

    Attributes:
        env: The environment.
        tally: Counts rollouts in flight and those cut short.
        drain: Ends a wait between attempts; the rollout then has no row,
            so a resume runs it again.
        retry: The retry policy, or None for a single attempt.
        timeout: Seconds each attempt may take, or None.
        attempt: Runs one attempt (see :data:`AttemptFn`).
    """

    env: Parts
    tally: Tally
    drain: Drain
    retry: Retry | None = None
    timeout: float | None = None
    attempt: AttemptFn = attempt_here

    async def _once(self, slot: Slot) -> Scored:
        try:
            return await self.attempt(self.env, slot)
        except DuplicateTaskId as exc:
            # Not the rollout's failure but the evaluation's: neither an
            # error row nor worth a retry.
            raise _Fatal(exc) from None

    def _ended(self, last_start: float, result: outcome.Value[Scored] | outcome.Error) -> float:
        """When the last attempt ended: now, or for one ``--timeout`` stopped, its deadline.

        With many rollouts in flight, a cancellation can reach an attempt
        well after its deadline (the loop busy with the others, the
        attempt's own clean-up): that wait is not the attempt's time.
        """
        now = trio.current_time()
        if self.timeout is not None and isinstance(result, outcome.Error):
            error = result.error
            if isinstance(error, TimeoutError) and isinstance(error.__cause__, trio.TooSlowError):
                return min(now, last_start + self.timeout)
        return now

    async def __call__(self, slot: Slot) -> Row | None:
        started_at = datetime.now(UTC)
        start = last_start = trio.current_time()

        async def once() -> Scored:
            nonlocal last_start
            last_start = trio.current_time()
            return await self._once(slot)

        self.tally.running += 1
        try:
            with rollout_of(slot.rollout):
                tried = await attempt(
                    once,
                    retry=self.retry,
                    limit=self.timeout,
                    drain=self.drain,
                )
        except CutShort:
            self.tally.cut_short += 1
            return None
        except _Fatal as fatal:
            raise fatal.error from None
        finally:
            self.tally.running -= 1
        duration = self._ended(last_start, tried.result) - start
        earlier = tuple(ErrorInfo.of(exc) for exc in tried.earlier)
        if isinstance(tried.result, outcome.Value):
            scored: Scored = tried.result.value
            return Row(
                task_id=slot.task_id,
                rollout=slot.rollout,
                status="ok",
                result=scored.result,
                score=scored.score,
                error=None,
                attempts=tried.attempts,
                started_at=started_at,
                duration_s=duration,
                earlier_errors=earlier,
            )
        return Row(
            task_id=slot.task_id,
            rollout=slot.rollout,
            status="error",
            result=None,
            score=None,
            error=ErrorInfo.of(tried.result.error),
            attempts=tried.attempts,
            started_at=started_at,
            duration_s=duration,
            earlier_errors=earlier,
        )
