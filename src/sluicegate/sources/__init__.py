"""Queues as sources for streams and services: leased items, acknowledged once settled.

:func:`consume` feeds a stream from any :class:`LeasedQueue` (the
acknowledging protocol); :class:`RedisStream` (a Redis stream read through a
consumer group) and :class:`PostgresQueue` (a PostgreSQL table) implement it.
The clients live in extras: ``pip install 'sluicegate[redis]'`` or
``'sluicegate[postgres]'``. See "Feeding from a queue" in the service docs.
"""

from .. import _util
from ._feed import Feed, FeedStatistics, consume
from ._postgres import PostgresQueue, QueueRow
from ._queue import LeasedQueue
from ._redis import RedisStream, StreamEntry

__all__ = [
    "Feed",
    "FeedStatistics",
    "LeasedQueue",
    "PostgresQueue",
    "QueueRow",
    "RedisStream",
    "StreamEntry",
    "consume",
]

_util.fixup_module_metadata(__name__, globals())
