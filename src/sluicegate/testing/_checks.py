"""Check a recorded :class:`Trace` against the runner's invariants.

The invariants and their numbers are those of ``docs/runner.md``.
"""

from __future__ import annotations

from typing import Literal, final

import attrs

from ._errors import TestingError
from ._trace import Trace

#: The numbered invariants of docs/runner.md, as a violation names them.
INVARIANTS = {
    1: "window",
    2: "back-pressure",
    3: "order",
    4: "fail fast",
    5: "close-out",
    6: "drain",
    7: "caller cancellation",
}


class InvariantViolation(TestingError, AssertionError):
    """A trace broke one of the runner's invariants.

    The message starts with the invariant's number and name in
    ``docs/runner.md`` (``invariant 2 (back-pressure)``), then the event
    where it broke and what was wrong.

    Attributes:
        invariant: The invariant's number in docs/runner.md, or None when the
            trace is inconsistent in itself (a run of an item never pulled,
            an item run twice).
        position: The index in ``trace.events`` of the offending event, or
            None for a count checked at the end.
    """

    def __init__(
        self, message: str, *, invariant: int | None = None, position: int | None = None
    ) -> None:
        super().__init__(message)
        self.invariant = invariant
        self.position = position


def _violation(invariant: int | None, position: int | None, detail: str) -> InvariantViolation:
    named = "" if invariant is None else f"invariant {invariant} ({INVARIANTS[invariant]}): "
    return InvariantViolation(
        f"{named}{detail} (see docs/runner.md)", invariant=invariant, position=position
    )


@final
@attrs.frozen
class TraceSummary:
    """Counts taken from a trace that passed :func:`check_trace`."""

    pulls: int
    items: int
    starts: int
    finished: int
    failed: int
    cancelled: int
    peak: int
    closes: int


def check_trace(
    trace: Trace,
    *,
    window: int | None,
    frees_on: Literal["finish", "consume"] = "finish",
    drained: bool = False,
    closes: int = 1,
) -> TraceSummary:
    """Validate ``trace`` against the runner's invariants and summarise it.

    Checked, event by event, with the invariants' numbers in docs/runner.md:

    * window (1): runs alive (started, not yet finished, failed or cancelled)
      never exceed ``window``;
    * back-pressure (2): at every pull, pulls so far <= freed places +
      ``window``, where a place is freed by a finished run
      (``frees_on="finish"``, as in ``run_stream``) or by a result handed to
      the consumer (``frees_on="consume"``, as in ``open_stream``);
    * fail fast (4): no run starts and nothing is pulled after the first run
      failure or source error;
    * close-out (5): the source is closed exactly ``closes`` times, nothing is
      pulled after the close, and no run is still alive at the close
      (unless ``drained``: a drain closes the source first and lets the runs
      in flight finish, invariant 6).

    And that the trace is whole: every started item was pulled, and starts
    once. Order (3) and caller cancellation (7) are the test's to check: a
    trace does not record what the caller received or when it was cancelled.

    Args:
        trace: Events recorded by a :class:`ScriptedFeed`/:class:`ScriptedIter`
            or :func:`traced_source`, a :class:`RunProbe` or :func:`traced_run`
            and, for ``frees_on="consume"``, the test
            recording ``consume`` as it receives each result.
        window: The window the runner was given (None: unbounded).
        frees_on: What frees a place, see above.
        drained: The stream was drained.
        closes: How many closes to expect (0 for a source the runner must
            not close, such as one it never received).

    Returns:
        A :class:`TraceSummary` of the counts.

    Raises:
        InvariantViolation: naming the invariant by its number in
            ``docs/runner.md`` and the offending event.
    """
    pulls = items = starts = finished = failed = cancelled = consumed = close_count = 0
    alive = peak = 0
    failure_seen = False
    pulled: list[object] = []
    started: list[object] = []

    def fail(position: int, invariant: int | None, message: str) -> None:
        event = trace.events[position]
        raise _violation(invariant, position, f"event {position} ({event!r}): {message}")

    for position, event in enumerate(trace.events):
        kind = event.kind
        if kind == "pull":
            pulls += 1
            freed = finished if frees_on == "finish" else consumed
            if window is not None and pulls > freed + window:
                fail(position, 2, f"pull {pulls} with only {freed} places freed")
            if failure_seen:
                fail(position, 4, "pulled after a failure")
            if close_count:
                fail(position, 5, "pulled after the source was closed")
        elif kind == "item":
            items += 1
            pulled.append(event.item)
        elif kind == "error":
            failure_seen = True
        elif kind == "start":
            if failure_seen:
                fail(position, 4, "a run started after a failure")
            if event.item not in pulled:
                fail(position, None, "a run started for an item that was never pulled")
            if event.item in started:
                fail(position, None, "an item started twice")
            started.append(event.item)
            starts += 1
            alive += 1
            peak = max(peak, alive)
            if window is not None and alive > window:
                fail(position, 1, f"{alive} runs alive with window {window}")
        elif kind in ("finish", "fail", "cancel"):
            alive -= 1
            if kind == "finish":
                finished += 1
            elif kind == "fail":
                failed += 1
                failure_seen = True
            else:
                cancelled += 1
        elif kind == "consume":
            consumed += 1
        elif kind == "close":
            close_count += 1
            if alive and not drained:
                fail(position, 5, f"closed with {alive} runs still alive")
    if close_count != closes:
        raise _violation(5, None, f"closed {close_count} times, expected {closes}")
    return TraceSummary(pulls, items, starts, finished, failed, cancelled, peak, close_count)
