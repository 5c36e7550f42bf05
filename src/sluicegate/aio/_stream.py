"""``run_stream`` and ``open_stream`` awaited from asyncio: the trio namesakes, hosted.

Each call runs the trio front itself (:func:`sluicegate.run_stream`,
:func:`sluicegate.open_stream`) in the trio guest run of the running asyncio
loop (:func:`sluicegate._asyncio.host`), with ``run`` and the source wrapped
so that the user's code runs on asyncio (:mod:`._adapt`). The arguments,
results and errors are the trio front's, because it is the trio front that
checks, runs and raises.

``open_stream`` needs a trio task that stays inside the trio block while the
asyncio body runs: :class:`_HostedStream` keeps one, and hands it the
consumer's requests one at a time, so that a place is freed only once the
asyncio consumer has its result (docs/runner.md, invariant 2).
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Generator, Iterable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, NoReturn, TypeVar

import attrs
import outcome
import trio

from .._asyncio import (
    FailureLatch,
    Hosted,
    host,
    keep_ticking,
    refuse_outside_asyncio,
    start_hosted,
)
from .._checks import check_flag
from .._runner import BindsRun, Done, Drain, Pacer, Recorder, WindowLike, check_stream_arguments
from .._runner import open_stream as trio_open_stream
from .._runner import run_stream as trio_run_stream
from ._adapt import Handover, adapt_run, adapt_source

__all__ = ["open_stream", "run_stream"]

T = TypeVar("T")
R = TypeVar("R")


async def run_stream(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[R]],
    *,
    window: int | WindowLike | None,
    drain: Drain | None = None,
    rate: Pacer | None = None,
    trace: Recorder | None = None,
) -> list[R]:
    """:func:`sluicegate.run_stream`, awaited from asyncio; each run is an asyncio task.

    Everything :func:`sluicegate.run_stream` promises holds (docs/runner.md):
    the window, back-pressure, order, fail-fast, close-out, drain. ``run``
    is an asyncio coroutine function, called once per item; each call runs
    as an asyncio task in a copy of the dispatcher's context, so
    ``sluicegate.enqueue()`` and context variables reach it. An async
    ``source`` is read on asyncio too (each pull and its ``aclose()``), as
    are the async hooks of a :class:`~sluicegate.SampleSource`. The
    dispatcher itself runs in trio's guest mode on the running loop.

    Args:
        source: As for :func:`sluicegate.run_stream`: a sync iterable, an
            async iterable of asyncio code (an async generator awaiting an
            asyncio client), a static :class:`~sluicegate.Taskset` or a
            :class:`~sluicegate.SampleSource` with asyncio hooks.
        run: An async function of asyncio code.
        window: As for :func:`sluicegate.run_stream`.
        drain: As for :func:`sluicegate.run_stream`; ``drain.request()`` may
            be called from asyncio code on the loop's thread.
        rate: As for :func:`sluicegate.run_stream`.
        trace: As for :func:`sluicegate.run_stream`.

    Returns:
        The results in submission (pull) order.

    Raises:
        RuntimeError: awaited where no asyncio loop runs (from trio, say).
        asyncio.CancelledError: the awaiting task was cancelled: every run
            was cancelled and has ended (or was left running after
            ignoring its cancellation for half a second, which is logged),
            and the source is closed.
        Exception: everything :func:`sluicegate.run_stream` raises, the same way.
    """
    refuse_outside_asyncio("sluicegate.aio.run_stream", "sluicegate.run_stream")
    check_stream_arguments(source, run, window, rate, trace, drain)
    loop = asyncio.get_running_loop()
    latch = FailureLatch()
    stream = functools.partial(
        trio_run_stream,
        adapt_source(source, loop, latch),
        adapt_run(run, loop, latch),
        window=window,
        drain=drain,
        rate=rate,
        trace=trace,
    )
    return await host(stream)


def open_stream(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[R]],
    *,
    window: int | WindowLike | None,
    ordered: bool = True,
    drain: Drain | None = None,
    rate: Pacer | None = None,
    trace: Recorder | None = None,
) -> AbstractAsyncContextManager[AsyncIterator[Done[T, R]]]:
    """:func:`sluicegate.open_stream`, entered from asyncio; each run is an asyncio task.

    Use as ``async with open_stream(source, run, window=8) as results:`` and
    iterate ``results`` with ``async for``. As on trio, a place is freed
    only once the consumer has its result; leaving the block early cancels
    the remaining runs and closes the source; and a failure cancels the
    block's body (the task that entered it gets a ``CancelledError``), after
    which the failure is raised as itself from the ``async with``.

    Args:
        source: As for :func:`run_stream`.
        run: As for :func:`run_stream`.
        window: As for :func:`run_stream`.
        ordered: Yield in submission order (default) or in completion order.
        drain: As for :func:`run_stream`.
        rate: As for :func:`run_stream`.
        trace: As for :func:`run_stream`.

    Returns:
        An async context manager; entering it starts the stream and gives an
        async iterator of :class:`~sluicegate.Done`.

    Raises:
        TypeError: for a non-bool ``ordered``, and everything
            :func:`sluicegate.open_stream` raises for bad arguments, when called.
        Exception: the rest as :func:`run_stream`, when the block is left.
    """
    check_flag(ordered, "ordered")
    check_stream_arguments(source, run, window, rate, trace, drain)
    options = _Options(window, ordered, drain, rate, trace)
    return _HostedStream(source, run, options)


@attrs.frozen
class _Options:
    window: Any
    ordered: bool
    drain: Any
    rate: Any
    trace: Any


@attrs.frozen
class _Leave:
    """The consumer left the block, with ``error`` raised in it (or None)."""

    error: BaseException | None


_END: Any = object()


class _HostedStream(Generic[T, R]):
    """What :func:`open_stream` returns: the async context manager and the results, for asyncio.

    One trio task (the hosted call, :meth:`_serve`) enters the trio front's
    block and serves the consumer's requests from inside it: a future per
    result asked for, and a :class:`_Leave` when the body is done.
    """

    def __init__(self, source: Any, run: Any, options: _Options) -> None:
        self._source = source
        self._run = run
        self._options = options
        self._entered = False
        # The consumer left the block; later reads are refused.
        self._left = False
        self._hosted: Hosted[None] | None = None
        # The asyncio task that entered: a failure cancels it, as trio cancels
        # the body of its block.
        self._consumer: asyncio.Task[Any] | None = None
        # What the consumer asked for and the trio task has not taken yet.
        # The consumer appends, the trio task takes.
        self._requests: collections.deque[asyncio.Future[Any] | _Leave] = collections.deque()
        self._asked = trio.lowlevel.ParkingLot()
        # Results taken from the dispatcher and not yet in the consumer's hands.
        self._handover = Handover()
        # The stream failed and the trio task cancelled the consumer (once).
        self._failed = False
        self._cancelled_consumer = False

    # -- the asyncio side -----------------------------------------------------------

    def __await__(self) -> Generator[Any, None, NoReturn]:
        # As on trio: `await open_stream(...)` would fail in Python's words.
        raise TypeError(
            "open_stream(...) is an async context manager, not a coroutine: write "
            "`async with open_stream(...) as results:` and iterate `results`"
        )

    async def __aenter__(self) -> _HostedStream[T, R]:
        if self._entered:
            raise RuntimeError(
                "open_stream(...) can be entered only once; call open_stream() again "
                "for another stream"
            )
        self._entered = True
        refuse_outside_asyncio("sluicegate.aio.open_stream", "sluicegate.open_stream")
        loop = asyncio.get_running_loop()
        self._consumer = asyncio.current_task()
        ready: asyncio.Future[None] = loop.create_future()
        latch = FailureLatch()
        source = adapt_source(self._source, loop, latch, self._handover)
        run = adapt_run(self._run, loop, latch)
        self._hosted = hosted = await start_hosted(self._serve, source, run, ready)
        if await hosted.until(ready) and hosted.caller_cancelled is None:
            return self
        self._left = True
        await hosted.result()  # the trio block's error, or the caller's cancellation
        raise AssertionError("the stream ended before it was entered")  # pragma: no cover

    def __aiter__(self) -> _HostedStream[T, R]:
        return self

    async def __anext__(self) -> Done[T, R]:
        if self._left or self._hosted is None:
            raise RuntimeError(
                "the results of open_stream(...) can be read only inside its async with block"
            )
        if self._failed:
            # The stream failed: as on trio, the body gets no further result.
            raise asyncio.CancelledError
        request: asyncio.Future[Done[T, R]] = asyncio.get_running_loop().create_future()
        self._ask(request)
        try:
            done = await request
        finally:
            # Resumed with its result, or cancelled after it was sent: either
            # way it is no longer on its way. (invariant 2)
            if request.done() and not request.cancelled() and request.result() is not _END:
                self._handover.received()
        if done is _END:
            raise StopAsyncIteration
        return done

    def _ask(self, request: asyncio.Future[Any] | _Leave) -> None:
        self._requests.append(request)
        self._asked.unpark()

    async def __aexit__(
        self,
        etype: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        hosted = self._hosted
        assert hosted is not None and self._consumer is not None
        self._left = True
        if isinstance(exc, asyncio.CancelledError) and not self._failed:
            # Cancelled from outside: on trio, the block's body would have
            # got trio's Cancelled, so the trio block is cancelled.
            hosted.cancel()
        else:
            self._ask(_Leave(exc))
        result = await hosted.wait()
        if self._cancelled_consumer:
            self._consumer.uncancel()
        if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
            if exc is not None and hosted.caller_cancelled is None:
                return False  # cancelled from outside: the body's CancelledError goes on
            result = hosted.unhosted(result)
        if not isinstance(result, outcome.Error):
            if hosted.caller_cancelled is not None:
                raise hosted.caller_cancelled
            return False
        error = result.error
        if error is exc:
            return False
        try:
            raise error
        finally:
            del error, result

    # -- the trio side ----------------------------------------------------------------

    async def _serve(self, source: Any, run: Any, ready: asyncio.Future[None]) -> None:
        """Enter the trio block and serve the consumer from inside it until it leaves."""
        options = self._options
        try:
            async with trio_open_stream(
                source,
                run,
                window=options.window,
                ordered=options.ordered,
                drain=options.drain,
                rate=options.rate,
                trace=options.trace,
            ) as results:
                if not ready.done():
                    ready.set_result(None)
                try:
                    leave = await self._hand_over(results)
                except trio.Cancelled:
                    assert self._hosted is not None
                    if not self._hosted.cancel_requested:
                        # The stream failed: its body, on asyncio, is
                        # cancelled and leaves before the block does.
                        self._cut_consumer()
                        with trio.CancelScope(shield=True):
                            error = await self._wait_to_leave()
                        if error is not None and not isinstance(error, asyncio.CancelledError):
                            # The body raised something else while leaving:
                            # on trio it would be what the block raises.
                            raise error from None
                    raise
                if leave is not None:
                    raise leave  # the body's exception, raised in the trio block
        finally:
            # A result asked for now would never come.
            for request in self._requests:
                if isinstance(request, asyncio.Future):
                    request.cancel()
            self._requests.clear()

    async def _hand_over(self, results: AsyncIterator[Done[T, R]]) -> BaseException | None:
        """Take each result the consumer asks for, one at a time; return when it leaves."""
        requests = self._requests
        while True:
            while not requests:
                await self._asked.park()
            request = requests.popleft()
            if isinstance(request, _Leave):
                return request.error
            if request.done():
                continue  # its consumer was cancelled while it waited
            try:
                done: Any = await results.__anext__()
            except StopAsyncIteration:
                done = _END
            if request.done():
                continue  # cancelled meanwhile: the result is dropped with its consumer
            if done is not _END:
                self._handover.sent()
            request.set_result(done)
            keep_ticking()  # the consumer's next request is likely a pass away

    def _cut_consumer(self) -> None:
        self._failed = True
        assert self._consumer is not None
        if not self._consumer.done() and self._consumer.cancel():
            self._cancelled_consumer = True

    async def _wait_to_leave(self) -> BaseException | None:
        """Wait for the cancelled consumer to leave; return what it left with."""
        requests = self._requests
        while True:
            while not requests:
                await self._asked.park()
            request = requests.popleft()
            if isinstance(request, _Leave):
                return request.error
            request.cancel()
