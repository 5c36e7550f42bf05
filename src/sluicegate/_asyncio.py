"""Hosting sluicegate on a running asyncio loop, and telling the two fronts apart.

There is one dispatcher, and it runs on trio. From asyncio it runs in trio's
guest mode (:func:`trio.lowlevel.start_guest_run`): a trio run whose ticks
are callbacks of the asyncio loop, on the loop's own thread. What runs on
asyncio is the user's code: each ``run`` call, each pull of an asyncio async
source and each hook of a dynamic source is an asyncio task, started from
the trio task that awaits it and waking that task when it is done.

* :func:`host` awaits a trio function from asyncio code. Every call on one
  loop shares one guest run (:class:`_Guest`), started by the first and
  ended by the last, so a stream started inside a run of another stream
  runs in the same trio run. Cancelling the asyncio caller cancels the trio
  call, waits for it to unwind and raises the caller's ``CancelledError``.
* :func:`on_asyncio` turns an asyncio coroutine function into one trio can
  await; :class:`AsyncioIterator` does the same for an async iterable.
  Each call runs as an asyncio task in a copy of the calling trio task's
  context (so context variables, ``sluicegate.enqueue()`` among them, reach
  it), outside trio's ticks (so ``sniffio`` says ``"asyncio"``). A trio
  cancellation cancels the task and waits for it, but no longer than
  :data:`CANCEL_GRACE`: a task that ignores its cancellation is logged and
  left running, not waited for forever.
* :func:`user_loop` says whether the user's code runs on asyncio here: in
  asyncio code, and in trio code hosted for it (an evaluation hosted by
  :func:`hosting_user_code`). :func:`bridged` then reads a user's async
  iterable on asyncio, unless it is trio code of sluicegate's own
  (:func:`mark_trio_code`): a live taskset's views and ``take()`` wrap the
  user's feed in trio code, and only the feed itself runs on asyncio.
* :class:`AsyncioContext` holds an asyncio async context manager open for a
  trio block, in one asyncio task from its enter to its exit.
* :func:`open_signal_receiver` is trio's, or, in a guest run hosted here,
  the same through the loop's own ``add_signal_handler`` (the guest run
  leaves the wakeup fd to asyncio).
* :func:`refuse_outside_trio` and :func:`note_asyncio_on_trio` are the trio
  front's two checks: the first refuses a stream started with no trio run
  (``asyncio.run(sluicegate.run_stream(...))``), the second names the
  asyncio front on the failure of asyncio code run on trio.

This module is below the runner, which calls those two checks, so that the
layers above it (the ``aio`` front, and an evaluation hosted on asyncio) can
share the hosting. It imports :mod:`asyncio` only when hosting starts:
``import sluicegate`` does not load it.

Trio documents that its synchronous functions (``reschedule``, a cancel
scope's ``cancel()``, ``spawn_system_task``) may be called from the host
loop's thread while a guest run is alive; the asyncio side of this module
calls nothing else of trio.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import signal
import sys
import threading
import types
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import outcome
import trio

from ._util import ChannelSource, in_background, logger

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "CANCEL_GRACE",
    "AsyncioContext",
    "AsyncioIterator",
    "FailureLatch",
    "Hosted",
    "awaiting_on_asyncio",
    "bridged",
    "host",
    "hosting_user_code",
    "is_trio_code",
    "keep_ticking",
    "mark_trio_code",
    "note_asyncio_on_trio",
    "on_asyncio",
    "open_signal_receiver",
    "refuse_outside_asyncio",
    "refuse_outside_trio",
    "start_hosted",
    "user_loop",
]

T = TypeVar("T")
R = TypeVar("R")

# Seconds (of the loop's clock) a cancelled asyncio task is given to finish
# before its trio caller stops waiting for it. Cancelling the asyncio task that
# awaits a stream must return within a second of the runs' cancellation, even
# when a run ignores it (docs/asyncio.md, "Cancellation").
CANCEL_GRACE = 0.5

# Trio ticks a guest run makes after asyncio work started or ended, before it
# may wait for the host in its thread (see _Guest.keep_ticking). One halves
# what an asyncio source's pull and an open_stream result cost; more gain
# nothing (docs/performance.md, "From asyncio").
_TICKS = 1

_TRIO_DIRECTORY = os.path.dirname(trio.__file__) + os.sep


# -- telling the fronts apart ---------------------------------------------------------


def refuse_outside_trio() -> None:
    """Raise a one-line :exc:`RuntimeError` naming ``sluicegate.aio`` if no trio task runs here.

    The trio front calls this first: awaited from asyncio (``asyncio.run(
    sluicegate.run_stream(...))``, or from a run of ``sluicegate.aio``), it
    would otherwise fail deep inside trio.
    """
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        pass
    else:
        return
    if _asyncio_running():
        raise RuntimeError(
            "sluicegate.run_stream and open_stream run on trio, and this is asyncio: "
            "use sluicegate.aio.run_stream / sluicegate.aio.open_stream, which run the same "
            "stream on the running asyncio loop"
        )
    raise RuntimeError(
        "sluicegate.run_stream and open_stream must be awaited inside trio (trio.run); "
        "from asyncio, use sluicegate.aio.run_stream / sluicegate.aio.open_stream"
    )


def refuse_outside_asyncio(name: str, other: str) -> None:
    """Raise a one-line :exc:`RuntimeError` if ``name`` is awaited where no asyncio loop runs.

    Args:
        name: The asyncio function called, as the user spells it.
        other: Its trio namesake, named in the error.
    """
    if _asyncio_running():
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return
        # A trio task of a guest run: trio code, though a loop runs beneath it.
    raise RuntimeError(
        f"{name} runs on asyncio (asyncio.run, a running event loop), and this is not "
        f"an asyncio task: inside trio, use {other}"
    )


def _asyncio_running() -> bool:
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _raised_in(exc: BaseException, directory: str) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is a file under ``directory``."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.startswith(directory)


def note_asyncio_on_trio(exc: BaseException) -> None:
    """Name the asyncio front on ``exc`` if it is asyncio code failing on trio.

    The runner calls this on the first failure of a run or of the source. The
    signatures: asyncio's ``no running event loop``, trio's ``unrecognized
    yield message``, and an error raised inside :mod:`asyncio` itself.
    """
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or not isinstance(exc, RuntimeError | TypeError | AttributeError):
        return  # no asyncio code has even been imported
    message = str(exc)
    if not (
        message == "no running event loop"
        or "unrecognized yield message" in message
        or _raised_in(exc, os.path.dirname(asyncio.__file__ or "") + os.sep)
    ):
        return
    exc.add_note(
        "sluicegate: this looks like asyncio code running on trio; sluicegate.run_stream "
        "runs on trio, so from asyncio use sluicegate.aio.run_stream / sluicegate.aio.open_stream"
    )


def _note_trio_on_asyncio(exc: BaseException, what: str) -> None:
    """Name the trio front on ``exc`` if it is trio code failing in an asyncio task."""
    if isinstance(exc, RuntimeError | TypeError | AttributeError) and _raised_in(
        exc, _TRIO_DIRECTORY
    ):
        exc.add_note(
            f"sluicegate.aio: this looks like trio code, but sluicegate.aio calls {what} in an "
            "asyncio task; hand trio code to sluicegate.run_stream / sluicegate.open_stream"
        )


def _asyncio() -> types.ModuleType:
    """:mod:`asyncio`, imported when first needed (``import sluicegate`` does not load it)."""
    import asyncio

    return asyncio


# -- the guest run ----------------------------------------------------------------------


class _LoopClock(trio.abc.Clock):
    """Trio's clock in a guest run: the asyncio loop's own, so both agree on every deadline."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._time = loop.time

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self._time()

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return deadline - self._time()


