"""Sources a test can drive: :class:`ScriptedFeed` (async) and :class:`ScriptedIter` (sync)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic

import trio

from ._trace import Trace, source_serial

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    # A feed or probe built without items to infer from is of Any items.
    T = TypeVar("T", default=Any)
else:
    from typing import TypeVar

    T = TypeVar("T")

_END = object()


class _Raise:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class ScriptedFeed(Generic[T]):
    """An async iterator whose items, quiet spells, end and failure a test decides.

    Items are handed out in the order they were given or pushed. When nothing
    is queued the feed stays quiet: a pull parks until the test pushes,
    ends or fails it. Every pull and the close are counted (and recorded in
    ``trace`` when one is given), so a test can assert what the consumer did.

    Args:
        items: Items queued from the start.
        end: End the feed once ``items`` are used up, instead of staying quiet.
        error: Raise this once ``items`` are used up (implies no more items).
        gaps: Seconds (on the trio clock) to wait before handing out the item
            at each position; positions not listed have no gap. Use with
            ``MockClock`` to model a feed whose items arrive over time.
        trace: A shared :class:`Trace` to record ``pull``/``item``/``end``/
            ``error``/``close`` events in.
    """

    def __init__(
        self,
        items: Iterable[T] = (),
        *,
        end: bool = False,
        error: BaseException | None = None,
        gaps: Mapping[int, float] | None = None,
        trace: Trace | None = None,
    ) -> None:
        self._queue: deque[object] = deque(items)
        if error is not None:
            self._queue.append(_Raise(error))
        elif end:
            self._queue.append(_END)
        self._gaps = dict(gaps or {})
        self._trace = trace
        self._serial = source_serial()
        self._arrived = trio.lowlevel.ParkingLot()
        self._parked_waiters = trio.lowlevel.ParkingLot()
        self.pulls: int = 0
        self.delivered: int = 0
        self.parked: bool = False
        self.close_count: int = 0

    # -- driving it from the test ---------------------------------------------------

    def push(self, *items: T) -> None:
        """Queue items; a parked pull receives the first of them."""
        self._queue.extend(items)
        self._arrived.unpark_all()

    def end(self) -> None:
        """End the feed once the queued items are used up."""
        self._queue.append(_END)
        self._arrived.unpark_all()

    def fail(self, exc: BaseException) -> None:
        """Make the pull after the queued items raise ``exc``."""
        self._queue.append(_Raise(exc))
        self._arrived.unpark_all()

    async def wait_parked(self) -> None:
        """Return once a pull is parked waiting for an item."""
        while not self.parked:
            await self._parked_waiters.park()

    # -- what a consumer sees -------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether anything has pulled from the feed yet."""
        return self.pulls > 0

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has been called."""
        return self.close_count > 0

    def __aiter__(self) -> ScriptedFeed[T]:
        return self

    async def __anext__(self) -> T:
        if self.closed:
            raise RuntimeError("ScriptedFeed pulled after it was closed")
        position = self.pulls
        self.pulls += 1
        self._record("pull")
        gap = self._gaps.get(position)
        if gap:
            await trio.sleep(gap)
        else:
            await trio.lowlevel.checkpoint()
        while not self._queue:
            self.parked = True
            self._parked_waiters.unpark_all()
            try:
                await self._arrived.park()
            finally:
                self.parked = False
        head = self._queue[0]
        if head is _END:
            self._record("end")
            raise StopAsyncIteration
        if isinstance(head, _Raise):
            self._record("error")
            raise head.exc
        self._queue.popleft()
        self.delivered += 1
        self._record("item", head)
        return head  # type: ignore[return-value]

    async def aclose(self) -> None:
        """Close the feed; counts every call so double closes are visible."""
        self.close_count += 1
        self._record("close")
        await trio.lowlevel.checkpoint()

    def _record(self, kind: str, item: object = None) -> None:
        if self._trace is not None:
            self._trace.record(kind, item, source=self._serial)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (
            f"<ScriptedFeed pulls={self.pulls} delivered={self.delivered} "
            f"queued={len(self._queue)} closed={self.closed}>"
        )


class ScriptedIter(Generic[T]):
    """A sync iterator over ``items`` that records its pulls and its close.

    The sync counterpart of :class:`ScriptedFeed`, for checking that the
    runner treats plain iterables by the same rules.
    """

    def __init__(self, items: Iterable[T], *, trace: Trace | None = None) -> None:
        self._items = iter(items)
        self._trace = trace
        self._serial = source_serial()
        self.pulls: int = 0
        self.delivered: int = 0
        self.close_count: int = 0

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self.close_count > 0

    def __iter__(self) -> ScriptedIter[T]:
        return self

    def __next__(self) -> T:
        if self.closed:
            raise RuntimeError("ScriptedIter pulled after it was closed")
        self.pulls += 1
        if self._trace is not None:
            self._trace.record("pull", source=self._serial)
        try:
            item = next(self._items)
        except StopIteration:
            if self._trace is not None:
                self._trace.record("end")
            raise
        self.delivered += 1
        if self._trace is not None:
            self._trace.record("item", item)
        return item

    def close(self) -> None:
        """Close the iterator, as a generator would be closed."""
        self.close_count += 1
        if self._trace is not None:
            self._trace.record("close")
