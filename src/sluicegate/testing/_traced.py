"""Record a user's own run and source into a :class:`Trace`.

:func:`traced_run` and :func:`traced_source` wrap them; nothing else changes.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar, overload

import trio

from .._runner import BindsRun
from ._trace import Trace, source_serial

T = TypeVar("T")
R = TypeVar("R")


def traced_run(run: Callable[[T], Awaitable[R]], trace: Trace) -> Callable[[T], Awaitable[R]]:
    """Wrap ``run`` so that each call records its ``start`` and its outcome in ``trace``.

    A call records ``start`` with its item, then ``finish`` when ``run``
    returns, ``cancel`` when it ends in trio's ``Cancelled`` and ``fail`` when
    it raises anything else. What ``run`` returns or raises passes through
    unchanged. Pass the wrapper to the runner in place of ``run``, and check
    the trace with :func:`~sluicegate.testing.check_trace`.

    Args:
        run: The async function under test, called once per item.
        trace: Where to record.

    Returns:
        An async function with the same signature as ``run``.
    """

    @functools.wraps(run)
    async def traced(item: T) -> R:
        trace.record("start", item)
        try:
            value = await run(item)
        except trio.Cancelled:
            trace.record("cancel", item)
            raise
        except BaseException as exc:
            trace.record("fail", item, error=type(exc).__name__)
            raise
        trace.record("finish", item)
        return value

    return traced


@overload
def traced_source(source: BindsRun, trace: Trace) -> BindsRun: ...
@overload
def traced_source(source: AsyncIterable[T], trace: Trace) -> AsyncIterator[T]: ...
@overload
def traced_source(source: Iterable[T], trace: Trace) -> Iterator[T]: ...
def traced_source(
    source: BindsRun | AsyncIterable[T] | Iterable[T], trace: Trace
) -> BindsRun | AsyncIterator[T] | Iterator[T]:
    """Wrap ``source`` so that its pulls and its close are recorded in ``trace``.

    Each pull records ``pull``, then ``item`` (with the item), ``end`` or
    ``error``; a pull cut short by cancellation records nothing more.
    Closing the wrapper records ``close`` every time (so a runner closing
    twice shows in the trace), and closes ``source`` the first time, with its
    ``aclose()`` or ``close()`` if it has one.

    An async iterable gives an async iterator with ``aclose()``, a sync
    iterable a sync iterator with ``close()``, and a
    :class:`~sluicegate.SampleSource` a source that binds like the original
    and records the items it hands out (its follow-ups included).

    Args:
        source: The source under test, as it would be passed to the runner.
        trace: Where to record.

    Returns:
        A source to pass to the runner in place of ``source``.

    Raises:
        TypeError: ``source`` is none of the above.
    """
    if isinstance(source, BindsRun):
        return _TracedBinder(source, trace)
    if isinstance(source, AsyncIterable):
        return _TracedAsyncIterator(aiter(source), trace)
    if isinstance(source, Iterable):
        return _TracedIterator(iter(source), trace)
    raise TypeError(f"source must be an iterable or async iterable, not {type(source).__name__}")


class _Recording:
    """What the sync and async wrappers share: the trace, and closing once."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace
        self._closed = False
        self._serial = source_serial()

    def _record_close(self) -> bool:
        """Record a close; true the first time, when the wrapped source must close too."""
        self._trace.record("close")
        first = not self._closed
        self._closed = True
        return first


class _TracedAsyncIterator(_Recording, AsyncIterator[T]):
    def __init__(self, inner: AsyncIterator[T], trace: Trace) -> None:
        super().__init__(trace)
        self._inner = inner

    async def __anext__(self) -> T:
        self._trace.record("pull", source=self._serial)
        try:
            item = await anext(self._inner)
        except StopAsyncIteration:
            self._trace.record("end")
            raise
        except trio.Cancelled:
            raise
        except BaseException:
            self._trace.record("error")
            raise
        self._trace.record("item", item)
        return item

    async def aclose(self) -> None:
        """Record the close; close the wrapped iterator the first time."""
        aclose = getattr(self._inner, "aclose", None)
        if self._record_close() and aclose is not None:
            await aclose()


class _TracedIterator(_Recording, Iterator[T]):
    def __init__(self, inner: Iterator[T], trace: Trace) -> None:
        super().__init__(trace)
        self._inner = inner

    def __next__(self) -> T:
        self._trace.record("pull", source=self._serial)
        try:
            item = next(self._inner)
        except StopIteration:
            self._trace.record("end")
            raise
        except BaseException:
            self._trace.record("error")
            raise
        self._trace.record("item", item)
        return item

    def close(self) -> None:
        """Record the close; close the wrapped iterator the first time."""
        close = getattr(self._inner, "close", None)
        if self._record_close() and close is not None:
            close()


class _TracedBinder:
    def __init__(self, inner: BindsRun, trace: Trace) -> None:
        self._inner = inner
        self._trace = trace

    def bind_run(self, run: Any, /, **hooks: Any) -> tuple[AsyncIterator[Any], Any]:
        # The dispatcher's hooks (admitting, drained, ...) pass through as they are.
        items, bound_run = self._inner.bind_run(run, **hooks)
        return _TracedAsyncIterator(items, self._trace), bound_run
