"""The one dispatcher: pull from a source through a bounded window of runs.

Everything else in sluicegate is built on :func:`run_stream` and
:func:`open_stream`. Both run a stream inside :func:`_open_block`, which
owns the seven invariants of docs/runner.md: the window, back-pressure,
order, fail-fast, close-out, drain and caller cancellation. A comment
``# invariant N`` marks each place that enforces one.

How it is laid out (docs/runner.md, "How it is built", says why). Every
stateful field says where it is declared who may change it and the
invariant it keeps (``# Written by:``, ``# Invariant:``); other objects go
through the owner's methods.

* :class:`_State` holds the counters every task of one stream reads, and
  :class:`_Ending`, the one record of how the stream is ending (what closed
  admission, the first failure, whether it was cut short). The objects
  below keep only what is theirs (the turn its waiters and places, a
  hand-over its results).
* :class:`_Turn` decides who pulls next: one task at a time, and for
  ``open_stream`` with an int window only while a place is free. It keeps
  the places a stream holds in a window object, and a drain cuts the pull
  in progress through it.
* Three ways to hand a finished run's value over: :class:`_AsReturned`
  gives it to a sink as the run returns (``run_stream``'s
  :class:`_ResultList`, or ``run_each``'s callback); :class:`_Ordered` and
  :class:`_Unordered` (both :class:`_ToConsumer`) keep it for the
  ``open_stream`` consumer, in pull order or in completion order.
* :class:`_Dispatcher` runs the workers: with a window, long-lived tasks
  that each take a place, pull an item, run it and loop (no task per item);
  with ``window=None``, one puller that gives each item a task of its own.
  With a window object (:class:`WindowLike`) the places are the object's.
* :class:`_StreamBlock` is the async context manager both fronts run in: it
  opens the nursery, and on the way out closes the source and decides what
  to raise. :func:`_open_block` checks the arguments and builds one.
"""

from __future__ import annotations

import inspect
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
)
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import (
    Any,
    Generic,
    Literal,
    NoReturn,
    Protocol,
    TypeVar,
    final,
    runtime_checkable,
)

import attrs
import trio

from ._asyncio import note_asyncio_on_trio, refuse_outside_trio
from ._checks import check_flag, check_text
from ._util import (
    as_async_iterator,
    close_source,
    logger,
    pace,
    sole_exception,
    surely_sync,
)

__all__ = [
    "CURRENT_INDEX",
    "CURRENT_WINDOW",
    "BindsRun",
    "Done",
    "Drain",
    "DrainStatistics",
    "Pacer",
    "PricedPacer",
    "Recorder",
    "open_stream",
    "report_failure",
    "run_each",
    "run_stream",
    "WindowLike",
    "check_stream_arguments",
    "mark_observed",
]

T = TypeVar("T")
R = TypeVar("R")

Run = Callable[[T], Awaitable[R]]
# How a stream hands its results over: _AsReturned, _Ordered or _Unordered.
H = TypeVar("H", bound="_AsReturned[Any, Any] | _ToConsumer[Any, Any]")


@final
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


@final
@attrs.frozen
class DrainStatistics:
    """What :meth:`Drain.statistics` returns: a snapshot, as trio's primitives give.

    Attributes:
        requested: Whether :meth:`Drain.request` has been called.
        reason: The reason given to the first request, or None.
        streams: Streams running with this drain now (each is told at once
            when the drain is requested).
        tasks_waiting: Tasks blocked in :meth:`Drain.wait`.
    """

    requested: bool
    reason: str | None
    streams: int
    tasks_waiting: int


