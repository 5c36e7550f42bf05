"""One rollout: its attempts under the retry policy and the timeout, then its row.

Two pieces, so that where an attempt runs can change without touching the
rest. An :data:`AttemptFn` runs one attempt of one slot and returns its
:class:`Scored` result; :func:`attempt_here` is the default, in this
process. :class:`Rollouts` is the runner's ``run``: it applies the retry
policy and timeout (:func:`sluicegate._retry.attempt`, the same
loop ``serve()`` uses) to the attempt function and makes the
:class:`~sluicegate.eval._records.RolloutRow`. A bridge that runs attempts on a
cluster hands :class:`Rollouts` its own ``attempt``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import outcome
import trio

from .._retry import CutShort, Retry, attempt
from .._runner import Drain
from ._current import current_rollout, rollout_of
from ._records import ErrorInfo, RolloutRow, sample_of
from ._score import Judged, ScoreValue, judge
from ._slots import DuplicateTaskId, Slot
from ._tally import RunTally
from ._target import Parts

__all__ = [
    "AttemptFn",
    "DuplicateTaskId",
    "Rollouts",
    "Scored",
    "attempt_here",
    "current_rollout",
    "rollout_of",
]


@attrs.frozen
class Scored:
    """What one successful attempt produced: the run's result and its score.

    Attributes:
        result: What ``run(task)`` returned.
        score: The score as floats, or None without a ``score``.
        explanation: A :class:`~sluicegate.eval.Score`'s explanation.
        score_metadata: A :class:`~sluicegate.eval.Score`'s metadata.
    """

    result: Any
    score: ScoreValue = None
    explanation: str | None = None
    score_metadata: Any = None

    @classmethod
    def of(cls, result: Any, judged: Judged) -> Scored:
        """The result with its checked score."""
        return cls(result, judged.value, judged.explanation, judged.metadata)


AttemptFn = Callable[[Parts, Slot], Awaitable[Scored]]
"""Runs one attempt of a slot's rollout: ``run(task)``, then ``score(task, result)``."""


async def attempt_here(env: Parts, slot: Slot) -> Scored:
    """The default :data:`AttemptFn`: run and score the slot's task in this process."""
    result = await env.run(slot.task)
    return Scored.of(result, await judge(env.score, slot.task, result))


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
    tally: RunTally
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

    async def __call__(self, slot: Slot) -> RolloutRow | None:
        started_at = datetime.now(UTC)
        start = last_start = trio.current_time()

        async def once() -> Scored:
            nonlocal last_start
            last_start = trio.current_time()
            return await self._once(slot)

        self.tally.started()
        cut_short = False
        try:
            with rollout_of(slot.rollout):
                tried = await attempt(
                    once,
                    retry=self.retry,
                    limit=self.timeout,
                    drain=self.drain,
                )
        except CutShort:
            cut_short = True
            return None
        except _Fatal as fatal:
            raise fatal.error from None
        finally:
            self.tally.ended(cut_short=cut_short)
        duration = self._ended(last_start, tried.result) - start
        earlier = tuple(ErrorInfo.of(exc) for exc in tried.earlier)
        sample = sample_of(slot.task)
        if isinstance(tried.result, outcome.Value):
            scored: Scored = tried.result.value
            return RolloutRow(
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
                explanation=scored.explanation,
                score_metadata=scored.score_metadata,
                **sample,
            )
        return RolloutRow(
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
            **sample,
        )
