"""The consumer side of a :class:`LeasedQueue`: a source for the runner that acknowledges.

:func:`consume` makes a :class:`Feed` of a queue. The feed is a source that
binds the run (the runner's ``BindsRun`` protocol, as a
:class:`~sluicegate.SampleSource` is), so it sees each of its items' runs
end. It claims only when the stream pulls, that is when a window place is
free (the runner's invariant 2), and no more at a time than the stream
starts in about a round trip; it acknowledges settled items in batches from
a task of its own, so no run waits for a round trip; it renews the leases of
what it holds; and it releases at once what will not run here.

Every claimed item is in exactly one state, counted by
:class:`FeedStatistics`: waiting (claimed, not handed to a run), outstanding
(handed out, not yet answered), acknowledging (settled, its round trip to
come), acknowledged, or released.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Generic, Literal, TypeVar, final

import attrs
import trio

from .._checks import check_count, check_seconds
from .._util import CLOSE_TIMEOUT, in_background, logger
from ._queue import LeasedQueue

__all__ = ["Feed", "FeedStatistics", "consume"]

T = TypeVar("T")
R = TypeVar("R")

Acknowledging = Literal["returned", "manual"]


@final
@attrs.frozen
class FeedStatistics:
    """What a :class:`Feed` has done, from :meth:`Feed.statistics`.

    Each claimed item is in exactly one of ``waiting``, ``outstanding``,
    ``acknowledging``, ``acknowledged`` and ``released``, at every moment::

        claimed == waiting + outstanding + acknowledging + acknowledged + released

    Attributes:
        claimed: Items claimed from the queue (an item claimed again after
            its release or its lease counts again).
        waiting: Claimed, not handed to a run yet.
        outstanding: Handed to a run, neither acknowledged nor released yet
            (running, or waiting for your :meth:`Feed.acknowledge`).
        acknowledging: Acknowledged here, their round trip still to come.
        acknowledged: Acknowledged to the queue.
        released: Given back to the queue: left unstarted by a drain or a
            failure, or never acknowledged (their run failed or was cut short).
        running: Runs of the feed's items in progress.
        lost: Items whose lease another consumer took (a renewal came too
            late); they may have run twice.
        claims: Claim round trips.
        acknowledgements: Acknowledging round trips (one per batch).
        renewals: Renewing round trips.
        releases: Releasing round trips.
    """

    claimed: int
    waiting: int
    outstanding: int
    acknowledging: int
    acknowledged: int
    released: int
    running: int
    lost: int
    claims: int
    acknowledgements: int
    renewals: int
    releases: int


def consume(
    queue: LeasedQueue[T],
    *,
    acknowledge: Acknowledging = "returned",
    on_released: Callable[[T], Awaitable[None]] | None = None,
) -> Feed[T]:
    """Feed streams from ``queue``: ``async with consume(queue) as feed: ...``.

    Entering the block opens the queue (a refused connection or bad
    credentials fail there, before any item is claimed) and starts the tasks
    that acknowledge and renew; leaving it acknowledges what settled,
    releases what is left and closes the queue. Pass the feed as the
    ``source`` of :func:`~sluicegate.run_stream` or
    :func:`~sluicegate.open_stream`, once or several times in the block.

    Args:
        queue: A :class:`LeasedQueue`, such as a
            :class:`~sluicegate.sources.RedisStream` or a
            :class:`~sluicegate.sources.PostgresQueue`.
        acknowledge: ``"returned"`` (the default): an item is acknowledged
            once its run returned. ``"manual"``: once you call
            :meth:`Feed.acknowledge` with it, after making its outcome
            durable (as ``open_stream``'s consumer, say).
        on_released: An async function ``(item)`` that hears of every item
            given back to the queue, whatever the reason; like
            :meth:`~sluicegate.SampleSource.on_abandoned`, keep it short.

    Returns:
        The :class:`Feed`, to use as an async context manager.

    Raises:
        TypeError: ``queue`` is not a :class:`LeasedQueue`, its ``batch`` is
            not an int or its ``lease`` not a number, or ``on_released`` is
            not callable.
        ValueError: ``acknowledge`` is neither ``"returned"`` nor
            ``"manual"``, or the queue's ``batch`` is below 1 or its
            ``lease`` not a positive number of seconds.
    """
    if isinstance(queue, type) or not isinstance(queue, LeasedQueue):
        raise TypeError(
            "queue must have batch, lease, open(), claim(), acknowledge(), release(), renew() "
            f"and aclose() (a sluicegate.sources.LeasedQueue), not {queue!r}"
        )
    check_count(queue.batch, "the queue's batch", minimum=1)
    check_seconds(queue.lease, "the queue's lease", zero=False)
    if acknowledge not in ("returned", "manual"):
        raise ValueError(f'acknowledge must be "returned" or "manual", not {acknowledge!r}')
    if on_released is not None and not callable(on_released):
        raise TypeError(f"on_released must be an async callable or None, not {on_released!r}")
    return Feed(queue, acknowledge, on_released)


class Feed(Generic[T]):
    """A :class:`LeasedQueue` as a source for the runner; made by :func:`consume`.

    Use it in ``async with``, then pass it as a stream's ``source``. Its
    promises:

    * **Back-pressure.** It claims only when the stream pulls, which the
      runner does only when a window place is free, and only when nothing it
      claimed is left. A claim asks for one item at first, twice as many
      while the stream takes them as fast as they come, half as many when
      they wait, never more than the queue's ``batch``: what it holds
      unstarted is what the window starts within a claim's round trip or
      so.
    * **Acknowledgements in batches, off the window.** A settled item is
      queued, and a task of the feed sends what is queued in one round trip
      (up to ``batch`` items) while the stream goes on: no run holds its
      place waiting for an acknowledgement. Items that settle while a round
      trip is out go together in the next one.
    * **Leases.** Every ``lease / 3`` seconds it renews the leases of the
      items it holds, so an item may run for longer than the lease; a dead
      consumer's items go to the others once its leases expire.
    * **Releases at once.** When the stream closes the feed (a drain, a
      failure, a cancellation, the consumer leaving ``open_stream``), the
      items it claimed and did not hand out are released in that close-out;
      when the ``async with`` block ends, so are the items handed out and
      never acknowledged (their run failed or was cut short). Nothing waits
      out a lease but the items of a consumer that died.

    After the block, every item it claimed was acknowledged or released, or,
    if the server could not be reached, is left to its lease (and claimed
    again after it). That is at-least-once delivery: an item runs again only
    if its consumer died, or lost the server, before acknowledging it.
    """

    def __init__(
        self,
        queue: LeasedQueue[T],
        acknowledge: Acknowledging,
        on_released: Callable[[T], Awaitable[None]] | None,
    ) -> None:
        self._queue = queue
        self._batch: int = queue.batch
        self._lease: float = queue.lease
        self._auto = acknowledge == "returned"
        self._on_released = on_released
        self._lifetime: AbstractAsyncContextManager[Feed[T]] | None = None
        # "new" until entered, "open" in the block, "closed" after it.
        # Written by _open and _close_queue. Invariant: items are claimed and
        # acknowledged only while "open".
        self._state: Literal["new", "open", "closed"] = "new"
        # Claimed items never handed out, and handed-out items not yet
        # answered (acknowledged or released), by identity. Written by the
        # bindings (claim, hand-out) and by _settle/_release. Invariant: an
        # item is in at most one of the two, and in neither once it is queued
        # for its acknowledgement or released.
        self._unstarted: dict[int, T] = {}
        self._outstanding: dict[int, T] = {}
        # Settled items awaiting their round trip, oldest first, and those
        # the round trip in progress carries. Written by _settle (appends)
        # and _send_acks (takes). Invariant: each item is here or in that
        # round trip at most once; both keep their leases renewed.
        self._to_ack: list[T] = []
        self._sending: list[T] = []
        # How many items the next claim asks for, how long the last claim
        # that got all it asked for took, and when the last claim returned
        # (trio's clock): see _claim_size. Written by _claim alone.
        # Invariant: 1 <= _size <= batch.
        self._size = 1
        self._round_trip = 0.0
        self._claimed_at: float | None = None
        # Runs in progress, and runs ended (a run that ends frees a place, so
        # the stream is cycling, not filling up); written by the wrapped run.
        self._running = 0
        self._ended = 0
        self._ended_by_last_claim = 0
        # Counters, each written only where its event happens.
        self._claimed = 0
        self._acknowledged = 0
        self._released = 0
        self._lost = 0
        self._claims = 0
        self._acknowledgements = 0
        self._renewals = 0
        self._releases = 0
        # One claim, one acknowledging round trip at a time (the protocol's
        # promise to the queue); the acker parks here while nothing is queued.
        self._claim_lock = trio.Lock()
        self._ack_lock = trio.Lock()
        self._ack_wanted = trio.lowlevel.ParkingLot()

    @property
    def queue(self) -> LeasedQueue[T]:
        """The queue this feed consumes."""
        return self._queue

    # -- the block ----------------------------------------------------------------

    async def __aenter__(self) -> Feed[T]:
        if self._state != "new":
            raise RuntimeError(f"{self!r} was entered already: make a new one with consume()")
        self._lifetime = self._open()
        return await self._lifetime.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._lifetime is not None
        return await self._lifetime.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Feed[T]]:
        self._state = "open"
        try:
            await self._queue.open()
            async with in_background(self._acker), in_background(self._renewer):
                try:
                    yield self
                except BaseException:
                    await self._close_out()
                    raise
                error = await self._close_out()
                if error is not None:
                    raise error
        except BaseException as exc:
            await self._close_queue(exc)
            raise
        await self._close_queue(None)

    async def _close_queue(self, exc: BaseException | None) -> None:
        """Close the queue, shielded; a failure is raised only if nothing else is on its way."""
        self._state = "closed"
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            try:
                await self._queue.aclose()
            except Exception as close_exc:
                if exc is None:
                    raise
                exc.add_note(f"sluicegate: closing the queue also failed: {close_exc!r}")

    async def _close_out(self) -> Exception | None:
        """Acknowledge what settled, release what is left; the first error, not raised."""
        error: Exception | None = None
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            try:
                await self.flush()
            except Exception as exc:
                error = exc
                logger.warning(
                    "could not acknowledge %d item(s) to %r: they will run again once their "
                    "lease expires: %r",
                    len(self._to_ack), self._queue, exc,
                )  # fmt: skip
            left = [*self._unstarted.values(), *self._outstanding.values()]
            try:
                await self._release(left)
            except Exception as exc:
                error = error or exc
                logger.warning(
                    "could not release %d item(s) to %r: they return once their lease "
                    "expires: %r",
                    len(left), self._queue, exc,
                )  # fmt: skip
        if scope.cancelled_caught:
            error = error or TimeoutError(
                f"closing the feed of {self._queue!r} did not finish within "
                f"{CLOSE_TIMEOUT:g} s; what it still held returns once its lease expires"
            )
        return error

    # -- what the runner calls ------------------------------------------------------

    def bind_run(
        self,
        run: Callable[[T], Awaitable[R]],
        /,
        *,
        admitting: Callable[[], bool] | None = None,
        drained: Callable[[], bool] | None = None,
    ) -> tuple[AsyncIterator[T], Callable[[T], Awaitable[R]]]:
        """Bind the feed to one stream; the runner calls this for you.

        Args:
            run: The stream's ``run``.
            admitting: Asked before each item is handed out; once it says
                no, the binding hands out nothing more.
            drained: Not needed: whatever closed the stream, the items it
                left unstarted are released.

        Returns:
            An async iterator of claimed items, whose ``aclose()`` releases
            those it holds, and a ``run`` that wraps the given one and, with
            ``acknowledge="returned"``, acknowledges each item it returns for.

        Raises:
            RuntimeError: outside the feed's ``async with`` block.
        """
        if self._state != "open":
            raise RuntimeError(
                f"{self!r} is not open: use it inside `async with consume(queue) as feed:`"
            )
        binding = _Binding(self, run, admitting)
        return binding, binding.run

    # -- acknowledging ----------------------------------------------------------------

    def acknowledge(self, item: T) -> None:
        """Acknowledge ``item``, a settled item the feed handed out; it never blocks.

        The item joins the next acknowledging round trip, which a task of
        the feed makes; :meth:`flush` waits for it. With
        ``acknowledge="returned"`` the feed does this when the run returns,
        unless you did it first.

        Raises:
            ValueError: ``item`` is not an item of this feed that is waiting
                for its acknowledgement (it was acknowledged or released
                already, or never handed out).
            RuntimeError: the feed is not open.
        """
        if self._state != "open":
            raise RuntimeError(f"{self!r} is not open: its items were acknowledged or released")
        if not self._settle(item):
            raise ValueError(
                f"{item!r} is not an item this feed handed out and still holds: "
                "it was acknowledged or released already, or comes from elsewhere"
            )

    def _settle(self, item: T) -> bool:
        if self._outstanding.pop(id(item), None) is None:
            return False
        self._to_ack.append(item)
        self._ack_wanted.unpark()
        return True

    async def flush(self) -> None:
        """Wait until every item acknowledged so far has had its round trip.

        Raises:
            Exception: what the queue's ``acknowledge`` raised; the items
                stay queued, to be sent again.
        """
        async with self._ack_lock:
            await self._send_acks()

    async def _send_acks(self) -> None:
        while self._to_ack:
            chunk = self._to_ack[: self._batch]
            del self._to_ack[: self._batch]
            self._sending = chunk
            try:
                await self._queue.acknowledge(chunk)
            except BaseException:
                # Sent or not, it goes again: acknowledging is idempotent.
                self._to_ack[:0] = chunk
                raise
            finally:
                self._sending = []
            self._acknowledged += len(chunk)
            self._acknowledgements += 1

    async def _acker(self) -> None:
        while True:
            if not self._to_ack:
                await self._ack_wanted.park()
            async with self._ack_lock:
                await self._send_acks()

    # -- leases ---------------------------------------------------------------------

    async def _renewer(self) -> None:
        while True:
            await trio.sleep(self._lease / 3)
            # Settled items too: their lease must last until their acknowledgement.
            held = [
                *self._unstarted.values(),
                *self._outstanding.values(),
                *self._sending,
                *self._to_ack,
            ]
            for start in range(0, len(held), self._batch):
                lost = await self._queue.renew(held[start : start + self._batch])
                self._renewals += 1
                if lost:
                    self._lost += len(lost)
                    logger.warning(
                        "%d item(s) of %r were claimed by another consumer after their lease "
                        "expired (was this process stalled?): they may run twice",
                        len(lost), self._queue,
                    )  # fmt: skip

    async def _release(self, items: Sequence[T]) -> None:
        """Give ``items`` back to the queue now, in round trips of ``batch``."""
        for start in range(0, len(items), self._batch):
            chunk = items[start : start + self._batch]
            await self._queue.release(chunk)
            self._releases += 1
            for item in chunk:
                if self._unstarted.pop(id(item), None) is None:
                    del self._outstanding[id(item)]
                self._released += 1
            if self._on_released is not None:
                for item in chunk:
                    await self._on_released(item)

    # -- claiming -------------------------------------------------------------------

    def _claim_size(self, now: float) -> int:
        """How many items to claim now: about what the stream starts in one round trip.

        A claim is made when the stream pulls and nothing claimed is left,
        that is when a window place is free. If runs ended since the last
        claim (the stream is cycling, not filling its window) and that
        claim's items lasted no longer than its round trip, the stream takes
        items faster than one claim at a time brings them: ask for twice as
        many, up to ``batch``. If they lasted more than four round trips,
        items wait here: ask for half as many. While the window fills, no
        run has ended and claims stay small, so what waits unstarted is what
        the window starts within a round trip or so, whatever its size.
        """
        if self._claimed_at is not None:
            lasted = now - self._claimed_at
            if lasted <= self._round_trip and self._ended > self._ended_by_last_claim:
                self._size = min(self._batch, self._size * 2)
            elif lasted > 4 * self._round_trip:
                self._size = max(1, self._size // 2)
        self._ended_by_last_claim = self._ended
        return self._size

    async def _claim(self, into: collections.deque[T]) -> bool:
        """Claim into ``into``; False when the queue has ended."""
        async with self._claim_lock:
            started = trio.current_time()
            limit = self._claim_size(started)
            items = await self._queue.claim(limit)
            # From here to the return nothing awaits, so a cancellation
            # cannot come between the claim and the bookkeeping.
            self._claims += 1
            if items is None:
                return False
            if len(items) > limit:
                raise RuntimeError(
                    f"{self._queue!r}.claim({limit}) returned {len(items)} items, more than asked"
                )
            ids = {id(item) for item in items}
            held = self._unstarted.keys() | self._outstanding.keys()
            if len(ids) < len(items) or not ids.isdisjoint(held):
                raise RuntimeError(
                    f"{self._queue!r}.claim() returned an object it returned before and is "
                    "still held: a claim must return a fresh object for every item"
                )
            for item in items:
                self._unstarted[id(item)] = item
            self._claimed += len(items)
            into.extend(items)
            self._claimed_at = now = trio.current_time()
            if len(items) == limit:
                # Got all it asked for, so it did not wait for items: a round trip.
                self._round_trip = now - started
            elif not items:
                # Nothing came: the queue, not the stream, is the bottleneck.
                self._claimed_at = None
        if not items:
            await trio.lowlevel.checkpoint()
        return True

    def _hand_out(self, item: T) -> None:
        self._outstanding[id(item)] = self._unstarted.pop(id(item))

    # -- looking at it ----------------------------------------------------------------

    def statistics(self) -> FeedStatistics:
        """The feed's counts now; see :class:`FeedStatistics`."""
        return FeedStatistics(
            claimed=self._claimed,
            waiting=len(self._unstarted),
            outstanding=len(self._outstanding),
            acknowledging=len(self._to_ack) + len(self._sending),
            acknowledged=self._acknowledged,
            released=self._released,
            running=self._running,
            lost=self._lost,
            claims=self._claims,
            acknowledgements=self._acknowledgements,
            renewals=self._renewals,
            releases=self._releases,
        )

    def __repr__(self) -> str:
        return f"<Feed of {self._queue!r}, {self._state}>"


class _Binding(Generic[T, R]):
    """One stream's view of a :class:`Feed`: its buffer of claimed items, and its wrapped run."""

    def __init__(
        self,
        feed: Feed[T],
        run: Callable[[T], Awaitable[R]],
        admitting: Callable[[], bool] | None,
    ) -> None:
        self._feed = feed
        self._run = run
        self._admitting = admitting
        # Claimed for this stream, not handed out yet. Written by __anext__
        # (claims, hand-outs) and aclose (releases). Invariant: each is in
        # the feed's _unstarted.
        self._buffer: collections.deque[T] = collections.deque()
        self._ended = False  # the queue ended, or the stream closed this binding

    def __aiter__(self) -> _Binding[T, R]:
        return self

    async def __anext__(self) -> T:
        feed = self._feed
        buffer = self._buffer
        while True:
            if self._ended or feed._state != "open":
                raise StopAsyncIteration
            if self._admitting is not None and not self._admitting():
                raise StopAsyncIteration
            if buffer:
                item = buffer.popleft()
                feed._hand_out(item)
                return item
            if not await feed._claim(buffer):
                self._ended = True

    async def run(self, item: T) -> R:
        feed = self._feed
        feed._running += 1
        try:
            result = await self._run(item)
        finally:
            feed._running -= 1
            feed._ended += 1
        if feed._auto:
            feed._settle(item)
        return result

    async def aclose(self) -> None:
        """Release the items claimed for this stream and not handed out. Idempotent."""
        self._ended = True
        left = list(self._buffer)
        self._buffer.clear()
        if left:
            try:
                await self._feed._release(left)
            except Exception as exc:
                # They stay the feed's, released when its block ends or,
                # failing that, back once their lease expires.
                logger.warning(
                    "could not release %d unstarted item(s) to %r: %r",
                    len(left), self._feed.queue, exc,
                )  # fmt: skip
        await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"<stream of {self._feed!r}, {len(self._buffer)} waiting>"
