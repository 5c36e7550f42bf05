"""The acknowledging protocol: what a queue implements so that :func:`consume` can feed a stream.

:class:`LeasedQueue` is the whole contract between a queue and sluicegate. The
queue does the round trips (claim, acknowledge, release, renew); the
:class:`~sluicegate.sources.Feed` that :func:`~sluicegate.sources.consume`
makes of it decides when each happens: it claims only when the stream has a
place free, acknowledges settled items in batches behind the stream, renews
the leases of what it holds and releases what will not run here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

__all__ = ["LeasedQueue"]

T = TypeVar("T")


@runtime_checkable
class LeasedQueue(Protocol[T]):
    """A queue that leases its items to a consumer until they are acknowledged.

    A claimed item belongs to this consumer for :attr:`lease` seconds.
    Unless it is acknowledged, renewed or released by then, the queue hands
    it to another consumer: that is how the items of a consumer that died
    (SIGKILL, a lost host) are neither lost nor stuck. sluicegate's
    :class:`~sluicegate.sources.RedisStream` and
    :class:`~sluicegate.sources.PostgresQueue` implement it; so can a class
    of yours for SQS, NATS JetStream, Kafka or anything else that leases.
    Pass it to :func:`~sluicegate.sources.consume`, which calls the methods
    below; nothing else needs to.

    Each method is one round trip to the server (or as few as the server
    allows), and each is given at most :attr:`batch` items. The feed never
    overlaps two calls of the same method, but different methods may overlap:
    acknowledgements go out while a claim waits for items. A queue built on a
    blocking client runs each call in a trio worker thread
    (:func:`trio.to_thread.run_sync`).

    A queue tells items apart by identity: every item a claim returns is a
    fresh object (any object made from the server's reply is), and
    :meth:`acknowledge`, :meth:`release` and :meth:`renew` get back those same
    objects.

    A queue may also have an ``item_key(item) -> str`` method, the item's
    identity on every delivery (its ID on the server):
    :func:`~sluicegate.serve` fed from the queue takes it as its ``key=``
    when none is given. :class:`~sluicegate.sources.RedisStream` and
    :class:`~sluicegate.sources.PostgresQueue` have one.
    """

    @property
    def batch(self) -> int:
        """The most items one call claims, acknowledges, releases or renews (>= 1)."""
        ...

    @property
    def lease(self) -> float:
        """Seconds a claimed item stays this consumer's without a renewal (> 0).

        The feed renews the leases of the items it holds every ``lease / 3``
        seconds, so an item may run longer than its lease; the lease only
        bounds how long the items of a dead consumer wait for another.
        """
        ...

    async def open(self) -> None:
        """Connect, and check what can be checked before any item is claimed.

        Called once, first. A refused connection, bad credentials or a
        queue that does not exist must fail here, with an error naming the
        address (its password hidden), so that a misconfigured consumer
        claims nothing.
        """
        ...

    async def claim(self, limit: int) -> Sequence[T] | None:
        """Claim up to ``limit`` items, each leased from now, and return them.

        ``1 <= limit <= batch``. Items whose lease expired (a dead
        consumer's) are claimed like new ones. Waiting for items is allowed,
        but briefly (a second or so): return ``[]`` when none came, and the
        feed asks again. Return ``None`` when the queue has ended and no
        item will ever come.

        Cancelled while it waits, a claim must claim nothing, or finish and
        return what it claimed: items claimed and never returned would be
        stuck until their lease expires. A blocking call in a worker thread
        that is not abandoned on cancellation (the default of
        :func:`trio.to_thread.run_sync`) keeps this.
        """
        ...

    async def acknowledge(self, items: Sequence[T]) -> None:
        """Settle ``items`` for good: remove them, or mark them done.

        Called once their outcome is durable (or, with nothing to make it
        durable, once it settled). Acknowledging an item twice, or one whose
        lease another consumer took meanwhile, is no error.
        """
        ...

    async def release(self, items: Sequence[T]) -> None:
        """Give ``items`` back at once, for any consumer to claim now.

        They will not be settled here: a drain or a failure left them
        unstarted, or they were cut short or failed. Releasing must not wait
        for their leases to expire.
        """
        ...

    async def renew(self, items: Sequence[T]) -> Sequence[T]:
        """Extend the leases of ``items`` by :attr:`lease` from now.

        Returns:
            Those of ``items`` whose lease was lost (it expired and another
            consumer claimed them); usually none. A queue without leases to
            renew returns ``[]``.
        """
        ...

    async def aclose(self) -> None:
        """Close the connection.

        Called once, last, however the consumer ends, even when :meth:`open`
        failed: it must cope with a queue that never opened.
        """
        ...
