"""``take(source, n)``: the next ``n`` items of a source, and not one more.

A live feed may be waiting for an item that does not exist yet, so asking it
for "one more, to see whether it has ended" can block forever. :class:`Take`
therefore counts: once it has handed out ``n`` items it closes the source
straight away and never pulls again. It owns the source it was given and
closes it on every way out: exhausted, ``n`` reached, closed early by the
consumer, or interrupted by an exception or a cancellation while pulling.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, Generic, TypeVar

import trio

from ._asyncio import bridged, mark_trio_code
from ._checks import check_count
from ._util import close_after, close_source, pace

__all__ = ["Take", "take"]

T = TypeVar("T")

_END: Any = object()


class Take(Generic[T]):
    """The async iterator :func:`take` returns; see there for the promises.

    Use it with ``async for``. Wrap it in :func:`contextlib.aclosing` (or hand
    it to :func:`~sluicegate.run_stream`, which closes its source) when the
    loop may stop before the end, so that the source is closed at once.
    """

    def __init__(self, source: AsyncIterable[T] | Iterable[T], n: int) -> None:
        # Items this iterator may still hand out.
        # Written by: __anext__, one less per item handed out.
        # Invariant: 0 <= _remaining <= n; at 0 the source is closed.
        self._remaining = check_count(n, "n")
        # The source, as exactly one of the two. Never changes.
        # Asking for the iterator does not start a generator or a feed; the
        # first pull does, and n == 0 never makes one.
        self._aiter: AsyncIterator[T] | None = None
        self._iter: Iterator[T] | None = None
        if isinstance(source, AsyncIterable):
            # An asyncio feed, where the user's code runs on asyncio, is
            # pulled there (sluicegate.aio, an evaluation under --loop asyncio).
            self._aiter = aiter(bridged(source))
        elif isinstance(source, Iterable):
            self._iter = iter(source)
        else:
            raise TypeError(
                f"source must be an iterable or async iterable, not {type(source).__name__}"
            )
        # The source has been closed, or is being closed: nothing is pulled again.
        # Written by: aclose() and __anext__ (when a pull raised), each once.
        # Invariant: the source is closed exactly once, on the first write.
        self._closed = False
        # A task is pulling now.
        # Written by: __anext__, around the pull.
        # Invariant: at most one pull at a time (a second raises BusyResourceError).
        self._pulling = False
        # Pulls made from a sync source, which pace() turns into checkpoints.
        # Written by: __anext__.
        self._pulls = 0

    @property
    def remaining(self) -> int:
        """How many more items this iterator may still hand out."""
        return 0 if self._closed else self._remaining

    def __aiter__(self) -> Take[T]:
        return self

    async def __anext__(self) -> T:
        """Pull and return the next item.

        Raises:
            StopAsyncIteration: ``n`` items have been handed out, the source
                has ended, or the iterator was closed. The source is closed
                by then.
            trio.BusyResourceError: another task is pulling from this
                iterator right now.
            BaseException: whatever the source raised while pulling,
                cancellation included, after the source has been closed.
            Exception: whatever closing the source raised, when it is closed
                right after the ``n``-th item or at the end.
        """
        if self._pulling:
            raise trio.BusyResourceError("another task is already pulling from this take()")
        if self._closed or self._remaining == 0:
            await self.aclose()
            raise StopAsyncIteration
        self._pulling = True
        try:
            if self._aiter is not None:
                item = await anext(self._aiter, _END)
            else:
                assert self._iter is not None
                # A sync source never yields to trio by itself.
                await pace(self._pulls)
                self._pulls += 1
                item = next(self._iter, _END)
        except BaseException as exc:
            self._closed = True
            await close_after(self._source, exc)
            raise
        finally:
            self._pulling = False
        if item is _END:
            await self.aclose()
            raise StopAsyncIteration
        self._remaining -= 1
        assert self._remaining >= 0
        if self._remaining == 0:
            # Release the source as soon as the last wanted item is in hand,
            # rather than whenever the consumer next asks.
            await self.aclose()
        return item

    @property
    def _source(self) -> object:
        return self._aiter if self._aiter is not None else self._iter

    async def aclose(self) -> None:
        """Close the source (once; later calls do nothing) and end iteration.

        Raises:
            Exception: whatever closing the source raised, the first time.
        """
        if self._closed:
            return
        self._closed = True
        await close_source(self._source)


mark_trio_code(Take)


def take(source: AsyncIterable[T] | Iterable[T], n: int) -> Take[T]:
    """An async iterator over the next ``n`` items of ``source``.

    The promises:

    * it hands out at most ``n`` items, fewer if ``source`` ends first;
    * it never pulls an ``(n+1)``-th item: after the ``n``-th it closes the
      source instead of asking it whether it has ended;
    * ``n == 0`` never starts the source (its ``__anext__`` is never called);
    * it owns ``source`` and closes it (``aclose()``, or ``close()`` for a
      sync generator) exactly once on every exit: exhausted, ``n`` reached,
      the consumer calling :meth:`Take.aclose`, or an exception or a
      cancellation arriving while it pulls. Closing is shielded from
      cancellation.

    Args:
        source: An async iterable (a live feed, an async generator, a trio
            receive channel) or a sync iterable.
        n: How many items to take, an ``int >= 0``.

    Returns:
        A :class:`Take`: an async iterator with an ``aclose()`` method.

    Raises:
        TypeError: ``n`` is not an int, or ``source`` is not iterable.
        ValueError: ``n`` is negative.
    """
    return Take(source, n)
