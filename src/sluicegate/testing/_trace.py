"""A shared, ordered record of what sources, the runner, the runs and a consumer did."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Literal, final

import attrs
import trio

EventKind = Literal[
    # A source wrapper (traced_source, ScriptedFeed, ScriptedIter):
    "pull",  # a pull from the source began
    "item",  # that pull returned an item
    "end",  # that pull found the end of the source
    "error",  # that pull raised
    "close",  # the source was closed
    # A run wrapper (traced_run, RunProbe): one call of the run, an attempt
    "start",  # a call began
    "finish",  # it returned
    "fail",  # it raised
    "cancel",  # it was cancelled
    # The runner itself, through trace= (the Recorder protocol):
    "pulled",  # item `index` came out of the source
    "started",  # its run started
    "finished",  # its run ended (`error` names what it raised, if anything)
    "errored",  # its caller counts it as failed (serve's recorded errors)
    "drain",  # a drain was seen
    "failure",  # the first failure was recorded
    "closed",  # the runner closed the source
    # The test:
    "consume",  # the consumer received a result
]

# What the runner tells a recorder, by the name of its mark.
_MARKS: dict[str, EventKind] = {"drain": "drain", "failure": "failure", "close": "closed"}


@final
@attrs.frozen
class Event:
    """One thing that happened, with the trio clock's time when it did.

    Attributes:
        kind: What happened (see :meth:`Trace.record`).
        item: The item it happened to, where one is known.
        time: The trio clock then (0 outside ``trio.run``).
        index: The item's pull index in its stream, where known: the runner
            gives one to every item it pulls, and a run wrapper learns it
            from the runner when the same trace is also passed as ``trace=``.
        stream: The name of the stream (see :meth:`Trace.stream`), None for
            the trace itself.
        session: Which run of that stream, from 0: a stream pulled again
            after it was closed is a restart.
        error: The type name of what a run or a pull raised, or what the
            caller counted as its failure.
    """

    kind: EventKind
    item: Any = None
    time: float = 0.0
    index: int | None = None
    stream: str | None = None
    session: int = 0
    error: str | None = None


@attrs.define
class _Shared:
    """What a trace and its stream views share.

    Only :class:`Trace` writes these fields, from its recording methods.
    """

    events: list[Event] = attrs.field(factory=list)
    # The item running in each trio task the runner started it in, so that a
    # run wrapper called there knows the item's index. Invariant: an entry
    # lives from the runner's started() to its finished().
    running: dict[object, tuple[str | None, int, int]] = attrs.field(factory=dict)
    # Per stream: its session number, and whether that session was closed.
    sessions: dict[str | None, int] = attrs.field(factory=dict)
    closed: set[str | None] = attrs.field(factory=set)
    # The item pulled at each (stream, session, index), for the runner's later events.
    pulled: dict[tuple[str | None, int, int], object] = attrs.field(factory=dict)
    # The wrapper that last recorded a pull in each stream (a restart is a new one).
    sources: dict[str | None, int] = attrs.field(factory=dict)


_serials = itertools.count(1)


def source_serial() -> int:
    """A number that tells one source wrapper from another in a trace."""
    return next(_serials)


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0


def _task() -> object:
    try:
        return trio.lowlevel.current_task()
    except RuntimeError:
        return None


@final
class Trace:
    """An append-only list of :class:`Event`, shared by sources, runs, the runner and tests.

    Pass one trace to a :class:`ScriptedFeed` and a :class:`RunProbe` (or to
    :func:`traced_source` and :func:`traced_run` around your own source and
    run) so their events interleave in the order they happened, then check
    it with :func:`~sluicegate.testing.check_trace`.

    A trace is also a recorder for the runner: pass it as ``trace=`` to
    :func:`~sluicegate.run_stream`, :func:`~sluicegate.open_stream` or
    :func:`~sluicegate.serve` and it hears each item pulled, started and
    finished by its pull index, the recorded errors, the drain, the first
    failure and the close. Items are then told apart by index, so equal and
    unhashable items are no trouble, a retried item is one item, and the
    runs of a ``traced_run`` are its attempts.

    Several streams share one trace through views: ``trace.stream("a")``
    records into the same list with ``stream="a"``. A stream pulled again
    after it was closed (a restarted service) starts a new session.
    """

    def __init__(self, *, name: str | None = None, _shared: _Shared | None = None) -> None:
        self._shared = _shared if _shared is not None else _Shared()
        self.name = name

    @property
    def events(self) -> list[Event]:
        """Every event of every stream, in the order they happened."""
        return self._shared.events

    def stream(self, name: str) -> Trace:
        """A view of this trace whose events belong to the stream ``name``.

        Give each stream its own view (as ``trace=`` and to its wrappers) so
        that :func:`~sluicegate.testing.check_trace` checks each stream by
        its own rules and shared windows across them.
        """
        return Trace(name=name, _shared=self._shared)

    # -- recording ---------------------------------------------------------------------

    def record(
        self,
        kind: EventKind,
        item: Any = None,
        *,
        index: int | None = None,
        error: str | None = None,
        source: int | None = None,
    ) -> None:
        """Append an event stamped with the current trio time (0 outside trio).

        Args:
            kind: What happened, one of :data:`EventKind`.
            item: The item it happened to.
            index: The item's pull index, if known. A run event recorded in
                a task where the runner (given this trace as ``trace=``)
                started an item gets that item's index.
            error: The type name of an exception, for ``error``/``fail``.
            source: Which source wrapper recorded a pull (a new wrapper
                pulling after a close is a restart).
        """
        shared = self._shared
        name = self.name
        session = shared.sessions.get(name, 0)
        if kind in ("pull", "pulled") and name in shared.closed:
            fresh = kind == "pulled" or (
                source is not None and source != shared.sources.get(name, source)
            )
            if fresh:
                session += 1
                shared.sessions[name] = session
                shared.closed.discard(name)
        if source is not None and kind == "pull":
            shared.sources[name] = source
        if kind in ("close", "closed"):
            shared.closed.add(name)
        if index is None and kind in ("start", "finish", "fail", "cancel"):
            running = shared.running.get(_task())
            if running is not None and running[0] == name:
                session, index = running[1], running[2]
        shared.events.append(Event(kind, item, _now(), index, name, session, error))

    def consumed(self, index: int) -> None:
        """The consumer received the result of item ``index`` (for ``open_stream``)."""
        self.record("consume", index=index)

    # -- the runner's Recorder protocol -----------------------------------------------------

    def pulled(self, index: int, item: object, /) -> None:
        """The runner pulled item ``index`` (see ``trace=`` in docs/runner.md)."""
        self.record("pulled", item, index=index)
        shared = self._shared
        shared.pulled[(self.name, shared.sessions.get(self.name, 0), index)] = item

    def started(self, index: int, /) -> None:
        """The runner started the run of item ``index``."""
        shared = self._shared
        session = shared.sessions.get(self.name, 0)
        shared.running[_task()] = (self.name, session, index)
        self.record("started", shared.pulled.get((self.name, session, index)), index=index)

    def finished(self, index: int, error: BaseException | None, /) -> None:
        """The run of item ``index`` ended; ``error`` is what it raised, if anything."""
        shared = self._shared
        shared.running.pop(_task(), None)
        session = shared.sessions.get(self.name, 0)
        name = None if error is None else type(error).__name__
        self.record(
            "finished", shared.pulled.get((self.name, session, index)), index=index, error=name
        )

    def errored(self, index: int, error: BaseException | str, /) -> None:
        """Item ``index`` counts as failed (a run that raised, or serve's recorded error)."""
        shared = self._shared
        session = shared.sessions.get(self.name, 0)
        name = error if isinstance(error, str) else type(error).__name__
        self.record(
            "errored", shared.pulled.get((self.name, session, index)), index=index, error=name
        )

    def marked(self, what: str, /) -> None:
        """An instant: ``"drain"``, ``"failure"`` or ``"close"``."""
        self.record(_MARKS.get(what, "failure"), what)

    # -- reading -------------------------------------------------------------------------

    def _mine(self) -> list[Event]:
        if self.name is None:
            return self.events
        return [event for event in self.events if event.stream == self.name]

    def kinds(self, *kinds: EventKind) -> list[Event]:
        """The events of the given kinds, in order (of this view's stream, for a view)."""
        return [event for event in self._mine() if event.kind in kinds]

    def items(self, kind: EventKind) -> list[Any]:
        """The items of every event of one kind, in order (of this view's stream, for a view)."""
        return [event.item for event in self._mine() if event.kind == kind]

    def __iter__(self) -> Iterator[Event]:
        return iter(self._mine())

    def __len__(self) -> int:
        return len(self._mine())

    def __repr__(self) -> str:
        where = "" if self.name is None else f" stream={self.name!r}"
        return f"<Trace{where} {len(self)} events>"
