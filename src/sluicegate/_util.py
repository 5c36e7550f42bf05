"""Helpers shared by every layer; this module imports nothing else of sluicegate."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Generic, TypeVar

import trio

__all__ = ["ChannelSource", "as_async_iterator", "sole_exception"]

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
