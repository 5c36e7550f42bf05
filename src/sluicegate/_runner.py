"""The one dispatcher: pull from a source through a bounded window of runs.

Everything else in sluicegate is built on :func:`run_stream` and
:func:`open_stream`. Both are thin fronts on :class:`_Dispatch`, which owns the
invariants listed in DESIGN.md section 2: the window, back-pressure, order,
fail-fast, close-out, drain and caller cancellation.

How it is fast: with a bounded window the dispatcher starts ``window``
long-lived workers. A worker pulls one item (taking turns with the others on a
lock that costs nothing when uncontended), runs it, delivers the result and
loops. A worker is only ever pulling when it has a free place, so the
back-pressure rule holds by construction, and no task is spawned per item.
With ``window=None`` one puller spawns a task per item, since there is no
place to wait for.
"""

from __future__ import annotations

import collections
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
)
from contextlib import asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import attrs
import trio

from ._util import as_async_iterator

__all__ = ["BindsRun", "Done", "Drain", "Pacer", "Recorder", "open_stream", "run_stream"]

T = TypeVar("T")
R = TypeVar("R")

Run = Callable[[T], Awaitable[R]]


@attrs.frozen
class Done(Generic[T, R]):
    """One finished run, as :func:`open_stream` hands it to the consumer.

    Attributes:
        index: The item's position in pull order, counting from 0.
        item: The item as it came from the source.
        value: What ``run(item)`` returned.
    """

    index: int
    item: T
    value: R


