"""``Window``: a bound on the runs alive that may change while streams run.

``window=`` takes an int (a bound fixed for one stream) or a :class:`Window`,
whose ``size`` may be set at any time and which several streams may share,
bounding them together. The dispatcher takes a place with :meth:`acquire`
before it pulls an item and gives it back with :meth:`release`; it tells the
window how each run ended with :meth:`observe`, which a subclass (the
adaptive window) uses to size itself. Code inside a run finds the window its
stream runs under with :func:`current_window` (the retry loop reports each
failed attempt there). The dispatcher takes any object of this shape (the
``WindowLike`` protocol of the runner); docs/runner.md says what it promises.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast, final

import attrs
import outcome
import trio

from ._checks import check_count, check_seconds
from ._runner import CURRENT_WINDOW

__all__ = ["Window", "WindowStatistics", "current_window"]


def current_window() -> Window | None:
    """The window the calling run's stream runs under, or None (an int window, or no stream).

    The dispatcher sets it in every task that runs items; a run's own child
    tasks inherit it.
    """
    return cast("Window | None", CURRENT_WINDOW.get())


@final
@attrs.frozen
class WindowStatistics:
    """What a :class:`Window` is doing now, for a metrics loop or a debugger.

    Attributes:
        size: The bound in force.
        in_flight: The places taken, by every stream sharing the window (it
            may exceed ``size`` for a while after the size shrank).
        tasks_waiting: The tasks waiting in :meth:`Window.acquire` for a
            place (at most one per stream: the dispatcher's other workers
            wait behind it).
        paused_for: Seconds left of a :meth:`Window.pause`, on trio's clock;
            0.0 when admission is not paused.
    """

    size: int
    in_flight: int
    tasks_waiting: int
    paused_for: float


def _trio_token() -> trio.lowlevel.TrioToken | None:
    try:
        return trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None


class Window:
    """A bound on the runs alive at once, that may change while streams run.

    Pass it as ``window=`` to :func:`~sluicegate.run_stream`,
    :func:`~sluicegate.open_stream` or :func:`~sluicegate.serve` (and as
    ``concurrency=`` to ``evaluate()``). Setting :attr:`size` takes effect at
    once: growing lets more runs start at once; shrinking starts none until
    the runs in flight fall below the new size, and cancels nothing. One
    window shared by several streams bounds them together, and a freed place
    goes to the stream that has waited longest, so none of them starves.

    :attr:`size` may be set from any thread: from outside the trio run that
    uses the window, the change is made in that run (as
    :func:`trio.from_thread.run_sync` does) before the setter returns. Every
    other method is for trio code in that run, as trio's own primitives are.

    Args:
        size: The bound, an int >= 1.

    Raises:
        TypeError: ``size`` is not an int.
        ValueError: ``size`` is below 1.
    """

    def __init__(self, size: int) -> None:
        self._size = check_count(size, "size", minimum=1)
        # Owner: _resize. Invariant: _size >= 1.
        self._in_flight = 0
        # Owner: acquire_nowait and _grant count a place in, release counts
        # it out. Invariant: _in_flight >= 0; above _size only after a shrink.
        self._paused_until = -math.inf
        # Owner: pause() sets it, _paused() clears it once it is past.
        # Invariant: -inf, or the end of the latest pause on trio's clock.
        self._waiters: dict[trio.lowlevel.Task, None] = {}
        # Tasks waiting in acquire(), oldest first. Owner: acquire() adds a
        # task once, _grant() (which counts its place) or its abort removes
        # it, so a task keeps its turn through pauses and resizes. Invariant:
        # non-empty only while no place can be handed out (all taken, or
        # admission paused).
        self._watchers: dict[Callable[[], None], None] = {}
        # Streams to tell when the size grows: one whose runs all hold places
        # has nobody waiting here, and must start more workers itself.
        # Owner: _subscribe/_unsubscribe.
        self._timer = False
        # Owner: pause() starts the timer task, _end_pause ends it.
        # Invariant: true while one system task waits for the pause to end.
        self._token = _trio_token()
        # The trio run that uses the window, for a size set from another
        # thread. Owner: _bind (a place taken with none in flight, a wait).
        # Invariant: the run of the latest stream that took a place, or None.

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self._size}, in_flight={self._in_flight})"

    @property
    def size(self) -> int:
        """The bound in force now; may be set, from any thread."""
        return self._size

    @size.setter
    def size(self, size: int) -> None:
        size = self._check_size(size)  # refused before anything changes
        if _trio_token() is not None:
            self._resize(size, "set")  # trio code, in the run that uses it
            return
        token = self._token
        if token is None:
            if self._watchers or self._waiters:
                # A stream starts on it and has not said in which run yet.
                raise RuntimeError(
                    f"{self!r}: a stream is starting on it; set its size from trio code"
                )
            self._resize(size, "set")  # no run uses it: nobody to wake
            return
        try:
            trio.from_thread.run_sync(self._resize, size, "set", trio_token=token)
        except trio.RunFinishedError:
            # The run that used it is over: nobody waits, nobody watches.
            self._resize(size, "set")

    @property
    def in_flight(self) -> int:
        """The places taken now, by every stream that shares this window together.

        A place is taken before an item is pulled and given back when its run
        ends (``run_stream``) or when its result reached the consumer
        (``open_stream``).
        """
        return self._in_flight

    def statistics(self) -> WindowStatistics:
        """What the window is doing now: size, places taken, tasks waiting, pause left.

        Like trio's own ``statistics()`` methods, it costs nothing until called
        and is meant for debugging and metrics (a loop that exports it every
        few seconds, say). Call it from trio code.
        """
        paused_for = 0.0
        if self._paused_until != -math.inf:
            paused_for = max(0.0, self._paused_until - trio.current_time())
        return WindowStatistics(self._size, self._in_flight, len(self._waiters), paused_for)

    def _check_size(self, size: object) -> int:
        """The size, checked; a subclass adds its own bounds. Raises before any change."""
        return check_count(size, "size", minimum=1)

    def _resize(self, size: int, reason: str) -> None:
        """Set the size (checked already); ``reason`` says why (a subclass records it)."""
        grew = size > self._size
        self._size = size
        if grew:
            self._grant()
            for watcher in list(self._watchers):
                watcher()

    def _bind(self) -> None:
        token = _trio_token()
        if token is not None:
            self._token = token

    def _paused(self) -> bool:
        if self._paused_until == -math.inf:
            return False
        if trio.current_time() < self._paused_until:
            return True
        self._paused_until = -math.inf
        return False

    def pause(self, seconds: float) -> None:
        """Start no run for ``seconds`` from now (on trio's clock); running ones go on.

        A later pause that ends sooner does not shorten an earlier one. Tasks
        already waiting keep their turn: when the pause ends, freed places go
        to them oldest first, before any newcomer.

        Raises:
            TypeError: ``seconds`` is not a number.
            ValueError: ``seconds`` is negative or not finite.
        """
        until = trio.current_time() + check_seconds(seconds, "seconds")
        if until > self._paused_until:
            self._paused_until = until
            if not self._timer:
                # Someone must hand out the places when the pause ends: a
                # system task, so that no waiter leaves its turn to watch
                # the clock.
                self._timer = True
                trio.lowlevel.spawn_system_task(self._end_pause, name="sluicegate window pause")

    async def _end_pause(self) -> None:
        try:
            while self._paused_until != -math.inf:
                await trio.sleep_until(self._paused_until)
                if not self._paused():
                    break  # else a later pause extended it
        finally:
            self._timer = False
        self._grant()

    def acquire_nowait(self) -> bool:
        """Take a place if one is free, nobody waits for one and admission is not paused.

        Returns:
            Whether a place was taken.
        """
        if self._in_flight >= self._size or self._waiters:
            return False
        if self._paused_until != -math.inf and self._paused():
            return False
        if not self._in_flight:
            self._bind()
        self._in_flight += 1
        return True

    async def acquire(self) -> None:
        """Wait for a free place and take it (a checkpoint, like trio's own ``acquire``).

        Waiters are served oldest first, a pause or a resize in between
        notwithstanding. A cancelled wait takes nothing.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.acquire_nowait():
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        self._bind()
        task = trio.lowlevel.current_task()
        waiters = self._waiters
        waiters[task] = None

        def abort(_: object) -> trio.lowlevel.Abort:
            del waiters[task]
            return trio.lowlevel.Abort.SUCCEEDED

        # _grant counted the place for this task before waking it.
        await trio.lowlevel.wait_task_rescheduled(abort)

    def _grant(self) -> None:
        """Hand free places to the oldest waiters, unless admission is paused."""
        waiters = self._waiters
        while waiters and self._in_flight < self._size and not self._paused():
            task = next(iter(waiters))
            del waiters[task]
            self._in_flight += 1
            trio.lowlevel.reschedule(task, outcome.Value(None))

    def release(self) -> None:
        """Give a place back; the oldest waiter, if any, gets it if the size allows.

        Raises:
            RuntimeError: no place is taken.
        """
        if self._in_flight <= 0:
            raise RuntimeError("Window.release() without a place taken")
        self._in_flight -= 1
        if self._waiters:
            self._grant()

    def observe(self, elapsed: float, error: BaseException | None) -> None:
        """Hear how one run, or one attempt inside it, ended; the base window ignores it.

        The dispatcher calls it once for every run that returned or raised
        (not for one cut by cancellation, nor for one whose retry loop told
        it of its last failed attempt and returned that failure as a value),
        with its duration on trio's clock;
        the retry loop calls it for each failed attempt, with the time since
        the run's first attempt began (``now - elapsed`` is when the run
        began, either way). An adaptive window sizes itself from these (and
        hears from the retry loop which attempt it was). It must be quick and
        must not raise.
        """

    def subscribe(self, grew: Callable[[], None]) -> None:
        """Call ``grew`` whenever the size grows, until :meth:`unsubscribe`."""
        self._watchers[grew] = None

    def unsubscribe(self, grew: Callable[[], None]) -> None:
        self._watchers.pop(grew, None)
