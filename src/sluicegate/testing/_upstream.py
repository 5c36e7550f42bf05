"""What a user's source reads from, played by the test: :class:`Upstream`."""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable
from typing import TYPE_CHECKING, Any, Generic

import trio

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    T = TypeVar("T", default=Any)
else:
    from typing import TypeVar

    T = TypeVar("T")


class Upstream(Generic[T]):
    """A queue a source reads from (a broker, a connection), which keeps the books.

    A source under test takes messages with :meth:`get` or ``async for``,
    hands them to the runner, may give back the ones it took and did not hand
    on with :meth:`give_back` (a broker's negative acknowledgement), and
    closes its upstream with :meth:`aclose` (or :meth:`close`).
    :func:`~sluicegate.testing.check_source` compares these books with what
    the runner ran: a message taken and neither run nor given back was
    dropped; one given back after it ran will run twice; an upstream left
    open, or closed twice, is a leak or a double close.

    Messages are told apart by which ``get`` handed them out, so equal and
    unhashable messages are counted right.

    Args:
        items: The messages, in order.
        end: The upstream ends once they are taken; else a ``get`` then
            waits (a quiet queue) until :meth:`end`, :meth:`put` or a close.
    """

    def __init__(self, items: Iterable[T] = (), *, end: bool = True) -> None:
        self._queue: deque[tuple[int, T]] = deque(enumerate(items))
        self._count = len(self._queue)
        self._ended = end
        self._arrived = trio.lowlevel.ParkingLot()
        # Owned by get/give_back. Invariant: every serial is in exactly one of
        # _queue and _out.
        self._out: dict[int, T] = {}
        # The take (a running count) that handed out each message now out.
        self._takes: dict[int, int] = {}
        self._take = 0
        #: Serials of the messages handed out by ``get``, in order (one more per redelivery).
        self.taken: list[int] = []
        #: Serials of the messages given back.
        self.given_back: list[int] = []
        #: Both, in the order they happened: ``("take", serial)`` or ``("back", serial)``.
        self.log: list[tuple[str, int]] = []
        #: How many times the upstream was closed.
        self.close_count: int = 0

    # -- the test's side -------------------------------------------------------------

    def put(self, *items: T) -> None:
        """Add messages; a waiting ``get`` receives the first."""
        for item in items:
            self._queue.append((self._count, item))
            self._count += 1
        self._arrived.unpark_all()

    def end(self) -> None:
        """End the upstream once what is queued is taken."""
        self._ended = True
        self._arrived.unpark_all()

    @property
    def items(self) -> list[T]:
        """Every message ever put, in order of its serial."""
        everything = dict(self._queue) | self._out
        return [everything[serial] for serial in sorted(everything)]

    def handed_out(self) -> list[tuple[int, int, T]]:
        """``(serial, take, message)`` of each message out now, oldest take first.

        ``take`` counts the takes of the whole log (so a message given back
        and taken again is a new take).
        """
        return sorted(
            ((serial, take, self._out[serial]) for serial, take in self._takes.items()),
            key=lambda entry: entry[1],
        )

    def _find(self, message: object, exclude: Container[int]) -> int | None:
        """The newest serial out that is ``message`` (else equal to it), not in ``exclude``."""
        out = [entry for entry in reversed(self.handed_out()) if entry[0] not in exclude]
        for serial, _, item in out:
            if item is message:
                return int(serial)
        for serial, _, item in out:
            try:
                if item == message:
                    return int(serial)
            except Exception:
                continue
        return None

    def held(self) -> set[int]:
        """Serials of the messages handed out (since :meth:`reopen`) and not given back."""
        state: dict[int, str] = {}
        for what, serial in self.log:
            state[serial] = what
        return {serial for serial, what in state.items() if what == "take"}

    def reopen(self) -> None:
        """Start a new session, as a restarted source would: open again, books cleared.

        Messages still handed out stay out (a broker would redeliver them
        only when it is told to).
        """
        self.taken, self.given_back, self.log = [], [], []
        self.close_count = 0

    @property
    def pending(self) -> int:
        """How many messages wait in the queue."""
        return len(self._queue)

    # -- the source's side -------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.close_count > 0

    async def get(self) -> T:
        """The next message; waits while the queue is empty and not ended.

        Raises:
            StopAsyncIteration: the upstream ended and everything was taken.
            trio.ClosedResourceError: the upstream was closed.
        """
        await trio.lowlevel.checkpoint()
        while True:
            if self.closed:
                raise trio.ClosedResourceError("the upstream is closed")
            if self._queue:
                serial, item = self._queue.popleft()
                self._out[serial] = item
                self._take += 1
                self._takes[serial] = self._take
                self.taken.append(serial)
                self.log.append(("take", serial))
                return item
            if self._ended:
                raise StopAsyncIteration
            await self._arrived.park()

    def __aiter__(self) -> Upstream[T]:
        return self

    async def __anext__(self) -> T:
        return await self.get()

    def give_back(self, *messages: T) -> None:
        """Return messages to the front of the queue, in the order given (redelivered first).

        Raises:
            ValueError: a message was not handed out (or was already given back).
        """
        serials: list[int] = []
        for message in messages:
            serial = self._find(message, serials)
            if serial is None:
                raise ValueError(f"{message!r} was not taken from this upstream")
            serials.append(serial)
        for serial in serials:
            del self._out[serial], self._takes[serial]
        for serial, message in zip(reversed(serials), reversed(messages), strict=True):
            self._queue.appendleft((serial, message))
        self.given_back.extend(serials)
        self.log.extend(("back", serial) for serial in serials)
        self._arrived.unpark_all()

    async def aclose(self) -> None:
        """Close the upstream (counted: a second close shows)."""
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Close the upstream without awaiting (counted like :meth:`aclose`)."""
        self.close_count += 1
        self._arrived.unpark_all()

    def __repr__(self) -> str:
        return (
            f"<Upstream taken={len(self.taken)} given_back={len(self.given_back)} "
            f"queued={len(self._queue)} closes={self.close_count}>"
        )