class Drain:
    """A latch that asks a running stream to stop admitting work.

    Pass one to :func:`run_stream` or :func:`open_stream`. After
    :meth:`request`, no further item is pulled, the source is closed, the
    runs already in flight finish normally and the stream ends with what
    they produced. A drain stays requested; one object can be shared by
    several streams to drain them together.
    """

    def __init__(self) -> None:
        self._event = trio.Event()
        self._reason: str | None = None

    def request(self, reason: str = "drain requested") -> None:
        """Stop admission. Safe to call more than once; the first reason wins.

        Call it from trio code (a signal watcher task, say), not from another
        thread.
        """
        if self._reason is None:
            self._reason = reason
        self._event.set()

    @property
    def requested(self) -> bool:
        """Whether :meth:`request` has been called."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """The reason given to the first :meth:`request`, or None."""
        return self._reason

    async def wait(self) -> None:
        """Block until the drain is requested."""
        await self._event.wait()

    def __repr__(self) -> str:
        state = f"requested: {self._reason!r}" if self.requested else "not requested"
        return f"<Drain {state}>"


# A source and runs that never block would keep a loop from ever reaching the
# scheduler, so deadlines and cancellation could not get in. Loops over items
# (here and in _take, _taskset) yield every so many passes; a full checkpoint
# costs far more than handing over an in-memory item, so not on every pass.
YIELD_EVERY = 32


async def close_source(source: object) -> None:
    """Close ``source`` with its ``aclose()`` or ``close()``, if it has one.

    Closing is shielded from cancellation, so cleanup in an async generator's
    ``finally`` runs to the end even when the caller is being cancelled.

    Raises:
        Exception: whatever closing raised.
    """
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        with trio.CancelScope(shield=True):
            await aclose()
        return
    close = getattr(source, "close", None)
    if close is not None:
        close()


class _Waiters:
    """Tasks parked until another task wakes them, oldest first.

    A trimmed-down ``trio.lowlevel.ParkingLot``: the dispatcher parks and
    wakes a task for nearly every item, and this does only what it needs.
    """

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: dict[trio.lowlevel.Task, None] = {}

    def __bool__(self) -> bool:
        return bool(self._tasks)

    async def park(self) -> None:
        task = trio.lowlevel.current_task()
        tasks = self._tasks
        tasks[task] = None

        def abort(_: object) -> trio.lowlevel.Abort:
            del tasks[task]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def wake_one(self) -> None:
        if self._tasks:
            task = next(iter(self._tasks))
            del self._tasks[task]
            trio.lowlevel.reschedule(task)

    def wake_all(self) -> None:
        tasks, self._tasks = self._tasks, {}
        for task in tasks:
            trio.lowlevel.reschedule(task)


@runtime_checkable
class BindsRun(Protocol):
    """A source that must see its own runs (a :class:`~sluicegate.SampleSource`).

    The dispatcher hands such a source the ``run`` it was given and two
    questions it may ask at any time, and uses the pair it returns instead:
    an async iterator of items and a ``run`` that wraps the original. This
    keeps the dispatcher unaware of what a dynamic source is, while letting
    the source learn when runs finish.

    ``admitting()`` is true while admission is open: false after the source
    ended, a drain was requested or a run failed. ``drained()`` is true once
    admission closed because of a drain, and stays false while no drain was
    requested, when the source ran out before the drain, and once a failure,
    an outside cancellation or a consumer leaving early has ended the stream:
    a source asks it when closed, to tell work a drain left unstarted from
    work a failure threw away.
    """

    def bind_run(
        self, run: Any, /, *, admitting: Callable[[], bool], drained: Callable[[], bool]
    ) -> tuple[AsyncIterator[Any], Any]: ...


@runtime_checkable
class Pacer(Protocol):
    """A bound on how fast a stream pulls, passed as ``rate=`` (a ``RateLimit``).

    The dispatcher awaits :meth:`acquire` before each pull, in the pulling
    worker's turn, so a pacer bounds pulls and starts alike. Each
    ``acquire()`` that returns is either spent on an item that runs or given
    back with exactly one :meth:`refund` (the pull found the end of the
    source, a drain or a failure cut it, the source raised, or admission
    closed while waiting). An ``acquire()`` that a drain or a cancellation
    interrupts is not refunded: it must take nothing when it does not return.
    """

    async def acquire(self) -> None: ...

    def refund(self) -> None: ...


@runtime_checkable
class Recorder(Protocol):
    """Sees what a stream does, passed as ``trace=`` (a ``Timeline``).

    Each method is called once per event, in the order the events happen, in
    the dispatcher's own tasks: ``pulled`` when an item came out of the
    source (it has an index from then on), ``started`` and ``finished``
    around its run. ``finished`` gets None for a run that returned, the
    exception for one that raised (a :class:`trio.Cancelled` for one cut by
    cancellation). An item pulled just as a failure ended the stream may get
    no ``started`` (it never ran); every ``started`` gets its ``finished``.
    ``marked`` gets ``"drain"`` when a drain is seen, ``"failure"`` when the
    first failure is recorded and ``"close"`` once the source is closed.
    Methods must be quick and must not raise.
    """

    def pulled(self, index: int, item: object, /) -> None: ...

    def started(self, index: int, /) -> None: ...

    def finished(self, index: int, error: BaseException | None, /) -> None: ...

    def marked(self, what: str, /) -> None: ...


Source = AsyncIterable[T] | Iterable[T] | BindsRun


def _check_arguments(
    source: object, run: object, window: object, rate: object, trace: object
) -> None:
    # bool is an int subclass, but window=True is always a mistake.
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise TypeError(f"window must be an int >= 1 or None, not {window!r}")
    if isinstance(window, int) and window < 1:
        raise ValueError(f"window must be >= 1 or None, got {window}")
    if not callable(run):
        raise TypeError(f"run must be an async callable, not {run!r}")
    if not isinstance(source, (AsyncIterable, Iterable, BindsRun)):
        raise TypeError(
            f"source must be an iterable or async iterable, not {type(source).__name__}"
        )
    if rate is not None and not isinstance(rate, Pacer):
        raise TypeError(f"rate must have async acquire() and refund() (a RateLimit), not {rate!r}")
    if trace is not None and not isinstance(trace, Recorder):
        raise TypeError(
            f"trace must have pulled(), started(), finished() and marked() (a Timeline), "
            f"not {trace!r}"
        )


class _Dispatch(Generic[T, R]):
    """One run of the dispatcher; not reusable.

    Runs record their own failure instead of raising it into the nursery, so
    the nursery never has to be unpicked from an ``ExceptionGroup``: the first
    failure cancels the nursery's scope and is re-raised as itself afterwards.
    """

    def __init__(
        self,
        source: Source[T],
        run: Run[T, R],
        window: int | None,
        drain: Drain | None,
        *,
        collect: bool,
        ordered: bool,
        rate: Pacer | None = None,
        trace: Recorder | None = None,
    ) -> None:
        self._pulled = 0
        self._exhausted = False
        # The source ran out while no drain was requested (see _drained).
        self._ran_out = False
        # A failure, an outside cancellation or the consumer leaving early
        # ended the stream: whatever is left was not left by a drain.
        self._cut_short = False
        self._closed = False
        self._failure: BaseException | None = None
        self._drain = drain
        self._rate = rate
        self._trace = trace
        if isinstance(source, BindsRun):
            # The source may hold work of its own (a buffer of follow-ups):
            # it asks whether admission is still open before handing any out.
            source, run = source.bind_run(run, admitting=self._admitting, drained=self._drained)
        self._run = run
        self._window = window
        self._ordered = ordered
        self._collect = collect
        self._aiter: AsyncIterator[T] | None = None
        self._iter: Iterator[T] | None = None
        if isinstance(source, AsyncIterable):
            self._aiter = as_async_iterator(source)
        else:
            self._iter = iter(source)
        self._nursery: trio.Nursery | None = None
        # Pull turn-taking: a bare flag and a queue of waiters, so the uncontended
        # case costs one attribute check (trio.Lock always checkpoints).
        self._pull_busy = False
        self._pull_lot = _Waiters()
        self._pull_scope: trio.CancelScope | None = None
        self._cut_scope: trio.CancelScope | None = None
        # run_stream: results by index.
        self.results: list[Any] = []
        # open_stream: finished runs waiting for the consumer.
        self._ready: dict[int, Done[T, R]] = {}
        self._order: collections.deque[int] = collections.deque()  # for ordered=False
        self._handed = 0
        self._live = 0  # workers or per-item tasks still running
        self._spawned = 0  # workers started so far
        self._consumer_lot = _Waiters()
        self._credit_window = None if collect else window
        self._credit_lot = _Waiters()
        self._took_since_park = False
        self._drain_scope = trio.CancelScope()

    # -- pulling ---------------------------------------------------------------

    def _admitting(self) -> bool:
        return not (
            self._exhausted
            or self._failure is not None
            or (self._drain is not None and self._drain.requested)
        )

    def _drained(self) -> bool:
        return (
            self._drain is not None
            and self._drain.requested
            and not self._ran_out
            and self._failure is None
            and not self._cut_short
        )

    async def _pull(self, scope: trio.CancelScope) -> tuple[int, T] | None:
        """Take the next item, or None when admission is over.

        Callers take turns; whoever holds the turn is the only one touching
        the source, which async generators require. ``scope`` is the caller's
        own long-lived cancel scope: a drain cancels it to cut a pull that is
        waiting on a quiet source (a scope per pull would cost more than the
        rest of the pull put together).
        """
        while True:
            while self._pull_busy:
                await self._pull_lot.park()
            # open_stream: a place is free only once the consumer has taken a
            # result, so pulls may run at most `window` ahead of hand-overs.
            if self._credit_window is not None and (
                self._pulled >= self._handed + self._credit_window
            ):
                await self._credit_lot.park()
                continue
            break
        self._pull_busy = True
        # A token taken from the pacer and not yet spent on an item that runs.
        token = False
        try:
            if not self._admitting():
                return None
            if self._rate is not None:
                # Waiting for a token is part of the pull: a drain cuts it.
                self._pull_scope = scope
                try:
                    await self._rate.acquire()
                finally:
                    self._pull_scope = None
                token = True
                if not self._admitting():
                    return None
            index = self._pulled
            if self._iter is not None:
                try:
                    item = next(self._iter)
                except StopIteration:
                    self._end_of_source()
                    return None
            else:
                self._pull_scope = scope
                try:
                    item = await anext(self._aiter)  # type: ignore[arg-type]
                except StopAsyncIteration:
                    self._end_of_source()
                    return None
                finally:
                    self._pull_scope = None
            if self._failure is not None:
                # The item arrived in the same instant as another run failed:
                # nothing may start after a failure.
                return None
            token = False
            self._pulled = index + 1
            if self._collect:
                self.results.append(None)
            if self._trace is not None:
                self._trace.pulled(index, item)
            if self._cut_scope is scope:
                # A drain cancelled this pull, but the item had already
                # arrived. Taken from the source, it must run, yet not under
                # the caller's cancelled scope: give it a task of its own.
                assert self._nursery is not None
                self._live += 1
                self._nursery.start_soon(self._run_one, index, item)
                return None
            return index, item
        except Exception as exc:
            self._fail(exc, f"sluicegate: raised by the source while pulling item {self._pulled}")
            return None
        finally:
            if token:
                self._rate.refund()  # type: ignore[union-attr]
            self._pull_busy = False
            if self._pull_lot:
                self._pull_lot.wake_one()

    def _end_of_source(self) -> None:
        self._exhausted = True
        if self._drain is None or not self._drain.requested:
            self._ran_out = True

    # -- failure and close-out ---------------------------------------------------

    def _fail(self, exc: BaseException, note: str) -> None:
        if self._failure is None:
            exc.add_note(note)
            self._failure = exc
            if self._trace is not None:
                self._trace.marked("failure")
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
        elif exc is not self._failure:
            # Runs that fail before the cancellation reaches them are kept as
            # notes on the first failure: nothing is dropped silently, and the
            # caller still gets one exception of the type it can catch.
            self._failure.add_note(f"{note.removeprefix('sluicegate: ')}, also failed: {exc!r}")

    async def _close_source(self) -> BaseException | None:
        """Close the source once; returns what closing raised."""
        if self._closed:
            return None
        self._closed = True
        try:
            await close_source(self._aiter if self._aiter is not None else self._iter)
        except Exception as exc:
            return exc
        finally:
            if self._trace is not None:
                self._trace.marked("close")
        return None

    async def _watch_drain(self, drain: Drain) -> None:
        with self._drain_scope:
            await drain.wait()
        if self._trace is not None and drain.requested:
            # Marked even when the stream ended in the same instant: the
            # drain was requested while it ran.
            self._trace.marked("drain")
        if self._drain_scope.cancelled_caught:
            return
        if self._pull_scope is not None:
            self._cut_scope = self._pull_scope
            self._pull_scope.cancel()
        # Wait for our turn so that the source is never closed mid-pull.
        while self._pull_busy:
            await self._pull_lot.park()
        self._pull_busy = True
        try:
            error = await self._close_source()
        finally:
            self._pull_busy = False
            self._pull_lot.wake_one()
        if error is not None:
            self._fail(error, "sluicegate: raised while closing the source for a drain")

    # -- running ----------------------------------------------------------------

    def _exited(self) -> None:
        """A worker (or per-item task, or the puller) is gone."""
        self._live -= 1
        if self._live == 0:
            # Nothing will produce again: wake every waiting consumer so each
            # sees the end, and stop watching for a drain that can no longer
            # matter.
            self._consumer_lot.wake_all()
            self._drain_scope.cancel()

    def _keep(self, index: int, item: T, value: R) -> None:
        """Store a finished run's value: by index, or for the consumer."""
        if self._collect:
            self.results[index] = value
        else:
            self._deliver(Done(index, item, value))

    def _spawn_worker(self) -> None:
        assert self._nursery is not None
        self._spawned += 1
        self._live += 1
        self._nursery.start_soon(self._worker)

    async def _worker(self) -> None:
        """Pull and run items until admission ends.

        With a window, a worker runs each item itself and the pool grows with
        the work. With ``window=None`` the one worker only pulls, and gives
        each item a task of its own.
        """
        run = self._run
        window = self._window
        trace = self._trace
        nursery = self._nursery
        assert nursery is not None
        passes = 0
        try:
            with trio.CancelScope() as scope:
                while True:
                    passes += 1
                    if not passes % YIELD_EVERY:
                        await trio.lowlevel.checkpoint()
                    pulled = await self._pull(scope)
                    if pulled is None:
                        return
                    if window is None:
                        self._live += 1
                        nursery.start_soon(self._run_one, *pulled)
                        continue
                    if self._spawned < window and not self._pull_lot and not self._credit_lot:
                        # Nobody is waiting to pull next: add a worker, so the
                        # pool grows with the work instead of all at once.
                        self._spawn_worker()
                    index, item = pulled
                    if trace is not None:
                        trace.started(index)
                    try:
                        value = await run(item)
                    except Exception as exc:
                        if trace is not None:
                            trace.finished(index, exc)
                        self._fail(exc, f"sluicegate: raised by the run of item {index}")
                        return
                    except BaseException as exc:
                        if trace is not None:
                            trace.finished(index, exc)
                        raise
                    if trace is not None:
                        trace.finished(index, None)
                    self._keep(index, item, value)
        finally:
            self._exited()

    async def _run_one(self, index: int, item: T) -> None:
        try:
            if self._failure is not None:
                return  # spawned before a failure, first scheduled after it
            trace = self._trace
            if trace is not None:
                trace.started(index)
            try:
                value = await self._run(item)
            except Exception as exc:
                if trace is not None:
                    trace.finished(index, exc)
                self._fail(exc, f"sluicegate: raised by the run of item {index}")
                return
            except BaseException as exc:
                if trace is not None:
                    trace.finished(index, exc)
                raise
            if trace is not None:
                trace.finished(index, None)
            self._keep(index, item, value)
        finally:
            self._exited()

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        if self._drain is not None:
            nursery.start_soon(self._watch_drain, self._drain)
        # One worker to start with; with a window, each adds another when it
        # finds nobody waiting to pull after it, up to the window. A large
        # window over a short source then costs nothing up front.
        self._spawn_worker()

    # -- handing results to an open_stream consumer -----------------------------

    def _deliver(self, done: Done[T, R]) -> None:
        """Queue ``done`` for the consumer; its place stays taken until handed over."""
        index = done.index
        self._ready[index] = done
        if self._ordered:
            if index == self._handed and self._consumer_lot:
                self._consumer_lot.wake_one()
        else:
            self._order.append(index)
            if self._consumer_lot:
                self._consumer_lot.wake_one()

    def _next_ready(self) -> Done[T, R] | None:
        if self._ordered:
            done = self._ready.pop(self._handed, None)
        elif self._order:
            done = self._ready.pop(self._order.popleft())
        else:
            return None
        if done is not None:
            self._handed += 1
            self._took_since_park = True
            if self._credit_lot:
                self._credit_lot.wake_one()
        return done

    async def next_done(self) -> Done[T, R]:
        while True:
            # No schedule point between taking a result and returning it: the
            # worker whose place that frees must not pull before the consumer
            # actually holds the result.
            await trio.lowlevel.checkpoint_if_cancelled()
            done = self._next_ready()
            if done is not None:
                return done
            if self._live == 0:
                raise StopAsyncIteration
            if self._took_since_park:
                # The consumer just freed places, so workers are about to run
                # and deliver: look once more before parking, which saves a
                # wake-up per batch when runs are short.
                self._took_since_park = False
                await trio.lowlevel.checkpoint()
                continue
            await self._consumer_lot.park()

    # -- the whole lifecycle ----------------------------------------------------

    async def finish(self, primary: BaseException | None) -> None:
        """Close the source and raise the failure that ended the stream, if any."""
        error = await self._close_source()
        failure = self._failure
        if failure is not None and (primary is None or isinstance(primary, trio.Cancelled)):
            if error is not None:
                failure.add_note(f"closing the source then also failed: {error!r}")
            raise failure
        if error is not None:
            if primary is not None:
                primary.add_note(f"sluicegate: closing the source also failed: {error!r}")
            else:
                raise error


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception to re-raise in place of the dispatcher nursery's group.

    Workers never raise run failures into the nursery, so the group holds
    cancellation, a ``KeyboardInterrupt`` (or other ``BaseException``) from a
    run, or what an ``open_stream`` consumer body raised. Each of those is
    re-raised as itself, untouched: a body that raises its own
    ``ExceptionGroup`` gets that group back. ``Cancelled`` only wins when
    nothing else is there, and a ``KeyboardInterrupt`` is never dropped in
    favour of an ordinary exception; anything else is kept as a note.
    """
    kept: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, trio.Cancelled):
            continue
        if isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None:
            continue
        kept.append(exc)
    if not kept:
        return _first_leaf(group)
    # A KeyboardInterrupt or SystemExit outranks an ordinary exception.
    kept.sort(key=lambda exc: isinstance(exc, Exception))
    first, others = kept[0], kept[1:]
    for other in others:
        first.add_note(f"sluicegate: also raised meanwhile: {other!r}")
    return first


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def run_stream(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[R]],
    *,
    window: int | None,
    drain: Drain | None = None,
    rate: Pacer | None = None,
    trace: Recorder | None = None,
) -> list[R]:
    """Run every item of ``source`` through ``run``, at most ``window`` at a time.

    The next item is pulled only when a place is free (the end-of-stream pull
    too), so a live feed is consumed no faster than it is processed.

    Args:
        source: An async iterable (a live feed, an async generator) or a sync
            iterable of items. A :class:`~sluicegate.SampleSource` works too.
        run: An async function called once per item.
        window: The most runs alive at once: an ``int >= 1``, or ``None`` for
            no bound.
        drain: Optional :class:`Drain`; requesting it stops admission and
            makes the call return what the in-flight runs produce.
        rate: Optional pacer (a :class:`~sluicegate.RateLimit`, or anything
            with ``async acquire()`` and ``refund()``) awaited before each
            pull; see :class:`Pacer`. One pacer may bound several streams.
        trace: Optional recorder (a :class:`~sluicegate.Timeline`) told of
            every pull, start, finish, drain, failure and close; see
            :class:`Recorder`.

    Returns:
        The results in submission (pull) order.

    Raises:
        TypeError: for a ``window`` that is not an int or None, a non-iterable
            ``source``, a non-callable ``run``, or a ``rate`` or ``trace``
            without the methods above, before the source is touched.
        ValueError: for a ``window`` below 1, before the source is touched.
        Exception: the first exception raised by a run or by the source, as
            itself, with a note naming the item index. Every other run is
            cancelled and has unwound, and the source is closed, before it
            propagates. Runs that failed meanwhile are listed in further notes.
    """
    _check_arguments(source, run, window, rate, trace)
    dispatch = _Dispatch(
        source, run, window, drain, collect=True, ordered=True, rate=rate, trace=trace
    )
    primary: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            dispatch.start(nursery)
    except BaseExceptionGroup as group:
        primary = _single(group)
    except BaseException as exc:
        primary = exc
    if primary is not None:
        dispatch._cut_short = True
    await dispatch.finish(primary)
    if primary is not None:
        raise primary
    return dispatch.results


class _Results(Generic[T, R]):
    """The async iterator :func:`open_stream` yields."""

    def __init__(self, dispatch: _Dispatch[T, R]) -> None:
        self._dispatch = dispatch

    def __aiter__(self) -> _Results[T, R]:
        return self

    def __anext__(self) -> Awaitable[Done[T, R]]:
        # Return the dispatcher's coroutine itself: one frame less per item.
        return self._dispatch.next_done()


@asynccontextmanager
async def open_stream(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[R]],
    *,
    window: int | None,
    ordered: bool = True,
    drain: Drain | None = None,
    rate: Pacer | None = None,
    trace: Recorder | None = None,
) -> AsyncIterator[AsyncIterator[Done[T, R]]]:
    """Run ``source`` through ``run`` and hand each result over as it is ready.

    Use as ``async with open_stream(source, run, window=8) as results:`` and
    iterate ``results``, a stream of :class:`Done`. A place in the window is
    freed only once its result has been handed to the consumer, so a slow
    consumer holds back new runs and memory stays bounded by ``window``.

    Leaving the block early (a ``break``, an exception in the body) cancels
    the remaining runs and closes the source; the body's exception
    propagates as itself.

    Args:
        source: As for :func:`run_stream`.
        run: As for :func:`run_stream`.
        window: As for :func:`run_stream`.
        ordered: Yield in submission order (default) or, if False, in
            completion order.
        drain: As for :func:`run_stream`.
        rate: As for :func:`run_stream`.
        trace: As for :func:`run_stream`.

    Yields:
        An async iterator of :class:`Done`, one per finished run.

    Raises:
        Exception: everything :func:`run_stream` raises, the same way.
    """
    _check_arguments(source, run, window, rate, trace)
    if not isinstance(ordered, bool):
        raise TypeError(f"ordered must be a bool, not {ordered!r}")
    dispatch = _Dispatch(
        source, run, window, drain, collect=False, ordered=ordered, rate=rate, trace=trace
    )
    primary: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            dispatch.start(nursery)
            try:
                yield _Results(dispatch)
            finally:
                # Leaving the block, however it happens, ends the runs.
                if dispatch._live:
                    dispatch._cut_short = True
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        primary = _single(group)
    except BaseException as exc:
        primary = exc
    if primary is not None:
        dispatch._cut_short = True
    await dispatch.finish(primary)
    if primary is not None:
        raise primary
