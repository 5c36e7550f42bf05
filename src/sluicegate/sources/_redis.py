"""A Redis stream, read through a consumer group, as a :class:`~sluicegate.sources.LeasedQueue`.

The client is redis-py's blocking one, each call in a trio worker thread:
its asyncio client needs an asyncio loop, which trio is not. Entries are
claimed with ``XREADGROUP`` and, once their lease is over, taken from a
consumer that stopped with ``XAUTOCLAIM``; a blocking read that trio cancels
(a drain) is cut at once with ``CLIENT UNBLOCK``, and what it read all the
same is released rather than left to its lease.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, final

import attrs
import outcome
import trio

from .._checks import check_count, check_flag, check_seconds
from .._util import logger
from ._address import shown

if TYPE_CHECKING:
    import redis

__all__ = ["RedisStream", "StreamEntry"]

V = TypeVar("V")

# The longest a blocking read waits on the server before the claim looks
# again for entries a dead consumer left (it is cut at once on cancellation).
_MOST_BLOCK = 1.0
# Socket timeouts: a connection that cannot be made, or a reply that does not
# come, is an error after this many seconds, not a hang.
_CONNECT_TIMEOUT = 10.0
_REPLY_TIMEOUT = 30.0
# XCLAIM ... TIME 0: delivered at the epoch, idle for ever: any consumer's
# next XAUTOCLAIM takes it, whatever its lease.
_LEASES = """
local lost = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local mine = redis.call("XPENDING", KEYS[1], ARGV[1], id, id, 1, ARGV[2])
  if #mine > 0 then
    if ARGV[3] == "release" then
      redis.call("XCLAIM", KEYS[1], ARGV[1], ARGV[2], 0, id, "TIME", 0, "JUSTID")
    else
      redis.call("XCLAIM", KEYS[1], ARGV[1], ARGV[2], 0, id, "JUSTID")
    end
  else
    table.insert(lost, id)
  end
end
return lost
"""
# Forget this consumer if it holds nothing, so that stopped ones do not pile up.
_FORGET = """
if #redis.call("XPENDING", KEYS[1], ARGV[1], "-", "+", 1, ARGV[2]) == 0 then
  return redis.call("XGROUP", "DELCONSUMER", KEYS[1], ARGV[1], ARGV[2])
