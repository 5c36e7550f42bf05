"""What of a stream's arguments runs on asyncio, and how the dispatcher sees it.

The dispatcher is trio code; the user's code on this front is asyncio code.
Before a stream starts, its ``run`` and ``source`` are wrapped so that trio
can await them (:mod:`sluicegate._asyncio` does the awaiting):

* ``run`` becomes a trio function that runs each call as an asyncio task;
* an async iterable runs each ``__anext__`` and its ``aclose()`` on
  asyncio, unless it is one of sluicegate's or trio's own, which are trio
  code (a trio memory channel, ``Taskset.stream()``, a live taskset's views
  and ``take()``, which read the user's feed itself on asyncio);
* a :class:`~sluicegate.SampleSource` runs its async hooks (``next``,
  ``on_complete``, ``on_abandoned``) on asyncio; a hook it does not
  override is sluicegate's own and runs in trio, costing no task.

A step of asyncio code and the dispatcher's reaction to it are a trio tick
apart, and two promises of docs/runner.md must hold across that gap. Every
pull therefore goes through a :class:`_Guard`:

* no pull and no run starts after a failure (invariant 4): the runs and
  pulls of one stream share a :class:`~sluicegate._asyncio.FailureLatch`,
  tripped by the first of them to fail on asyncio, which holds back every
  pull and every run that has not started yet until the failure, on its way
  to the dispatcher, cancels them;
* for ``open_stream``, a place is freed only once the consumer has its
  result (invariant 2): the result is taken from the dispatcher in trio and
  reaches the asyncio consumer a pass of the loop later, and a
  :class:`Handover` holds back pulls in between.

Everything else (``window``, ``drain``, ``rate``, ``trace``) goes to the
dispatcher as it is, and so does anything it refuses, so that the error is
the trio front's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar

import trio

from .._asyncio import AsyncioIterator, FailureLatch, is_trio_code, on_asyncio
from .._dynamic import AsyncioHooks, SampleSource
from .._util import as_async_iterator, surely_sync

__all__ = ["Handover", "adapt_run", "adapt_source"]

T = TypeVar("T")
R = TypeVar("R")


def adapt_run(
    run: Any,
    loop: asyncio.AbstractEventLoop,
    latch: FailureLatch | None = None,
    what: str = "the run",
) -> Any:
    """``run`` (or another callable the caller awaits) as trio awaits it: each call an asyncio task.

    A ``run`` the trio front refuses (not callable, a plain ``def``) is
    returned as it is, so that the trio front refuses it in its own words.

    Args:
        run: The user's async function.
        loop: The running loop.
        latch: The stream's failure latch; None where trio code catches a
            run's failure (``serve()``'s retries and recorded errors).
        what: What it is, for the notes and the log.
    """
    if not callable(run) or surely_sync(run):
        return run
    return on_asyncio(run, loop, what, latch)


def adapt_source(
    source: Any,
    loop: asyncio.AbstractEventLoop,
    latch: FailureLatch | None = None,
    handover: Handover | None = None,
) -> Any:
    """``source`` as the dispatcher reads it: asyncio code on asyncio, each pull guarded.

    Args:
        source: The stream's source.
        loop: The running loop.
        latch: The stream's failure latch, or None for a source whose
            pulls need no guard (``serve()``'s, whose runs' failures do not
            end it).
        handover: ``open_stream``'s, holding pulls back while a result is on
            its way to the consumer; None for ``run_stream`` and ``serve``.
    """
    guarded = latch is not None or handover is not None
    if isinstance(source, SampleSource):
        if not guarded:
            return AsyncioHooks(source, loop)
        return _HooksOnAsyncio(source, loop, latch, handover)
    if isinstance(source, AsyncIterable):
        if not is_trio_code(source):
            source = AsyncioIterator(source, loop, latch)
        return _Guard(source, latch, handover) if guarded else source
    if isinstance(source, Iterable) and guarded:
        return _Guard(source, latch, handover)
    return source  # a sync iterable unguarded, or one the trio front refuses


class Handover:
    """Results taken from the dispatcher that the asyncio consumer does not hold yet.

    The trio task serving ``open_stream``'s consumer counts a result
    :meth:`sent` as it takes it (which frees its place); the consumer counts
    it :meth:`received` as it resumes with it, on the same thread. While
    any is on its way, :class:`_Guard` holds pulls back. (invariant 2)
    """

    def __init__(self) -> None:
        # Written by sent() and received() only. Invariant: >= 0.
        self.in_transit = 0
        self._pulls = trio.lowlevel.ParkingLot()

    def sent(self) -> None:
        self.in_transit += 1

    def received(self) -> None:
        self.in_transit -= 1
        if not self.in_transit:
            self._pulls.unpark_all()

    async def wait(self) -> None:
        while self.in_transit:
            await self._pulls.park()


class _Guard(Generic[T]):
    """A source as the dispatcher pulls it on this front (trio code): see the module's docstring.

    ``iter()`` or ``aiter()`` of the source is taken at the dispatcher's
    first ``aiter()``, after it has checked its arguments, and a sync
    iterator is read as it is, in trio.
    """

    def __init__(self, source: Any, latch: FailureLatch | None, handover: Handover | None) -> None:
        self._source = source
        self._latch = latch
        self._handover = handover
        self._sync = not isinstance(source, AsyncIterable)
        self._iterator: Any = None

    def __aiter__(self) -> _Guard[T]:
        if self._iterator is None:
            source = self._source
            self._iterator = iter(source) if self._sync else as_async_iterator(source)
        return self

    async def __anext__(self) -> T:
        if self._iterator is None:
            self.__aiter__()
        handover = self._handover
        if handover is not None and handover.in_transit:
            await handover.wait()
        latch = self._latch
        if latch is not None and latch.tripped:
            # A run failed on asyncio; the failure, on its way to the
            # dispatcher, cancels this pull.
            await trio.sleep_forever()
        if self._sync:
            try:
                return next(self._iterator)  # type: ignore[no-any-return]
            except StopIteration:
                raise StopAsyncIteration from None
        return await self._iterator.__anext__()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Close the source (``aclose()``, else ``close()``), as the dispatcher would."""
        iterator = self._source if self._iterator is None else self._iterator
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
            return
        close = getattr(iterator, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return repr(self._source)


class _HooksOnAsyncio(AsyncioHooks[T, R], Generic[T, R]):
    """:class:`~sluicegate._dynamic.AsyncioHooks`, its stream pulled through a :class:`_Guard`."""

    def __init__(
        self,
        source: SampleSource[T, R],
        loop: asyncio.AbstractEventLoop,
        latch: FailureLatch | None,
        handover: Handover | None,
    ) -> None:
        super().__init__(source, loop, latch)
        self._latch = latch
        self._handover = handover

    def bind_run(
        self,
        run: Callable[[T], Awaitable[R]],
        /,
        *,
        admitting: Callable[[], bool] | None = None,
        drained: Callable[[], bool] | None = None,
    ) -> tuple[AsyncIterator[T], Callable[[T], Awaitable[R]]]:
        stream, bound = super().bind_run(run, admitting=admitting, drained=drained)
        return _Guard(stream, self._latch, self._handover), bound
