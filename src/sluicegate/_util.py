"""Helpers shared by every layer; this module imports nothing else of sluicegate."""

from __future__ import annotations

import inspect
import sys
import types
import typing
from collections.abc import AsyncIterable, AsyncIterator
from typing import Generic, TypeVar

import attrs
import trio

__all__ = ["ChannelSource", "as_async_iterator", "fixup_module_metadata", "sole_exception"]

T = TypeVar("T")


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception to raise in place of a group that wraps just one.

    A nursery whose only possible failure is its body's own exception wraps
    that exception in a group; the caller should get it back as itself. A
    group of several is returned unchanged, since none of them may be dropped.
    """
    if len(group.exceptions) == 1:
        return group.exceptions[0]
    return group


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
