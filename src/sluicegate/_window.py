"""``Window``: a bound on the runs alive that may change while streams run.

``window=`` takes an int (a bound fixed for one stream) or a :class:`Window`,
whose ``size`` may be set at any time and which several streams may share,
bounding them together. The dispatcher takes a place with :meth:`acquire`
before it pulls an item and gives it back with :meth:`release`; it tells the
window how each run ended with :meth:`observe`, which a subclass (the
adaptive window) uses to size itself. Code inside a run finds the window its
stream runs under with :func:`current_window` (the retry loop reports each
failed attempt there).
"""

from __future__ import annotations

import math
from contextvars import ContextVar

import trio

__all__ = ["Window", "current_window"]

_CURRENT: ContextVar[Window | None] = ContextVar("sluicegate_window", default=None)


def current_window() -> Window | None:
    """The :class:`Window` the calling run's stream runs under, or None (an int window)."""
    return _CURRENT.get()


def _checked_size(size: object, what: str = "size") -> int:
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"{what} must be an int >= 1, not {size!r}")
    if size < 1:
        raise ValueError(f"{what} must be an int >= 1, not {size!r}")
    return size


class Window:
    """A bound on the runs alive at once, that may change while streams run.

    Pass it as ``window=`` to :func:`~sluicegate.run_stream`,
    :func:`~sluicegate.open_stream` or :func:`~sluicegate.serve` (and as
    ``concurrency=`` to ``evaluate()``). Setting :attr:`size` takes effect at
    once: growing lets more runs start as places free; shrinking starts none
    until the runs in flight fall below the new size, and cancels nothing.
    One window shared by several streams bounds them together.

    Args:
        size: The bound, an int >= 1.

    Raises:
        TypeError: ``size`` is not an int.
        ValueError: ``size`` is below 1.
    """

    def __init__(self, size: int) -> None:
        self._size = _checked_size(size)
        self._in_flight = 0
        self._paused_until = -math.inf
        self._lot = trio.lowlevel.ParkingLot()

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
        """The runs alive now under this window, every stream that shares it together."""
        return self._in_flight

    def _resize(self, size: int, reason: str) -> None:
        """Set the size; ``reason`` says why (a subclass records it)."""
        self._size = _checked_size(size)
        self._wake()

    def _wake(self) -> None:
        free = self._size - self._in_flight
        if free > 0:
            self._lot.unpark(count=free)

    def pause(self, seconds: float) -> None:
        """Start no run for ``seconds`` from now (on trio's clock); running ones go on.

        A later pause that ends sooner does not shorten an earlier one.
        """
        self._paused_until = max(self._paused_until, trio.current_time() + seconds)

    def acquire_nowait(self) -> bool:
        """Take a place if one is free and admission is not paused; say whether it did."""
        if self._in_flight >= self._size:
            return False
        if self._paused_until > -math.inf and trio.current_time() < self._paused_until:
            return False
        self._in_flight += 1
        return True

    async def acquire(self) -> None:
        """Wait for a free place and take it (a checkpoint, like trio's own ``acquire``)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.acquire_nowait():
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        while not self.acquire_nowait():
            if self._in_flight < self._size:
                # Free, but paused: wait out the pause (a resize may wake us sooner).
                with trio.move_on_at(self._paused_until):
                    await self._lot.park()
            else:
                await self._lot.park()

    def release(self) -> None:
        """Give a place back, and let one waiting stream take it if the size allows."""
        self._in_flight -= 1
        if self._in_flight < self._size:
            self._lot.unpark(count=1)

    def observe(self, elapsed: float, error: BaseException | None) -> None:
        """Hear how one run, or one attempt inside it, ended; the base window ignores it.

        The dispatcher calls it once for every run that returned or raised
        (not for one cut by cancellation), with its duration on trio's clock;
        the retry loop calls it for each failed attempt. An adaptive window
        sizes itself from these.
        """