end
return -1
"""


@final
@attrs.frozen(eq=False)
class StreamEntry:
    """One entry of a Redis stream, as :class:`RedisStream` hands it to a run.

    Two entries are equal only if they are the same object: each delivery
    is its own (acknowledging goes by the object handed out).

    Attributes:
        id: The entry's ID (``"1718000000000-0"``); the same on every
            delivery, so it makes a good ``key`` for a journal.
        fields: Its fields and values, decoded as UTF-8; bytes that are not
            UTF-8 come as lone surrogates (``value.encode("utf-8",
            "surrogateescape")`` gives them back).
        redelivered: Whether it was taken over from a consumer that did not
            acknowledge it in time (it died, or released it).
    """

    id: str
    fields: dict[str, str]
    redelivered: bool = False


class _Read:
    """One blocking read in a worker thread, which trio may abandon on cancellation.

    The thread and the trio task meet here, under ``lock``: whichever of the
    two comes second decides where what was read goes. Read before the task
    gave up, the entries are the claim's; after, they are left for the next
    claim or the close to release. Nothing read is dropped.
    """

    __slots__ = ("abandoned", "client_id", "entries", "finished", "lock", "outcome")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Written by the thread: its connection's ID, once known; what it
        # read (unless abandoned by then); set when it is over, however.
        self.client_id: int | None = None
        self.entries: list[StreamEntry] | None = None
        self.finished = threading.Event()
        self.outcome: outcome.Outcome[None] | None = None
        # Written by the trio task: it gave up waiting (it was cancelled).
        self.abandoned = False


class RedisStream:
    """A Redis stream read through a consumer group: a :class:`~sluicegate.sources.LeasedQueue`.

    Pass it to :func:`~sluicegate.sources.consume`; runs get
    :class:`StreamEntry` items. Several consumers (processes, hosts) may
    read the same group; each entry goes to one of them. Needs the ``redis``
    extra (``pip install 'sluicegate[redis]'``) and Redis 6.2 or later (for
    ``XAUTOCLAIM``); Redis Cluster is not supported.

    * The group is created when missing (with the stream, if that is missing
      too), reading from ``start``.
    * Entries are claimed with ``XREADGROUP``, at most ``batch`` a round
      trip, and acknowledged with ``XACK`` once settled, ``batch`` a round
      trip.
    * An entry stays pending (in the group's ``XPENDING`` list) while it is
      claimed. Entries that another consumer left pending for ``lease``
      seconds are taken over with ``XAUTOCLAIM``; the consumer checks at
      least every second and before waiting for new entries. A live
      consumer renews its entries' leases (``XCLAIM ... JUSTID``), so a long
      run keeps its entry.
    * Releasing an entry marks it idle for ever (``XCLAIM ... TIME 0``), so
      the next consumer to look takes it over at once.
    * Acknowledged entries stay in the stream (another group may need them):
      trim it as you add (``XADD ... MAXLEN ~ N``, ``XTRIM``).

    Args:
        url: The server: ``redis://[[user]:password@]host[:port][/db]``,
            ``rediss://...`` (TLS) or ``unix://path``.
        stream: The stream's key.
        group: The consumer group's name.
        consumer: This consumer's name in the group; by default one made of
            the host name, the process ID and a random part, so that a
            restarted process is a new consumer and the old one's entries
            are taken over after their lease. A consumer that stops holding
            nothing is removed from the group.
        batch: The most entries one round trip claims, acknowledges,
            releases or renews.
        lease: Seconds an entry claimed by a consumer that stopped (without
            acknowledging or releasing it) waits before another takes it.
        start: Where a group created here starts: ``"0"`` (the default), the
            stream's first entry; ``"$"``, entries added from now on.
        stop_when_empty: End the feed at the first claim that finds nothing
            to take (new entries, or entries left by a dead consumer), for a
            job that works through a backlog; by default a claim waits.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``url`` is not a Redis URL, ``stream`` or ``group`` is
            empty, ``batch`` < 1, ``lease`` is not a positive number of
            seconds.
    """

    def __init__(
        self,
        url: str,
        stream: str,
        group: str,
        consumer: str | None = None,
        *,
        batch: int = 64,
        lease: float = 30.0,
        start: str = "0",
        stop_when_empty: bool = False,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"url must be a str (redis://host:port/db), not {url!r}")
        takes = "a redis://, rediss:// or unix:// URL"
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"url must be {takes}, not {shown(url)!r}")
        try:
            urllib.parse.urlsplit(url).port  # noqa: B018 - reading it checks it
        except ValueError:
            raise ValueError(
                f"url must be {takes} with a numeric port, not {shown(url)!r}"
            ) from None
        for name, value in (("stream", stream), ("group", group), ("start", start)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a non-empty str, not {value!r}")
            if not value:
                raise ValueError(f"{name} must be a non-empty str, not {value!r}")
        if consumer is not None and (not isinstance(consumer, str) or not consumer):
            if isinstance(consumer, str):
                raise ValueError(f"consumer must be a non-empty str or None, not {consumer!r}")
            raise TypeError(f"consumer must be a non-empty str or None, not {consumer!r}")
        self._url = url
        self._stream = stream
        self._group = group
        self._consumer = consumer or (
            f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        )
        self._batch = check_count(batch, "batch", minimum=1)
        self._lease = check_seconds(lease, "lease", zero=False)
        self._start = start
        self._stop_when_empty = check_flag(stop_when_empty, "stop_when_empty")
        # The client, from open() to aclose(); only they write it.
        self._client: redis.Redis | None = None
        self._leases: Any = None  # the registered _LEASES script
        self._forget: Any = None  # the registered _FORGET script
        # Where the next XAUTOCLAIM starts, and when (trio's clock) one is
        # next due. Written by claim() alone (claims never overlap).
        # Invariant: "0-0" once a pass over the pending entries finished.
        self._cursor = "0-0"
        self._reclaim_at = -float("inf")
        # Entries a cancelled read got all the same: the next claim returns
        # them, or aclose() releases them. Written under its lock by the
        # reading thread and the claim, in turn (see _Read).
        self._left: list[StreamEntry] = []
        self._left_lock = threading.Lock()
        # Set when the thread of the last read trio gave up on is over: a
        # claim or the close waits for it, then finds what it read in _left.
        # Written by _read alone.
        self._abandoned_read = trio.Event()
        self._abandoned_read.set()

    @property
    def batch(self) -> int:
        """The most entries one round trip claims, acknowledges, releases or renews."""
        return self._batch

    @property
    def lease(self) -> float:
        """Seconds before another consumer may take an entry this one left pending."""
        return self._lease

    @property
    def consumer(self) -> str:
        """This consumer's name in the group."""
        return self._consumer

    @staticmethod
    def item_key(entry: StreamEntry) -> str:
        """An entry's identity on every delivery, its ID: ``serve()``'s default key."""
        return entry.id

    def __repr__(self) -> str:
        return (
            f"<RedisStream {shown(self._url)} stream={self._stream!r} group={self._group!r} "
            f"consumer={self._consumer!r}>"
        )

    # -- talking to the server ------------------------------------------------------

    async def _call(self, fn: Callable[..., V], /, *args: object) -> V:
        """``fn(*args)`` in a worker thread; a lost server is a ConnectionError naming it."""
        import redis

        try:
            return await trio.to_thread.run_sync(fn, *args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ConnectionError(f"lost the Redis server at {shown(self._url)}: {exc}") from exc

    @property
    def _redis(self) -> redis.Redis:
        if self._client is None:
            raise RuntimeError(f"{self!r} is not open: use `async with` or consume() first")
        return self._client

    # -- LeasedQueue ----------------------------------------------------------------

    async def open(self) -> None:
        """Connect, check the credentials, and create the group if it is missing.

        Raises:
            ConnectionError: the server refused the connection or the
                credentials, naming the URL (its password hidden).
            ValueError: the key holds something other than a stream.
            RuntimeError: it is open already.
            ImportError: redis-py is not installed.
        """
        if self._client is not None:
            raise RuntimeError(f"{self!r} is open already (consume() opens the queue it gets)")
        try:
            import redis
        except ImportError:  # pragma: no cover - only without the extra
            raise ImportError(
                "RedisStream needs redis-py: pip install 'sluicegate[redis]'"
            ) from None
        client = redis.Redis.from_url(
            self._url,
            decode_responses=True,
            encoding_errors="surrogateescape",
            protocol=2,
            socket_connect_timeout=_CONNECT_TIMEOUT,
            socket_timeout=_REPLY_TIMEOUT,
        )
        try:
            await trio.to_thread.run_sync(self._prepare, client)
        except redis.AuthenticationError as exc:
            client.close()
            raise ConnectionError(
                f"cannot connect to the Redis server at {shown(self._url)}: "
                f"it refused the credentials: {exc}"
            ) from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            client.close()
            raise ConnectionError(
                f"cannot connect to the Redis server at {shown(self._url)}: {exc}"
            ) from exc
        except redis.ResponseError as exc:
            client.close()
            if "WRONGTYPE" in str(exc):
                raise ValueError(
                    f"the key {self._stream!r} at {shown(self._url)} holds something other "
                    f"than a stream: {exc}"
                ) from exc
            raise
        except BaseException:
            client.close()
            raise
        self._client = client
        self._leases = client.register_script(_LEASES)
        self._forget = client.register_script(_FORGET)

    def _prepare(self, client: redis.Redis) -> None:
        import redis

        client.ping()
        try:
            client.xgroup_create(self._stream, self._group, id=self._start, mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def claim(self, limit: int) -> Sequence[StreamEntry] | None:
        """Take up to ``limit`` entries: left by a dead consumer first, then new ones.

        Waits up to a second for new entries (cut at once by a cancellation)
        and returns ``[]`` if none came; with ``stop_when_empty``, returns
        ``None`` instead of waiting.
        """
        if not self._abandoned_read.is_set():
            await self._abandoned_read.wait()
        with self._left_lock:
            left = self._left[:limit]
            del self._left[:limit]
        if left:
            return left
        now = trio.current_time()
        if now >= self._reclaim_at:
            taken = await self._reclaimed(limit, now)
            if taken:
                return taken
        if not self._stop_when_empty:
            return await self._read(limit, max(self._reclaim_at - now, 0.001))
        entries = await self._read(limit, 0.0)
        if entries:
            return entries
        # Empty only if no dead consumer's entry is ready either.
        self._cursor = "0-0"
        return await self._reclaimed(limit, now) or None

    async def _reclaimed(self, limit: int, now: float) -> list[StreamEntry]:
        """Entries pending longer than the lease (a dead consumer's), from the cursor on."""
        self._cursor, taken = await self._call(self._reclaim, limit)
        if self._cursor == "0-0":
            # A pass over every pending entry is over: the next is due in a while.
            self._reclaim_at = now + min(self._lease / 2, _MOST_BLOCK)
        return taken

    def _reclaim(self, limit: int) -> tuple[str, list[StreamEntry]]:
        cursor, taken, *_ = self._redis.xautoclaim(
            self._stream,
            self._group,
            self._consumer,
            int(self._lease * 1000),
            start_id=self._cursor,
            count=limit,
        )
        return cursor, [
            StreamEntry(entry_id, fields, True)
            for entry_id, fields in taken
            if fields is not None  # an entry deleted from the stream meanwhile
        ]

    async def _read(self, limit: int, block: float) -> list[StreamEntry]:
        """One ``XREADGROUP``, waiting up to ``block`` seconds, cut at once by a cancellation.

        The read runs in a thread of its own (trio's ``start_thread_soon``),
        which always runs to its end: so a read trio gave up on still says,
        through its :class:`_Read`, what it took, and :meth:`aclose` can wait
        for it.
        """
        import redis

        read = _Read()
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[None]) -> None:
            read.outcome = result
            # trio.run may have ended meanwhile: then nobody waits.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        trio.lowlevel.start_thread_soon(
            functools.partial(self._blocking_read, limit, block, read), deliver
        )
        try:
            await done.wait()
        except trio.Cancelled:
            self._abandoned_read = done
            with read.lock:
                read.abandoned = True
                taken, read.entries = read.entries, None
                client_id = None if read.finished.is_set() else read.client_id
            if taken:
                with self._left_lock:
                    self._left.extend(taken)
            if client_id is not None:
                # The thread still waits on the server: cut its wait short.
                trio.lowlevel.start_thread_soon(
                    functools.partial(self._redis.client_unblock, client_id),
                    lambda _outcome: None,
                )
            raise
        assert read.outcome is not None
        try:
            read.outcome.unwrap()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ConnectionError(f"lost the Redis server at {shown(self._url)}: {exc}") from exc
        return read.entries or []

    def _blocking_read(self, limit: int, block: float, read: _Read) -> None:
        try:
            client = self._redis
            pool = client.connection_pool
            connection = pool.get_connection()
            try:
                # CLIENT ID first, in the same round trip: it says which
                # connection to unblock should trio give up on this read.
                # BLOCK 0 would wait for ever: a read that must not wait has none.
                wait = ("BLOCK", int(block * 1000)) if block else ()
                connection.send_packed_command(  # type: ignore[no-untyped-call]
                    connection.pack_commands(  # type: ignore[no-untyped-call]
                        [
                            ("CLIENT", "ID"),
                            ("XREADGROUP", "GROUP", self._group, self._consumer,
                             "COUNT", limit, *wait, "STREAMS", self._stream, ">"),
                        ]
                    )
                )  # fmt: skip
                client_id = int(connection.read_response())
                with read.lock:
                    read.client_id = client_id
                    abandoned = read.abandoned
                if abandoned:
                    client.client_unblock(client_id)
                reply = connection.read_response()
            except BaseException:
                connection.disconnect()  # type: ignore[no-untyped-call]
                raise
            finally:
                pool.release(connection)
            entries = [
                StreamEntry(entry_id, dict(zip(values[::2], values[1::2], strict=True)))
                for _, stream_entries in reply or ()
                for entry_id, values in stream_entries
            ]
            with read.lock:
                if read.abandoned:
                    with self._left_lock:
                        self._left.extend(entries)
                else:
                    read.entries = entries
        finally:
            read.finished.set()

    async def acknowledge(self, items: Sequence[StreamEntry]) -> None:
        """``XACK`` the entries, in one round trip."""
        if items:
            await self._call(self._redis.xack, self._stream, self._group, *[e.id for e in items])

    async def release(self, items: Sequence[StreamEntry]) -> None:
        """Mark the entries idle for ever, so any consumer takes them over at once."""
        if items:
            await self._call(self._lease_script, "release", [e.id for e in items])

    async def renew(self, items: Sequence[StreamEntry]) -> Sequence[StreamEntry]:
        """Reset the entries' idle time; return those another consumer took over."""
        if not items:
            return []
        lost = set(await self._call(self._lease_script, "renew", [e.id for e in items]))
        return [entry for entry in items if entry.id in lost]

    def _lease_script(self, what: str, ids: list[str]) -> list[str]:
        lost: list[str] = self._leases(
            keys=[self._stream], args=[self._group, self._consumer, what, *ids]
        )
        return lost

    async def aclose(self) -> None:
        """Release what a cancelled read left, forget this consumer if it holds nothing, close."""
        client = self._client
        if client is None:
            return
        try:
            with trio.move_on_after(_REPLY_TIMEOUT):
                await self._abandoned_read.wait()
            with self._left_lock:
                left, self._left = self._left, []
            if left:
                await self.release(left)
            await self._call(
                functools.partial(
                    self._forget, keys=[self._stream], args=[self._group, self._consumer]
                )
            )
        except ConnectionError as exc:
            # Said already by whatever met the lost server first; what this
            # consumer still holds comes back after its lease.
            logger.warning("closing %r: %s", self, exc)
        finally:
            self._client = None
            client.close()

    # -- producing ------------------------------------------------------------------

    async def put(self, *entries: Mapping[str, str | bytes | int | float]) -> list[str]:
        """Add entries to the stream (``XADD``), all in one round trip; return their IDs.

        For producers, tests and examples: ``async with RedisStream(...) as
        stream: await stream.put({"order": "17"})``.
        """
        client = self._redis

        def add() -> list[str]:
            pipe = client.pipeline(transaction=False)
            for fields in entries:
                pipe.xadd(self._stream, dict(fields))  # type: ignore[arg-type]
            ids: list[str] = pipe.execute()
            return ids

        return await self._call(add)

    async def __aenter__(self) -> RedisStream:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
