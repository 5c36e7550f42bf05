"""Dynamic sources: work that grows from its own results while it runs.

A :class:`SampleSource` is handed to :func:`~sluicegate.run_stream` or
:func:`~sluicegate.open_stream` like any other source. The dispatcher sees its
``bind_run`` method (the :class:`~sluicegate._runner.BindsRun` protocol) and
uses the pair it returns: a :class:`_SampleStream`, which hands out buffered
work and asks :meth:`SampleSource.next` only when nothing is running, and a
wrapped ``run`` that tells the stream when each run has finished and what it
asked for next.

The dispatcher pulls only when a window place is free, so the stream never
needs to know the window: it only decides *what* to hand out and when to
wait. Everything added passes through the source's admission hook
(:meth:`SampleSource.admit`) at the moment it is added; an evaluation's
source makes rollout slots there. After a drain, what was accepted but
never started goes to :meth:`SampleSource.on_abandoned`.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import trio

from ._asyncio import FailureLatch, on_asyncio
from ._checks import check_count
from ._util import pace

if TYPE_CHECKING:
    import asyncio

__all__ = ["AsyncioHooks", "SampleSource", "enqueue"]

T = TypeVar("T")
R = TypeVar("R")

# The stream whose run is executing in this context. trio copies the context
# into every task a run spawns, so enqueue() works from those tasks too, and a
# nested stream's runs shadow the outer one only for their own duration.
_current_stream: ContextVar[_SampleStream[Any, Any] | None] = ContextVar(
    "sluicegate_current_sample_stream", default=None
)


class SampleSource(Generic[T, R]):
    """A source whose work grows from its results while the stream runs.

    Subclass it and override any of :meth:`initial`, :meth:`next` and
    :meth:`on_complete`, or build one from plain callables with
    :meth:`from_items`. Then pass it as the ``source`` of
    :func:`~sluicegate.run_stream` or :func:`~sluicegate.open_stream`; runs of
    the stream may also add work with :func:`~sluicegate.enqueue`.

    How the work is dispatched:

    * Items from :meth:`initial`, from :meth:`on_complete` and from
      :func:`~sluicegate.enqueue` are buffered in the order they were added
      and start as soon as a window place is free, while other runs are
      still going.
    * :meth:`next` is awaited only when nothing is running and nothing is
      buffered, so no item that could still produce work is overlooked.
      ``[]`` from it means "nothing yet, ask again when idle"; ``None``
      ends the source. Work added while :meth:`next` is awaited (by a task
      a run left behind) is handed out once it returns, even if it returned
      ``None``.
    * The stream ends when :meth:`next` has returned ``None`` and nothing is
      running or buffered.
    * An exception from :meth:`initial` or :meth:`next` fails the stream as
      a failing source does; one from :meth:`on_complete` fails it as a
      failing run does. Either way it surfaces as itself through the
      runner's fail-fast. A hook returning a ``str`` or ``bytes`` instead
      of a sequence of items is a ``TypeError`` raised the same way.
    * :func:`~sluicegate.enqueue` works inside runs and ``on_complete``, not
      inside ``initial()`` or ``next()``, which return their items instead.
    * When a drain closes the stream, :meth:`on_abandoned` hears about every
      item it had accepted that never started, so nothing waits for them.

    A source may be passed to several streams, one after another or at the
    same time; each stream keeps its own buffer and counts. Nothing is kept
    per finished item.
    """

    def initial(self) -> Sequence[T]:
        """The seed: items to run first. Called once per stream, at its first pull.

        Returns:
            The items, possibly none (the default).
        """
        return ()

    async def next(self) -> Sequence[T] | None:
        """More work, asked for only when the stream is idle. May block.

        Returns:
            Items to run; ``[]`` to be asked again at the next idle moment;
            ``None`` (the default) to end the source.
        """
        return None

    async def on_complete(self, item: T, result: R) -> Sequence[T] | None:
        """See a finished run and return follow-up work.

        Called in the run's own task right after ``run(item)`` returned
        ``result``, and counted as part of that run: it occupies the run's
        window place, and :meth:`next` is not asked while it is pending.
        It is not called for a run that raised. It may call
        :func:`~sluicegate.enqueue` too.

        Returns:
            Items to run next (they start on free places at once), or
            ``None`` (the default) for none.
        """
        return None

    async def on_abandoned(self, item: T) -> None:
        """Hear that ``item`` was accepted but will never run: a drain closed the stream first.

        Called once for every such item, whichever way it was added (the
        seed, :meth:`next`, :meth:`on_complete`, :func:`~sluicegate.enqueue`),
        including items that runs still finishing add after the drain.
        Items buffered when the drain closes the stream are reported during
        that close, which is shielded from cancellation like the rest of
        close-out, so keep this short: set an event, note the item. Items
        added later are reported in the task of the run that is finishing.
        Never called after a failure or a cancellation, which unwind
        everything. :func:`~sluicegate.enqueue` raises in here: admission is
        closed. The default does nothing.
        """

    def admit(self, items: Iterable[Any], rollout: int | None) -> Iterable[T]:
        """Turn what a hook or :func:`~sluicegate.enqueue` added into the items to buffer.

        The one admission point of a stream: every addition passes through
        it at the moment it is added. A plain source buffers the items as
        they are; an evaluation's source makes rollout slots of them here.

        Raises:
            RuntimeError: ``rollout`` was given; only an evaluation knows
                what a rollout is.
        """
        if rollout is not None:
            raise RuntimeError(
                "sluicegate.enqueue(..., rollout=...) only works inside an evaluation "
                "(sluicegate eval / sluicegate.eval.evaluate): a plain SampleSource stream "
                "has no rollouts"
            )
        return items

    # Without on_complete nothing fixes R, so the result type says Any rather
    # than making every caller spell out SampleSource[T, R].from_items(...).
    @overload
    @staticmethod
    def from_items(
        initial: Iterable[T],
        *,
        next: Callable[[], Awaitable[Sequence[T] | None]] | None = None,
        on_complete: None = None,
        on_abandoned: Callable[[T], Awaitable[None]] | None = None,
    ) -> SampleSource[T, Any]: ...

    @overload
    @staticmethod
    def from_items(
        initial: Iterable[T],
        *,
        next: Callable[[], Awaitable[Sequence[T] | None]] | None = None,
        on_complete: Callable[[T, R], Awaitable[Sequence[T] | None]],
        on_abandoned: Callable[[T], Awaitable[None]] | None = None,
    ) -> SampleSource[T, R]: ...

    @staticmethod
    def from_items(
        initial: Iterable[T],
        *,
        next: Callable[[], Awaitable[Sequence[T] | None]] | None = None,
        on_complete: Callable[[T, R], Awaitable[Sequence[T] | None]] | None = None,
        on_abandoned: Callable[[T], Awaitable[None]] | None = None,
    ) -> SampleSource[T, Any]:
        """Build a source from a seed and optional async callables, without subclassing.

        Args:
            initial: The seed items; copied once, so every stream gets them all.
            next: An async function standing in for :meth:`next`; without it
                the source ends once the seed and its follow-ups are done.
            on_complete: An async function ``(item, result)`` standing in for
                :meth:`on_complete`.
            on_abandoned: An async function ``(item)`` standing in for
                :meth:`on_abandoned`.

        Returns:
            A new :class:`SampleSource`.

        Raises:
            TypeError: if a callback is given but not callable.
        """
        for name, fn in (
            ("next", next),
            ("on_complete", on_complete),
            ("on_abandoned", on_abandoned),
        ):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be an async callable or None, not {fn!r}")
        return _ItemsSource(tuple(initial), next, on_complete, on_abandoned)

    def bind_run(
        self,
        run: Callable[[T], Awaitable[R]],
        /,
        *,
        admitting: Callable[[], bool] | None = None,
        drained: Callable[[], bool] | None = None,
    ) -> tuple[AsyncIterator[T], Callable[[T], Awaitable[R]]]:
        """Bind this source to one stream; the dispatcher calls this for you.

        Args:
            run: The stream's ``run``.
            admitting: Asked before each item is handed out; once it says no
                (a drain was requested, a run failed), the stream ends and
                keeps what is still buffered from running.
            drained: True once admission closed because of a drain (false
                after a failure or a cancellation ended the stream); see
                :class:`~sluicegate._runner.BindsRun`. Only then does
                :meth:`on_abandoned` hear about the items left unstarted.

        Returns:
            An async iterator of the items to run, with ``aclose()``, and a
            ``run`` that wraps the given one. Each call returns a fresh pair
            with its own state.
        """
        stream = _SampleStream(self, run, admitting, drained)
        return stream, stream.run


class _ItemsSource(SampleSource[T, R]):
    """What :meth:`SampleSource.from_items` returns."""

    def __init__(
        self,
        initial: tuple[T, ...],
        next: Callable[[], Awaitable[Sequence[T] | None]] | None,
        on_complete: Callable[[T, R], Awaitable[Sequence[T] | None]] | None,
        on_abandoned: Callable[[T], Awaitable[None]] | None,
    ) -> None:
        self._initial = initial
        self._next = next
        self._on_complete = on_complete
        self._on_abandoned = on_abandoned

    def initial(self) -> Sequence[T]:
        return self._initial

    async def next(self) -> Sequence[T] | None:
        if self._next is None:
            return None
        return await self._next()

    async def on_complete(self, item: T, result: R) -> Sequence[T] | None:
        if self._on_complete is None:
            return None
        return await self._on_complete(item, result)

    async def on_abandoned(self, item: T) -> None:
        if self._on_abandoned is not None:
            await self._on_abandoned(item)

    def __repr__(self) -> str:
        return f"<SampleSource.from_items seed={len(self._initial)}>"


class AsyncioHooks(SampleSource[T, R]):
    """A :class:`SampleSource` whose async hooks are asyncio coroutines, as trio sees it.

    Each hook the source overrides (``next``, ``on_complete``,
    ``on_abandoned``) runs as an asyncio task of ``loop``, in the context
    of the trio task that calls it (a run's, for ``on_complete``, so that
    ``enqueue()`` finds the stream); a hook it does not override is
    :class:`SampleSource`'s own and runs in trio, costing no task.
    ``initial()`` and ``admit()`` are synchronous and called as they are.
    Must be used in the loop's trio guest run (see ``sluicegate._asyncio``).

    Args:
        source: The user's source.
        loop: The running asyncio loop hosting the trio run.
        latch: The stream's failure latch, if its failures end it (see
            :class:`~sluicegate._asyncio.FailureLatch`); ``on_abandoned``,
            heard during a drain's close-out, is never under it.
    """

    def __init__(
        self,
        source: SampleSource[T, R],
        loop: asyncio.AbstractEventLoop,
        latch: FailureLatch | None = None,
    ) -> None:
        # Set here, never changed.
        self.source = source
        kind = type(source)
        self._next: Callable[[], Awaitable[Sequence[T] | None]] = (
            source.next
            if kind.next is SampleSource.next
            else on_asyncio(source.next, loop, "the source's next", latch)
        )
        self._on_complete: Callable[[T, R], Awaitable[Sequence[T] | None]] = (
            source.on_complete
            if kind.on_complete is SampleSource.on_complete
            else on_asyncio(source.on_complete, loop, "the source's on_complete", latch)
        )
        self._on_abandoned: Callable[[T], Awaitable[None]] = (
            source.on_abandoned
            if kind.on_abandoned is SampleSource.on_abandoned
            else on_asyncio(source.on_abandoned, loop, "the source's on_abandoned")
        )

    def initial(self) -> Sequence[T]:
        return self.source.initial()

    async def next(self) -> Sequence[T] | None:
        return await self._next()

    async def on_complete(self, item: T, result: R) -> Sequence[T] | None:
        return await self._on_complete(item, result)

    async def on_abandoned(self, item: T) -> None:
        await self._on_abandoned(item)

    def admit(self, items: Iterable[Any], rollout: int | None) -> Iterable[T]:
        return self.source.admit(items, rollout)

    def __repr__(self) -> str:
        return f"<{self.source!r}, hooks on asyncio>"


class _SampleStream(Generic[T, R]):
    """One binding of a :class:`SampleSource` to a stream: its buffer and counts.

    ``in_flight`` counts items from the moment they are handed out until their
    wrapped run (``on_complete`` included) is over. Counting from the handout,
    not from the run's start, matters with ``window=None``: there the
    dispatcher spawns the run and pulls again before the run has started, and
    that pull must not mistake the stream for idle.
    """

    def __init__(
        self,
        source: SampleSource[T, R],
        run: Callable[[T], Awaitable[R]],
        admitting: Callable[[], bool] | None = None,
        drained: Callable[[], bool] | None = None,
    ) -> None:
        # What this stream was bound to. Never change.
        self._source = source
        self._run = run
        self._admitting = admitting
        self._drained = drained
        # Items added and not handed out yet, in the order they were added.
        # Written by: _add() (appends), _pull() (takes the oldest) and
        # aclose() (empties it).
        # Invariant: empty once the stream is closed.
        self._buffer: collections.deque[T] = collections.deque()
        # Accepted items a drain left unstarted, not yet reported to on_abandoned.
        # Written by: _add() and aclose() (append), _report_abandoned() (takes).
        # Invariant: it holds items only once a drain has closed the stream.
        self._abandoned: collections.deque[T] = collections.deque()
        # initial() has been asked. Written by: _pull(), once.
        self._seeded = False
        # Items handed out whose wrapped run (on_complete included) is not over.
        # Written by: _pull() (one more per item handed out) and run() (one
        # less as it ends).
        # Invariant: 0 <= _in_flight; next() is asked only while it is 0.
        self._in_flight = 0
        # next() has returned None. Written by: _pull().
        self._source_done = False
        # No added item could run any more: enqueue() refuses.
        # Written by: _pull() (the source ran out with nothing running) and
        # _idle_after_close() (closed by a drain, nothing running).
        # Invariant: once true, stays true.
        self._ended = False
        # aclose() has been called: nothing is handed out any more.
        # Written by: aclose(). Invariant: once true, stays true.
        self._closed = False
        # A task is pulling now. Written by: __anext__, around the pull.
        # Invariant: one pull at a time (the dispatcher serialises them).
        self._pulling = False
        # Passes of _pull's loop, which pace() turns into checkpoints.
        # Written by: _pull().
        self._passes = 0
        # Where the puller waits for a running item to add work or finish.
        # At most one task pulls at a time (the dispatcher serialises pulls),
        # so it holds at most one parked puller.
        # Written by: park() in _pull(), unpark_all() in _add(), run() and aclose().
        self._wakeup = trio.lowlevel.ParkingLot()

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has been called."""
        return self._closed

    @property
    def in_flight(self) -> int:
        """Items handed out whose wrapped run is not over yet."""
        return self._in_flight

    @property
    def buffered(self) -> int:
        """Items added but not handed out yet."""
        return len(self._buffer)

    def __aiter__(self) -> _SampleStream[T, R]:
        return self

    async def __anext__(self) -> T:
        if self._pulling:
            raise RuntimeError("a SampleSource stream was pulled by two tasks at once")
        self._pulling = True
        # initial() and next() run outside any run of this stream, even when the
        # pulling task inherited an outer stream's context (a stream nested in
        # a run): an enqueue() there must fail, not feed the outer stream.
        token = _current_stream.set(None)
        try:
            return await self._pull()
        finally:
            _current_stream.reset(token)
            self._pulling = False

    async def _pull(self) -> T:
        parked = False
        while True:
            # Every pass is a cancellation point, and every YIELD_EVERY-th a
            # schedule point too (a park counts), so a source whose next()
            # keeps returning [] without blocking can still be cancelled and
            # lets other tasks run, without a scheduler round per item. Nothing
            # is taken from the buffer before this point, so a cancellation
            # here loses no item.
            self._passes += 1
            if not parked:
                await pace(self._passes)
            parked = False
            if self._closed or (self._admitting is not None and not self._admitting()):
                raise StopAsyncIteration
            if not self._seeded:
                self._seeded = True
                self._add(self._source.initial())
            if self._buffer:
                self._in_flight += 1
                return self._buffer.popleft()
            if self._in_flight:
                # A running item may still add work; wait for it to do so or
                # for the last one to finish.
                await self._wakeup.park()
                parked = True
                continue
            if self._source_done:
                self._ended = True
                raise StopAsyncIteration
            more = await self._source.next()
            if more is None:
                self._source_done = True
            else:
                self._add(more)

    def _was_drained(self) -> bool:
        return self._drained is not None and self._drained()

    def _add(self, items: Iterable[Any], rollout: int | None = None) -> None:
        if isinstance(items, (str, bytes)):
            # Iterating would split it into characters, which is never meant.
            raise TypeError(
                "a SampleSource hook must return a sequence of items or None, "
                f"not the {type(items).__name__} {items!r}"
            )
        if self._closed:
            # Admission is over. After a drain the items were still accepted,
            # and the source hears that they will not run; after a failure or
            # a cancellation everything unwinds and they are dropped.
            if self._was_drained():
                self._abandoned.extend(self._source.admit(items, rollout))
            return
        before = len(self._buffer)
        self._buffer.extend(self._source.admit(items, rollout))
        if len(self._buffer) != before:
            self._wakeup.unpark_all()

    def enqueue(self, items: tuple[Any, ...], rollout: int | None = None) -> None:
        if self._ended:
            raise RuntimeError(
                "enqueue() after its SampleSource stream has ended: the items would never run"
            )
        self._add(items, rollout)

    async def _report_abandoned(self) -> None:
        # Outside any run of this stream: an enqueue() in on_abandoned fails
        # rather than feeding this closed stream or an outer one.
        token = _current_stream.set(None)
        try:
            while self._abandoned:
                if not self._was_drained():
                    # A failure followed the drain: it unwinds everything.
                    self._abandoned.clear()
                    return
                await trio.lowlevel.checkpoint_if_cancelled()
                await self._source.on_abandoned(self._abandoned.popleft())
        finally:
            _current_stream.reset(token)

    async def run(self, item: T) -> R:
        token = _current_stream.set(self)
        try:
            result = await self._run(item)
            more = await self._source.on_complete(item, result)
            if more is not None:
                self._add(more)
            if self._abandoned:
                # Work this run (or another) added after a drain closed the
                # stream: report it here, where a task is still alive to do so.
                await self._report_abandoned()
            return result
        finally:
            _current_stream.reset(token)
            self._in_flight -= 1
            assert self._in_flight >= 0
            if self._in_flight == 0:
                self._idle_after_close()
                self._wakeup.unpark_all()

    def _idle_after_close(self) -> None:
        # Closed by a drain with nothing running: no run is left to report
        # what a lingering task might still add, so enqueue() must refuse it.
        if self._closed and self._was_drained():
            self._ended = True

    async def aclose(self) -> None:
        """Stop handing out work; report what is buffered after a drain, or drop it. Idempotent."""
        self._closed = True
        if self._was_drained():
            self._abandoned.extend(self._buffer)
        self._buffer.clear()
        if self._in_flight == 0:
            self._idle_after_close()
        self._wakeup.unpark_all()
        await self._report_abandoned()
        await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return (
            f"<SampleSource stream in_flight={self._in_flight} "
            f"buffered={len(self._buffer)} closed={self._closed}>"
        )


def enqueue(*items: Any, rollout: int | None = None) -> None:
    """Add work to the :class:`SampleSource` stream whose run is calling this.

    Works at any depth of the run's call stack and from tasks the run spawns.
    The items are buffered after anything added before them and start as soon
    as window places are free. After a drain has closed the stream they do
    not run: the source's :meth:`~SampleSource.on_abandoned` hears about them.

    Args:
        items: The items to add.
        rollout: In an evaluation only: run exactly this rollout of each
            task (an int >= 0, which may exceed ``-r``), instead of all of
            its ``-r`` rollouts. See ``docs/adaptive.md``.

    Raises:
        TypeError: ``rollout`` is not an int.
        ValueError: ``rollout`` is negative.
        RuntimeError: when not called from inside a run of a ``SampleSource``
            stream, when that stream has already ended, or for ``rollout``
            outside an evaluation.
    """
    check_count(rollout, "rollout", none=True)
    stream = _current_stream.get()
    if stream is None:
        raise RuntimeError(
            "sluicegate.enqueue() must be called from inside a run of a SampleSource "
            "(a run started by run_stream/open_stream with a SampleSource as the source)"
        )
    stream.enqueue(items, rollout)
