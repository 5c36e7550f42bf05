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
from typing import cast

import outcome
import trio

from ._checks import check_count, check_seconds
from ._runner import CURRENT_WINDOW

__all__ = ["Window", "current_window"]


def current_window() -> Window | None:
    """The window the calling run's stream runs under, or None (an int window, or no stream).

    The dispatcher sets it in every task that runs items; a run's own child
    tasks inherit it.
    """
    return cast("Window | None", CURRENT_WINDOW.get())


class Window:
    """A bound on the runs alive at once, that may change while streams run.

    Pass it as ``window=`` to :func:`~sluicegate.run_stream`,
    :func:`~sluicegate.open_stream` or :func:`~sluicegate.serve` (and as
    ``concurrency=`` to ``evaluate()``). Setting :attr:`size` takes effect at
    once: growing lets more runs start at once; shrinking starts none until
    the runs in flight fall below the new size, and cancels nothing. One
    window shared by several streams bounds them together, and a freed place
    goes to the stream that has waited longest, so none of them starves.

    Args:
        size: The bound, an int >= 1.

    Raises:
        TypeError: ``size`` is not an int.
        ValueError: ``size`` is below 1.
    """

    def __init__(self, size: int) -> None:
        self._size = check_count(size, "size", minimum=1)
        self._in_flight = 0
        self._paused_until = -math.inf
        # Tasks waiting in acquire(), oldest first. A freed place is handed to
        # the oldest (see _grant), never taken by a latecomer in between.
        self._waiters: dict[trio.lowlevel.Task, None] = {}
        # Streams to tell when the size grows: one whose runs all hold places
        # has nobody waiting here, and must start more workers itself.
        self._watchers: dict[Callable[[], None], None] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self._size}, in_flight={self._in_flight})"

    @property
    def size(self) -> int:
        """The bound in force now."""
        return self._size

    @size.setter
    def size(self, size: int) -> None:
        self._resize(size, "set")

    @property
    def in_flight(self) -> int:
        """The places taken now, by every stream that shares this window together.

        A place is taken before an item is pulled and given back when its run
        ends (``run_stream``) or when its result reached the consumer
        (``open_stream``).
        """
        return self._in_flight

    def _resize(self, size: int, reason: str) -> None:
        """Set the size; ``reason`` says why (a subclass records it)."""
        grew = size > self._size if isinstance(size, int) else False
        self._size = check_count(size, "size", minimum=1)
        if grew:
            self._grant()
            for watcher in list(self._watchers):
                watcher()

    def _paused(self) -> bool:
        if self._paused_until == -math.inf:
            return False
        if trio.current_time() < self._paused_until:
            return True
        self._paused_until = -math.inf
        return False

    def pause(self, seconds: float) -> None:
        """Start no run for ``seconds`` from now (on trio's clock); running ones go on.

        A later pause that ends sooner does not shorten an earlier one.

        Raises:
            TypeError: ``seconds`` is not a number.
            ValueError: ``seconds`` is negative or not finite.
        """
        until = trio.current_time() + check_seconds(seconds, "seconds")
        if until > self._paused_until:
            self._paused_until = until
            # Tasks already waiting must wait for the end of the pause too:
            # wake them to wait again with its deadline.
            waiters = list(self._waiters)
            self._waiters.clear()
            for task in waiters:
                trio.lowlevel.reschedule(task, outcome.Value(False))

    def acquire_nowait(self) -> bool:
        """Take a place if one is free, nobody waits for one and admission is not paused.

        Returns:
            Whether a place was taken.
        """
        if self._in_flight >= self._size or self._waiters:
            return False
        if self._paused_until != -math.inf and self._paused():
            return False
        self._in_flight += 1
        return True

    async def acquire(self) -> None:
        """Wait for a free place and take it (a checkpoint, like trio's own ``acquire``).

        Waiters are served oldest first. A cancelled wait takes nothing.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.acquire_nowait():
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        task = trio.lowlevel.current_task()
        waiters = self._waiters

        def abort(_: object) -> trio.lowlevel.Abort:
            del waiters[task]
            return trio.lowlevel.Abort.SUCCEEDED

        while True:
            if not self._paused():
                # No cancel scope where no pause needs one: it would cost
                # more than the rest of the wait.
                waiters[task] = None
                if await trio.lowlevel.wait_task_rescheduled(abort):
                    return  # _grant counted the place for this task
                continue  # woken by pause(): wait again, until its end
            with trio.move_on_at(self._paused_until):
                waiters[task] = None
                if await trio.lowlevel.wait_task_rescheduled(abort):
                    return
                continue
            # The pause is over: places freed meanwhile go to the oldest waiters.
            self._grant()
            if self.acquire_nowait():
                return

    def _grant(self) -> None:
        """Hand free places to the oldest waiters, unless admission is paused."""
        waiters = self._waiters
        while waiters and self._in_flight < self._size and not self._paused():
            task = next(iter(waiters))
            del waiters[task]
            self._in_flight += 1
            trio.lowlevel.reschedule(task, outcome.Value(True))

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
        (not for one cut by cancellation), with its duration on trio's clock;
        the retry loop calls it for each failed attempt. An adaptive window
        sizes itself from these. It must be quick and must not raise.
        """

    def subscribe(self, grew: Callable[[], None]) -> None:
        """Call ``grew`` whenever the size grows, until :meth:`unsubscribe`."""
        self._watchers[grew] = None

    def unsubscribe(self, grew: Callable[[], None]) -> None:
        self._watchers.pop(grew, None)