class Drain:
    """A latch that asks a running stream to stop admitting work.

    Pass one to :func:`run_stream` or :func:`open_stream`. After
    :meth:`request`, no further item is pulled, the source is closed, the
    runs already in flight finish normally and the stream ends with what
    they produced. A drain stays requested; one object can be shared by
    several streams to drain them together.
    """

    def __init__(self) -> None:
        # Set once, by request(); what wait() blocks on.
        # Invariant: set exactly when _reason is not None.
        self._event = trio.Event()
        # Written by: request(), once.
        self._reason: str | None = None
        # The streams running with this drain, told at once when it is
        # requested, so that none of them pulls again after request() returns.
        # Written by: _subscribe() and _unsubscribe(), which each stream's
        # dispatcher calls as it starts and as it ends.
        self._streams: dict[Callable[[], None], None] = {}

    def request(self, reason: str = "drain requested") -> None:
        """Stop admission. Safe to call more than once; the first reason wins.

        Call it from trio code (a signal watcher task, say), not from another
        thread.

        Raises:
            TypeError: ``reason`` is not a str.
        """
        check_text(reason, "reason")
        if self._reason is not None:
            return
        self._reason = reason
        self._event.set()
        for stop in list(self._streams):
            stop()

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

    def statistics(self) -> DrainStatistics:
        """A frozen snapshot of the drain, for a metrics loop or a debugger."""
        return DrainStatistics(
            requested=self.requested,
            reason=self._reason,
            streams=len(self._streams),
            tasks_waiting=self._event.statistics().tasks_waiting,
        )

    def _subscribe(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` when the drain is requested: now, if it already is."""
        self._streams[stop] = None
        if self.requested:
            stop()

    def _unsubscribe(self, stop: Callable[[], None]) -> None:
        self._streams.pop(stop, None)

    def __repr__(self) -> str:
        state = f"requested: {self._reason!r}" if self.requested else "not requested"
        return f"<Drain {state}>"


@runtime_checkable
class BindsRun(Protocol):
    """A source that must see its own runs (a :class:`~sluicegate.SampleSource`).

    The dispatcher hands such a source the ``run`` it was given and two
    questions it may ask at any time, and uses the pair it returns instead:
    an async iterator of items and a ``run`` that wraps the original. This
    keeps the dispatcher unaware of what a dynamic source is, while letting
    the source learn when runs finish.

    ``admitting()`` is true while admission is open: false after the source
    ended, a drain was requested, a run failed or the stream was cut short.
    ``drained()`` is true once admission closed because of a drain, and
    stays false while no drain was requested, when the source ran out before
    the drain, and once a failure, an outside cancellation or a consumer
    leaving early has ended the stream: a source asks it when closed, to
    tell work a drain left unstarted from work a failure threw away. Both
    may be called from ``bind_run`` itself.
    """

    def bind_run(
        self, run: Any, /, *, admitting: Callable[[], bool], drained: Callable[[], bool]
    ) -> tuple[AsyncIterator[Any], Any]: ...


@runtime_checkable
class Pacer(Protocol):
    """A bound on how fast a stream starts items, passed as ``rate=`` (a ``RateLimit``).

    The dispatcher uses it twice per item, in the pulling worker's turn.
    Before each pull (the end-of-stream pull too) it awaits :meth:`acquire`
    and gives the token back at once with :meth:`refund`: a gate, so that no
    item leaves the source before one could start. With the item in hand it
    awaits :meth:`acquire` again, and the item starts in that instant (an
    item that runs in a task of its own, with ``window=None`` or after a
    drain, takes its token there). So the pacer's bound holds over starts,
    whatever the source does: a token taken before a pull that then waited
    on the source would be older than its start, and the burst refilled
    meanwhile would start on top of it. Every token not given back is spent
    on an item that started; if a failure ends the stream between an item's
    token and its start, the token is given back. An ``acquire()`` that a
    drain or a cancellation interrupts is not refunded: it must take nothing
    when it does not return. A drain ends a wait at the gate; an item that
    waits for its token when the drain comes runs once it has it, since
    nothing taken from the source is dropped.
    """

    async def acquire(self) -> None: ...

    def refund(self) -> None: ...


@runtime_checkable
class PricedPacer(Protocol):
    """A :class:`Pacer` that may price each item (a ``RateLimit(cost=...)``).

    ``cost`` is None when every start takes one unit: the pacer is then
    used as any :class:`Pacer`. Otherwise the units depend on the item, so
    the dispatcher awaits ``acquire(item)`` in the item's run instead, as it
    starts, while the run holds its window place; there is no gate and
    nothing is refunded, since the units are spent on an item that runs.
    """

    @property
    def cost(self) -> Callable[[Any], float] | None: ...

    async def acquire(self, item: Any = ..., /) -> None: ...

    def refund(self) -> None: ...


@runtime_checkable
class WindowLike(Protocol):
    """A window object passed as ``window=`` (a :class:`~sluicegate.Window`).

    Its places bound the runs alive; its size may change while streams run,
    and several streams may share it. The dispatcher takes a place before
    each pull (:meth:`acquire_nowait`, else :meth:`acquire`) and gives it
    back with exactly one :meth:`release`: when the run ends (``run_stream``),
    when the consumer has taken the result (``open_stream``), or at once for
    a pull that yields nothing to run. It calls :meth:`observe` once for
    every run that returned or raised (not for one cut by cancellation),
    with its duration on trio's clock. It reads :attr:`size` and
    :attr:`in_flight` to decide how many workers to keep, and calls
    :meth:`subscribe` with a callback for as long as a stream runs, so that a
    larger size starts runs at once, not only as places free: the window
    calls every subscribed callback, in the trio thread, each time its size
    grows, and forgets one on :meth:`unsubscribe`. ``acquire()`` must take
    nothing when it does not return.
    """

    @property
    def size(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    def acquire_nowait(self) -> bool: ...

    async def acquire(self) -> None: ...

    def release(self) -> None: ...

    def observe(self, elapsed: float, error: BaseException | None) -> None: ...

    def subscribe(self, grew: Callable[[], None]) -> None: ...

    def unsubscribe(self, grew: Callable[[], None]) -> None: ...


# The window object the current task's items run under, None for an int
# window: what sluicegate._window.current_window() reads. It lives here, below
# the policies, because the dispatcher sets it in each of its workers.
CURRENT_WINDOW: ContextVar[WindowLike | None] = ContextVar("sluicegate_window", default=None)


class _RunIndex:
    """The pull index of the item a dispatcher task runs: one per worker, rewritten per item.

    A ``ContextVar.set()`` per item copies the context's mapping and makes a
    token (about 1,350 instructions, 4% of a no-op item): the task sets its
    context variable to this once, and the item's index is an attribute store.
    """

    __slots__ = ("index", "observed")

    def __init__(self) -> None:
        # Invariant: the index of the item the owning task runs now, or ran
        # last; -1 before its first. Written by that task alone, as each run
        # starts (_Dispatcher._work, _Dispatcher._run_one).
        self.index = -1
        # Invariant: the window object already heard how the current run
        # ended, so the dispatcher tells it nothing more. Cleared by the
        # owning task as each run starts; set only by mark_observed(), from
        # inside the run.
        self.observed = False


_RUN_INDEX: ContextVar[_RunIndex | None] = ContextVar("sluicegate_index", default=None)


@final
class _CurrentIndex:
    """What :data:`CURRENT_INDEX` is: read with ``CURRENT_INDEX.get()``, like a context variable."""

    __slots__ = ()

    def get(self) -> int:
        """The pull index of the item the current task is running; -1 outside any run."""
        cell = _RUN_INDEX.get()
        return -1 if cell is None else cell.index


def mark_observed() -> None:
    """Say, from inside a run, that its window object has heard how the run ended.

    For a retry loop that told the window of the run's last failed attempt
    and hands that failure back as a value rather than raising it: the
    dispatcher, which sees the run return, must not tell the window that it
    succeeded. Outside any run it does nothing.
    """
    cell = _RUN_INDEX.get()
    if cell is not None:
        cell.observed = True


# The pull index of the item the current task is running: set by the
# dispatcher as each run starts, so the layers above (a service's labels, an
# evaluation's rows, a campaign's numbering) read the one number instead of
# counting pulls themselves. -1 outside any run. A task that a run starts in
# a nursery of its own reads the run's index; one it starts in a nursery
# from outside the run reads whatever its worker runs by then.
CURRENT_INDEX = _CurrentIndex()


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
    ``marked`` gets ``"drain"`` when a drain is requested, ``"failure"`` when
    the first failure is recorded and ``"close"`` once the source is closed.
    Methods must be quick and must not raise.

    A recorder may also have ``errored(index, error)``, called through
    :func:`report_failure` for every item that failed: by the dispatcher
    for each run that raised (not for one cut by cancellation), right after
    its ``finished``, and by the layers that catch failures inside their
    runs (``serve()``, ``evaluate()``, campaigns) for every item they count
    as failed, with the exception or its type name.
    """

    def pulled(self, index: int, item: object, /) -> None: ...

    def started(self, index: int, /) -> None: ...

    def finished(self, index: int, error: BaseException | None, /) -> None: ...

    def marked(self, what: str, /) -> None: ...


Source = AsyncIterable[T] | Iterable[T] | BindsRun


def report_failure(trace: object, index: int, error: BaseException | str) -> None:
    """Tell ``trace`` that item ``index`` failed, if it has the optional ``errored`` hook.

    The one place every layer reports a failed item to a :class:`Recorder`, so
    that a user's own recorder hears the same failures a ``Timeline`` does.
    """
    errored = getattr(trace, "errored", None)
    if errored is not None:
        errored(index, error)


def check_stream_arguments(
    source: object,
    run: object,
    window: object,
    rate: object,
    trace: object,
    drain: object = None,
) -> None:
    """Refuse bad arguments to a stream, before the source is touched.

    The one check behind :func:`run_stream`, :func:`open_stream` and
    :func:`run_each`, public for the layers that take the same arguments
    (``serve()``) so that they refuse them in the same words, up front.

    Raises:
        TypeError: a ``window``, ``run``, ``source``, ``drain``, ``rate`` or
            ``trace`` of the wrong kind.
        ValueError: a ``window`` below 1.
    """
    # invariant 1: a bad window is refused before the source is touched.
    # bool is an int subclass, but window=True is always a mistake; a class
    # has a Window's methods too, unbound: Window for Window(8) is a slip.
    window_object = not isinstance(window, type) and isinstance(window, WindowLike)
    if window is not None and not window_object:
        # The wording of sluicegate._checks, which has no word for a window object.
        takes = "an int >= 1, None or a sluicegate.Window"
        if isinstance(window, bool) or not isinstance(window, int):
            raise TypeError(f"window must be {takes}, not {window!r}")
        if window < 1:
            raise ValueError(f"window must be {takes}, not {window!r}")
    if not callable(run):
        raise TypeError(f"run must be an async callable, not {run!r}")
    if surely_sync(run):
        # Refused now: met at the first item, it would have run item 0 for
        # its side effect and then failed on awaiting a plain value.
        what = getattr(run, "__qualname__", None) or repr(run)
        raise TypeError(
            f"run must be an async function (async def, or a functools.partial of one), "
            f"not the plain function {what}"
        )
    if inspect.isasyncgenfunction(source) or inspect.isgeneratorfunction(source):
        # The generator function itself, not one of its generators: a slip
        # that would otherwise read as "not a function".
        name = getattr(source, "__qualname__", "feed")
        raise TypeError(
            f"source must be an iterable or async iterable, not the generator function "
            f"{name}: call it, {name}()"
        )
    if not isinstance(source, (AsyncIterable, Iterable, BindsRun)):
        raise TypeError(
            f"source must be an iterable or async iterable, not {type(source).__name__}"
        )
    if drain is not None and not isinstance(drain, Drain):
        raise TypeError(f"drain must be a sluicegate.Drain or None, not {drain!r}")
    # A class has the methods too, unbound: RateLimit for RateLimit(5) is a slip.
    if rate is not None and (isinstance(rate, type) or not isinstance(rate, Pacer)):
        raise TypeError(
            f"rate must be None or a pacer with async acquire() and refund() "
            f"(a sluicegate.RateLimit), not {rate!r}"
        )
    if trace is not None and (isinstance(trace, type) or not isinstance(trace, Recorder)):
        raise TypeError(
            f"trace must be None or a recorder with pulled(), started(), finished() and "
            f"marked() (a sluicegate.Timeline), not {trace!r}"
        )


# -- the shared state -------------------------------------------------------------


@attrs.define(eq=False)
class _Ending:
    """How a stream is ending: what closed admission, and whether it was cut short.

    Written only through its verbs: :meth:`close` and :meth:`fail` (the
    dispatcher) and :meth:`cut` (the dispatcher's close-out, and the stream
    block when the consumer leaves).
    """

    # None while admission is open (items are pulled); then what is ending the
    # stream: "end" (the source ran out) or "drain" (a drain closed
    # admission), then "cut" (an outside cancellation, or the consumer leaving
    # early, cut the stream short), then "failure" (a run or the source raised).
    # Invariant: it only moves on, to a later stage of that list. (invariants 4, 6)
    how: Literal["end", "drain", "cut", "failure"] | None = None
    # The first failure of a run or the source, raised as itself at the end,
    # and where it came from ("by the run of item 3"), for notes.
    # Invariant: set once, exactly when how is "failure". (invariant 4)
    failure: BaseException | None = None
    where: str = ""

    @property
    def admitting(self) -> bool:
        """Items may still be pulled. (invariants 4, 6)"""
        return self.how is None

    @property
    def drained(self) -> bool:
        """A drain closed admission, and nothing cut the stream short since."""
        return self.how == "drain"

    def close(self, why: Literal["end", "drain"]) -> bool:
        """Admission closes for ``why`` unless it already has; say whether it did now."""
        if self.how is None:
            self.how = why
            return True
        return False

    def cut(self) -> None:
        """An outside cancellation or the consumer leaving cut the stream short."""
        if self.how != "failure":
            self.how = "cut"

    def fail(self, exc: BaseException, where: str) -> bool:
        """Record a failure; say whether it is the first. (invariant 4)"""
        if self.failure is not None:
            return False
        self.how = "failure"
        self.failure = exc
        self.where = where
        return True


@attrs.define(eq=False)
class _State:
    """The counters every task of one stream reads; each field names its one writer.

    "The dispatcher" is :class:`_Dispatcher`; the other objects change a
    field only through its owner's verbs.
    """

    # The most runs alive at once, or None for no bound (or a window object).
    # Never changes. (invariant 1)
    window: int | None
    # Items taken from the source so far: the index the next one gets.
    # Written by: the dispatcher's workers, while holding the pull turn (_work).
    # Invariant: an open_stream with an int window keeps
    # pulled <= handed + window (invariant 2); indices follow pull order (invariant 3).
    pulled: int = 0
    # Results the open_stream consumer has taken.
    # Written by: _ToConsumer.__anext__, the consumer.
    # Invariant: handed <= pulled. (invariant 2)
    handed: int = 0
    # How the stream is ending; while it says nothing, admission is open.
    # Written by: its own verbs. (invariants 4, 5, 6)
    ending: _Ending = attrs.Factory(lambda: _Ending())
    # Tasks that can still produce a result: workers, and runs in a task of
    # their own.
    # Written by: the dispatcher's _spawn() and _exited().
    # Invariant: live >= 0, and once it drops to 0 the stream is over. (invariants 2, 6)
    live: int = 0
    # Workers started so far, less those that left a window object that shrank.
    # Written by: the dispatcher's _add_worker(), and _work() as a worker leaves.
    # Invariant: workers <= window for an int window. (invariant 1)
    workers: int = 0
    # Whether the source has been closed, and what closing it raised, raised
    # (or noted) at close-out, after the runs: a drain's close failing must
    # not cut them.
    # Written by: the dispatcher's _close(), once. (invariants 5, 6)
    closed: bool = False
    close_error: BaseException | None = None


class _Turn:
    """Who pulls next, and with which place: one task at a time, while a place is free.

    The source is touched only by the task holding the turn (async
    generators allow no more), and taking the turn is cheap when nobody else
    holds it: a flag, not a lock, since ``trio.Lock`` always checkpoints. A
    task takes it with :meth:`take` (or :meth:`wait_alone`) and gives it up
    with :meth:`leave`, in a ``finally``. (Not a ``with`` block: on CPython
    3.11 a context manager written in Python costs about 1,700 instructions
    more per item than the call, 5% of a no-op item; docs/performance.md.)
    With a window object the turn also keeps the places the stream holds,
    and frees them: as runs end, or for ``open_stream`` as the consumer
    takes results (:meth:`result_taken`).
    """

    __slots__ = (
        "busy",
        "cut",
        "for_place",
        "held",
        "limit",
        "placeless",
        "places",
        "queue",
        "queued",
        "scope",
        "state",
        "waking",
    )

    def __init__(self, state: _State, limit: int | None, places: WindowLike | None) -> None:
        self.state = state
        # open_stream's int window: pulls may run at most this far ahead of the
        # results handed over; None where the worker pool bounds them already
        # (run_stream) or nothing does (window=None). Never changes. (invariant 2)
        self.limit = limit
        # A window object, whose places bound the pulls instead. Never changes.
        self.places = places
        # Places of the window object this stream holds.
        # Written by: took_place() and give_back().
        # Invariant: 0 <= held, and every place is given back once: held is 0
        # when the stream has ended. (invariants 1, 2)
        self.held = 0
        # A task holds the turn.
        # Written by: take(), wait_alone() and leave().
        # Invariant: one task at most holds it, and only that task touches
        # the source. (invariant 2)
        self.busy = False
        # The cancel scope of the task holding the turn: a drain cancels it to
        # cut that task's wait on the source or the pacer. Each worker owns one
        # scope for its whole life: a scope per pull would cost more than the
        # rest of the pull.
        # Written by: take() and leave().
        # Invariant: None unless busy (and None for the drain's closer).
        self.scope: trio.CancelScope | None = None
        # The scope a drain cut: an item that arrives under it anyway is run in
        # a task of its own, not dropped.
        # Written by: cut_pull(). (invariant 6)
        self.cut: trio.CancelScope | None = None
        # Tasks waiting for the turn, and tasks that found no free place (with
        # a window object: all but the one waiting in the window).
        # Written by: their park() (by the waiting task) and unpark().
        self.queue = trio.lowlevel.ParkingLot()
        self.for_place = trio.lowlevel.ParkingLot()
        # The tasks in each of the two waits, counted by the waiting task
        # around its park, so that it counts a task woken (or cancelled)
        # until that task runs again: while a count is 0 its lot is empty,
        # and the turn, left once per item, asks the lot nothing (a lot's
        # emptiness is a Python call).
        # Written by: the waiting task (wait(), wait_alone(), wait_for_place()).
        # Invariant: queued >= len(queue) >= 0 and placeless >= len(for_place) >= 0.
        self.queued = 0
        self.placeless = 0
        # A task woken from for_place has not run yet: places freed meanwhile
        # wait for it, or for a worker whose run ends, rather than each waking
        # a task of its own (see wake_for_place).
        # Written by: wake_for_place(), pass_on(), result_taken() and the woken
        # task (wait(), wait_for_place()).
        # Invariant: while true, one task woken from for_place has yet to run. (invariant 2)
        self.waking = False

    # -- the turn -----------------------------------------------------------------

    def take(self, scope: trio.CancelScope) -> bool:
        """Take the turn if it is free and a place is too; False if not.

        ``scope`` is the taker's long-lived cancel scope, which a drain
        cancels (:meth:`cut_pull`) to cut a wait on the source or the pacer.
        """
        if self.busy:
            return False
        limit = self.limit
        if limit is not None and self.state.pulled >= self.state.handed + limit:
            return False  # invariant 2
        self.busy = True
        self.scope = scope
        return True

    async def wait(self) -> None:
        """Wait in the right queue after :meth:`take` said no; then try again."""
        if self.busy:
            self.queued += 1
            try:
                await self.queue.park()
            finally:
                self.queued -= 1
        else:
            # What wait_for_place() does, without a coroutine of its own.
            self.placeless += 1
            try:
                await self.for_place.park()
                self.waking = False
            finally:
                self.placeless -= 1

    async def wait_alone(self) -> None:
        """Take the turn without a place or a scope: to close the source, not to pull."""
        while self.busy:
            self.queued += 1
            try:
                await self.queue.park()
            finally:
                self.queued -= 1
        self.busy = True

    def leave(self) -> None:
        """Give the turn up: to the next task waiting for it, and pass a wake-up on."""
        self.busy = False
        self.scope = None
        if self.queued:
            self.queue.unpark()
        if self.placeless:
            self.pass_on()

    def cut_pull(self) -> None:
        """Cancel the wait of whoever is pulling now. (invariant 6)"""
        if self.scope is not None:
            self.cut = self.scope
            self.scope.cancel()

    @property
    def idle(self) -> bool:
        """Nobody is waiting to pull."""
        return not (self.queued and self.queue) and not (self.placeless and self.for_place)

    # -- places -------------------------------------------------------------------

    async def wait_for_place(self) -> None:
        """Wait until a task that frees a place passes a wake-up on (:meth:`pass_on`)."""
        self.placeless += 1
        try:
            await self.for_place.park()
            self.waking = False
        finally:
            self.placeless -= 1

    def wake_for_place(self) -> None:
        """Places were freed: wake one task waiting for one, unless one is already woken.

        The woken task pulls, and wakes the next while places are left
        (:meth:`pass_on`, when it leaves the turn); meanwhile a worker whose
        run ends takes a free place without parking at all. So the places a
        consumer frees in one go share one wake-up instead of costing one
        each.
        """
        if self.placeless and not self.waking:
            self.waking = bool(self.for_place.unpark())

    def pass_on(self) -> None:
        """Wake a task waiting for a place if one is free, or if admission is over.

        Admission over, the waiters must leave, each waking the next.
        (invariant 2)
        """
        if not self.placeless:
            return
        state = self.state
        places = self.places
        if state.ending.how is not None:
            pass
        elif places is not None:
            if places.in_flight >= places.size:
                return
        elif self.limit is not None and state.pulled >= state.handed + self.limit:
            return
        if not self.waking:
            self.waking = bool(self.for_place.unpark())

    def took_place(self) -> None:
        """A place of the window object was taken for this stream."""
        self.held += 1

    def give_back(self) -> None:
        """Give one place back to the window object. (invariants 1, 2)"""
        self.held -= 1
        assert self.held >= 0, "a place was given back twice"
        self.places.release()  # type: ignore[union-attr]

    def give_all_back(self) -> None:
        """The stream is over: give back the places results nobody took, or runs cut short, held.

        The window outlives this stream. (invariant 1)
        """
        while self.held:
            self.give_back()

    def result_taken(self) -> None:
        """The open_stream consumer took a result: its place is free. (invariant 2)"""
        if self.places is not None:
            self.give_back()
            self.pass_on()
        elif self.placeless and not self.waking:
            # One more may pull: what wake_for_place() does, without a call per item.
            self.waking = bool(self.for_place.unpark())


# -- handing results over: three ways -----------------------------------------------


class _AsReturned(Generic[T, R]):
    """run_stream and run_each: each value goes to a sink as its run returns.

    The run's place frees at once (the worker that ran it pulls again), so
    the worker pool alone bounds the pulls. ``run_stream``'s sink is a
    :class:`_ResultList`; ``run_each``'s is the caller's callback, after which
    the value is dropped and memory stays O(window) however long the stream
    runs (a service journals each result inside its run).
    """

    limit = None  # the worker pool bounds the pulls by itself (invariant 2)

    def __init__(self, state: _State, sink: Callable[[int, T, R], None]) -> None:
        self.state = state
        self.keep = sink

    def bind(self, turn: _Turn) -> None:
        pass  # a place frees as its run returns: the dispatcher sees to it

    def ended(self) -> None:
        pass


class _ResultList(Generic[R]):
    """run_stream's sink: each value at its pull index, returned as a list at the end."""

    __slots__ = ("results",)

    def __init__(self) -> None:
        # Written by: keep(), as each run returns.
        # Invariant: results[i] is item i's value once its run has returned. (invariant 3)
        self.results: list[Any] = []

    def keep(self, index: int, item: object, value: R) -> None:
        results = self.results
        if index == len(results):
            results.append(value)  # invariant 3
        elif index < len(results):
            results[index] = value
        else:
            results.extend([None] * (index - len(results)))
            results.append(value)


def _drop(index: int, item: object, value: object) -> None:
    pass


class _ToConsumer(Generic[T, R]):
    """open_stream: results wait for the consumer, each holding its place until taken.

    A place is freed only when the consumer has the result in hand, so a
    slow consumer stops new pulls and memory stays O(window). (invariant 2)
    This object is the async iterator the consumer gets. Results wait in
    ``ready`` under the rank in which the consumer is to get them: the
    ``handed``-th result handed over is ``ready[handed]``. The two
    subclasses differ only in the rank a finished run gets.
    """

    def __init__(self, state: _State) -> None:
        self.state = state
        # Pulls may run this far ahead of the results handed over. Never
        # changes. (invariant 2)
        self.limit = state.window
        # The turn whose places a hand-over frees.
        # Written by: bind(), once, by the dispatcher serving this hand-over.
        self._turn: _Turn | None = None
        # Finished runs not handed over yet, by rank.
        # Written by: keep() (the workers, as runs return) and __anext__ (the
        # consumer, as it takes one).
        # Invariant: at most window of them. (invariants 2, 3)
        self.ready: dict[int, Done[T, R]] = {}
        # Consumers waiting for the next result (one, unless the consumer
        # shares the iterator between tasks), and how many of them are in
        # __anext__'s wait, woken or not yet back: while it is 0 a kept result
        # wakes nobody without asking the lot (a Python call, once per item).
        # Written by: their park() in __anext__, and keep()/ended() waking them;
        # waiting by __anext__, around the park.
        # Invariant: waiting >= len(consumers) >= 0.
        self.consumers = trio.lowlevel.ParkingLot()
        self.waiting = 0
        # The consumer freed places since it last parked (see __anext__).
        # Written by: __anext__.
        self._took = False
        # The async with block has been left: a result read now would be one
        # that finished as the stream was being torn down.
        # Written by: left(), once, by the stream block.
        self._left = False

    def bind(self, turn: _Turn) -> None:
        """Hand over for the stream ``turn`` admits: a result taken frees its place there."""
        self._turn = turn

    def left(self) -> None:
        """The async with block was left: reading results is an error from now on."""
        self._left = True

    def keep(self, index: int, item: T, value: R) -> None:
        raise NotImplementedError

    def ended(self) -> None:
        """Nothing will be kept any more: let every waiting consumer see the end."""
        self.consumers.unpark_all()

    def __aiter__(self) -> _ToConsumer[T, R]:
        return self

    async def __anext__(self) -> Done[T, R]:
        state = self.state
        turn = self._turn
        assert turn is not None
        if self._left:
            raise RuntimeError(
                "the results of open_stream(...) can be read only inside its async with block"
            )
        while True:
            # A cancelled consumer gets no more results; otherwise there is no
            # schedule point between taking a result and returning it: the
            # worker whose place that frees must not pull before the consumer
            # actually holds the result (invariant 2).
            await trio.lowlevel.checkpoint_if_cancelled()
            done = self.ready.pop(state.handed, None)
            if done is not None:
                state.handed += 1
                self._took = True
                turn.result_taken()
                return done
            if state.live == 0:
                raise StopAsyncIteration
            if self._took:
                # The consumer just freed places, so workers are about to run
                # and deliver: look once more before parking, which saves a
                # wake-up per batch when runs are short.
                self._took = False
                await trio.lowlevel.checkpoint()
                continue
            self.waiting += 1
            try:
                await self.consumers.park()
            finally:
                self.waiting -= 1


class _Ordered(_ToConsumer[T, R]):
    """open_stream(ordered=True): a result's rank is its pull index. (invariant 3)"""

    def keep(self, index: int, item: T, value: R) -> None:
        self.ready[index] = Done(index, item, value)
        if self.waiting and index == self.state.handed:
            self.consumers.unpark()


class _Unordered(_ToConsumer[T, R]):
    """open_stream(ordered=False): a result's rank is when its run finished. (invariant 3)"""

    def __init__(self, state: _State) -> None:
        super().__init__(state)
        # Runs finished so far: the rank the next finished run gets.
        # Written by: keep().
        self._finished = 0

    def keep(self, index: int, item: T, value: R) -> None:
        self.ready[self._finished] = Done(index, item, value)
        self._finished += 1
        if self.waiting:
            self.consumers.unpark()


# -- the dispatcher -----------------------------------------------------------------


class _Dispatcher(Generic[T, R]):
    """One run of the dispatcher: its workers, its source and its close-out.

    Runs record their own failure instead of raising it into the nursery, so
    the nursery never has to be unpicked from an ``ExceptionGroup``: the first
    failure cancels the nursery's scope and is re-raised as itself afterwards.
    """

    def __init__(
        self,
        source: Source[T],
        run: Run[T, R],
        handover: _AsReturned[T, R] | _ToConsumer[T, R],
        *,
        places: WindowLike | None,
        drain: Drain | None,
        rate: Pacer | None,
        trace: Recorder | None,
    ) -> None:
        # What the stream's tasks share, and the two mechanisms built on it.
        self.state = state = handover.state
        self.handover = handover
        # A window object, or None for an int window or none. (invariant 1)
        self.places = places
        self.turn = _Turn(state, handover.limit, places)
        handover.bind(self.turn)
        # Whether a run's place waits for the consumer to take its result.
        self._held_until_taken = isinstance(handover, _ToConsumer)
        # The cancel scopes of the workers waiting for a place of the window
        # object: the end of admission ends their wait.
        # Written by: _take_place(), around that wait.
        # Invariant: one at most; the stream's other workers wait in the
        # turn for the wake-up it passes on. (invariants 4, 6)
        self._seeking: dict[trio.CancelScope, None] = {}
        # The caller's options, each None when not given (and then free).
        # Never change.
        self._drain = drain
        self._rate = rate
        self._trace = trace
        # Where workers, runs of their own and the drain's closer run.
        # Written by: start(), once.
        self._nursery: trio.Nursery | None = None
        if isinstance(source, BindsRun):
            # The source may hold work of its own (a buffer of follow-ups):
            # it asks whether admission is still open before handing any out.
            source, run = source.bind_run(run, admitting=self._admitting, drained=self._drained)
        self._run = run
        # The source, as exactly one of the two; never changes. Only the
        # turn's holder touches it (invariant 2), and _close closes it
        # (invariant 5).
        self._aiter: AsyncIterator[T] | None = None
        self._iter: Iterator[T] | None = None
        if isinstance(source, AsyncIterable):
            self._aiter = as_async_iterator(source)
        else:
            self._iter = iter(source)

    # -- what a bound source may ask --------------------------------------------

    def _admitting(self) -> bool:
        return self.state.ending.admitting

    def _drained(self) -> bool:
        return self.state.ending.drained

    # -- admission ----------------------------------------------------------------

    def _stop_admitting(self, why: Literal["end", "drain"]) -> None:
        if self.state.ending.close(why):  # invariants 4, 6
            self._end_waits_for_places()

    def _end_waits_for_places(self) -> None:
        """Admission closed: workers waiting for a place of the window object stop."""
        for scope in self._seeking:
            scope.cancel()
        self.turn.pass_on()

    def _on_drain(self) -> None:
        """The drain was requested: :class:`Drain` calls this at once, in the requesting task.

        The whole drain protocol: admission closes now, so no pull starts
        after ``request()`` returns; then a task of its own cuts the pull
        still waiting on the source or the pacer, if any, and closes the
        source as soon as it gets the turn, while the runs in flight go on.
        (invariant 6)
        """
        if self._trace is not None:
            self._trace.marked("drain")
        self._stop_admitting("drain")
        if self.state.live:
            # With nothing left running the stream is over, and its nursery
            # may be closed: close-out will close the source.
            assert self._nursery is not None
            self._nursery.start_soon(self._close_for_drain)

    async def _close_for_drain(self) -> None:
        """Close the source for a drain, in the turn: never mid-pull. (invariants 5, 6)"""
        # Cancelled as well (from outside, or by a failure)? Then close-out
        # closes the source, and not as a drain.
        await trio.lowlevel.checkpoint_if_cancelled()
        # A pull that completes in the instant the drain was requested
        # completes, and its item runs; one still waiting is cut.
        turn = self.turn
        turn.cut_pull()
        await turn.wait_alone()
        try:
            await self._close()
        finally:
            turn.leave()
        # A failure to close is no failure of the work: the runs in flight
        # still finish (invariant 6), and close-out raises it afterwards.
        if self.state.close_error is not None:
            self.state.close_error.add_note(
                "sluicegate: raised while closing the source for a drain"
            )

    def _fail(self, exc: BaseException, where: str) -> None:
        """Record a failure of a run or of the source. (invariant 4)"""
        ending = self.state.ending
        if ending.fail(exc, where):
            exc.add_note(f"sluicegate: raised {where}")
            note_asyncio_on_trio(exc)
            self._end_waits_for_places()
            if self._trace is not None:
                self._trace.marked("failure")
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
        elif exc is not ending.failure:
            # Runs that fail before the cancellation reaches them are kept as
            # notes on the first failure: nothing is dropped silently, and the
            # caller still gets one exception of the type it can catch.
            assert ending.failure is not None
            ending.failure.add_note(f"raised {where}, also failed: {exc!r}")

    # -- places -------------------------------------------------------------------

    async def _take_place(self, scope: trio.CancelScope) -> bool:
        """Take a place of the window object before pulling; False once admission is over.

        The place comes before the pull, the end-of-stream pull too.
        ``scope`` is the worker's own, which the end of admission cancels
        while it waits in the window. (invariant 2)
        """
        places = self.places
        assert places is not None
        turn = self.turn
        while not places.acquire_nowait():
            if self.state.ending.how is not None:
                turn.pass_on()
                return False
            if self._seeking:
                # One worker of this stream waits in the window; the rest
                # wait here for the wake-up passed on (_Turn.pass_on).
                await turn.wait_for_place()
                continue
            self._seeking[scope] = None
            try:
                await places.acquire()
            finally:
                del self._seeking[scope]
            break
        if not self._seeking:
            # Whoever waits here needs one of them to wait in the window: the
            # places other streams free go to the window's waiters, and the
            # stream must keep its turn among them.
            turn.wake_for_place()
        turn.took_place()
        return True

    # -- running ------------------------------------------------------------------

    def _ran(self, elapsed: float, error: BaseException | None, observed: bool = False) -> None:
        """A run under a window object returned or raised: free its place, tell the window.

        ``observed``: the window heard how it ended already (mark_observed()).
        """
        places = self.places
        assert places is not None
        if error is not None or not self._held_until_taken:
            self.turn.give_back()  # else the consumer frees it (invariant 2)
        if not observed and (error is None or not isinstance(error, trio.Cancelled)):
            places.observe(elapsed, error)

    def _on_grow(self) -> None:
        """The window object grew: start a worker if nobody of this stream waits to pull.

        Workers waiting for a place get the new places from the window itself;
        this covers a stream whose workers are all running. (invariant 1)
        """
        state = self.state
        places = self.places
        assert places is not None
        turn = self.turn
        if turn.for_place:
            turn.pass_on()  # a worker waiting for a place takes one
            return
        if (
            state.ending.how is None
            and state.live
            and not self._seeking
            and not turn.busy
            and turn.idle
            and state.workers < places.size
        ):
            self._add_worker()

    def _add_worker(self) -> None:
        """Start one more worker. (invariant 1)"""
        state = self.state
        state.workers += 1
        assert state.window is None or state.workers <= state.window
        self._spawn(self._work)

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        assert self._nursery is not None
        self.state.live += 1
        self._nursery.start_soon(fn, *args)

    def _exited(self) -> None:
        """A worker, or a run in a task of its own, is gone."""
        state = self.state
        state.live -= 1
        assert state.live >= 0
        if state.live == 0:
            # Nothing will produce again: every waiting consumer must see the end.
            self.handover.ended()

    def _ended_badly(self, index: int, exc: BaseException) -> None:
        """A run raised: the one place that tells the recorder and records a failure."""
        trace = self._trace
        if trace is not None:
            trace.finished(index, exc)
            if not isinstance(exc, trio.Cancelled):
                report_failure(trace, index, exc)
        if isinstance(exc, Exception):
            self._fail(exc, f"by the run of item {index}")

    async def _work(self) -> None:
        """One worker: take a place and the turn, pull, run, hand over; until admission ends.

        With a window each worker runs its items itself, and the pool grows
        by one whenever a worker finds nobody waiting to pull after it: up to
        an int window, or while a window object has free places (a worker
        leaves when the pool is larger than its size). With ``window=None``
        the one worker only pulls, and gives each item a task of its own.
        Any way the pull yields no item to run (admission over, the end of
        the source, a failure, a drain cutting it), the worker leaves.

        The pull is written out here, not in a method of its own: a coroutine
        call costs about 1,300 instructions, 4% of a no-op item.
        """
        state = self.state
        ending = state.ending
        turn = self.turn
        run = self._run
        keep = self.handover.keep
        window = state.window
        places = self.places
        trace = self._trace
        rate = self._rate
        # Whether this worker runs the items it pulls; with window=None each
        # item runs in a task of its own.
        runs_here = window is not None or places is not None
        source = self._iter
        feed = self._aiter
        passes = 0
        began = 0.0
        # The clock's own method, fetched once: trio.current_time() looks the
        # clock up on every call. Only a window object is told durations.
        now = trio.lowlevel.current_clock().current_time
        # What current_window() answers in the runs of this worker.
        CURRENT_WINDOW.set(places)
        # What CURRENT_INDEX answers in the runs of this worker.
        running = _RunIndex()
        _RUN_INDEX.set(running)
        try:
            with trio.CancelScope() as scope:
                # This scope is the one a drain cancels (through the turn) to
                # cut this worker's wait on the source or the pacer.
                while True:
                    # Runs that shield themselves or swallow Cancelled must not
                    # keep a cancelled worker pulling (invariant 7); a source
                    # and runs that never block must still let the scheduler in.
                    passes += 1
                    await pace(passes)
                    # A place of the window object taken and not spent on an item yet.
                    place = False
                    if places is not None:
                        if not await self._take_place(scope):
                            return
                        place = True
                    try:
                        while not turn.take(scope):
                            await turn.wait()  # invariant 2
                    except BaseException:
                        if place:
                            turn.give_back()
                        raise
                    # The pull, in the turn.
                    try:
                        if ending.how is not None:
                            return  # invariants 4, 6
                        if rate is not None:
                            # The gate: no item leaves the source before one
                            # could start. The token goes back at once; the item
                            # takes its own as it starts, below. (Pacer)
                            try:
                                await rate.acquire()
                            except Exception as exc:
                                where = f"by the rate pacer before pulling item {state.pulled}"
                                self._fail(exc, where)
                                return
                            rate.refund()
                            if ending.how is not None:
                                return
                        index = state.pulled
                        if source is not None:
                            try:
                                item = next(source)
                            except StopIteration:
                                self._stop_admitting("end")
                                return
                        else:
                            try:
                                item = await anext(feed)  # type: ignore[arg-type]
                            except StopAsyncIteration:
                                self._stop_admitting("end")
                                return
                        if ending.failure is not None:
                            # The item arrived in the same instant as a run
                            # failed: nothing starts after a failure. (invariant 4)
                            return
                        state.pulled = index + 1
                        if trace is not None:
                            trace.pulled(index, item)
                        # The item's token, taken in the instant it starts: one
                        # taken before a pull that waited on the source would be
                        # older than the start, and the burst the pacer refilled
                        # meanwhile would start on top of it. An item that runs
                        # in a task of its own takes it there. (Pacer)
                        due = rate is not None
                        if rate is not None and runs_here and turn.cut is not scope:
                            try:
                                await rate.acquire()
                            except Exception as exc:
                                self._fail(exc, f"by the rate pacer before item {index} started")
                                return
                            except BaseException:
                                if turn.cut is scope:
                                    # A drain cut the wait for the token: the
                                    # item runs all the same, once its own task
                                    # has one. (invariant 6)
                                    place = False
                                    self._spawn(self._run_one, index, item, True)
                                raise
                            due = False
                            if ending.failure is not None:
                                rate.refund()
                                return  # invariant 4
                        place = False
                        if turn.cut is scope:
                            # A drain cut this pull, but the item had already
                            # arrived. Taken from the source, it must run, yet
                            # not under the cancelled scope: it gets a task of
                            # its own. (invariant 6)
                            self._spawn(self._run_one, index, item, due)
                            return
                    except Exception as exc:
                        self._fail(exc, f"by the source while pulling item {state.pulled}")
                        return
                    finally:
                        if place:
                            turn.give_back()
                        turn.leave()
                    # The run.
                    if places is not None:
                        # Grow while places are free; the window object bounds
                        # the runs, the size the workers. (invariant 1)
                        if (
                            state.workers < places.size
                            and places.in_flight < places.size
                            and turn.idle
                        ):
                            self._add_worker()
                        began = now()
                    elif window is None:
                        self._spawn(self._run_one, index, item, due)
                        continue
                    elif state.workers < window and turn.idle:
                        self._add_worker()
                    running.index = index
                    running.observed = False
                    if trace is not None:
                        trace.started(index)
                    try:
                        value = await run(item)
                    except BaseException as exc:
                        if places is not None:
                            self._ran(now() - began, exc)
                        self._ended_badly(index, exc)
                        if isinstance(exc, Exception):
                            return
                        raise
                    if trace is not None:
                        trace.finished(index, None)
                    if places is not None:
                        self._ran(now() - began, None, running.observed)
                        keep(index, item, value)
                        if state.workers > places.size:
                            # The window shrank: this worker is one too many.
                            state.workers -= 1
                            return
                        continue
                    keep(index, item, value)
        finally:
            self._exited()

    async def _run_one(self, index: int, item: T, due: bool = False) -> None:
        """Run one item in a task of its own (``window=None``, or an item a drain cut).

        ``due``: the item has no token of the pacer yet; it takes one here, in
        the instant it starts (see :meth:`_work`).
        """
        try:
            if self.state.ending.failure is not None:
                return  # spawned before a failure, first scheduled after it (invariant 4)
            await trio.lowlevel.checkpoint_if_cancelled()  # invariant 7
            if due:
                assert self._rate is not None
                try:
                    await self._rate.acquire()
                except Exception as exc:
                    # Recorded, not raised into the nursery, like a run's.
                    self._fail(exc, f"by the rate pacer before item {index} started")
                    return
                if self.state.ending.failure is not None:
                    self._rate.refund()
                    return  # invariant 4
            running = _RunIndex()
            running.index = index
            _RUN_INDEX.set(running)
            if self._trace is not None:
                self._trace.started(index)
            now = trio.current_time
            began = now() if self.places is not None else 0.0
            try:
                value = await self._run(item)
            except BaseException as exc:
                if self.places is not None:
                    self._ran(now() - began, exc)
                self._ended_badly(index, exc)
                if isinstance(exc, Exception):
                    return
                raise
            if self._trace is not None:
                self._trace.finished(index, None)
            if self.places is not None:
                self._ran(now() - began, None, running.observed)
            self.handover.keep(index, item, value)
        finally:
            self._exited()

    # -- the lifecycle --------------------------------------------------------------

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        if self._drain is not None:
            # A drain requested already closes admission before any pull.
            self._drain._subscribe(self._on_drain)
        if self.places is not None:
            self.places.subscribe(self._on_grow)
        # One worker to start with; with a window, each adds another when it
        # finds nobody waiting to pull after it, up to the window. A large
        # window over a short source then costs nothing up front.
        self._add_worker()

    def stop(self) -> None:
        """The stream is over: a later drain request must not reach it."""
        if self._drain is not None:
            self._drain._unsubscribe(self._on_drain)
        if self.places is not None:
            self.places.unsubscribe(self._on_grow)
            self.turn.give_all_back()  # invariant 1

    async def _close(self) -> None:
        """Close the source, once; keep what closing raised for close-out. (invariant 5)"""
        state = self.state
        if state.closed:
            return
        state.closed = True
        try:
            await close_source(self._aiter if self._aiter is not None else self._iter)
        except Exception as exc:
            state.close_error = exc
        finally:
            if self._trace is not None:
                self._trace.marked("close")

    async def close_out(self, primary: BaseException | None) -> BaseException | None:
        """Close the source and decide what the stream raises; None for nothing.

        ``primary`` is what ended the nursery, if anything: a cancellation,
        the consumer body's own exception or a ``KeyboardInterrupt``.

        One place decides, so that every failure is either raised or named in
        a note on what is raised (invariant 4):

        * a recorded failure is raised as itself unless something stronger
          ended the stream (the body's exception, a ``KeyboardInterrupt``);
          then it is named in a note on that;
        * a failure to close the source is raised if nothing else is, noted
          on what is raised otherwise, and logged if that is a cancellation,
          which a cancel scope will swallow along with its notes.
        """
        ending = self.state.ending
        if primary is not None:
            ending.cut()
        await self._close()  # invariant 5
        close_error = self.state.close_error
        failure = ending.failure
        raised = primary
        if failure is not None and (primary is None or isinstance(primary, trio.Cancelled)):
            raised = failure  # invariant 4
        elif failure is not None and failure is not primary:
            assert primary is not None
            primary.add_note(f"sluicegate: meanwhile {failure!r} was raised {ending.where}")
        if close_error is None:
            return raised
        if raised is None:
            return close_error
        raised.add_note(f"sluicegate: closing the source also failed: {close_error!r}")
        if isinstance(raised, trio.Cancelled):
            logger.error(
                "sluicegate: closing the source failed while the stream was being cancelled",
                exc_info=close_error,
            )
        return raised


class _StreamBlock(Generic[H]):
    """The async context manager a stream runs in, for both fronts.

    Entering starts the workers in a nursery of its own and gives the
    hand-over: ``run_stream`` reads its sink at the end,
    ``open_stream``'s consumer iterates it. Leaving waits for the workers
    (``open_stream``'s consumer leaving cancels them first), closes the
    source and raises what :meth:`_Dispatcher.close_out` decides, as itself.
    A class, not an ``@asynccontextmanager`` generator, because a generator
    may not raise a run's ``StopAsyncIteration`` (invariant 4).
    """

    def __init__(
        self, handover: H, setup: Callable[[H], _Dispatcher[Any, Any]], *, stop_on_exit: bool
    ) -> None:
        # What the block was built with. Never change.
        self._handover = handover
        self._setup = setup
        self._stop_on_exit = stop_on_exit
        self._nursery_manager = trio.open_nursery()
        # The nursery and the dispatcher of the one stream this block runs.
        # Written by: __aenter__, once.
        # Invariant: set before any worker starts; a block is entered once.
        self._nursery: trio.Nursery | None = None
        self._dispatch: _Dispatcher[Any, Any] | None = None

    def __await__(self) -> Generator[Any, None, NoReturn]:
        # `await open_stream(...)` would fail with Python's own words, which
        # do not say what to write instead.
        raise TypeError(
            "open_stream(...) is an async context manager, not a coroutine: write "
            "`async with open_stream(...) as results:` and iterate `results`"
        )

    async def __aenter__(self) -> H:
        if self._dispatch is not None:
            # A second block over the same stream would share its iterator
            # and its nursery with the first: trio cannot unpick that.
            raise RuntimeError(
                "open_stream(...) can be entered only once; call open_stream() again "
                "for another stream"
            )
        # The source is first touched here (bound, or asked for its iterator).
        self._dispatch = dispatch = self._setup(self._handover)
        self._nursery = await self._nursery_manager.__aenter__()
        try:
            dispatch.start(self._nursery)
        except BaseException:
            # Leave the nursery we entered, or trio's own state is corrupted.
            self._nursery.cancel_scope.cancel()
            await self._nursery_manager.__aexit__(None, None, None)
            raise
        return self._handover

    async def __aexit__(
        self,
        etype: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        dispatch = self._dispatch
        assert dispatch is not None and self._nursery is not None
        if isinstance(self._handover, _ToConsumer):
            self._handover.left()
        if self._stop_on_exit:
            # The consumer left: leaving, however it happens, ends the runs.
            if dispatch.state.live:
                dispatch.state.ending.cut()
            self._nursery.cancel_scope.cancel()
        primary: BaseException | None = None
        try:
            if not await self._nursery_manager.__aexit__(etype, exc, tb):
                primary = exc
        except BaseExceptionGroup as group:
            primary = sole_exception(group)  # invariant 4: as itself, not in a group
        except BaseException as error:
            primary = error
        finally:
            dispatch.stop()
        raised = await dispatch.close_out(primary)
        if raised is None:
            return True
        if raised is exc:
            return False
        raise raised


def _fixed(window: object) -> int | None:
    """The int bound of ``window``, or None for no bound or a window object."""
    return window if isinstance(window, int) else None  # checked by check_stream_arguments


def _priced(run: Run[T, R], rate: Pacer) -> Run[T, R]:
    """``run`` that first takes ``rate``'s units for its item (``acquire(item)``)."""
    acquire: Callable[[T], Awaitable[None]] = rate.acquire  # type: ignore[assignment]

    async def priced(item: T) -> R:
        await acquire(item)
        return await run(item)

    return priced


def _open_block(
    source: Source[T],
    run: Run[T, R],
    handover: H,
    *,
    window: int | WindowLike | None,
    drain: Drain | None,
    rate: Pacer | None,
    trace: Recorder | None,
) -> _StreamBlock[H]:
    """Check the arguments now, before the source is touched; start the stream on entry."""
    refuse_outside_trio()
    check_stream_arguments(source, run, window, rate, trace, drain)
    if isinstance(rate, PricedPacer) and rate.cost is not None:
        # A pacer that prices each item (RateLimit(cost=...)) needs the item,
        # which the pull before it has not got yet: such a limit is taken in
        # the run, with the item, while the run holds its window place.
        run, rate = _priced(run, rate), None

    def setup(handover: H) -> _Dispatcher[T, R]:
        places = None if window is None or isinstance(window, int) else window
        return _Dispatcher(
            source, run, handover, places=places, drain=drain, rate=rate, trace=trace
        )

    return _StreamBlock(handover, setup, stop_on_exit=isinstance(handover, _ToConsumer))


async def run_stream(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[R]],
    *,
    window: int | WindowLike | None,
    drain: Drain | None = None,
    rate: Pacer | None = None,
    trace: Recorder | None = None,
) -> list[R]:
    """Run every item of ``source`` through ``run``, at most ``window`` at a time.

    The next item is pulled only when a place is free (the end-of-stream pull
    too), so a live feed is consumed no faster than it is processed.

    Args:
        source: An async iterable (a live feed, an async generator, a trio
            memory receive channel) or a sync iterable of items. A
            :class:`~sluicegate.SampleSource` works too.
        run: An async function called once per item.
        window: The most runs alive at once: an ``int >= 1``, ``None`` for
            no bound, or a :class:`~sluicegate.Window` whose size may change
            while the stream runs and which other streams may share (see
            :class:`WindowLike`).
        drain: Optional :class:`Drain`; requesting it stops admission and
            makes the call return what the in-flight runs produce.
        rate: Optional pacer (a :class:`~sluicegate.RateLimit`, or anything
            with ``async acquire()`` and ``refund()``) that each item's start
            waits for; see :class:`Pacer`. One pacer may bound several streams.
        trace: Optional recorder (a :class:`~sluicegate.Timeline`) told of
            every pull, start, finish, drain, failure and close; see
            :class:`Recorder`.

    Returns:
        The results in submission (pull) order.

    Raises:
        TypeError: for a ``window`` that is not an int, None or a window
            object, a non-iterable ``source``, a ``run`` that is not an async
            callable, or a ``rate`` or ``trace`` without the methods above,
            before the source is touched.
        ValueError: for a ``window`` below 1, before the source is touched.
        TimeoutError: the source's ``aclose()`` did not finish within 10
            seconds (see docs/runner.md, "Close-out").
        Exception: the first exception raised by a run or by the source, as
            itself, with a note naming the item index. Every other run is
            cancelled and has unwound, and the source is closed, before it
            propagates. Runs that failed meanwhile are listed in further notes.
    """
    results: _ResultList[R] = _ResultList()
    collect: _AsReturned[T, R] = _AsReturned(_State(_fixed(window)), results.keep)
    async with _open_block(
        source, run, collect, window=window, drain=drain, rate=rate, trace=trace
    ):
        pass
    return results.results


async def run_each(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[R]],
    *,
    window: int | WindowLike | None,
    each: Callable[[int, T, R], None] | None = None,
    drain: Drain | None = None,
    rate: Pacer | None = None,
    trace: Recorder | None = None,
) -> None:
    """:func:`run_stream` for a stream that never ends: no result is kept.

    What ``serve()`` runs on. Each run's value goes to ``each(index, item,
    value)``, called in the run's task as the run returns (it must be quick
    and must not raise), and is then dropped; the run's place frees at once.
    Everything else is :func:`run_stream`'s: the window, back-pressure,
    fail-fast, close-out, drain and cancellation.

    Raises:
        Exception: as :func:`run_stream`.
    """
    each_: _AsReturned[T, R] = _AsReturned(_State(_fixed(window)), each or _drop)
    async with _open_block(source, run, each_, window=window, drain=drain, rate=rate, trace=trace):
        pass


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

    Returns:
        An async context manager; entering it starts the stream and gives an
        async iterator of :class:`Done`, one per finished run.

    Raises:
        TypeError: for a non-bool ``ordered``, and everything
            :func:`run_stream` raises for bad arguments, when called.
        Exception: everything else :func:`run_stream` raises, the same way,
            when the block is left.
    """
    check_flag(ordered, "ordered")
    state = _State(_fixed(window))
    handover: _ToConsumer[T, R] = _Ordered(state) if ordered else _Unordered(state)
    return _open_block(source, run, handover, window=window, drain=drain, rate=rate, trace=trace)