# The guest run of this thread's asyncio loop, if any: trio keeps its run in a
# thread-local too, so there is at most one per thread.
_local = threading.local()


class _Guest:
    """The trio guest run on one asyncio loop, shared by the calls hosted on it.

    Started by the first call, it ends once no call is left: its main task
    waits for that and returns. A call that comes while it is ending waits
    for the end and starts a new run.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # Calls hosted and not finished. Written by spawn() and _release() only.
        # Invariant: once it drops to 0 the run is ending (closing is true) and
        # takes no call.
        self.calls = 0
        self.closing = False
        # Set by _release() when calls drops to 0: the main task then returns.
        self._empty = trio.Event()
        # The run's outcome, once it has ended; written by _done() only.
        self.ended: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
        # Ticks the ticker task still makes before it parks (see keep_ticking),
        # and the ticker itself while it is parked. Written by keep_ticking()
        # and _tick() only.
        self._ticks = 0
        self._ticker: trio.lowlevel.Task | None = None
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=self._done,
            # asyncio's signal handling (loop.add_signal_handler) owns the
            # wakeup fd; trio must not take it over.
            host_uses_signal_set_wakeup_fd=True,
            clock=_LoopClock(loop),
        )

    async def _main(self) -> None:
        # A Ctrl-C that trio delivers here (its handler is installed when
        # nothing else handles SIGINT) ends the run, and comes out as itself.
        async with in_background(self._tick):
            await self._empty.wait()

    def keep_ticking(self) -> None:
        """A trio task started an asyncio task, or was woken by one: tick a few times more.

        With nothing to run, a guest run waits for the host in a thread of
        its own, and waking it from there costs two thread switches. Right
        after asyncio work started or ended, more is likely within a pass or
        two of the loop: the ticker stays runnable for :data:`_TICKS` more
        ticks, so trio ticks between asyncio's passes instead.
        """
        self._ticks = _TICKS
        ticker = self._ticker
        if ticker is not None:
            self._ticker = None
            trio.lowlevel.reschedule(ticker)

    async def _tick(self) -> None:
        while True:
            if self._ticks:
                self._ticks -= 1
                await trio.lowlevel.checkpoint()
                continue
            self._ticker = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                self._ticker = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)

    def _done(self, run: outcome.Outcome[None]) -> None:
        if getattr(_local, "guest", None) is self:
            _local.guest = None
        if not self.ended.done():
            self.ended.set_result(run)

    def spawn(self, fn: Callable[..., Awaitable[R]], args: tuple[Any, ...]) -> Hosted[R]:
        hosted: Hosted[R] = Hosted(self)
        self.calls += 1
        try:
            # A system task, started from the loop's thread as trio allows in
            # a guest run; it runs in a copy of the caller's context, as an
            # asyncio task would.
            trio.lowlevel.spawn_system_task(
                self._job,
                hosted,
                fn,
                args,
                name=getattr(fn, "__qualname__", repr(fn)),
                context=contextvars.copy_context(),
            )
        except BaseException:
            self._release()
            raise
        return hosted

    @trio.lowlevel.disable_ki_protection
    async def _job(
        self, hosted: Hosted[R], fn: Callable[..., Awaitable[R]], args: tuple[Any, ...]
    ) -> None:
        try:
            with trio.CancelScope() as hosted.scope:
                if hosted.cancel_requested:
                    hosted.scope.cancel()
                result = await outcome.acapture(fn, *args)
            hosted.finish(result)
        finally:
            self._release()

    def _release(self) -> None:
        self.calls -= 1
        if self.calls == 0:
            self.closing = True
            self._empty.set()


class Hosted(Generic[R]):
    """A trio call hosted by :func:`start_hosted`, seen from asyncio.

    Its trio task owns :attr:`scope` and resolves the future; the asyncio
    side only reads them, and cancels through :meth:`cancel`.
    """

    def __init__(self, guest: _Guest) -> None:
        self._guest = guest
        # Resolved with the call's outcome when its trio task ends.
        self.future: asyncio.Future[outcome.Outcome[R]] = guest.loop.create_future()
        # The trio task's cancel scope, once it has started.
        self.scope: trio.CancelScope | None = None
        # The asyncio side asked for the call to be cancelled.
        self.cancel_requested = False
        # The CancelledError of the asyncio caller, if it was cancelled while waiting.
        self.caller_cancelled: BaseException | None = None

    def finish(self, result: outcome.Outcome[R]) -> None:
        if not self.future.done():
            self.future.set_result(result)

    def cancel(self) -> None:
        """Cancel the trio call (from the loop's thread); it then unwinds as trio code does."""
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel()

    async def until(self, other: asyncio.Future[Any]) -> bool:
        """Wait, from asyncio, until ``other`` is done (True) or the call has ended (False).

        A cancellation of the waiting task cancels the call, which is then
        waited for, and is remembered in :attr:`caller_cancelled`.
        """
        asyncio = _asyncio()
        while not other.done() and not self.future.done():
            try:
                await asyncio.wait((other, self.future), return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError as exc:
                if self.caller_cancelled is None:
                    self.caller_cancelled = exc
                self.cancel()
        return other.done()

    async def wait(self) -> outcome.Outcome[R]:
        """Wait for the call to end and return its outcome; cancellation as for :meth:`until`.

        The last call of a guest run also waits for the run to end, so that
        nothing of trio is left on the thread once it returns.
        """
        asyncio = _asyncio()
        await self.until(self.future)
        guest = self._guest
        if guest.closing:
            try:
                await asyncio.shield(guest.ended)
            except asyncio.CancelledError as exc:
                if self.caller_cancelled is None:
                    self.caller_cancelled = exc
                await asyncio.wait((guest.ended,))
        return self.future.result()

    async def result(self) -> R:
        """Wait for the call to end and return what it returned, or raise what it raised.

        Raises:
            asyncio.CancelledError: the waiting task was cancelled, and the
                call ended by that cancellation (or returned meanwhile).
            BaseException: what the call raised, as itself (a failure wins
                over the caller's cancellation, as it does on trio).
        """
        result = await self.wait()
        if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
            result = self.unhosted(result)
        if self.caller_cancelled is not None and isinstance(result, outcome.Value):
            raise self.caller_cancelled
        return result.unwrap()

    def unhosted(self, cancelled: outcome.Error) -> outcome.Outcome[R]:
        """What the caller gets for a call that ended in trio's ``Cancelled``: never that."""
        if self.caller_cancelled is not None:
            return outcome.Error(self.caller_cancelled)
        ended = self._guest.ended
        if ended.done():
            run = ended.result()
            if isinstance(run, outcome.Error):
                return outcome.Error(run.error)  # the run itself died (Ctrl-C)
        return outcome.Error(
            RuntimeError("sluicegate.aio: the trio run hosting this call was cancelled")
        )


def keep_ticking() -> None:
    """Something asyncio is about to answer was just handed over: see :meth:`_Guest.keep_ticking`.

    Call it from trio code of the guest run.
    """
    _local.guest.keep_ticking()


async def start_hosted(fn: Callable[..., Awaitable[R]], *args: Any) -> Hosted[R]:
    """Start ``fn(*args)`` in the trio guest run of the running asyncio loop; awaited from asyncio.

    Starts the guest run if none is alive, and waits first for one that is
    ending.

    Raises:
        RuntimeError: a trio run that is not this loop's guest run holds the
            thread (another loop's guest run that never ended, or trio.run).
    """
    asyncio = _asyncio()
    loop = asyncio.get_running_loop()
    while True:
        guest: _Guest | None = getattr(_local, "guest", None)
        if guest is None:
            try:
                guest = _local.guest = _Guest(loop)
            except RuntimeError as exc:
                exc.add_note(
                    "sluicegate.aio: a trio run already holds this thread (trio.run, or the "
                    "guest run of another asyncio loop that never ended)"
                )
                raise
            break
        if guest.loop is not loop:
            raise RuntimeError(
                "sluicegate.aio: the trio guest run of another asyncio loop is still alive in "
                "this thread; it ends when its last stream does"
            )
        if not guest.closing:
            break
        await asyncio.shield(guest.ended)
    return guest.spawn(fn, args)


async def host(fn: Callable[..., Awaitable[R]], *args: Any) -> R:
    """Await the trio function ``fn(*args)`` from asyncio code, in the loop's guest run.

    Returns:
        What ``fn`` returned.

    Raises:
        asyncio.CancelledError: the caller was cancelled; ``fn`` was
            cancelled and has unwound.
        BaseException: what ``fn`` raised, as itself.
    """
    hosted = await start_hosted(fn, *args)
    return await hosted.result()


# -- asyncio code awaited from trio -------------------------------------------------------


class _Waiting:
    """One asyncio task a trio task waits for: the asyncio side wakes the trio side, once."""

    __slots__ = ("cut", "given_up", "guest", "task", "timer", "trio_task", "what", "woken")

    def __init__(self, guest: _Guest, what: str) -> None:
        self.guest = guest
        self.trio_task = trio.lowlevel.current_task()
        self.what = what
        self.task: asyncio.Task[Any] | None = None
        # The trio task has been rescheduled (or the asyncio task left running).
        self.woken = False
        # trio's raise_cancel, once trio asked the asyncio task to stop.
        self.cut: Callable[[], None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        # The grace ran out: the trio task went on without the asyncio task.
        self.given_up = False

    def wake(self) -> None:
        """The asyncio task is ending: wake the trio task (the task's last step calls this)."""
        if self.woken:
            if self.given_up:
                logger.warning("sluicegate.aio: %s ended after it was left running", self.what)
            return
        self.woken = True
        if self.timer is not None:
            self.timer.cancel()
        self.guest.keep_ticking()
        trio.lowlevel.reschedule(self.trio_task)

    def done(self, _: object) -> None:
        """A done callback: wakes the trio task of an asyncio task cancelled before it started."""
        self.wake()

    def abort(self, raise_cancel: Callable[[], None]) -> trio.lowlevel.Abort:
        """Trio cancels the waiting task: cancel the asyncio task, and wait for it a while."""
        task = self.task
        assert task is not None
        self.cut = raise_cancel
        if task.done():
            # Cancelled by someone else before its first step: it never ran,
            # so nothing will wake the trio task.
            self.woken = True
            return trio.lowlevel.Abort.SUCCEEDED
        task.cancel()
        # A task cancelled before its first step ends without running a line of it.
        task.add_done_callback(self.done)
        self.timer = task.get_loop().call_later(CANCEL_GRACE, self.give_up)
        return trio.lowlevel.Abort.FAILED  # wake() reschedules, or give_up()

    def give_up(self) -> None:
        if self.woken:
            return
        self.woken = self.given_up = True
        logger.error(
            "sluicegate.aio: %s ignored its cancellation for %g s; it is left running and the "
            "stream goes on without it: %r",
            self.what,
            CANCEL_GRACE,
            self.task,
        )
        assert self.cut is not None
        trio.lowlevel.reschedule(self.trio_task, outcome.capture(self.cut))


class FailureLatch:
    """Tripped by the first failure of a call bridged under it: later calls do not start.

    A failure on asyncio reaches the dispatcher only at trio's next tick;
    meanwhile tasks already started for other calls get their first step.
    Under a latch those steps start nothing: the call then waits for the
    cancellation the failure brings. Only for calls whose failure surely
    ends the stream (a plain stream's runs and pulls), never where trio
    code catches it (a retry).
    """

    __slots__ = ("tripped",)

    def __init__(self) -> None:
        self.tripped = False


_SKIPPED: Any = object()


async def _then_wake(
    waiting: _Waiting,
    fn: Callable[..., Awaitable[R]],
    args: tuple[Any, ...],
    latch: FailureLatch | None,
) -> R:
    """The asyncio task of one call: ``fn(*args)``, then wake the trio task waiting for it.

    Waking from the task's last step rather than from a done callback saves
    a pass of the asyncio loop: the trio task runs in the trio tick after it.
    """
    try:
        if latch is None:
            return await fn(*args)
        if latch.tripped:
            return _SKIPPED  # type: ignore[no-any-return]
        try:
            return await fn(*args)
        except Exception:
            latch.tripped = True
            raise
    finally:
        waiting.wake()


def on_asyncio(
    fn: Callable[..., Awaitable[R]],
    loop: asyncio.AbstractEventLoop,
    what: str = "the run",
    latch: FailureLatch | None = None,
) -> Callable[..., Awaitable[R]]:
    """``fn`` as a trio async function: each call runs ``fn(*args)`` as a task of ``loop``.

    The task runs in a copy of the calling trio task's context. The call
    returns what the task returned and raises what it raised, as itself
    (with a note naming the trio front if it looks like trio code). If the
    calling trio task is cancelled, the asyncio task is cancelled and waited
    for, for at most :data:`CANCEL_GRACE` seconds; then the call raises
    trio's ``Cancelled``. Must be called in the loop's guest run.

    Args:
        fn: An asyncio coroutine function (or any callable returning an awaitable).
        loop: The running asyncio loop hosting the trio run.
        what: What ``fn`` is, for the note and the log (``"the run"``).
        latch: Trip it on a failure, and start nothing once it is tripped
            (see :class:`FailureLatch`).
    """
    aio = _asyncio()
    Task = aio.Task
    CancelledError = aio.CancelledError
    copy_context = contextvars.copy_context
    wait = trio.lowlevel.wait_task_rescheduled

    async def call(*args: Any) -> R:
        guest: _Guest = _local.guest
        waiting = _Waiting(guest, what)
        # asyncio.Task rather than loop.create_task: a task factory could
        # start it eagerly, inside trio's tick, where sniffio says "trio".
        task: asyncio.Task[R] = Task(
            _then_wake(waiting, fn, args, latch), loop=loop, context=copy_context()
        )
        waiting.task = task
        guest.keep_ticking()
        await wait(waiting.abort)
        try:
            result = task.result()
        except CancelledError:
            if waiting.cut is not None:
                waiting.cut()  # trio's Cancelled: trio asked for this one
            raise
        except BaseException as exc:
            _note_trio_on_asyncio(exc, what)
            raise
        if result is _SKIPPED:
            # Another call failed first: its failure, on its way to the
            # dispatcher, cancels this one.
            await trio.sleep_forever()
        return result

    return call


_END: Any = object()


async def _next_or_end(iterator: AsyncIterator[T]) -> T:
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return _END  # type: ignore[no-any-return]


class AsyncioIterator(Generic[T]):
    """An async iterable of asyncio code, read by trio: each pull and the close run on asyncio.

    ``aiter(source)`` is taken at the first ``aiter()`` of this object, as the
    runner does after checking its arguments; each ``__anext__`` and
    ``aclose()`` of the source is an asyncio task (see :func:`on_asyncio`).
    Must be used in the loop's guest run.
    """

    def __init__(
        self,
        source: AsyncIterable[T],
        loop: asyncio.AbstractEventLoop,
        latch: FailureLatch | None = None,
    ) -> None:
        self._source = source
        self._iterator: AsyncIterator[T] | None = None
        self._next: Callable[[AsyncIterator[T]], Awaitable[T]] = on_asyncio(
            _next_or_end, loop, "the source's __anext__", latch
        )
        self._loop = loop
        self._closed = False

    def __aiter__(self) -> AsyncioIterator[T]:
        if self._iterator is None:
            self._iterator = aiter(self._source)
        return self

    async def __anext__(self) -> T:
        if self._iterator is None:
            self._iterator = aiter(self._source)
        item = await self._next(self._iterator)
        if item is _END:
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        """Close the source once, on asyncio (``aclose()``, else a plain ``close()``)."""
        if self._closed:
            return
        self._closed = True
        iterator = self._iterator if self._iterator is not None else self._source
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await on_asyncio(aclose, self._loop, "the source's aclose")()
            return
        close = getattr(iterator, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return f"<{self._source!r}, read on asyncio>"


# -- where the user's code runs -------------------------------------------------------------

# The loop the user's code runs on, for trio code hosted for it (an evaluation
# of an asyncio environment). Set by hosting_user_code() only, on the asyncio
# side; the trio calls it hosts inherit it with the rest of the context.
_user_code_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "sluicegate_asyncio_user_code", default=None
)


def user_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio loop the user's code runs on here, or None where it runs on trio.

    That is the running loop in asyncio code (no trio task here), and the
    loop of :func:`hosting_user_code` in trio code it hosts; None anywhere
    else, a trio run included.
    """
    loop = _user_code_loop.get()
    if loop is not None:
        return loop
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        pass
    else:
        return None
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.get_running_loop()  # type: ignore[no-any-return]
    except RuntimeError:
        return None


@contextlib.contextmanager
def hosting_user_code() -> Iterator[asyncio.AbstractEventLoop]:
    """In this block (asyncio code), the trio calls hosted run the user's code on this loop.

    :func:`user_loop` says so in them: their trio code reads the user's
    feeds through :func:`bridged`, and bridges the user's functions.
    """
    loop = _asyncio().get_running_loop()
    token = _user_code_loop.set(loop)
    try:
        yield loop
    finally:
        _user_code_loop.reset(token)


# Classes, and the code of async generator functions, that are trio code of
# sluicegate's own: an async iterable of them is read in trio on either front.
# Added to by mark_trio_code() only, as the modules defining them are imported.
_trio_kinds: tuple[type, ...] = ()
_trio_code: set[types.CodeType] = set()


def mark_trio_code(*kinds: type | types.CodeType) -> None:
    """Declare classes (or an async generator function's ``__code__``) as sluicegate's trio code.

    An async iterable of them is read by the dispatcher as it is, on the
    asyncio front too: it wraps the user's feed (itself bridged) rather
    than being the user's code.
    """
    global _trio_kinds
    for kind in kinds:
        if isinstance(kind, types.CodeType):
            _trio_code.add(kind)
        else:
            _trio_kinds = (*_trio_kinds, kind)


def is_trio_code(source: object) -> bool:
    """Whether ``source`` is an async iterable of trio code (see :func:`mark_trio_code`)."""
    return isinstance(source, _trio_kinds) or getattr(source, "ag_code", None) in _trio_code


def bridged(source: AsyncIterable[T]) -> AsyncIterable[T]:
    """``source`` as trio code reads it here: on asyncio where the user's code runs there.

    Where :func:`user_loop` is a loop and ``source`` is not sluicegate's own
    trio code, an :class:`AsyncioIterator`; otherwise ``source`` itself. The
    trio code that pulls a user's feed (``take()``, a taskset's views, a
    ``FeedTaskset``) reads it through this, so it runs on either front.
    """
    loop = user_loop()
    if loop is None or is_trio_code(source):
        return source
    return AsyncioIterator(source, loop)


# -- an asyncio context manager, held for a trio block ------------------------------------


async def _awaited(awaitable: Awaitable[R]) -> R:
    return await awaitable


def awaiting_on_asyncio(
    fn: Callable[..., Any], loop: asyncio.AbstractEventLoop, what: str
) -> Callable[..., Any]:
    """``fn``, plain or ``async``, as trio calls it: an awaitable it returns runs on asyncio.

    Each call calls ``fn`` as it is; when it returns an awaitable (an
    ``async def`` was called), the call returns a trio awaitable that awaits
    it as an asyncio task (see :func:`on_asyncio`). For a callback a trio
    caller awaits only when it returns an awaitable: an evaluation's
    ``score``, ``serve()``'s ``on_stats``.
    """
    awaited = on_asyncio(_awaited, loop, what)

    def call(*args: Any) -> Any:
        value = fn(*args)
        if inspect.isawaitable(value):
            return awaited(value)
        return value

    return call


async def _ended(task: asyncio.Task[R], what: str) -> R:
    """Wait, from trio, for an asyncio task already started; what it returned, or raised.

    A trio cancellation cancels it and waits for it as :func:`on_asyncio`
    does (no longer than :data:`CANCEL_GRACE`).
    """
    if not task.done():
        waiting = _Waiting(_local.guest, what)
        waiting.task = task
        task.add_done_callback(waiting.done)
        await trio.lowlevel.wait_task_rescheduled(waiting.abort)
        try:
            return task.result()
        except _asyncio().CancelledError:
            if waiting.cut is not None:
                waiting.cut()  # trio's Cancelled: trio asked for this one
            raise
    return task.result()


class AsyncioContext(Generic[T]):
    """An asyncio async context manager, as a trio block enters and leaves it.

    One asyncio task holds it, from its ``__aenter__`` to its ``__aexit__``,
    so that asyncio code bound to its task (a ``TaskGroup``, an
    ``asyncio.timeout`` across the ``yield`` of an ``asynccontextmanager``)
    sees one task throughout. The block's exception reaches ``__aexit__``
    as it was raised, trio's ``Cancelled`` as asyncio's ``CancelledError``;
    what ``__aexit__`` raises or returns is the trio block's. Cancelling the
    trio task while it enters or leaves cancels the holding task, as
    :func:`on_asyncio` cancels any call: a block left while cancelled
    leaves the manager with a ``CancelledError``, as trio code would get
    ``Cancelled`` at its first checkpoint.

    Args:
        make: Makes the asyncio async context manager; called in the
            holding task, so that it is made in asyncio code too.
        loop: The running loop hosting the trio run.
        what: What it is, for the log and the notes (``"serving()"``).
    """

    def __init__(
        self,
        make: Callable[[], AbstractAsyncContextManager[T]],
        loop: asyncio.AbstractEventLoop,
        what: str,
    ) -> None:
        self._make = make
        self._loop = loop
        self._what = what
        # The holding task, and how the block ended (None: no exception);
        # written by _enter() and __aexit__() once each.
        self._task: asyncio.Task[bool | None] | None = None
        self._leave: asyncio.Future[BaseException | None] = loop.create_future()
        self._entered: asyncio.Future[T] = loop.create_future()

    async def _hold(self) -> bool | None:
        asyncio = _asyncio()
        manager = self._make()
        self._entered.set_result(await manager.__aenter__())
        exc: BaseException | None
        try:
            exc = await self._leave
        except asyncio.CancelledError as cancelled:
            exc = cancelled  # the trio side was cancelled as it left
        else:
            if isinstance(exc, trio.Cancelled):
                exc = asyncio.CancelledError()  # asyncio's word for it
        if exc is None:
            return await manager.__aexit__(None, None, None)
        return await manager.__aexit__(type(exc), exc, exc.__traceback__)

    async def _enter(self) -> T:
        asyncio = _asyncio()
        self._task = task = asyncio.Task(self._hold(), loop=self._loop)
        try:
            await asyncio.wait((task, self._entered), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait((task,))
            raise
        if self._entered.done():
            return self._entered.result()
        task.result()  # what __aenter__ raised
        raise AssertionError("the holding task ended before entering")  # pragma: no cover

    async def __aenter__(self) -> T:
        return await on_asyncio(self._enter, self._loop, self._what)()

    async def __aexit__(
        self,
        etype: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool:
        task = self._task
        assert task is not None
        self._leave.set_result(exc)
        try:
            return bool(await _ended(task, self._what))
        except _asyncio().CancelledError:
            if isinstance(exc, trio.Cancelled):
                return False  # the manager let the block's cancellation through
            raise


# -- signals ----------------------------------------------------------------------------------


def open_signal_receiver(
    *signals: signal.Signals | int,
) -> contextlib.AbstractContextManager[AsyncIterator[int]]:
    """:func:`trio.open_signal_receiver`, which in a guest run hosted here goes through asyncio.

    A guest run leaves the wakeup fd to asyncio (``loop.add_signal_handler``
    sets it), so there the signals are taken with the loop's own
    ``add_signal_handler``: a signal wakes the loop wherever it lands, and
    the previous handlers are back when the block is left.

    Raises:
        RuntimeError: outside the main thread, as trio's; or, in a guest run,
            a signal this loop handles already (``loop.add_signal_handler``),
            whose handler could not be given back.
    """
    guest: _Guest | None = getattr(_local, "guest", None)
    if guest is None:
        return trio.open_signal_receiver(*signals)
    return _loop_signals(guest.loop, signals)


def _asyncios_own(handler: object) -> bool:
    # The Python-level handler asyncio installs for loop.add_signal_handler;
    # the handler it stands for is the loop's, out of reach.
    return getattr(handler, "__module__", None) == "asyncio.unix_events"


@contextlib.contextmanager
def _loop_signals(
    loop: asyncio.AbstractEventLoop, signals: tuple[signal.Signals | int, ...]
) -> Iterator[AsyncIterator[int]]:
    if not signals:
        raise TypeError("No signals were provided")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("signals can only be received in the main thread")
    wanted = [signal.Signals(sig) for sig in dict.fromkeys(signals)]
    for sig in wanted:
        if _asyncios_own(signal.getsignal(sig)):
            raise RuntimeError(
                f"this asyncio loop handles {sig.name} already (loop.add_signal_handler): "
                "pass signals=() and drain from that handler (Drain.request())"
            )
    token = trio.lowlevel.current_trio_token()
    send, receive = trio.open_memory_channel[int](float("inf"))

    def deliver(signum: int) -> None:
        # A signal handed over just before the block was left finds it closed.
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            send.send_nowait(signum)

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in wanted:
            previous[sig] = signal.getsignal(sig)
            # The loop calls this outside trio's ticks: hand it to trio.
            loop.add_signal_handler(sig, token.run_sync_soon, deliver, int(sig))
        yield receive
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            # None: a handler installed from C, which Python cannot give back.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        send.close()


mark_trio_code(AsyncioIterator, trio.MemoryReceiveChannel, ChannelSource)
