"""Helpers shared by every layer; this module imports nothing else of sluicegate.

Invariant numbers in comments refer to docs/runner.md.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
import tempfile
import types
import typing
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import attrs
import trio

__all__ = [
    "CLOSE_TIMEOUT",
    "YIELD_EVERY",
    "ChannelSource",
    "as_async_iterator",
    "close_after",
    "close_source",
    "fixup_module_metadata",
    "in_background",
    "logger",
    "pace",
    "write_atomically",
    "sole_exception",
    "surely_sync",
]

T = TypeVar("T")

logger = logging.getLogger("sluicegate")

# A source and runs that never block would keep a loop from ever reaching the
# scheduler, so deadlines and other tasks could not get in. Loops over items
# yield every so many passes; a full checkpoint costs far more than handing
# over an in-memory item, so not on every pass.
YIELD_EVERY = 32

# How long closing a source may take, in seconds of the trio clock. Close-out
# is shielded from cancellation so that a source's cleanup is not cut short;
# this bound keeps an aclose() that never returns from hanging its caller for
# good, even under an outer timeout.
CLOSE_TIMEOUT = 10.0


def pace(count: int) -> Awaitable[None]:
    """The checkpoint a loop takes before its item number ``count``; await it at once.

    Awaiting it raises if the task is cancelled; every ``YIELD_EVERY``-th
    call (the first included) also yields to the scheduler. A loop over a
    large or infinite in-memory set, or the runner's workers over any
    source, thus stays cancellable and lets other tasks (and deadlines) run,
    without paying a scheduler round per item. It returns trio's own
    awaitable rather than being a coroutine itself: one frame less per item.
    """
    if count % YIELD_EVERY:
        return trio.lowlevel.checkpoint_if_cancelled()  # noqa: ASYNC105 (awaited by the caller)
    return trio.lowlevel.checkpoint()  # noqa: ASYNC105 (awaited by the caller)


def surely_sync(fn: object) -> bool:
    """Whether ``fn`` is a plain (non-``async``) Python function, method or builtin.

    A ``lambda`` is given the benefit of the doubt, as are other callables
    (an object whose ``__call__`` is compiled, say): ``lambda x: work(x, 1)``
    is the usual way to hand over an async function with its arguments.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        if fn.__name__ == "<lambda>":
            return False
        return not inspect.iscoroutinefunction(fn)
    if inspect.isbuiltin(fn) or inspect.isclass(fn):
        return True
    call = inspect.getattr_static(type(fn), "__call__", None)
    if inspect.isfunction(call):
        return not inspect.iscoroutinefunction(call)
    return False


async def close_source(source: object) -> None:
    """Close ``source`` with its ``aclose()`` or ``close()``, if it has one.

    Closing is shielded from cancellation, so cleanup in an async generator's
    ``finally`` runs to the end even when the caller is being cancelled, but
    for at most :data:`CLOSE_TIMEOUT` seconds: an ``aclose()`` still running
    then is cancelled, and this raises :exc:`TimeoutError`.

    Raises:
        TimeoutError: ``aclose()`` did not finish in time.
        Exception: whatever closing raised.
    """
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            await aclose()
        if scope.cancelled_caught:
            raise TimeoutError(
                f"closing {source!r} did not finish within {CLOSE_TIMEOUT:g} s; it was cancelled"
            )
        return
    close = getattr(source, "close", None)
    if close is not None:
        close()


