"""Check a recorded :class:`Trace` against the runner's invariants.

The invariants and their numbers are those of ``docs/runner.md``.
"""

from __future__ import annotations

from typing import Any, Literal, final

import attrs

from ._errors import TestingError
from ._trace import Event, Trace

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

_RUNNER = frozenset({"pulled", "started", "finished", "errored", "drain", "failure", "closed"})
_SOURCE = frozenset({"pull", "item", "end", "error", "close"})
_CALLS = frozenset({"start", "finish", "fail", "cancel"})


class InvariantViolation(TestingError, AssertionError):
    """A trace broke one of the runner's invariants.

    The message starts with the invariant's number and name in
    ``docs/runner.md`` (``invariant 2 (back-pressure)``), then the stream
    (when the trace has several), the event where it broke and what was wrong.

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
    """Counts taken from a trace that passed :func:`check_trace`, over all its streams.

    Attributes:
        pulls: Pulls from the source (the runner's, where it was the recorder).
        items: Items pulled.
        starts: Items whose run started (a retried item counts once).
        finished: Runs that returned.
        failed: Runs (or, without the runner's record, calls) that raised.
        cancelled: Runs cut short by cancellation.
        peak: The most runs alive at once (in one stream, or in all of them
            with ``shared=True``).
        closes: Closes of the sources.
        attempts: Calls of the run recorded by a run wrapper, in the streams
            the runner recorded (where a call is an attempt of an item).
        errors: Items their caller counted as failed (``serve()``'s recorded errors).
        sessions: Streams and restarts seen, each a session.
    """

    pulls: int
    items: int
    starts: int
    finished: int
    failed: int
    cancelled: int
    peak: int
    closes: int
    attempts: int = 0
    errors: int = 0
    sessions: int = 1


def _same(a: object, b: object) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:
        return False


def _take(pool: list[Any], item: object) -> bool:
    """Remove the first entry of ``pool`` that is ``item`` (else equal to it)."""
    for i, entry in enumerate(pool):
        if entry is item:
            del pool[i]
            return True
    for i, entry in enumerate(pool):
        if _same(entry, item):
            del pool[i]
            return True
    return False


@attrs.define
class _Session:
    """What check_trace knows of one session of one stream, while it reads the events."""

    where: str
    indexed: bool
    has_source: bool
    has_calls: bool
    pulls: int = 0
    items: int = 0
    starts: int = 0
    ends: int = 0
    finished: int = 0
    failed: int = 0
    cancelled: int = 0
    consumed: int = 0
    alive: int = 0
    peak: int = 0
    closes: int = 0
    closed_marks: int = 0
    attempts: int = 0
    errors: int = 0
    failure: bool = False
    drain: bool = False
    pulled: set[int] = attrs.field(factory=set)
    running: set[int] = attrs.field(factory=set)
    ran: set[int] = attrs.field(factory=set)
    waiting: list[Any] = attrs.field(factory=list)
    retryable: list[Any] = attrs.field(factory=list)
    started: list[Any] = attrs.field(factory=list)


def _where(stream: str | None, session: int, several: bool) -> str:
    if stream is None and session == 0 and not several:
        return ""
    name = "the unnamed stream" if stream is None else f"stream {stream!r}"
    return f"{name}, session {session}: " if session else f"{name}: "


def check_trace(
    trace: Trace,
    *,
    window: int | None,
    frees_on: Literal["finish", "consume"] = "finish",
    drained: bool = False,
    closes: int = 1,
    errors: Literal["raise", "record"] = "raise",
    shared: bool = False,
) -> TraceSummary:
    """Validate ``trace`` against the runner's invariants and summarise it.

    Checked, event by event, with the invariants' numbers in docs/runner.md,
    for each stream and each session (a restart) of it:

    * window (1): runs alive never exceed ``window`` (over all the streams
      together with ``shared=True``: streams on one shared ``Window``);
    * back-pressure (2): at every pull, pulls so far <= freed places +
      ``window``, where a place is freed by a run that ended
      (``frees_on="finish"``, as in ``run_stream`` and ``serve``) or by a
      result handed to the consumer (``frees_on="consume"``, as in
      ``open_stream``; record it with :meth:`Trace.consumed`);
    * fail fast (4): no run starts and nothing is pulled after the first
      failure;
    * close-out (5): each session's source is closed exactly ``closes``
      times, nothing is pulled after the close, and no run is alive at the
      close, unless the stream was drained (a drain closes the source first
      and lets the runs in flight finish, invariant 6).

    And that the trace is whole: every started item was pulled, starts once,
    and every run that started ended.

    Items are told apart by their pull index where the runner recorded one
    (the trace passed as ``trace=``): then a ``serve()`` error recorded
    rather than raised, a retried item (its calls are attempts of one run),
    a skipped key and a restart all read as what they are, and equal or
    unhashable items are no trouble. Without the runner's record, a run's
    calls are matched to the items pulled by identity, then equality;
    ``errors="record"`` says that a failing call does not end the stream
    (``serve()``'s default) and may be retried. Order (3) and caller
    cancellation (7) are the test's to check: a trace does not record what
    the caller received or when it was cancelled.

    Args:
        trace: A :class:`Trace` (every stream in it) or a view from
            :meth:`Trace.stream` (that stream only).
        window: The window the runner was given (None: unbounded).
        frees_on: What frees a place, see above.
        drained: The stream was drained (found by itself where the runner
            recorded the drain).
        closes: How many closes to expect per session (0 for a source the
            runner must not close, such as one it never received).
        errors: ``"raise"`` (a run that raises fails the stream) or
            ``"record"`` (it becomes an outcome), for a trace without the
            runner's record.
        shared: The streams in the trace run under one shared window.

    Returns:
        A :class:`TraceSummary` of the counts.

    Raises:
        InvariantViolation: naming the invariant by its number in
            ``docs/runner.md``, the stream and the offending event.
    """
    events = trace.events
    mine = [
        (position, event)
        for position, event in enumerate(events)
        if trace.name is None or event.stream == trace.name
    ]
    kinds: dict[tuple[str | None, int], set[str]] = {}
    for _, event in mine:
        kinds.setdefault((event.stream, event.session), set()).add(event.kind)
    several = len(kinds) > 1
    sessions = {
        key: _Session(
            where=_where(key[0], key[1], several),
            indexed=bool(seen & _RUNNER),
            has_source=bool(seen & _SOURCE),
            has_calls=bool(seen & _CALLS),
        )
        for key, seen in kinds.items()
    }
    total_alive = total_peak = 0

    def fail(position: int, invariant: int | None, state: _Session, message: str) -> None:
        event = events[position]
        raise _violation(
            invariant, position, f"{state.where}event {position} ({event!r}): {message}"
        )

    def start(position: int, state: _Session) -> None:
        nonlocal total_alive, total_peak
        state.alive += 1
        state.peak = max(state.peak, state.alive)
        total_alive += 1
        total_peak = max(total_peak, total_alive)
        if window is None:
            return
        if shared and total_alive > window:
            fail(
                position,
                1,
                state,
                f"{total_alive} runs alive in all streams, shared window {window}",
            )
        if state.alive > window:
            fail(position, 1, state, f"{state.alive} runs alive with window {window}")

    def end(state: _Session) -> None:
        nonlocal total_alive
        state.alive -= 1
        state.ends += 1
        total_alive -= 1

    def pull(position: int, state: _Session) -> None:
        state.pulls += 1
        freed = state.ends if frees_on == "finish" else state.consumed
        if window is not None and state.has_calls | state.indexed and state.pulls > freed + window:
            fail(position, 2, state, f"pull {state.pulls} with only {freed} places freed")
        if state.failure:
            fail(position, 4, state, "pulled after a failure")

    for position, event in mine:
        state = sessions[(event.stream, event.session)]
        if state.indexed:
            _indexed(event, position, state, start, end, pull, fail)
        else:
            _unindexed(event, position, state, start, end, pull, fail, errors, drained)
    for state in sessions.values():
        if not (state.indexed or state.has_source):
            continue  # runs traced without their source: nothing says how it closed
        if state.indexed and state.running:
            index = min(state.running)
            raise _violation(None, None, f"{state.where}the run of item {index} never finished")
        counted = state.closes if state.has_source or not state.indexed else state.closed_marks
        if counted != closes:
            raise _violation(5, None, f"{state.where}closed {counted} times, expected {closes}")
    return TraceSummary(
        pulls=sum(s.pulls for s in sessions.values()),
        items=sum(s.items for s in sessions.values()),
        starts=sum(s.starts for s in sessions.values()),
        finished=sum(s.finished for s in sessions.values()),
        failed=sum(s.failed for s in sessions.values()),
        cancelled=sum(s.cancelled for s in sessions.values()),
        peak=total_peak if shared else max((s.peak for s in sessions.values()), default=0),
        closes=sum(s.closes or s.closed_marks for s in sessions.values()),
        attempts=sum(s.attempts for s in sessions.values()),
        errors=sum(s.errors for s in sessions.values()),
        sessions=len(sessions),
    )


def _indexed(
    event: Event, position: int, state: _Session, start: Any, end: Any, pull: Any, fail: Any
) -> None:
    """One event of a session the runner recorded: items are pull indices."""
    kind, index = event.kind, event.index
    if kind == "pulled":
        assert index is not None
        if index in state.pulled:
            fail(
                position, None, state,
                f"item {index} pulled twice: do two streams share one recorder? "
                "Give each its own trace.stream(name)",
            )  # fmt: skip
        state.pulled.add(index)
        state.items += 1
        pull(position, state)
    elif kind == "started":
        assert index is not None
        if state.failure:
            fail(position, 4, state, "a run started after a failure")
        if index not in state.pulled:
            fail(position, None, state, f"item {index} started and was never pulled")
        if index in state.ran:
            fail(position, None, state, f"item {index} started twice")
        state.ran.add(index)
        state.running.add(index)
        state.starts += 1
        start(position, state)
    elif kind == "finished":
        assert index is not None
        if index not in state.running:
            fail(position, None, state, f"item {index} finished and was not running")
        state.running.discard(index)
        end(state)
        if event.error is None:
            state.finished += 1
        elif event.error == "Cancelled":
            state.cancelled += 1
        else:
            state.failed += 1
            state.failure = True
    elif kind == "errored":
        state.errors += 1
    elif kind == "failure":
        state.failure = True
    elif kind == "drain":
        state.drain = True
    elif kind == "closed":
        state.closed_marks += 1
        if state.alive and not state.drain:
            fail(position, 5, state, f"closed with {state.alive} runs still alive")
    elif kind == "close":
        state.closes += 1
    elif kind == "consume":
        state.consumed += 1
    elif kind == "start":
        state.attempts += 1
        if index is not None and index not in state.running:
            fail(position, None, state, f"a call of the run for item {index} outside its run")
    elif kind == "error" and not state.failure:
        state.failure = True


def _unindexed(
    event: Event,
    position: int,
    state: _Session,
    start: Any,
    end: Any,
    pull: Any,
    fail: Any,
    errors: str,
    drained: bool,
) -> None:
    """One event of a session recorded by wrappers alone: items are matched by value."""
    kind = event.kind
    if kind == "pull":
        pull(position, state)
        if state.closes:
            fail(position, 5, state, "pulled after the source was closed")
    elif kind == "item":
        state.items += 1
        state.waiting.append(event.item)
    elif kind == "error":
        state.failure = True
    elif kind == "start":
        if state.failure:
            fail(position, 4, state, "a run started after a failure")
        if state.has_source:
            if _take(state.waiting, event.item):
                state.starts += 1
            elif not _take(state.retryable, event.item):
                twice = any(_same(item, event.item) for item in state.started)
                fail(
                    position, None, state,
                    "an item started twice" if twice
                    else "a run started for an item that was never pulled",
                )  # fmt: skip
        else:
            state.starts += 1
        state.started.append(event.item)
        start(position, state)
    elif kind in ("finish", "fail", "cancel"):
        end(state)
        if kind == "finish":
            state.finished += 1
        elif kind == "fail":
            state.failed += 1
            if errors == "raise":
                state.failure = True
            else:
                state.retryable.append(event.item)
        else:
            state.cancelled += 1
    elif kind == "consume":
        state.consumed += 1
    elif kind == "close":
        state.closes += 1
        if state.alive and not drained:
            fail(position, 5, state, f"closed with {state.alive} runs still alive")
