"""Which rollout of its task the running code belongs to: :func:`current_rollout`.

Its own module, below both the planning of slots (``_slots``, which calls a
``SampleSource``'s hooks for a given rollout) and the running of one
(``_rollout``), so that neither needs the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["current_rollout", "rollout_of"]

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
