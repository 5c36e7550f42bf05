"""Tasksets: one read path for a static list of tasks and for a live feed.

A :class:`Taskset` is read two ways: ``iter(ts)`` (sync, a static set) and
``ts.stream()`` (async, what the runner consumes). A static set overrides
``load()``; a live feed overrides ``stream()``, and that override is the
whole declaration (``ts.streaming`` reads it off the class, so there is no
flag that can disagree with the code).

Views (``head``, ``shuffle``, ``map``, ``with_system_prompt``) are tasksets
that wrap another one. Each view implements both read paths: over a static
base its ``stream()`` is the default one (its own ``iter()`` streamed), over a
streaming base it applies the same operation to the base's ``stream()``, with
``head`` done by :func:`~sluicegate.take`. Either way the view gives the same
items on both paths, and a view of a streaming taskset is itself streaming.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sized,
)
from typing import Any, Generic, TypeVar, cast, final

import attrs
import trio

from ._checks import check_callable, check_count, check_text
from ._take import take
from ._util import ChannelSource, close_after, close_source, pace

__all__ = ["FeedTaskset", "Task", "Taskset"]

T = TypeVar("T")
U = TypeVar("U")
T_co = TypeVar("T_co", covariant=True)

_END: Any = object()


@final
@attrs.frozen
class Task:
    """One unit of work in a taskset.

    Attributes:
        input: What the run works on.
        id: An optional identifier, unique within its taskset.
        target: An optional expected answer.
        metadata: Free-form extra fields; a fresh empty mapping by default,
            never shared between tasks. Left out of the hash, so a task with
            a plain dict here can still be a dict key or set member.
        system_prompt: An optional system prompt to run the task with.
    """

    input: Any
    id: str | int | None = None
    target: Any = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    system_prompt: str | None = None

    def with_system_prompt(self, text: str) -> Task:
        """Return a copy of this task with ``system_prompt`` set to ``text``.

        Raises:
            TypeError: ``text`` is not a str.
        """
        return attrs.evolve(self, system_prompt=check_text(text, "text"))


class Taskset(Generic[T_co]):
    """A set of tasks, read with ``iter(ts)`` or ``ts.stream()``.

    Subclass it one of two ways:

    * a **static** set overrides :meth:`load`, returning a sync iterable (a
      list, or a generator: ``iter(ts)`` reads it lazily). Set the class
      attribute ``infinite = True`` when it never ends;
    * a **live feed** overrides ``async def stream(self)``, an async generator
      that waits on its source, yields each task as it arrives and returns
      when the source is drained. :attr:`streaming` is then true.

    Views (:meth:`head`, :meth:`shuffle`, :meth:`map`,
    :meth:`with_system_prompt`) return new tasksets and leave this one as it
    is. Hand a taskset to the runner with
    ``await run_stream(ts.stream(), run, window=w)``.

    Attributes:
        infinite: Whether the static set has no end. ``len()`` and
            :meth:`shuffle` refuse such a set; :meth:`head` makes it finite.
    """

    infinite: bool = False

    def load(self) -> Iterable[T_co]:
        """The tasks of a static set. Override this (or :meth:`stream`).

        Returns:
            A sync iterable of tasks, read afresh on every ``iter(ts)``.

        Raises:
            TypeError: this is a streaming taskset that did not override
                ``load()``; read it with :meth:`stream`.
            NotImplementedError: neither ``load()`` nor ``stream()`` is
                overridden.
        """
        if self.streaming:
            raise TypeError(
                f"{self!r} is a streaming taskset: its tasks arrive over time, "
                "so read it with `stream()`, not `iter()`"
            )
        raise NotImplementedError(
            f"{type(self).__qualname__} must override load() (a static set) "
            "or stream() (a live feed)"
        )

    def __iter__(self) -> Iterator[T_co]:
        return iter(self.load())

    async def stream(self) -> AsyncIterator[T_co]:
        """The tasks as they become available; what the runner consumes.

        The default streams ``iter(self)``. It checks for cancellation before
        each item and yields to the scheduler every few dozen items, so a
        large or infinite static set stays cancellable and fair to other
        tasks without a scheduler round per item. A live feed
        overrides this with an async generator that awaits its source and
        returns when the source is drained.

        Closing the stream early closes the iterator ``load()`` returned (a
        generator's ``finally`` runs).
        """
        it = iter(self)
        try:
            for count in itertools.count():
                await pace(count)
                item = next(it, _END)
                if item is _END:
                    return
                yield item
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    @property
    def streaming(self) -> bool:
        """Whether this taskset is a live feed: ``stream()`` is overridden.

        True when any class between ``Taskset`` and this object's class
        overrides ``stream()``, and for every view of a streaming taskset.
        """
        return type(self).stream is not Taskset.stream

    def __len__(self) -> int:
        """The number of tasks, where that is known without reading them.

        Known for a static, finite set whose ``load()`` returns a sized
        collection (a list, a tuple), and for views of one; ``head(n)`` of an
        infinite set has length ``n``. Note that ``len()`` calls ``load()``.

        Raises:
            TypeError: the set is streaming or infinite, or ``load()``
                returned something without a length (a generator).
        """
        self._check_sized()
        items = self.load()
        if isinstance(items, Sized):
            return len(items)
        close = getattr(items, "close", None)
        if close is not None:
            close()
        raise TypeError(
            f"len() of {self!r} is not known: load() returned a "
            f"{type(items).__name__}, which has no length"
        )

    def _check_sized(self) -> None:
        if self.streaming:
            raise TypeError(f"len() of {self!r} is not known: it is a streaming taskset")
        if self.infinite:
            raise TypeError(f"len() of {self!r} is not known: it is an infinite taskset")

    # -- building ------------------------------------------------------------------

    @staticmethod
    def from_iterable(items: Iterable[U]) -> Taskset[U]:
        """A static, finite taskset of ``items``.

        ``items`` is read once, now, and kept as a tuple, so the taskset can
        be iterated any number of times. Pass a finite iterable.
        """
        return _Items(tuple(items))

    # -- views -----------------------------------------------------------------------

    def head(self, n: int) -> Taskset[T_co]:
        """A view of the first ``n`` tasks.

        Over a streaming taskset its ``stream()`` is ``take(self.stream(), n)``:
        it never pulls an ``(n+1)``-th task and ``n == 0`` never starts the
        feed. Over an infinite set it is finite and lazy.

        Raises:
            TypeError, ValueError: ``n`` is not an ``int >= 0``.
        """
        return _Head(self, check_count(n, "head(n)"))

    def shuffle(self, seed: int | str | bytes) -> Taskset[T_co]:
        """A view of all the tasks in an order fixed by ``seed``.

        The order is the same on every read and every run with the same seed.
        Reading the view reads the whole base set first.

        Raises:
            ValueError: this taskset is streaming or infinite: there is no
                whole set to shuffle (take a ``head(n)`` of an infinite set
                first).
            TypeError: ``seed`` is not an int, str or bytes.
        """
        if self.streaming:
            raise ValueError(
                f"cannot shuffle {self!r}: it is a streaming taskset whose tasks arrive "
                "over time, so there is no whole set to shuffle"
            )
        if self.infinite:
            raise ValueError(
                f"cannot shuffle {self!r}: it is an infinite taskset with no end to "
                "shuffle up to; take a head(n) of it first"
            )
        if isinstance(seed, bool) or not isinstance(seed, (int, str, bytes)):
            raise TypeError(f"seed must be an int, str or bytes, not {seed!r}")
        return _Shuffle(self, seed)

    def map(self, fn: Callable[[T_co], U]) -> Taskset[U]:
        """A view with ``fn`` applied to each task, lazily, on both read paths.

        Args:
            fn: A sync function of one task; it runs as each task is read.

        Raises:
            TypeError: ``fn`` is not callable.
        """
        check_callable(fn, "fn")
        return _Map(self, fn, f"map({getattr(fn, '__qualname__', fn)!r})")

    def with_system_prompt(self: Taskset[Task], text: str) -> Taskset[Task]:
        """A view whose every task carries ``text`` as its system prompt.

        Applies to streamed tasks too: a streaming taskset's own ``stream()``
        is wrapped, so no task escapes it.

        Raises:
            TypeError: ``text`` is not a str.
        """
        check_text(text, "text")

        def prompt(task: Task) -> Task:
            return task.with_system_prompt(text)

        short = text if len(text) <= 20 else text[:17] + "..."
        return _Map(self, prompt, f"with_system_prompt({short!r})")

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__}>"


class _Items(Taskset[T]):
    """What :meth:`Taskset.from_iterable` returns."""

    def __init__(self, items: tuple[T, ...]) -> None:
        self._items = items

    def load(self) -> tuple[T, ...]:
        return self._items

    def __repr__(self) -> str:
        return f"<Taskset of {len(self._items)} items>"


class _View(Taskset[U]):
    """A taskset computed from another; streaming exactly when its base is.

    A view is a value: its fields are set in ``__init__`` and never change.
    """

    def __init__(self, base: Taskset[Any], label: str) -> None:
        self._base = base
        self._label = label
        self.infinite = base.infinite

    @property
    def streaming(self) -> bool:
        return self._base.streaming

    def stream(self) -> AsyncIterator[U]:
        if self._base.streaming:
            return self._stream_from(self._base.stream())
        # A static base: stream this view's own iter(), like any static set,
        # so both read paths run the very same sync chain.
        return Taskset.stream(self)

    def _stream_from(self, source: AsyncIterator[Any]) -> AsyncIterator[U]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self._base!r}.{self._label}"


class _Head(_View[T]):
    def __init__(self, base: Taskset[T], n: int) -> None:
        super().__init__(base, f"head({n})")
        self._n = n
        self.infinite = False

    def load(self) -> Iterator[T]:
        n = self._n
        base = self._base
        if n == 0:
            return
        it = iter(base)
        try:
            # islice stops after n items without asking for an (n+1)-th.
            yield from itertools.islice(it, n)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def __len__(self) -> int:
        base = self._base
        if base.streaming:
            raise TypeError(f"len() of {self!r} is not known: the feed may end before {self._n}")
        if base.infinite:
            return self._n
        return min(self._n, len(base))

    def _stream_from(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        return take(source, self._n)


class _Shuffle(_View[T]):
    def __init__(self, base: Taskset[T], seed: int | str | bytes) -> None:
        super().__init__(base, f"shuffle({seed!r})")
        self._seed = seed

    def load(self) -> list[T]:
        items = list(self._base)
        # A fresh Random per read keeps the order the same on every read.
        random.Random(self._seed).shuffle(items)
        return items

    def __len__(self) -> int:
        return len(self._base)


class _Map(_View[U], Generic[T, U]):
    def __init__(self, base: Taskset[T], fn: Callable[[T], U], label: str) -> None:
        super().__init__(base, label)
        self._fn = fn

    def load(self) -> Iterator[U]:
        fn = self._fn
        it = iter(self._base)
        try:
            for item in it:
                yield fn(item)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def __len__(self) -> int:
        self._check_sized()
        return len(self._base)

    def _stream_from(self, source: AsyncIterator[T]) -> AsyncIterator[U]:
        return _OwnedStream(source, self._fn)


class _OwnedStream(Generic[T, U]):
    """An async iterator over ``source`` (mapped by ``fn``) that owns it.

    A class rather than an async generator so that closing it closes the
    source even if it was never started: ``take(stream, 0)`` must still
    release a feed's channel.
    """

    def __init__(self, source: AsyncIterable[T], fn: Callable[[T], U] | None) -> None:
        # Never change.
        self._source = source
        self._iter = aiter(source)
        self._fn = fn
        # This stream is over: the source is closed, or being closed.
        # Written by: aclose() and __anext__ (when the source or fn raised), each once.
        # Invariant: the source is closed exactly once, on the first write.
        self._closed = False

    def __aiter__(self) -> _OwnedStream[T, U]:
        return self

    async def __anext__(self) -> U:
        if self._closed:
            raise StopAsyncIteration
        try:
            item = await anext(self._iter, _END)
            if item is _END:
                await self.aclose()
                raise StopAsyncIteration
            if self._fn is None:
                return cast(U, item)  # no fn: the feed passes items through as they are
            return self._fn(item)
        except StopAsyncIteration:
            raise
        except BaseException as exc:
            # The source failed, the map failed, or we are being cancelled:
            # either way this stream is over, so release the source now.
            if not self._closed:
                self._closed = True
                await close_after(self._iter, exc)
                if self._source is not self._iter:
                    await close_after(self._source, exc)
            raise

    async def aclose(self) -> None:
        """Close the source, once; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            await close_source(self._iter)
        finally:
            if self._source is not self._iter:
                await close_source(self._source)


class FeedTaskset(Taskset[T]):
    """A streaming taskset fed by a trio memory receive channel or any async iterable.

    Its stream ends when the source ends (a channel ends once every send
    side is closed). The taskset owns the source: closing the stream, early
    or at the end, closes it, so the senders see
    :exc:`trio.BrokenResourceError` instead of blocking forever.

    A feed is consumed once: :meth:`stream` may be called a single time.

    Args:
        source: A :class:`trio.MemoryReceiveChannel` or any async iterable.

    Raises:
        TypeError: ``source`` is not an async iterable.
    """

    def __init__(self, source: AsyncIterable[T]) -> None:
        if not isinstance(source, AsyncIterable):
            raise TypeError(
                f"source must be an async iterable (a trio receive channel, say), "
                f"not {type(source).__name__}"
            )
        # Never changes.
        self._source = source
        # stream() has been called.
        # Written by: stream(), once.
        # Invariant: the feed is read by one stream at most.
        self._claimed = False

    def stream(self) -> AsyncIterator[T]:
        """The feed's tasks as they arrive.

        Raises:
            RuntimeError: ``stream()`` was already called on this taskset.
        """
        if self._claimed:
            raise RuntimeError(f"{self!r} was already streamed: a feed can be read once")
        self._claimed = True
        if isinstance(self._source, trio.MemoryReceiveChannel):
            # Items already waiting are taken without a schedule point each.
            return ChannelSource(self._source)
        return _OwnedStream(self._source, None)

    def __repr__(self) -> str:
        return f"<FeedTaskset of {type(self._source).__name__}>"