async def close_after(source: object, exc: BaseException) -> None:
    """Close ``source`` because ``exc`` is on its way out; never masks ``exc``.

    A failure while closing is kept as a note on ``exc`` rather than raised in
    its place, so the caller still sees the exception that ended the stream.
    """
    try:
        await close_source(source)
    except Exception as close_exc:
        exc.add_note(f"sluicegate: closing the source also failed: {close_exc!r}")


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception to raise in place of a nursery's exception group.

    The nurseries in sluicegate keep their own failures out of the group, so
    what is left is cancellation, a ``KeyboardInterrupt`` (or another
    ``BaseException``) from a task, and the body's own exception. Each comes
    back as itself, untouched: a body that raised an ``ExceptionGroup`` gets
    that group back. ``Cancelled`` wins only when nothing else is there; a
    ``KeyboardInterrupt`` or ``SystemExit`` outranks an ordinary exception;
    anything else is named in a note on the one returned, never dropped.
    """
    kept: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, trio.Cancelled):
            continue
        if isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None:
            continue  # a group of cancellations only
        kept.append(exc)
    if not kept:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup) and first.exceptions:
            first = first.exceptions[0]
        return first
    kept.sort(key=lambda exc: isinstance(exc, Exception))  # stable: BaseExceptions first
    chosen, others = kept[0], kept[1:]
    for other in others:
        chosen.add_note(f"sluicegate: also raised meanwhile: {other!r}")
    return chosen


@asynccontextmanager
async def in_background(
    fn: Callable[..., Awaitable[object]], *args: object, shield: bool = False
) -> AsyncIterator[None]:
    """Run ``fn(*args)`` in a task of its own while the block runs; cancel it after.

    The block's exception comes out as itself, not wrapped in the nursery's
    exception group (see :func:`sole_exception`); so does one from ``fn``.

    Args:
        fn: The async function to run beside the block.
        args: Its arguments.
        shield: Keep ``fn`` running when a scope around the block is
            cancelled, until the block has ended.
    """
    scope = trio.CancelScope(shield=shield)

    async def run() -> None:
        with scope:
            await fn(*args)

    error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            try:
                yield
            finally:
                scope.cancel()
    except BaseExceptionGroup as group:
        error = sole_exception(group)
    if error is not None:
        try:
            raise error
        finally:
            del error


class ChannelSource(Generic[T]):
    """An async iterator over a trio memory receive channel, without a schedule point per item.

    ``MemoryReceiveChannel.receive()`` always yields to the scheduler, even
    when an item is waiting, so a loop over it takes at most one item per
    scheduler pass. This takes what is already waiting with
    ``receive_nowait()`` and blocks in ``receive()`` only when the channel is
    empty. It makes no checkpoint of its own while items are waiting: its
    consumer must (the runner's workers and ``take()`` do). The channel's
    end (:exc:`trio.EndOfChannel`) ends the iteration; :meth:`aclose` closes
    the channel, as does a failure or a cancellation while waiting, so the
    senders see :exc:`trio.BrokenResourceError` instead of blocking forever.
    """

    __slots__ = ("_channel",)

    def __init__(self, channel: trio.MemoryReceiveChannel[T]) -> None:
        # Never changes; the channel keeps its own state.
        self._channel = channel

    def __aiter__(self) -> ChannelSource[T]:
        return self

    async def __anext__(self) -> T:
        channel = self._channel
        try:
            return channel.receive_nowait()
        except trio.WouldBlock:
            pass
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        try:
            return await channel.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        except BaseException:
            channel.close()
            raise

    async def aclose(self) -> None:
        """Close the channel. Idempotent."""
        await self._channel.aclose()

    def __repr__(self) -> str:
        return f"<ChannelSource of {self._channel!r}>"


def as_async_iterator(source: AsyncIterable[T]) -> AsyncIterator[T]:
    """``aiter(source)``, with a trio memory receive channel read through :class:`ChannelSource`."""
    if isinstance(source, trio.MemoryReceiveChannel):
        return ChannelSource(source)
    return aiter(source)


def fixup_module_metadata(module_name: str, namespace: dict[str, object]) -> None:
    """Make the names a package re-exports report the package as their home.

    Call it last in a package's ``__init__``, as
    ``_util.fixup_module_metadata(__name__, globals())``. Every class and
    function listed in the namespace's ``__all__`` that was defined in one of
    the package's private modules (``pkg._name``) gets ``pkg`` as its
    ``__module__``, and its public name as ``__name__``/``__qualname__``, and
    so do the methods and nested classes defined in it. Tracebacks, reprs and
    the API docs then say ``sluicegate.testing.Trace``, not
    ``sluicegate.testing._trace.Trace``. Names re-exported from another
    public package keep that package as their home.

    A class has its string annotations resolved first, against the private
    module that defined it: ``typing.get_type_hints`` (and so cattrs) looks
    names up in the module that ``__module__`` names, and the package does
    not import everything its modules do.

    Args:
        module_name: The package's ``__name__``.
        namespace: The package's ``globals()``.
    """
    private_prefix = module_name + "._"
    seen: set[int] = set()

    def fix(qualname: str, name: str, obj: object) -> None:
        if not isinstance(obj, type | types.FunctionType) or id(obj) in seen:
            return
        seen.add(id(obj))
        home = obj.__module__
        if not home.startswith(private_prefix):
            return
        if isinstance(obj, type):
            _resolve_annotations(obj, sys.modules.get(home))
        defined_as = obj.__qualname__
        obj.__module__ = module_name
        obj.__name__ = name
        obj.__qualname__ = qualname
        if isinstance(obj, type):
            for attr_name, value in list(vars(obj).items()):
                # Only what the class body defined; a class attribute that
                # refers to another top-level class keeps that class's name.
                if getattr(value, "__qualname__", None) == f"{defined_as}.{attr_name}":
                    fix(f"{qualname}.{attr_name}", attr_name, value)

    exported = namespace.get("__all__", ())
    assert isinstance(exported, list | tuple), "__all__ must be a list of names"
    for name in exported:
        fix(name, name, namespace[name])


def _resolve_annotations(cls: type, defining: types.ModuleType | None) -> None:
    """Replace the string annotations of ``cls`` by what they name in ``defining``."""
    own = inspect.get_annotations(cls)
    if not own or defining is None:
        return
    try:
        hints = typing.get_type_hints(cls, globalns=vars(defining), include_extras=True)
    except NameError:
        return  # a name imported only for type checkers: nothing could resolve it
    cls.__annotations__ = {name: hints.get(name, value) for name, value in own.items()}
    if attrs.has(cls):
        attrs.resolve_types(cls, globalns=vars(defining), include_extras=True)


def write_atomically(
    path: os.PathLike[str] | str, text: str, *, mode: int = 0o644, durable: bool = False
) -> None:
    """Replace ``path`` with ``text``: a reader sees the old file or the new one, never half.

    The text goes to a file of its own in the same directory (so several
    processes may write the same path at once), which is then renamed over
    ``path``.

    Args:
        path: The file to write.
        text: Its whole new content.
        mode: The permissions the file gets.
        durable: Flush the file to disk before the rename, so that the new
            content also survives a power loss, not only a killed process.

    Raises:
        OSError: the file cannot be written; ``path`` is then unchanged.
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    descriptor, partial = tempfile.mkstemp(
        prefix=f".{name}.", suffix=".partial", dir=directory or "."
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
